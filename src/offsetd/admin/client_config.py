"""Client configuration for the operator tools: `--bootstrap-server` plus the properties of a
`--command-config` file (Java `.properties` syntax, as Kafka's tools read it), given to
confluent-kafka as they are and translated for kafka-python's keyword-argument names."""

from __future__ import annotations

import re
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


def build_client_config(bootstrap: str, command_config: str | None) -> dict[str, str]:
    """The confluent-kafka configuration for the tools: the file's properties, Java's JAAS
    credentials turned into librdkafka's keys, and `bootstrap.servers` (the option wins)."""
    props: dict[str, str] = {}
    if command_config:
        try:
            props = parse_properties(Path(command_config).read_text())
        except OSError as exc:
            raise UsageError(f"Cannot read --command-config file '{command_config}': {exc.strerror}") from None
    jaas = props.pop("sasl.jaas.config", None)
    if jaas:
        for name, value in _JAAS_CREDENTIAL.findall(jaas):
            props.setdefault(f"sasl.{name}", value.replace('\\"', '"'))
    props["bootstrap.servers"] = bootstrap
    return props


def kafka_python_config(client_config: dict[str, str]) -> dict[str, str]:
    """kafka-python keyword arguments for the same connection (keys it has no equivalent for are
    left out; librdkafka-only tuning does not matter to one OffsetDelete request)."""
    return {_KAFKA_PYTHON_KEYS[key]: value for key, value in client_config.items() if key in _KAFKA_PYTHON_KEYS}
