"""Client configuration for the operator tools: `--bootstrap-server` plus the properties of a
`--command-config` file (Java `.properties` syntax, as Kafka's tools read it).

Kafka's Java client keys for security are translated to librdkafka's (confluent-kafka) and to
kafka-python's keyword arguments: `sasl.jaas.config` (PLAIN/SCRAM username and password),
`ssl.truststore.*` and `ssl.keystore.*` of type PEM (files or inline PEM) or PKCS12, `ssl.key.password`
and `ssl.endpoint.identification.algorithm`. librdkafka's own keys (`ssl.ca.location`,
`sasl.username`, ...) pass through unchanged. JKS stores are refused with the keytool command that
converts them. Inline PEM and PKCS12 stores are written to 0600 temporary files (removed at exit),
because OpenSSL and kafka-python load keys from files."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..config import parse_properties
from .errors import UsageError

# Java's `sasl.jaas.config` for PLAIN/SCRAM carries the credentials librdkafka wants as
# `sasl.username` / `sasl.password`.
_JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')

# librdkafka key -> kafka-python keyword for the settings that matter to an admin connection.
_KAFKA_PYTHON_KEYS: dict[str, str] = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}

# Java-only keys that carry nothing a tool's connection needs (librdkafka would refuse them).
_IGNORED_JAVA_KEYS = ("ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
                      "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider",
                      "sasl.login.class", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
                      "sasl.kerberos.service.name", "ssl.engine.factory.class")

JKS_HINT = ("convert it with `keytool -importkeystore -srckeystore {path} -destkeystore {path}.p12 "
            "-deststoretype PKCS12` and set {key}=PKCS12, or use PEM")

_temp_dir: Path | None = None


def _private_file(name: str, data: bytes) -> str:
    """Write `data` to a 0600 file in this process' temporary directory; return its path."""
    global _temp_dir
    if _temp_dir is None:
        _temp_dir = Path(tempfile.mkdtemp(prefix="offsetd-client-"))
        atexit.register(shutil.rmtree, _temp_dir, True)
    path = _temp_dir / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return str(path)


def _read_store(key: str, location: str) -> bytes:
    """The bytes of a keystore/truststore file, or UsageError naming the key."""
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise UsageError(f"Cannot read {key} '{location}': {exc.strerror}") from None


def _store_type(props: dict[str, str], prefix: str) -> str | None:
    """The upper-cased `<prefix>.type` when a store is configured (Java's default is JKS), else None;
    JKS is refused here."""
    location, inline = props.get(f"{prefix}.location"), (
        props.get("ssl.truststore.certificates") if prefix == "ssl.truststore" else props.get("ssl.keystore.key"))
    if not location and not inline:
        props.pop(f"{prefix}.type", None)
        return None
    kind = props.pop(f"{prefix}.type", "JKS").strip().upper()
    if kind == "JKS":
        raise UsageError(f"{prefix}.type JKS is not supported (it is Java's default when {prefix}.location is "
                         f"set without a type): " + JKS_HINT.format(path=location or "STORE", key=f"{prefix}.type"))
    if kind not in ("PEM", "PKCS12"):
        raise UsageError(f"{prefix}.type {kind} is not supported: use PEM or PKCS12")
    return kind


