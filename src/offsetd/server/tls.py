"""TLS for SSL and SASL_SSL listeners: one server `ssl.SSLContext` per listener from Kafka's `ssl.*`
keys (reference security.md §1), and the principal of a client certificate.

Keystores: PEM files, inline PEM (`ssl.keystore.key` + `ssl.keystore.certificate.chain`), PKCS12
(re-serialised as PEM through `cryptography`, since `ssl` loads only PEM). JKS is refused with the
`keytool` command converting it. Private keys reach `ssl` only through files, so key material that
is not already a PEM file is written to a 0600 temp file and removed once loaded.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..config import BrokerConfig

log = logging.getLogger("offsetd.tls")

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JKS_ADVICE = ("JKS keystores are not supported; convert it with keytool -importkeystore -srckeystore FILE "
              "-destkeystore FILE.p12 -deststoretype PKCS12 and set the type to PKCS12")

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


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; `key` is the (listener-prefixed) key to blame."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class _Keys:
    """The `ssl.*` values of one listener, each with the key name to blame in an error."""

    def __init__(self, config: "BrokerConfig", listener: str) -> None:
        self.config = config
        self.listener = listener

    def name(self, key: str) -> str:
        prefixed = f"listener.name.{self.listener.lower()}.{key}"
        return prefixed if (self.listener.lower(), key) in self.config._overrides else key

    def __getitem__(self, key: str) -> Any:
        return self.config.listener_value(self.listener, key)


def server_contexts(config: "BrokerConfig") -> dict[str, ssl.SSLContext]:
    """One server context per SSL / SASL_SSL listener; ConfigError naming the key otherwise."""
    from ..config import ConfigError

    contexts = {}
    for listener in config.listeners:
        if not config.security_protocol(listener.name).endswith("SSL"):
            continue
        try:
            keys = _Keys(config, listener.name)
            contexts[listener.name] = server_context(keys)
            if config.security_protocol(listener.name) == "SSL":
                _check_mapping_rules(keys)
        except TlsConfigError as exc:
            raise ConfigError(f"Invalid value for configuration {exc.key} (listener {listener.name}): {exc}") from None
    return contexts


def _check_mapping_rules(keys: _Keys) -> None:
    from ..security.principal import PrincipalMapper

    try:
        PrincipalMapper.parse(keys["ssl.principal.mapping.rules"])
    except ValueError as exc:
        raise TlsConfigError(keys.name("ssl.principal.mapping.rules"), str(exc)) from None


def server_context(keys: _Keys) -> ssl.SSLContext:
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


def _read(keys: _Keys, key: str) -> bytes:
    try:
        return Path(keys[key]).expanduser().read_bytes()
    except OSError as exc:
        raise TlsConfigError(keys.name(key), f"cannot read {keys[key]}: {exc.strerror}") from None


def _store_type(keys: _Keys, type_key: str, data: bytes) -> str:
    """The declared type, with Kafka's default JKS taken as what the file is (Java reads PKCS12
    under the JKS type too); a real JKS file is refused with the conversion command."""
    declared = keys[type_key]
    if data.startswith(JKS_MAGIC):
        raise TlsConfigError(keys.name(type_key), JKS_ADVICE)
    if declared == "JKS":
        if b"-----BEGIN" in data[:4096]:
            raise TlsConfigError(keys.name(type_key), "the file is PEM: set the type to PEM")
        return "PKCS12"
    return declared


def _load_keystore(ctx: ssl.SSLContext, keys: _Keys) -> None:
    key_password = keys["ssl.key.password"] or None
    inline_key, inline_chain = keys["ssl.keystore.key"], keys["ssl.keystore.certificate.chain"]
    location = keys["ssl.keystore.location"]
    if inline_key or inline_chain:
        if keys["ssl.keystore.type"] != "PEM":
            raise TlsConfigError(keys.name("ssl.keystore.type"), "inline ssl.keystore.key needs type PEM")
        if not (inline_key and inline_chain):
            missing = "ssl.keystore.certificate.chain" if inline_key else "ssl.keystore.key"
            raise TlsConfigError(keys.name(missing), "inline PEM needs both the key and the certificate chain")
        _load_pem_bytes(ctx, keys, (inline_key.strip() + "\n" + inline_chain.strip() + "\n").encode(), key_password)
        return
    if not location:
        raise TlsConfigError(keys.name("ssl.keystore.location"), "a TLS listener needs a keystore (or inline PEM)")
    data = _read(keys, "ssl.keystore.location")
    kind = _store_type(keys, "ssl.keystore.type", data)
    if kind == "PEM":
        if keys["ssl.keystore.password"]:
            raise TlsConfigError(keys.name("ssl.keystore.password"), "a PEM keystore has no store password "
                                 "(use ssl.key.password for an encrypted key)")
        try:
            ctx.load_cert_chain(str(Path(location).expanduser()), password=key_password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(keys.name("ssl.keystore.location"), f"cannot load the key and chain: {exc}") from None
        return
    _load_pem_bytes(ctx, keys, _pkcs12_to_pem(keys, data), None)


def _pkcs12_to_pem(keys: _Keys, data: bytes) -> bytes:
    """Key and chain of a PKCS12 keystore as unencrypted PEM (written only to a 0600 temp file)."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    password = keys["ssl.keystore.password"] or keys["ssl.key.password"]
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(keys.name("ssl.keystore.password"), f"cannot open the PKCS12 keystore: {exc}") from None
    if key is None or cert is None:
        raise TlsConfigError(keys.name("ssl.keystore.location"), "the PKCS12 keystore holds no key entry")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return pem + b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *extra])


