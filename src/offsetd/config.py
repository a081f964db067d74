"""Broker configuration: Kafka's key names, types, defaults and validation, as one table.

`server.properties` uses Java properties syntax; every key a user sets is validated up front so a
bad value stops start-up with one line naming the key, as `kafka-server-start.sh` does.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

log = logging.getLogger("offsetd.config")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


def _parse_int(lo: int, hi: int = 2**63 - 1) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range [{lo}, {hi}]")
        return value

    return parse


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"expected true or false, got {raw!r}")


def _parse_ratio(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{value} is out of range [0.0, 1.0]")
    return value


def _parse_str(raw: str) -> str:
    return raw.strip()


def _parse_engine(raw: str) -> str:
    """`local` (segments in log.dirs, one node) or a PostgreSQL URL (cluster mode)."""
    value = raw.strip()
    if value == "local" or value.startswith(("postgresql://", "postgres://")):
        return value
    raise ValueError("expected local or a postgresql://user@host:port/database URL")


def _parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


@dataclass(frozen=True, slots=True)
class Listener:
    """One `NAME://host:port` entry of `listeners` / `advertised.listeners`."""

    name: str
    host: str
    port: int


_LISTENER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d+)$")


def _parse_listeners(raw: str) -> tuple[Listener, ...]:
    entries = [item.strip() for item in raw.split(",") if item.strip()]
    if not entries:
        raise ValueError("at least one listener is required, e.g. PLAINTEXT://127.0.0.1:9092")
    listeners = []
    for item in entries:
        match = _LISTENER.match(item)
        if not match:
            raise ValueError(f"{item!r} is not of the form NAME://host:port")
        name, host, port = match.group(1), match.group(2).strip("[]"), int(match.group(3))
        if name.upper() != "PLAINTEXT":
            raise ValueError(f"listener {name} is not supported (only PLAINTEXT)")
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is out of range")
        listeners.append(Listener(name.upper(), host, port))
    return tuple(listeners)


_HTTP_LISTENER = re.compile(r"^http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)(/|/metrics)?$")


def _parse_metrics_listener(raw: str) -> Listener | None:
    """`metrics.listener`: `http://host:port` (an optional `/metrics` path is accepted); empty = off."""
    text = raw.strip()
    if not text:
        return None
    match = _HTTP_LISTENER.match(text)
    if not match:
        raise ValueError(f"{text!r} is not of the form http://host:port, e.g. http://127.0.0.1:9404")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return Listener("HTTP", host, port)


INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _parse_timeout_ms(raw: str) -> int:
    """A time limit in ms, or -1 for none (Kafka disables idle expiry for a negative value)."""
    value = _parse_int(-1)(raw)
    if value == 0:
        raise ValueError("0 is not a usable time limit (use -1 for none)")
    return value


def _host_addresses(host: str) -> list[str]:
    """The addresses of an IP literal or host name, as peer addresses are written."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"cannot resolve host {host!r}: {exc}") from None
    return sorted({str(info[4][0]) for info in infos})


def _parse_ip_overrides(raw: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: Kafka's `host:count,host:count`; host names are
    resolved here, once, so the check at accept is a dict lookup by peer address."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")  # the last colon: IPv6 literals have colons
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not of the form host:count")
        limit = _parse_int(0, INT32_MAX)(count)
        for address in _host_addresses(host):
            overrides[address] = limit
    return overrides


