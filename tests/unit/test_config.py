"""Broker config: Kafka key names, properties syntax, one clear error naming the key."""

import pytest

from offsetd.config import BrokerConfig, ConfigError, parse_properties


def test_properties_syntax_comments_separators_and_continuations():
    text = "# comment\n! also comment\n\nnode.id=3\nlog.dirs : /tmp/x\nlisteners PLAINTEXT://a:1,\\\n   PLAINTEXT://b:2\n"
    assert parse_properties(text) == {
        "node.id": "3", "log.dirs": "/tmp/x", "listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}


def test_defaults_match_kafka_names_and_embedded_default():
    config = BrokerConfig()
    assert config.listener.host == "127.0.0.1" and config.listener.port == 9092
    assert str(config.log_dir) == "data"
    assert config.get("socket.request.max.bytes") == 104857600
    assert config.get("log.flush.interval.ms") is None


@pytest.mark.parametrize("key,value", [
    ("node.id", "abc"), ("log.segment.bytes", "10"), ("auto.create.topics.enable", "yes"),
    ("listeners", "127.0.0.1:9092"), ("listeners", "FOO://127.0.0.1:9093"), ("message.max.bytes", "-5"),
    ("connections.max.idle.ms", "-2"), ("connections.max.idle.ms", "0"),
    ("socket.request.receive.timeout.ms", "x"),
    ("max.connections", "-1"), ("max.connections.per.ip", "2147483648"),
    ("max.connections.per.ip.overrides", "127.0.0.1"), ("max.connections.per.ip.overrides", "127.0.0.1:-1"),
    ("max.connections.per.ip.overrides", ":5"), ("coordinator.journal.bytes", "4096"),
    ("coordinator.journal.bytes", "-1"),
])
def test_invalid_value_names_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({key: value})
    assert f"for configuration {key}" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_key_is_a_warning_not_an_error(caplog):
    config = BrokerConfig({"no.such.key": "1", "node.id": "7"})
    assert config.unknown == ["no.such.key"]
    assert config.get("node.id") == 7
    assert "unknown config key no.such.key" in caplog.text


def test_overrides_apply_on_top_of_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("node.id=1\nnum.partitions=3\n")
    config = BrokerConfig.load(path, ["num.partitions=5"])
    assert config.get("num.partitions") == 5 and config.get("node.id") == 1
    with pytest.raises(ConfigError, match="expected key=value"):
        BrokerConfig.load(path, ["num.partitions"])


def test_connection_settings_kafka_defaults_and_overrides():
    config = BrokerConfig()
    assert config.get("connections.max.idle.ms") == 600000
    assert config.get("max.connections") == config.get("max.connections.per.ip") == 2147483647
    assert config.get("max.connections.per.ip.overrides") == {}
    assert config.get("socket.request.receive.timeout.ms") == 30000
    config = BrokerConfig({"connections.max.idle.ms": "-1",
                           "max.connections.per.ip.overrides": " 127.0.0.2:4 , [::1]:0,10.0.0.1:7"})
    assert config.get("connections.max.idle.ms") == -1  # Kafka: a negative value turns idle expiry off
    assert config.get("max.connections.per.ip.overrides") == {"127.0.0.2": 4, "::1": 0, "10.0.0.1": 7}
