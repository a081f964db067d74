"""TLS for SSL and SASL_SSL listeners: one server `ssl.SSLContext` per listener, built at start-up
from Kafka's `ssl.*` keys as config_tls.py read and checked them (reference security.md §1), the
keystore reloaded when its file changes, and the principal of a client certificate.

Private keys reach `ssl` only through files, so key material that is not already a PEM file is
written to a 0600 temp file and removed once loaded.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path
from typing import Callable

from ..config import BrokerConfig, ConfigError
from ..config_tls import ListenerKeys, TlsConfigError, keystore, truststore
from ..security.principal import PrincipalMapper

log = logging.getLogger("offsetd.tls")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

# IANA names of TLS 1.2 suites (Kafka's ssl.cipher.suites) -> their code point; OpenSSL names them
# differently, so a name is found by the low 16 bits of get_ciphers()' id (reference §1).
IANA_SUITES: dict[str, int] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": 0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": 0xC02C,
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": 0xC02F, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": 0xC030,
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA9, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA8,
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": 0x009E, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": 0x009F,
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCAA,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": 0xC023, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": 0xC024,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": 0xC027, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": 0xC028,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": 0xC009, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": 0xC00A,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": 0xC013, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": 0xC014,
    "TLS_RSA_WITH_AES_128_GCM_SHA256": 0x009C, "TLS_RSA_WITH_AES_256_GCM_SHA384": 0x009D,
    "TLS_RSA_WITH_AES_128_CBC_SHA256": 0x003C, "TLS_RSA_WITH_AES_256_CBC_SHA256": 0x003D,
    "TLS_RSA_WITH_AES_128_CBC_SHA": 0x002F, "TLS_RSA_WITH_AES_256_CBC_SHA": 0x0035,
}
# TLS 1.3 suites are always on in OpenSSL through `ssl` (not settable): accepted, not applied.
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


def server_contexts(config: BrokerConfig) -> dict[str, ssl.SSLContext]:
    """One server context per SSL / SASL_SSL listener, built at start-up; ConfigError naming the key
    when ssl cannot use a setting config.py could only check (a key and chain, a cipher suite)."""
    contexts = {}
    for listener in config.listeners:
        if not config.security_protocol(listener.name).endswith("SSL"):
            continue
        try:
            contexts[listener.name] = server_context(ListenerKeys(config, listener.name))
        except TlsConfigError as exc:
            raise ConfigError(exc.line(listener.name)) from None
    return contexts


def server_context(keys: ListenerKeys) -> ssl.SSLContext:
    """The server context of one listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(ctx, keys)
    _load_truststore(ctx, keys)
    ctx.verify_mode = CLIENT_AUTH[keys["ssl.client.auth"]]
    versions = sorted(TLS_VERSIONS[p] for p in keys["ssl.enabled.protocols"])
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    if keys["ssl.cipher.suites"]:
        _set_ciphers(ctx, keys)
    return ctx


def _load_keystore(ctx: ssl.SSLContext, keys: ListenerKeys) -> None:
    """The listener's key and chain into `ctx` (again when the reloader sees a new file)."""
    store = keystore(keys)
    if store.path is not None:
        try:
            ctx.load_cert_chain(str(store.path), password=store.password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(store.blame, f"cannot load the key and chain: {exc}") from None
        return
    assert store.pem is not None
    fd, path = tempfile.mkstemp(prefix="offsetd-key-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(store.pem)
        ctx.load_cert_chain(path, password=store.password)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(store.blame, f"cannot load the key and chain: {exc}") from None
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, keys: ListenerKeys) -> None:
    """The certificates `ctx` trusts for client certificates."""
    store = truststore(keys)
    try:
        if store.cadata is not None:
            ctx.load_verify_locations(cadata=store.cadata)
        elif store.cafile is not None:
            ctx.load_verify_locations(cafile=str(store.cafile))
        elif keys["ssl.client.auth"] != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(store.blame, f"cannot load the trusted certificates: {exc}") from None


def _set_ciphers(ctx: ssl.SSLContext, keys: ListenerKeys) -> None:
    """`ssl.cipher.suites` by IANA name (OpenSSL names are accepted too)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    by_code = {c["id"] & 0xFFFF: c["name"] for c in probe.get_ciphers()}
    openssl_names = set(by_code.values())
    names = []
    for suite in keys["ssl.cipher.suites"]:
        if suite in TLS13_SUITES:
            continue
        name = by_code.get(IANA_SUITES.get(suite, -1)) or (suite if suite in openssl_names else None)
        if name is None:
            raise TlsConfigError(keys.name("ssl.cipher.suites"), f"cipher suite {suite} is not available")
        names.append(name)
    if names:
        ctx.set_ciphers(":".join(names))


# ------------------------------------------------------------------------ certificate rotation


class KeystoreReloader:
    """Loads a listener's keystore file again when it changes, so a renewed certificate serves new
    connections without a restart (existing connections keep theirs). A file that does not load
    is logged and the certificate in use is kept."""

    def __init__(self, ctx: ssl.SSLContext, keys: ListenerKeys) -> None:
        self.ctx, self.keys = ctx, keys
        location = keys["ssl.keystore.location"]
        self.path = Path(location).expanduser() if location and not keys["ssl.keystore.key"] else None
        self.stamp = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat() if self.path is not None else None
        except OSError:
            return None
        return None if stat is None else (stat.st_mtime_ns, stat.st_size)

    def check(self) -> bool:
        """Reload if the file changed since the last look; True when a new keystore is in use."""
        stamp = self._stamp()
        if stamp is None or stamp == self.stamp:
            return False
        self.stamp = stamp
        try:
            _load_keystore(self.ctx, self.keys)
        except TlsConfigError as exc:
            log.warning("listener %s: keeping the current certificate, %s: %s", self.keys.listener, exc.key, exc)
            return False
        log.info("listener %s: reloaded the keystore %s", self.keys.listener, self.path)
        return True


def keystore_reloaders(config: BrokerConfig, contexts: dict[str, ssl.SSLContext]) -> list[KeystoreReloader]:
    """One reloader per TLS listener (name -> its server context) whose keystore is a file."""
    reloaders = [KeystoreReloader(ctx, ListenerKeys(config, name)) for name, ctx in contexts.items()]
    return [r for r in reloaders if r.path is not None]


# ------------------------------------------------------------------------------ principal


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, most specific first (`CN=a,OU=B,O=C`)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal_builder(config: BrokerConfig, listener: str) -> Callable[[bytes | None], str | None]:
    """For an SSL listener: peer certificate (DER, or None) -> `User:<mapped DN>`, `User:ANONYMOUS`
    without a certificate, None when no `ssl.principal.mapping.rules` rule matches (the connection
    must then fail). The mapping is security/principal.py's."""
    mapper = PrincipalMapper.parse(config.listener_value(listener, "ssl.principal.mapping.rules")).map

    def build(der: bytes | None) -> str | None:
        if der is None:
            return "User:ANONYMOUS"
        name = mapper(certificate_dn(der))
        return None if name is None else f"User:{name}"

    return build
