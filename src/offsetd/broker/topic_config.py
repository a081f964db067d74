"""Topic-level configs: Kafka's topic keys, the broker key each defaults to, and their types.

One table drives CreateTopics validation, DescribeConfigs output and the `LogConfig` handed to
storage, so a topic key means the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..config import BrokerConfig
from ..config_keys import SCHEMA
from ..storage.log_config import LogConfig

# DescribeConfigs ConfigType values (KIP-569).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7

# DescribeConfigs ConfigSource values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


@dataclass(frozen=True, slots=True)
class TopicKey:
    """A topic config: its broker-wide default key (if any), fallback default and type."""

    broker_key: str | None
    default: str
    config_type: int
    check: Callable[[str], bool]


def _int_at_least(lo: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        try:
            return int(value) >= lo
        except ValueError:
            return False

    return check


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda value: value in choices


def _ratio(value: str) -> bool:
    try:
        return 0.0 <= float(value) <= 1.0
    except ValueError:
        return False


TOPIC_KEYS: dict[str, TopicKey] = {
    "cleanup.policy": TopicKey("log.cleanup.policy", "delete", LIST, _one_of("delete", "compact", "compact,delete", "delete,compact")),
    "retention.ms": TopicKey("log.retention.ms", "604800000", LONG, _int_at_least(-1)),
    "retention.bytes": TopicKey("log.retention.bytes", "-1", LONG, _int_at_least(-1)),
    "local.retention.bytes": TopicKey("log.local.retention.bytes", "-2", LONG, _int_at_least(-2)),
    "segment.bytes": TopicKey("log.segment.bytes", "1073741824", INT, _int_at_least(14)),
    "segment.ms": TopicKey("log.roll.ms", "604800000", LONG, _int_at_least(1)),
    "segment.index.bytes": TopicKey(None, "10485760", INT, _int_at_least(4)),
    "index.interval.bytes": TopicKey("log.index.interval.bytes", "4096", INT, _int_at_least(0)),
    "flush.messages": TopicKey("log.flush.interval.messages", str(2**63 - 1), LONG, _int_at_least(1)),
    "flush.ms": TopicKey("log.flush.interval.ms", str(2**63 - 1), LONG, _int_at_least(0)),
    "max.message.bytes": TopicKey("message.max.bytes", "1048588", INT, _int_at_least(0)),
    "message.timestamp.type": TopicKey(None, "CreateTime", STRING, _one_of("CreateTime")),
    "compression.type": TopicKey(None, "producer", STRING, _one_of("producer")),
    "min.insync.replicas": TopicKey(None, "1", INT, _int_at_least(1)),
    "delete.retention.ms": TopicKey("log.cleaner.delete.retention.ms", "86400000", LONG, _int_at_least(0)),
    "min.cleanable.dirty.ratio": TopicKey("log.cleaner.min.cleanable.ratio", "0.5", DOUBLE, _ratio),
    "min.compaction.lag.ms": TopicKey("log.cleaner.min.compaction.lag.ms", "0", LONG, _int_at_least(0)),
    "max.compaction.lag.ms": TopicKey(None, str(2**63 - 1), LONG, _int_at_least(1)),
    "preallocate": TopicKey("log.preallocate", "false", BOOLEAN, _one_of("true", "false")),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> str | None:
    """An error message for the first unknown key or bad value, else None (INVALID_CONFIG)."""
    for key, value in configs.items():
        spec = TOPIC_KEYS.get(key)
        if spec is None:
            return f"Unknown topic config name: {key}"
        if value is None or not spec.check(value):
            return f"Invalid value {value} for configuration {key}"
    return None


def effective_value(key: str, overrides: Mapping[str, str], broker: BrokerConfig) -> tuple[str, int]:
    """(value, source) of a topic key: the topic override, else the broker key, else the default."""
    if key in overrides:
        return overrides[key], DYNAMIC_TOPIC_CONFIG
    spec = TOPIC_KEYS[key]
    if spec.broker_key is not None:
        raw = broker.raw(spec.broker_key)
        if raw != "":
            return raw, (DEFAULT_CONFIG if raw == _broker_default(spec.broker_key) else STATIC_BROKER_CONFIG)
    return spec.default, DEFAULT_CONFIG


def _broker_default(key: str) -> str:
    """The built-in default of a broker key, as a string."""
    return SCHEMA[key][1]


def log_config(overrides: Mapping[str, str], broker: BrokerConfig) -> LogConfig:
    """The storage `LogConfig` of a topic with these overrides."""

    def value(key: str) -> str:
        return effective_value(key, overrides, broker)[0]

    flush_ms = int(value("flush.ms"))
    return LogConfig(
        segment_bytes=int(value("segment.bytes")),
        segment_ms=int(value("segment.ms")),
        retention_ms=int(value("retention.ms")),
        retention_bytes=int(value("retention.bytes")),
        local_retention_bytes=int(value("local.retention.bytes")),
        flush_interval_messages=int(value("flush.messages")),
        flush_interval_ms=None if flush_ms >= 2**63 - 1 else flush_ms,
        index_interval_bytes=int(value("index.interval.bytes")),
        max_message_bytes=int(value("max.message.bytes")),
        cleanup_policy=value("cleanup.policy"),
        delete_retention_ms=int(value("delete.retention.ms")),
        min_cleanable_dirty_ratio=float(value("min.cleanable.dirty.ratio")),
        min_compaction_lag_ms=int(value("min.compaction.lag.ms")),
        preallocate=value("preallocate") == "true",
    )