def _pkcs12(key: str, data: bytes, password: str | None) -> tuple[bytes, bytes]:
    """A PKCS12 store as (PEM private key or b"", PEM certificates)."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    try:
        private, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise UsageError(f"Cannot load PKCS12 {key}: {exc} (wrong password?)") from None
    certs = ([cert] if cert else []) + list(extra)
    key_pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()) if private else b""
    return key_pem, b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _translate_truststore(props: dict[str, str]) -> None:
    """`ssl.truststore.*` -> `ssl.ca.location` (a CA file librdkafka and kafka-python both read)."""
    kind = _store_type(props, "ssl.truststore")
    location = props.pop("ssl.truststore.location", None)
    inline = props.pop("ssl.truststore.certificates", None)
    password = props.pop("ssl.truststore.password", None)
    if kind is None:
        return
    if kind == "PEM":
        if password:
            raise UsageError("ssl.truststore.password is not allowed with ssl.truststore.type=PEM")
        props["ssl.ca.location"] = location if location else _private_file("truststore.pem", inline.encode())
        return
    _key, certs = _pkcs12("ssl.truststore.location", _read_store("ssl.truststore.location", location or ""), password)
    props["ssl.ca.location"] = _private_file("truststore.pem", certs)


def _translate_keystore(props: dict[str, str]) -> None:
    """`ssl.keystore.*` -> `ssl.certificate.location` + `ssl.key.location` (PEM files)."""
    kind = _store_type(props, "ssl.keystore")
    location = props.pop("ssl.keystore.location", None)
    inline_key = props.pop("ssl.keystore.key", None)
    inline_chain = props.pop("ssl.keystore.certificate.chain", None)
    password = props.pop("ssl.keystore.password", None)
    if kind is None:
        return
    if kind == "PEM":
        if password:
            raise UsageError("ssl.keystore.password is not allowed with ssl.keystore.type=PEM "
                             "(an encrypted key's password is ssl.key.password)")
        if location:  # one file holding the private key and the certificate chain (KIP-651)
            props["ssl.certificate.location"] = props["ssl.key.location"] = location
            return
        if not inline_chain:
            raise UsageError("ssl.keystore.key needs ssl.keystore.certificate.chain")
        props["ssl.key.location"] = _private_file("keystore.key", (inline_key or "").encode())
        props["ssl.certificate.location"] = _private_file("keystore.crt", inline_chain.encode())
        return
    key_pem, certs = _pkcs12("ssl.keystore.location", _read_store("ssl.keystore.location", location or ""),
                             props.pop("ssl.key.password", None) or password)
    props["ssl.key.location"] = _private_file("keystore.key", key_pem)
    props["ssl.certificate.location"] = _private_file("keystore.crt", certs)


def translate_java_properties(props: dict[str, str]) -> dict[str, str]:
    """Kafka Java client security properties -> librdkafka keys (a new dict; UsageError for JKS,
    unreadable stores and contradictions)."""
    props = dict(props)
    jaas = props.pop("sasl.jaas.config", None)
    if jaas:
        for name, value in _JAAS_CREDENTIAL.findall(jaas):
            props.setdefault(f"sasl.{name}", value.replace('\\"', '"'))
    _translate_truststore(props)
    _translate_keystore(props)
    if "ssl.endpoint.identification.algorithm" in props:
        # Java: "" turns hostname verification off; librdkafka spells that `none`
        algorithm = props["ssl.endpoint.identification.algorithm"].strip().lower()
        props["ssl.endpoint.identification.algorithm"] = algorithm if algorithm in ("https",) else "none"
    for key in _IGNORED_JAVA_KEYS:
        props.pop(key, None)
    return props


def read_command_config(command_config: str | None) -> dict[str, str]:
    """The properties of a `--command-config` file (empty without one); UsageError if unreadable."""
    if not command_config:
        return {}
    try:
        return parse_properties(Path(command_config).read_text())
    except OSError as exc:
        raise UsageError(f"Cannot read --command-config file '{command_config}': {exc.strerror}") from None


def build_client_config(bootstrap: str, command_config: str | None) -> dict[str, str]:
    """The confluent-kafka configuration for the tools: the file's properties with Java's security
    keys translated, and `bootstrap.servers` (the option wins)."""
    props = translate_java_properties(read_command_config(command_config))
    props["bootstrap.servers"] = bootstrap
    return props


def kafka_python_config(client_config: dict[str, str]) -> dict[str, object]:
    """kafka-python keyword arguments for the same connection (keys it has no equivalent for are
    left out; librdkafka-only tuning does not matter to one admin request)."""
    settings: dict[str, object] = {_KAFKA_PYTHON_KEYS[key]: value for key, value in client_config.items()
                                   if key in _KAFKA_PYTHON_KEYS}
    if "ssl.ca.pem" in client_config:
        settings["ssl_cafile"] = _private_file("ca.pem", client_config["ssl.ca.pem"].encode())
    if client_config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        settings["ssl_check_hostname"] = False
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    settings["security_protocol"] = protocol
    if "sasl_mechanism" in settings:
        settings["sasl_mechanism"] = str(settings["sasl_mechanism"]).upper()
    return settings