# key: (parser, default as Kafka would write it in server.properties, one-line doc)
SCHEMA: dict[str, tuple[Callable[[str], Any], str, str]] = {
    "listeners": (_parse_listeners, "PLAINTEXT://127.0.0.1:9092", "Where the broker listens."),
    "advertised.listeners": (_parse_listeners, "", "Addresses given to clients (default: listeners)."),
    "node.id": (_parse_int(0, INT32_MAX), "1", "This broker's id."),
    "log.dirs": (_parse_str, "./data", "Directory holding the partition logs."),
    "storage.engine": (_parse_engine, "local",
                       "local (one node), or postgresql://… (cluster mode: logs, catalogue and ownership in "
                       "PostgreSQL; log.dirs caches the partitions this broker leads)."),
    "broker.session.timeout.ms": (_parse_int(100, INT32_MAX), "9000",
                                  "Cluster mode: a broker's lease; a broker not renewing it within this long "
                                  "loses its partitions (KRaft's name and default)."),
    "broker.heartbeat.interval.ms": (_parse_int(10, INT32_MAX), "2000",
                                     "Cluster mode: how often a broker renews its lease and looks at ownership."),
    "num.partitions": (_parse_int(1, 100000), "1", "Partitions of an auto-created topic."),
    "default.replication.factor": (_parse_int(1, 1), "1", "Only 1 (single node)."),
    "auto.create.topics.enable": (_parse_bool, "true", "Create unknown topics on Metadata/Produce."),
    "delete.topic.enable": (_parse_bool, "true", "Allow DeleteTopics."),
    "log.segment.bytes": (_parse_int(14, INT32_MAX), "1073741824", "Segment size before a roll."),
    "log.roll.ms": (_parse_int(1), "604800000", "Segment age before a roll."),
    "log.retention.ms": (_parse_int(-1), "604800000", "Delete segments older than this (-1: never)."),
    "log.retention.bytes": (_parse_int(-1), "-1", "Delete old segments above this size (-1: never)."),
    "log.retention.check.interval.ms": (_parse_int(1), "300000", "How often retention runs."),
    "log.flush.interval.messages": (_parse_int(1), str(LONG_MAX), "fsync after this many messages."),
    "log.flush.interval.ms": (_parse_int(1), "", "fsync dirty logs this often (default: never)."),
    "log.index.interval.bytes": (_parse_int(0, INT32_MAX), "4096", "Bytes between index entries."),
    "log.preallocate": (_parse_bool, "false", "Zero-fill space ahead of active segments (cheaper fsyncs)."),
    "log.cleanup.policy": (_parse_choice("delete", "compact"), "delete", "Default cleanup policy."),
    "log.cleaner.enable": (_parse_bool, "true", "Compact cleanup.policy=compact topics."),
    "log.cleaner.backoff.ms": (_parse_int(1), "15000", "Pause between cleaner passes."),
    "log.cleaner.delete.retention.ms": (_parse_int(0), "86400000", "How long tombstones are kept."),
    "log.cleaner.min.cleanable.ratio": (_parse_ratio, "0.5", "Dirty share that makes a log cleanable."),
    "log.cleaner.min.compaction.lag.ms": (_parse_int(0), "0", "Records younger than this are not cleaned."),
    "message.max.bytes": (_parse_int(0, INT32_MAX), "1048588", "Largest record batch accepted."),
    "socket.request.max.bytes": (_parse_int(1, INT32_MAX), "104857600", "Largest request frame."),
    "socket.request.receive.timeout.ms": (_parse_timeout_ms, "30000",
                                          "Close a connection whose started request frame is not complete "
                                          "within this (offsetd's own; -1: no limit)."),
    "connections.max.idle.ms": (_parse_timeout_ms, "600000", "Close connections idle this long (-1: never)."),
    "max.connections": (_parse_int(0, INT32_MAX), str(INT32_MAX), "Most client connections at once."),
    "max.connections.per.ip": (_parse_int(0, INT32_MAX), str(INT32_MAX), "Most connections from one address."),
    "max.connections.per.ip.overrides": (_parse_ip_overrides, "",
                                         "Per-address limits, host:count,host:count."),
    "max.incremental.fetch.session.cache.slots": (_parse_int(0, INT32_MAX), "1000",
                                                  "Most incremental fetch sessions (KIP-227) at once."),
    "group.initial.rebalance.delay.ms": (_parse_int(0), "3000", "Delay of a new group's first rebalance."),
    "offsets.topic.num.partitions": (_parse_int(1, 10000), "50", "Partitions of __consumer_offsets."),
    "offsets.topic.replication.factor": (_parse_int(1, 1), "1", "Only 1 (single node)."),
    "offsets.topic.segment.bytes": (_parse_int(14, INT32_MAX), "104857600", "Segment size of __consumer_offsets."),
    "offsets.topic.fsync.enable": (_parse_bool, "true", "fsync __consumer_offsets before acknowledging a commit."),
    "offsets.retention.minutes": (_parse_int(1), "10080", "Offsets retention (KIP-211)."),
    "offsets.retention.check.interval.ms": (_parse_int(1), "600000", "How often offsets expire."),
    "offset.metadata.max.bytes": (_parse_int(0, INT32_MAX), "4096", "Longest commit metadata."),
    "group.min.session.timeout.ms": (_parse_int(0, INT32_MAX), "6000", "Shortest session timeout."),
    "group.max.session.timeout.ms": (_parse_int(0, INT32_MAX), "1800000", "Longest session timeout."),
    "group.max.size": (_parse_int(1, INT32_MAX), str(INT32_MAX), "Most members in a group."),
    "transactional.id.expiration.ms": (_parse_int(1), "604800000",
                                       "Idle transactional ids are forgotten after this."),
    "transaction.max.timeout.ms": (_parse_int(1, INT32_MAX), "900000",
                                   "Longest transaction.timeout.ms a producer may ask for."),
    "transaction.state.log.num.partitions": (_parse_int(1, 10000), "50", "Partitions of __transaction_state."),
    "transaction.state.log.segment.bytes": (_parse_int(14, INT32_MAX), "104857600",
                                            "Segment size of __transaction_state."),
    "transaction.state.log.replication.factor": (_parse_int(1, 1), "1", "Only 1 (the log is stored once)."),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_parse_int(1, INT32_MAX), "10000",
                                                                    "How often timed-out transactions are aborted."),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_parse_int(1, INT32_MAX), "3600000",
                                                                   "How often expired transactional ids go."),
    "transaction.partition.verification.enable": (_parse_bool, "true",
                                                  "Check a partition is in the transaction before its first "
                                                  "transactional batch is appended."),
    "metrics.listener": (_parse_metrics_listener, "",
                         "Prometheus /metrics and read-only /v1/groups JSON, e.g. http://127.0.0.1:9404 (empty: off)."),
}

