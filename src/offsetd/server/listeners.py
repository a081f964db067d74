"""What the server shell needs to know about each listener: its security protocol, its TLS context,
how a client certificate becomes a principal, and its SASL mechanisms (reference security.md §1-§2).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import BrokerConfig
from ..config_keys import SASL_MECHANISMS
from ..config_tls import ListenerKeys, truststore
from ..security.jaas import parse_jaas_config
from .peer_client import PeerSecurity
from .tls import principal_builder, server_contexts

ANONYMOUS = "User:ANONYMOUS"
LISTEN_BACKLOG = 1024  # connections the kernel queues for us (a reconnect burst of many clients)
ACCEPTS_PER_TURN = 1  # connections accepted per turn of the event loop (see bind(); 16: p99 x20, 4: x6)
TLS_HANDSHAKE_TIMEOUT_S = 10.0
log = logging.getLogger("offsetd.server")


@dataclass
class ListenerRuntime:
    """One bound listener: name, protocol, address, and its security set-up."""

    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    # SSL only: peer certificate (DER, or None) -> principal, or None when no mapping rule matches
    principal_of: Callable[[bytes | None], str | None] | None = None
    # SASL only: the enabled mechanisms offsetd serves, in the configured order
    mechanisms: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        """Whether clients must authenticate with SASL before any other request."""
        return self.protocol.startswith("SASL_")


async def bind(listener: ListenerRuntime, protocol_factory: Callable[[], asyncio.Protocol],
               config: BrokerConfig, *, serving: bool = True) -> asyncio.base_events.Server:
    """Listen on one listener (TLS listeners hand connections over after the handshake); a `:0`
    listener's port is then known and advertised. With `serving` False the port is only bound
    (connections are refused) until start_serving()."""
    loop = asyncio.get_running_loop()
    # asyncio accepts up to `backlog` connections in one turn of the loop, and listens with
    # that backlog. A turn accepting a thousand connections of a garbage storm starves every
    # request behind it (commit p99 > 1 s at ~6,000 connections/s), so the server accepts
    # ACCEPTS_PER_TURN per turn, and the kernel still queues LISTEN_BACKLOG (listen() again,
    # through a duplicate of the same socket).
    tls: dict[str, Any] = {} if listener.ssl is None else {
        "ssl": listener.ssl, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
    server = await loop.create_server(protocol_factory, listener.host or None, listener.port, reuse_address=True,
                                      backlog=ACCEPTS_PER_TURN, start_serving=serving, **tls)
    if serving:
        _deepen_backlog(server)
    listener.port = server.sockets[0].getsockname()[1]
    config.bound(listener.name, listener.port)
    log.info("listener %s (%s) on %s:%d", listener.name, listener.protocol, listener.host or "0.0.0.0", listener.port)
    return server


async def start_serving(server: asyncio.base_events.Server) -> None:
    """Accept connections on a listener bound with serving=False."""
    await server.start_serving()
    _deepen_backlog(server)


def _deepen_backlog(server: asyncio.base_events.Server) -> None:
    """listen() again with LISTEN_BACKLOG, through a duplicate of each socket (see bind())."""
    for listening in server.sockets:
        with listening.dup() as same:
            same.listen(LISTEN_BACKLOG)


def listener_runtimes(config: BrokerConfig) -> list[ListenerRuntime]:
    """One runtime per entry of `listeners`, in order, with the TLS contexts built now (ConfigError
    naming the key when ssl cannot use a setting)."""
    contexts = server_contexts(config)
    runtimes = []
    for listener in config.listeners:
        protocol = config.security_protocol(listener.name)
        runtime = ListenerRuntime(listener.name, protocol, listener.host, listener.port,
                                  ssl=contexts.get(listener.name))
        if protocol == "SSL":
            runtime.principal_of = principal_builder(config, listener.name)
        if runtime.sasl:
            runtime.mechanisms = config.sasl_mechanisms(listener.name)
        runtimes.append(runtime)
    return runtimes


def peer_listener(config: BrokerConfig) -> str:
    """The listener brokers use to reach each other (WriteTxnMarkers, verification): the one named by
    `inter.broker.listener.name` if it exists, else the first PLAINTEXT listener, else the first."""
    names = [l.name for l in config.listeners]
    wanted = config.get("inter.broker.listener.name").upper()
    if wanted in names:
        return wanted
    return next((n for n in names if config.security_protocol(n) == "PLAINTEXT"), names[0])


def peer_security(config: BrokerConfig, listener: str) -> PeerSecurity:
    """How to reach peers on their `listener`: TLS trusting the listener's truststore (or the system's
    CAs), and on SASL a login as `_peer_login` picks it, as Kafka brokers authenticate to each other."""
    protocol = config.security_protocol(listener)
    context = None
    if protocol.endswith("SSL"):
        context = ssl.create_default_context()
        context.check_hostname = config.listener_value(listener, "ssl.endpoint.identification.algorithm") != ""
        store = truststore(ListenerKeys(config, listener))
        if store.cadata is not None or store.cafile is not None:
            context.load_verify_locations(cafile=None if store.cafile is None else str(store.cafile),
                                          cadata=store.cadata)
    login = _peer_login(config, listener) if protocol.startswith("SASL_") else None
    return PeerSecurity(context, login)


def _peer_login(config: BrokerConfig, listener: str) -> tuple[str, str, str] | None:
    """(mechanism, username, password) this broker logs in to its peers' `listener` with:
    `sasl.mechanism.inter.broker.protocol` when the listener enables it, else (Kafka's default
    GSSAPI is not served) PLAIN, else a SCRAM mechanism; the first with a JAAS username and
    password. None, warned: requests between brokers (transaction markers) will fail."""
    enabled = config.sasl_mechanisms(listener)
    wanted = config.get("sasl.mechanism.inter.broker.protocol").upper()
    candidates = [wanted] if wanted in SASL_MECHANISMS else sorted(enabled, key=lambda m: m != "PLAIN")
    for mechanism in candidates:
        jaas = config.jaas_config(listener, mechanism) if mechanism in enabled else None
        options = parse_jaas_config(jaas)[1] if jaas else {}
        if options.get("username") and options.get("password"):
            return mechanism, options["username"], options["password"]
    if candidates == [wanted] and wanted not in enabled:
        log.warning("sasl.mechanism.inter.broker.protocol %s is not among listener %s's sasl.enabled.mechanisms: "
                    "requests between brokers (transaction markers) fail", wanted, listener)
    else:
        log.warning("listener %s: brokers log in to each other with %s and its JAAS username/password; without "
                    "them, requests between brokers (transaction markers) fail", listener, " or ".join(candidates))
    return None
