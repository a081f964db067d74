"""`offsetd spark --command-config`: Kafka client properties become `kafka.*` source options,
read with the project's one `.properties` parser (comments, `key: value`, continued lines)."""

from __future__ import annotations

import argparse
from pathlib import Path

from offsetd.spark.cli import _client_options


def test_command_config_becomes_kafka_options(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\n! another\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism: PLAIN\n"
                    "client.id = spark-\\\n   job\n")
    assert _client_options(argparse.Namespace(command_config=str(path))) == {
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN", "kafka.client.id": "spark-job"}
    assert _client_options(argparse.Namespace(command_config=None)) == {}