def _load_pem_bytes(ctx: ssl.SSLContext, keys: _Keys, pem: bytes, password: str | None) -> None:
    fd, path = tempfile.mkstemp(prefix="offsetd-key-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        ctx.load_cert_chain(path, password=password)
    except (ssl.SSLError, ValueError) as exc:
        key = "ssl.keystore.key" if keys["ssl.keystore.key"] else "ssl.keystore.location"
        raise TlsConfigError(keys.name(key), f"cannot load the key and chain: {exc}") from None
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, keys: _Keys) -> None:
    inline, location = keys["ssl.truststore.certificates"], keys["ssl.truststore.location"]
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
        elif location:
            data = _read(keys, "ssl.truststore.location")
            if _store_type(keys, "ssl.truststore.type", data) == "PEM":
                ctx.load_verify_locations(cafile=str(Path(location).expanduser()))
            else:
                ctx.load_verify_locations(cadata=_pkcs12_certificates(keys, data))
        elif keys["ssl.client.auth"] != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, ValueError) as exc:
        key = "ssl.truststore.certificates" if inline else "ssl.truststore.location"
        raise TlsConfigError(keys.name(key), f"cannot load the trusted certificates: {exc}") from None


def _pkcs12_certificates(keys: _Keys, data: bytes) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    password = keys["ssl.truststore.password"]
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(keys.name("ssl.truststore.password"), f"cannot open the PKCS12 truststore: {exc}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise TlsConfigError(keys.name("ssl.truststore.location"), "the PKCS12 truststore holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _set_ciphers(ctx: ssl.SSLContext, keys: _Keys) -> None:
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

    def __init__(self, ctx: ssl.SSLContext, keys: _Keys) -> None:
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


def keystore_reloaders(config: "BrokerConfig") -> list[KeystoreReloader]:
    """One reloader per TLS listener whose keystore is a file."""
    reloaders = [KeystoreReloader(ctx, _Keys(config, name)) for name, ctx in config.tls.items()]
    return [r for r in reloaders if r.path is not None]


# ------------------------------------------------------------------------------ principal


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, most specific first (`CN=a,OU=B,O=C`)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal_builder(config: "BrokerConfig", listener: str) -> Callable[[bytes | None], str | None]:
    """For an SSL listener: peer certificate (DER, or None) -> `User:<mapped DN>`, `User:ANONYMOUS`
    without a certificate, None when no `ssl.principal.mapping.rules` rule matches (the connection
    must then fail). The mapping is security/principal.py's."""
    from ..security.principal import PrincipalMapper

    mapper = PrincipalMapper.parse(config.listener_value(listener, "ssl.principal.mapping.rules")).map

    def build(der: bytes | None) -> str | None:
        if der is None:
            return "User:ANONYMOUS"
        name = mapper(certificate_dn(der))
        return None if name is None else f"User:{name}"

    return build
