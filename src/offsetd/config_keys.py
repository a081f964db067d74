"""Kafka's broker config keys as one table (SCHEMA): each key's parser, default and one-line doc,
and the parsers themselves, each checking one value and saying in one line what is wrong with it.
config.py loads a configuration through this table and checks the keys against each other.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any, Callable


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


def _parse_off_or_at_least(lo: int) -> Callable[[str], int]:
    """0 (off), or an integer of at least `lo` (a size where something smaller would only hurt)."""
    def parse(raw: str) -> int:
        value = _parse_int(0, INT32_MAX)(raw)
        if 0 < value < lo:
            raise ValueError(f"{value} is neither 0 (off) nor at least {lo}")
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

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# SASL mechanisms offsetd serves (GSSAPI and OAUTHBEARER are not: reference §2.7).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_listeners(raw: str) -> tuple[Listener, ...]:
    entries = [item.strip() for item in raw.split(",") if item.strip()]
    if not entries:
        raise ValueError("at least one listener is required, e.g. PLAINTEXT://127.0.0.1:9092")
    listeners: list[Listener] = []
    for item in entries:
        match = _LISTENER.match(item)
        if not match:
            raise ValueError(f"{item!r} is not of the form NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is out of range")
        if any(other.name == name for other in listeners):
            raise ValueError(f"listener name {name} appears twice")
        if port and any(other.port == port for other in listeners):
            raise ValueError(f"port {port} appears twice")
        listeners.append(Listener(name, host, port))
    return tuple(listeners)


def _parse_protocol_map(raw: str) -> dict[str, str]:
    """`listener.security.protocol.map`: `NAME:PROTOCOL,…` (both case-insensitive)."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ValueError(f"{item!r} is not of the form NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})")
        mapping[name] = protocol
    return mapping


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_rebalance_protocols(raw: str) -> tuple[str, ...]:
    """group.coordinator.rebalance.protocols: classic (required) and optionally consumer; share is
    accepted and ignored, as Kafka 4.2 does (share groups follow group.share.enable)."""
    protocols = tuple(p.lower() for p in _parse_list(raw))
    unknown = [p for p in protocols if p not in ("classic", "consumer", "share")]
    if unknown:
        raise ValueError(f"unknown protocol(s) {', '.join(unknown)}; expected classic and consumer")
    if "classic" not in protocols:
        raise ValueError("the classic protocol must be enabled")
    return protocols


def _parse_assignors(raw: str) -> tuple[str, ...]:
    """group.consumer.assignors: server-side assignor names (uniform, range), the first the default."""
    names = tuple(a.lower() for a in _parse_list(raw))
    unknown = [a for a in names if a not in ("uniform", "range")]
    if unknown or not names:
        raise ValueError(f"expected a list of uniform and range, got {raw!r}")
    return names


def _parse_share_assignors(raw: str) -> str:
    """group.share.assignors: exactly one assignor, and the only one is simple."""
    names = tuple(a.lower() for a in _parse_list(raw))
    if names != ("simple",):
        raise ValueError(f"expected exactly one share assignor, simple, got {raw!r}")
    return names[0]


def _parse_mechanisms(raw: str) -> tuple[str, ...]:
    return tuple(item.upper() for item in _parse_list(raw))


def _parse_store_type(raw: str) -> str:
    value = raw.strip().upper()
    if value not in ("JKS", "PKCS12", "PEM"):
        raise ValueError(f"expected JKS, PKCS12 or PEM, got {raw!r}")
    return value


