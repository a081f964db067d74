"""`metrics.listener`: off by default, http://host:port when set, one clear error otherwise."""

import pytest

from offsetd.config import BrokerConfig, ConfigError


def test_off_by_default():
    assert BrokerConfig().get("metrics.listener") is None
    assert BrokerConfig({"metrics.listener": "  "}).get("metrics.listener") is None


@pytest.mark.parametrize("value,host,port", [
    ("http://127.0.0.1:9404", "127.0.0.1", 9404),
    ("http://127.0.0.1:0", "127.0.0.1", 0),
    ("http://0.0.0.0:9404/metrics", "0.0.0.0", 9404),
    ("http://localhost:9404/", "localhost", 9404),
    ("http://[::1]:9404", "::1", 9404),
    ("http://:9404", "", 9404),
])
def test_valid(value, host, port):
    listener = BrokerConfig({"metrics.listener": value}).get("metrics.listener")
    assert (listener.host, listener.port) == (host, port)


@pytest.mark.parametrize("value", [
    "127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://127.0.0.1:99999",
    "http://127.0.0.1:9404/other", "PLAINTEXT://127.0.0.1:9404",
])
def test_invalid_value_names_the_key(value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"metrics.listener": value})
    assert "for configuration metrics.listener" in str(info.value)
    assert "http://host:port" in str(info.value) or "out of range" in str(info.value)
    assert "\n" not in str(info.value)


def test_group_filter_is_a_whole_id_expression():
    """`metrics.group.filter`: empty keeps every group; a bad expression names the key."""
    assert BrokerConfig().get("metrics.group.filter") is None
    pattern = BrokerConfig({"metrics.group.filter": "orders-.*"}).get("metrics.group.filter")
    assert pattern.fullmatch("orders-eu") and not pattern.fullmatch("my-orders-eu")
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"metrics.group.filter": "orders-("})
    assert "metrics.group.filter" in str(info.value)