# Keys whose value must be given as an integer but may be left empty to mean "unset".
_OPTIONAL = {"log.flush.interval.ms", "advertised.listeners"}


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` (server.properties, client --command-config files): `key=value`,
    `key:value` or `key value`; `#`/`!` comments; a trailing backslash continues the line (also
    on the last line); `\\` escapes in keys; values are stripped."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)", line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        props[key.replace("\\", "")] = value.strip()
    if pending:
        key, _, value = pending.partition("=")
        props[key.strip()] = value.strip()
    return props


class BrokerConfig:
    """Typed, validated broker configuration; attribute access by Kafka key via `get`."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        raw = {key: default for key, (_, default, _) in SCHEMA.items()}
        self.unknown: list[str] = []
        for key, value in (values or {}).items():
            if key not in SCHEMA:
                self.unknown.append(key)
                log.warning("unknown config key %s (ignored)", key)
                continue
            raw[key] = value
        self._values: dict[str, Any] = {}
        for key, text in raw.items():
            parser = SCHEMA[key][0]
            if key in _OPTIONAL and text.strip() == "":
                self._values[key] = None
                continue
            try:
                self._values[key] = parser(text)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None
        if self._values["broker.heartbeat.interval.ms"] >= self._values["broker.session.timeout.ms"]:
            raise ConfigError("broker.heartbeat.interval.ms must be less than broker.session.timeout.ms "
                              f"({self._values['broker.heartbeat.interval.ms']} >= "
                              f"{self._values['broker.session.timeout.ms']})")
        self._raw = raw

    def get(self, key: str) -> Any:
        """The typed value of a Kafka config key."""
        return self._values[key]

    def raw(self, key: str) -> str:
        """The value as a string, as DescribeConfigs reports it."""
        return self._raw[key]

    def items_raw(self) -> list[tuple[str, str]]:
        """All known keys with their string values."""
        return sorted(self._raw.items())

    @property
    def listener(self) -> Listener:
        return self._values["listeners"][0]

    @property
    def advertised_listener(self) -> Listener:
        advertised = self._values["advertised.listeners"]
        if advertised:
            return advertised[0]
        listener = self.listener
        host = listener.host or "localhost"
        return Listener(listener.name, "localhost" if host == "0.0.0.0" else host, listener.port)

    @property
    def log_dir(self) -> Path:
        return Path(self._values["log.dirs"].split(",")[0]).expanduser()

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str]) -> "BrokerConfig":
        """Read a properties file (optional) and apply `key=value` overrides on top."""
        values: dict[str, str] = {}
        if path is not None:
            try:
                values.update(parse_properties(Path(path).read_text(encoding="utf-8")))
            except OSError as exc:
                raise ConfigError(f"Cannot read config file {path}: {exc.strerror}") from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid --override {item!r}: expected key=value")
            values[key.strip()] = value
        return cls(values)
