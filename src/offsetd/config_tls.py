"""The `ssl.*` keys of a TLS listener (reference security.md §1), checked when the configuration
loads, without building an ssl context: keystore and truststore readable, their types (JKS refused
with the `keytool` command converting it), the passwords that open a PKCS12 store, a PEM keystore
without a store password, mapping rules that parse. server/tls.py builds each listener's context at
start-up from the same Keystore and Truststore, so a key ssl cannot load still stops start-up there.

Keystores: PEM files, inline PEM (`ssl.keystore.key` + `ssl.keystore.certificate.chain`), PKCS12
(re-serialised as PEM through `cryptography`, since `ssl` loads only PEM).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .security.principal import PrincipalMapper

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JKS_ADVICE = ("JKS keystores are not supported; convert it with keytool -importkeystore -srckeystore FILE "
              "-destkeystore FILE.p12 -deststoretype PKCS12 and set the type to PKCS12")


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; `key` is the (listener-prefixed) key to blame."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key

    def line(self, listener: str) -> str:
        """The one start-up line naming the key (config.ConfigError's message)."""
        return f"Invalid value for configuration {self.key} (listener {listener}): {self}"


class ListenerSettings(Protocol):
    """What the TLS checks read of the configuration (config.py's BrokerConfig)."""

    def listener_value(self, listener: str, key: str) -> Any: ...

    def listener_key(self, listener: str, key: str) -> str: ...


class ListenerKeys:
    """The `ssl.*` values of one listener, each with the key name to blame in an error."""

    def __init__(self, config: ListenerSettings, listener: str) -> None:
        self.config = config
        self.listener = listener

    def name(self, key: str) -> str:
        return self.config.listener_key(self.listener, key)

    def __getitem__(self, key: str) -> Any:
        return self.config.listener_value(self.listener, key)


@dataclass(frozen=True, slots=True)
class Keystore:
    """A listener's key and certificate chain as ssl loads them: a PEM file (`path`), or PEM bytes
    (inline, or converted from PKCS12) that reach ssl only through a 0600 temp file. `blame` is the
    key an ssl load failure names."""

    path: Path | None
    pem: bytes | None
    password: str | None
    blame: str


@dataclass(frozen=True, slots=True)
class Truststore:
    """A listener's trusted certificates as ssl loads them: a PEM file, PEM text, or neither (then
    the system's CAs when client certificates are asked for). `blame` as Keystore's."""

    cafile: Path | None
    cadata: str | None
    blame: str


def check_listener(config: ListenerSettings, listener: str, protocol: str) -> None:
    """Every check of one SSL / SASL_SSL listener that needs no ssl context; TlsConfigError naming the key."""
    keys = ListenerKeys(config, listener)
    keystore(keys)
    truststore(keys)
    if protocol == "SSL":
        try:
            PrincipalMapper.parse(keys["ssl.principal.mapping.rules"])
        except ValueError as exc:
            raise TlsConfigError(keys.name("ssl.principal.mapping.rules"), str(exc)) from None


def _read(keys: ListenerKeys, key: str) -> bytes:
    try:
        return Path(keys[key]).expanduser().read_bytes()
    except OSError as exc:
        raise TlsConfigError(keys.name(key), f"cannot read {keys[key]}: {exc.strerror}") from None


def _store_type(keys: ListenerKeys, type_key: str, data: bytes) -> str:
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


def keystore(keys: ListenerKeys) -> Keystore:
    """The listener's keystore, read (a PKCS12 store opened with its password) but not loaded."""
    key_password = keys["ssl.key.password"] or None
    inline_key, inline_chain = keys["ssl.keystore.key"], keys["ssl.keystore.certificate.chain"]
    location = keys["ssl.keystore.location"]
    if inline_key or inline_chain:
        if keys["ssl.keystore.type"] != "PEM":
            raise TlsConfigError(keys.name("ssl.keystore.type"), "inline ssl.keystore.key needs type PEM")
        if not (inline_key and inline_chain):
            missing = "ssl.keystore.certificate.chain" if inline_key else "ssl.keystore.key"
            raise TlsConfigError(keys.name(missing), "inline PEM needs both the key and the certificate chain")
        pem = (inline_key.strip() + "\n" + inline_chain.strip() + "\n").encode()
        return Keystore(None, pem, key_password, keys.name("ssl.keystore.key"))
    if not location:
        raise TlsConfigError(keys.name("ssl.keystore.location"), "a TLS listener needs a keystore (or inline PEM)")
    data = _read(keys, "ssl.keystore.location")
    kind = _store_type(keys, "ssl.keystore.type", data)
    if kind == "PEM":
        if keys["ssl.keystore.password"]:
            raise TlsConfigError(keys.name("ssl.keystore.password"), "a PEM keystore has no store password "
                                 "(use ssl.key.password for an encrypted key)")
        return Keystore(Path(location).expanduser(), None, key_password, keys.name("ssl.keystore.location"))
    return Keystore(None, _pkcs12_to_pem(keys, data), None, keys.name("ssl.keystore.location"))


def _pkcs12_to_pem(keys: ListenerKeys, data: bytes) -> bytes:
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


def truststore(keys: ListenerKeys) -> Truststore:
    """The listener's truststore, read (a PKCS12 store opened with its password) but not loaded."""
    inline, location = keys["ssl.truststore.certificates"], keys["ssl.truststore.location"]
    if inline:
        return Truststore(None, inline, keys.name("ssl.truststore.certificates"))
    blame = keys.name("ssl.truststore.location")
    if not location:
        return Truststore(None, None, blame)
    data = _read(keys, "ssl.truststore.location")
    if _store_type(keys, "ssl.truststore.type", data) == "PEM":
        return Truststore(Path(location).expanduser(), None, blame)
    return Truststore(None, _pkcs12_certificates(keys, data), blame)


def _pkcs12_certificates(keys: ListenerKeys, data: bytes) -> str:
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