def _parse_client_auth(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("none", "requested", "required"):
        raise ValueError(f"expected none, requested or required, got {raw!r}")
    return value


def _parse_protocols(raw: str) -> tuple[str, ...]:
    protocols = _parse_list(raw)
    for protocol in protocols:
        if protocol not in ("TLSv1.2", "TLSv1.3"):
            raise ValueError(f"{protocol!r} is not served (TLSv1.2 and TLSv1.3 are)")
    if not protocols:
        raise ValueError("at least one protocol is required")
    return protocols


def _parse_super_users(raw: str) -> tuple[str, ...]:
    """`super.users`: principals separated by `;` (a DN may contain commas), e.g. `User:admin;User:CN=x,O=y`."""
    users = tuple(item.strip() for item in raw.split(";") if item.strip())
    for user in users:
        kind, sep, name = user.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{user!r} is not a principal of the form Type:name")
    return users


# Kafka's authorizers; offsetd's own ACL authorizer (security/authorization.py) stands for both.
AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer")


def _parse_authorizer(raw: str) -> str:
    value = raw.strip()
    if value and value not in AUTHORIZERS:
        raise ValueError(f"expected empty (no authorization) or one of {', '.join(AUTHORIZERS)}")
    return value


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


def _parse_rate(raw: str) -> float | None:
    """A positive number, or -1 for "off" (None)."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if value == -1:
        return None
    if not value > 0:
        raise ValueError(f"{value} must be positive (or -1: off)")
    return value


def _parse_regex(raw: str) -> re.Pattern[str] | None:
    """A regular expression matched against whole group ids; empty = none."""
    text = raw.strip()
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"{text!r} is not a regular expression: {exc}") from None


def _parse_webhook(raw: str) -> str | None:
    text = raw.strip()
    if not text:
        return None
    if not re.match(r"^https?://[^/\s]+", text):
        raise ValueError(f"{text!r} is not an http:// or https:// URL")
    return text


def _parse_off(lo: int) -> Callable[[str], int | None]:
    """An integer >= lo, or -1 for "off" (None)."""
    parse_int = _parse_int(-1)

    def parse(raw: str) -> int | None:
        value = parse_int(raw)
        if value == -1:
            return None
        if value < lo:
            raise ValueError(f"{value} is out of range: at least {lo}, or -1 (off)")
        return value
    return parse


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
                       "PostgreSQL; log.dirs caches the partitions this broker leads; several hosts, "
                       "h1:p1,h2:p2, for a primary and its standbys: only the primary is written to)."),
    "storage.connections": (_parse_int(2, 1000), "8",
                            "Cluster mode: PostgreSQL connections a broker keeps for appends, claims and "
                            "reads (its lease renews on one more of its own)."),
    "broker.session.timeout.ms": (_parse_int(100, INT32_MAX), "9000",
                                  "Cluster mode: a broker's lease; a broker not renewing it within this long "
                                  "loses its partitions (KRaft's name and default)."),
    "broker.heartbeat.interval.ms": (_parse_int(10, INT32_MAX), "2000",
                                     "Cluster mode: how often a broker renews its lease and looks at ownership "
                                     "(at most a third of broker.session.timeout.ms is used)."),
    "num.partitions": (_parse_int(1, 100000), "1", "Partitions of an auto-created topic."),
    "default.replication.factor": (_parse_int(1, 1), "1", "Only 1 (single node)."),
    "auto.create.topics.enable": (_parse_bool, "true", "Create unknown topics on Metadata/Produce."),
    "delete.topic.enable": (_parse_bool, "true", "Allow DeleteTopics."),
    "log.segment.bytes": (_parse_int(14, INT32_MAX), "1073741824", "Segment size before a roll."),
    "log.roll.ms": (_parse_int(1), "604800000", "Segment age before a roll."),
    "log.retention.ms": (_parse_int(-1), "604800000", "Delete segments older than this (-1: never)."),
    "log.retention.bytes": (_parse_int(-1), "-1", "Delete old segments above this size (-1: never)."),
    "log.local.retention.bytes": (_parse_int(-2), "268435456",
                                  "Cluster mode: a new owner copies at most this much of a log's tail from "
                                  "PostgreSQL and reads the rest from there (-2: log.retention.bytes, -1: all)."),
    "log.retention.check.interval.ms": (_parse_int(1), "300000", "How often retention runs."),
    "log.flush.interval.messages": (_parse_int(1), str(LONG_MAX), "fsync after this many messages."),
    "log.flush.interval.ms": (_parse_int(1), "", "fsync dirty logs this often (default: never)."),
    "log.index.interval.bytes": (_parse_int(0, INT32_MAX), "4096", "Bytes between index entries."),
    "log.preallocate": (_parse_bool, "false", "Zero-fill space ahead of active segments (cheaper fsyncs)."),
    "log.max.open.files": (_parse_int(16, INT32_MAX), "",
                           "Segment and index files held open at once, least recently used closed first "
                           "(default: half the open-file limit, raised to its hard limit at start-up)."),
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
    "coordinator.journal.bytes": (_parse_off_or_at_least(1 << 20), "67108864",
                                  "The coordinators' journal in log.dirs: one fdatasync makes the writes of every "
                                  "coordinator partition durable; it rolls (fsyncing their segments) past this size. "
                                  "0: an fdatasync per partition written; else at least 1048576."),
    "offsets.retention.minutes": (_parse_int(1), "10080", "Offsets retention (KIP-211)."),
    "offsets.retention.check.interval.ms": (_parse_int(1), "600000", "How often offsets expire."),
    "offset.metadata.max.bytes": (_parse_int(0, INT32_MAX), "4096", "Longest commit metadata."),
    "group.min.session.timeout.ms": (_parse_int(0, INT32_MAX), "6000", "Shortest session timeout."),
    "group.max.session.timeout.ms": (_parse_int(0, INT32_MAX), "1800000", "Longest session timeout."),
    "group.max.size": (_parse_int(1, INT32_MAX), str(INT32_MAX), "Most members in a group."),
    "group.coordinator.rebalance.protocols": (_parse_rebalance_protocols, "classic,consumer",
                                              "Group protocols served; without consumer, KIP-848's APIs "
                                              "answer UNSUPPORTED_VERSION."),
    "group.consumer.session.timeout.ms": (_parse_int(1, INT32_MAX), "45000",
                                          "Session timeout of consumer-protocol members."),
    "group.consumer.min.session.timeout.ms": (_parse_int(1, INT32_MAX), "45000",
                                              "Lower bound of group.consumer.session.timeout.ms."),
    "group.consumer.max.session.timeout.ms": (_parse_int(1, INT32_MAX), "60000",
                                              "Upper bound of group.consumer.session.timeout.ms."),
    "group.consumer.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "5000",
                                             "Heartbeat interval given to consumer-protocol members."),
    "group.consumer.min.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "5000",
                                                 "Lower bound of group.consumer.heartbeat.interval.ms."),
    "group.consumer.max.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "15000",
                                                 "Upper bound of group.consumer.heartbeat.interval.ms."),
    "group.consumer.max.size": (_parse_int(1, INT32_MAX), str(INT32_MAX), "Most members in a consumer group."),
    "group.consumer.assignors": (_parse_assignors, "uniform,range",
                                 "Server-side assignors (uniform, range); the first is the default."),
    "group.consumer.migration.policy": (_parse_choice("bidirectional", "upgrade", "downgrade", "disabled"),
                                        "bidirectional", "Whether a non-empty classic group converts to a "
                                        "consumer group (upgrade) and back (downgrade)."),
    # KIP-932 share groups (reference share-groups.md §1); config.py checks min <= value <= max.
    "group.share.enable": (_parse_bool, "true", "Serve share groups (APIs 76-79); off: UNSUPPORTED_VERSION "
                           "(Kafka 4.2's share.version=1 on a newly formatted cluster)."),
    "group.share.delivery.count.limit": (_parse_int(2, 10), "5",
                                         "Deliveries of a record before it is archived."),
    "group.share.record.lock.duration.ms": (_parse_int(1000, 3600000), "30000",
                                            "How long an acquired record stays locked to its consumer."),
    "group.share.min.record.lock.duration.ms": (_parse_int(1000, 30000), "15000",
                                                "Lower bound of the record lock duration."),
    "group.share.max.record.lock.duration.ms": (_parse_int(30000, 3600000), "60000",
                                                "Upper bound of the record lock duration."),
    "group.share.partition.max.record.locks": (_parse_int(100, 10000), "2000",
                                               "Most in-flight records of one share-partition."),
    "group.share.max.share.sessions": (_parse_int(1, INT32_MAX), "2000",
                                       "Most share sessions on the broker (at least group.share.max.size)."),
    "group.share.max.size": (_parse_int(1, 1000), "200", "Most members in a share group."),
    "group.share.session.timeout.ms": (_parse_int(1, INT32_MAX), "45000", "Session timeout of share-group members."),
    "group.share.min.session.timeout.ms": (_parse_int(1, INT32_MAX), "45000",
                                           "Lower bound of group.share.session.timeout.ms."),
    "group.share.max.session.timeout.ms": (_parse_int(1, INT32_MAX), "60000",
                                           "Upper bound of group.share.session.timeout.ms."),
    "group.share.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "5000",
                                          "Heartbeat interval given to share-group members."),
    "group.share.min.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "5000",
                                              "Lower bound of group.share.heartbeat.interval.ms."),
    "group.share.max.heartbeat.interval.ms": (_parse_int(1, INT32_MAX), "15000",
                                              "Upper bound of group.share.heartbeat.interval.ms."),
    "group.share.assignors": (_parse_share_assignors, "simple", "The share groups' assignor (only simple)."),
    "share.coordinator.state.topic.num.partitions": (_parse_int(1, INT32_MAX), "50",
                                                     "Partitions of __share_group_state."),
    "share.coordinator.snapshot.update.records.per.snapshot": (_parse_int(0, INT32_MAX), "500",
                                                               "ShareUpdate records between two ShareSnapshots."),
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
    "metrics.group.filter": (_parse_regex, "", "Only groups whose whole id matches have per-group series and lag "
                             "(kafka_exporter's --group.filter; empty: all)."),
    # ---- lag alerts (README "Lag: metrics, alerts and the console"); each rule is off at -1
    "lag.alert.lag.threshold": (_parse_off(1), "-1",
                                "Alert when a group's lag (records, all its partitions) reaches this."),
    "lag.alert.lag.growth.rate": (_parse_rate, "-1",
                                  "Alert when a group's lag grows by at least this many records/s over "
                                  "lag.alert.lag.growth.window.ms (falling behind while it consumes)."),
    "lag.alert.lag.growth.window.ms": (_parse_int(1000, INT32_MAX), "300000",
                                       "The window the lag growth rate is measured over."),
    "lag.alert.time.lag.threshold.ms": (_parse_off(1), "-1",
                                        "Alert when a group's oldest unconsumed record is this old."),
    "lag.alert.expiry.warning.ms": (_parse_off(1), "-1",
                                    "Alert when a group's first offset expires within this long (KIP-211/496)."),
    "lag.alert.for.ms": (_parse_int(0, INT32_MAX), "60000",
                         "A condition fires only after holding this long, and resolves only after clearing "
                         "this long."),
    "lag.alert.resolve.ratio": (_parse_ratio, "0.8",
                                "Hysteresis: an alert resolves once its value is back past threshold x ratio "
                                "(for the expiry warning: threshold / ratio)."),
    "lag.alert.interval.ms": (_parse_int(100, INT32_MAX), "10000", "How often the rules are evaluated."),
    "lag.alert.groups.include": (_parse_regex, "", "Only groups whose whole id matches (empty: all)."),
    "lag.alert.groups.exclude": (_parse_regex, "", "Groups whose whole id matches are never alerted on."),
    "lag.alert.webhook.url": (_parse_webhook, "", "POST each firing / resolved event here as JSON (empty: off)."),
    "lag.alert.webhook.timeout.ms": (_parse_int(1, INT32_MAX), "5000", "Timeout of one webhook POST."),
    # ---- security (reference security.md §1-§3); every listener is PLAINTEXT unless mapped otherwise
    "listener.security.protocol.map": (_parse_protocol_map,
                                       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
                                       "Security protocol of each listener name."),
    "ssl.keystore.type": (_parse_store_type, "JKS", "PKCS12 or PEM (JKS is refused: convert it with keytool)."),
    "ssl.keystore.location": (_parse_str, "", "The broker's key and certificate chain (file)."),
    "ssl.keystore.password": (_parse_str, "", "Password of a PKCS12 keystore."),
    "ssl.key.password": (_parse_str, "", "Password of the private key (PKCS12 entry or encrypted PEM)."),
    "ssl.keystore.key": (_parse_str, "", "Inline PEM private key (ssl.keystore.type=PEM)."),
    "ssl.keystore.certificate.chain": (_parse_str, "", "Inline PEM certificate chain (ssl.keystore.type=PEM)."),
    "ssl.truststore.type": (_parse_store_type, "JKS", "PKCS12 or PEM."),
    "ssl.truststore.location": (_parse_str, "", "CAs trusted for client certificates (file)."),
    "ssl.truststore.password": (_parse_str, "", "Password of a PKCS12 truststore."),
    "ssl.truststore.certificates": (_parse_str, "", "Inline PEM CA certificates (ssl.truststore.type=PEM)."),
    "ssl.client.auth": (_parse_client_auth, "none", "Client certificates: none, requested or required."),
    "ssl.enabled.protocols": (_parse_protocols, "TLSv1.2,TLSv1.3", "TLS versions served."),
    "ssl.protocol": (_parse_str, "TLSv1.3", "Accepted and ignored (ssl.enabled.protocols decides)."),
    "ssl.cipher.suites": (_parse_list, "", "TLS 1.2 cipher suites by IANA name (empty: OpenSSL's defaults)."),
    "ssl.endpoint.identification.algorithm": (_parse_str, "https", "Client-side only: accepted and ignored."),
    "ssl.principal.mapping.rules": (_parse_str, "DEFAULT", "RULE:regex/replacement/[LU] list mapping a DN."),
    "ssl.keymanager.algorithm": (_parse_str, "SunX509", "Java only: accepted and ignored."),
    "ssl.trustmanager.algorithm": (_parse_str, "PKIX", "Java only: accepted and ignored."),
    "ssl.secure.random.implementation": (_parse_str, "", "Java only: accepted and ignored."),
    "ssl.provider": (_parse_str, "", "Java only: accepted and ignored."),
    "ssl.engine.factory.class": (_parse_str, "", "Java only: accepted and ignored."),
    "sasl.enabled.mechanisms": (_parse_mechanisms, "GSSAPI",
                                "SASL mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI "
                                "is not served, so set it)."),
    "sasl.jaas.config": (_parse_str, "", "Ignored without a listener and mechanism prefix (as Kafka)."),
    "connections.max.reauth.ms": (_parse_int(0), "0", "SASL session lifetime (KIP-368; 0: no expiry)."),
    "connection.failed.authentication.delay.ms": (_parse_int(0, INT32_MAX), "100",
                                                  "Delay before closing a connection that failed SASL."),
    "sasl.server.max.receive.size": (_parse_int(1, INT32_MAX), "524288", "Largest SASL token accepted."),
    "authorizer.class.name": (_parse_authorizer, "", "Empty: no authorization; else ACLs are enforced."),
    "super.users": (_parse_super_users, "", "Principals that bypass ACLs, separated by ;."),
    "allow.everyone.if.no.acl.found": (_parse_bool, "false", "Allow access to resources without any ACL."),
    # Brokers reach each other only for transaction markers (the rest goes through PostgreSQL);
    # there are no controller listeners.
    "inter.broker.listener.name": (_parse_str, "", "The listener brokers send each other requests on "
                                   "(empty: the first PLAINTEXT listener, else the first)."),
    "security.inter.broker.protocol": (_parse_str, "PLAINTEXT", "Accepted and ignored (the listener's "
                                       "protocol is used)."),
    "controller.listener.names": (_parse_str, "", "Accepted and ignored."),
    "sasl.mechanism.inter.broker.protocol": (_parse_str, "GSSAPI", "The SASL mechanism brokers log in to "
                                             "each other with, with its JAAS username and password; one offsetd "
                                             "does not serve (GSSAPI): PLAIN, else a SCRAM mechanism, whichever "
                                             "the listener enables with a username and password."),
    "sasl.mechanism.controller.protocol": (_parse_str, "GSSAPI", "Accepted and ignored."),
}

# Secrets: never reported by DescribeConfigs (Kafka's PASSWORD type).
SENSITIVE_KEYS = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
                            "ssl.keystore.key", "sasl.jaas.config"})

# Keys a `listener.name.<name>.` prefix may override (KIP-103), parsed with the key's own parser.
LISTENER_KEYS = frozenset(k for k in SCHEMA if k.startswith("ssl.")) | {
    "sasl.enabled.mechanisms", "connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
    "sasl.server.max.receive.size"}
# Per-mechanism keys under a listener prefix (`<mech>.sasl.jaas.config`, ...) and their parsers.
MECHANISM_KEYS: dict[str, Callable[[str], Any]] = {"sasl.jaas.config": _parse_str,
                                                   "connections.max.reauth.ms": _parse_int(0)}

# Keys whose value must be given as an integer but may be left empty to mean "unset".
OPTIONAL_KEYS = frozenset({"log.flush.interval.ms", "advertised.listeners", "log.max.open.files"})
