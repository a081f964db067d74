"""What the server shell needs to know about each listener: its security protocol, its TLS context,
how a client certificate becomes a principal, and its SASL mechanisms (reference security.md §1-§2).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..config import BrokerConfig, Listener

ANONYMOUS = "User:ANONYMOUS"


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


def listener_runtimes(config: "BrokerConfig") -> list[ListenerRuntime]:
    """One runtime per entry of `listeners`, in order (TLS contexts were built by the config)."""
    runtimes = []
    for listener in config.listeners:
        protocol = config.security_protocol(listener.name)
        runtime = ListenerRuntime(listener.name, protocol, listener.host, listener.port,
                                  ssl=config.tls.get(listener.name))
        if protocol == "SSL":
            runtime.principal_of = _principal_builder(config, listener)
        if runtime.sasl:
            runtime.mechanisms = config.sasl_mechanisms(listener.name)
        runtimes.append(runtime)
    return runtimes


def _principal_builder(config: "BrokerConfig", listener: "Listener") -> Callable[[bytes | None], str | None]:
    from .tls import principal_builder

    return principal_builder(config, listener.name)


def peer_listener(config: "BrokerConfig") -> str:
    """The listener brokers use to reach each other (WriteTxnMarkers, verification): the one named by
    `inter.broker.listener.name` if it exists, else the first PLAINTEXT listener, else the first."""
    names = [l.name for l in config.listeners]
    wanted = config.get("inter.broker.listener.name").upper()
    if wanted in names:
        return wanted
    return next((n for n in names if config.security_protocol(n) == "PLAINTEXT"), names[0])
