"""Helpers for the consumer-group integration tests (test_groups_*.py).

Everything here is written from the reference (`shared/reference/kafka-offsets-conformance.md`)
and is deliberately independent of offsetd's own code: the `__consumer_offsets` record decoders,
Java's `String.hashCode` and Kafka's `Utils.abs` are re-implemented so that the tests check the
broker against the specification, not against itself.

Run as a script (`python group_helpers.py member ...`) it is a confluent-kafka group member in a
separate process, so a test can kill -9 it (see `SubprocessMember`).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# Broker overrides for group tests: no initial rebalance delay, and a low minimum session timeout
# so session-timeout tests run in seconds (both are Kafka config keys, §4.1).
GROUP_BROKER = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}

OFFSETS_TOPIC = "__consumer_offsets"


def unique(prefix: str) -> str:
    """A fresh name (group or topic) so tests sharing a broker never collide."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# §4.3 group -> partition


def java_string_hashcode(text: str) -> int:
    """Java `String.hashCode`: h = 31*h + c over UTF-16 code units, signed 32-bit wrap."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: 0 for Integer.MIN_VALUE (unlike Math.abs), else |n|."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group: str, partitions: int = 50) -> int:
    """The `__consumer_offsets` partition holding `group` (§4.3)."""
    return kafka_abs(java_string_hashcode(group)) % partitions


# --------------------------------------------------------------------------------------------
# §4.2, §4.4-§4.7: non-flexible decoding of __consumer_offsets keys and values


class Reader:
    """Big-endian reader for Kafka's non-flexible (classic) encodings."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"buffer underflow at {self.pos} reading {n} of {len(self.data)}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError("null in a non-nullable string")
        return value

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else self._take(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else self._take(n)

    def array(self, read_item) -> list | None:
        n = self.int32()
        return None if n == -1 else [read_item() for _ in range(n)]

    def at_end(self) -> bool:
        return self.pos == len(self.data)


@dataclass
class OffsetKey:
    version: int
    group: str
    topic: str
    partition: int


@dataclass
class GroupKey:
    version: int
    group: str


def decode_key(data: bytes) -> OffsetKey | GroupKey | tuple[int, bytes]:
    """Key = int16 version + struct (§4.2). Versions 0/1: OffsetCommit; 2: GroupMetadata."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        key = OffsetKey(version, r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupKey(version, r.string())
    else:
        return (version, data)
    assert r.at_end(), f"trailing bytes in key {data.hex()}"
    return key


@dataclass
class OffsetValue:
    version: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int


def decode_offset_value(data: bytes) -> OffsetValue:
    """OffsetCommitValue v0-v3 (§4.5); v4 is flexible and never written."""
    r = Reader(data)
    version = r.int16()
    if version > 3:
        raise ValueError(f"OffsetCommitValue v{version} is not a version a modern broker writes")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    assert r.at_end(), f"trailing bytes in OffsetCommitValue {data.hex()}"
    return OffsetValue(version, offset, leader_epoch, metadata, commit_ts, expire_ts)


@dataclass
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupValue:
    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberValue] = field(default_factory=list)


def decode_group_value(data: bytes) -> GroupValue:
    """GroupMetadataValue v0-v3 (§4.7) with its member structs."""
    r = Reader(data)
    version = r.int16()
    if version > 3:
        raise ValueError(f"GroupMetadataValue v{version} is not a version a modern broker writes")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1

    def member() -> MemberValue:
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        return MemberValue(member_id, instance_id, client_id, client_host, rebalance_timeout,
                           session_timeout, subscription or b"", assignment or b"")

    members = r.array(member) or []
    assert r.at_end(), f"trailing bytes in GroupMetadataValue {data.hex()}"
    return GroupValue(version, protocol_type, generation, protocol, leader, state_ts, members)


def decode_subscription_topics(data: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version; later fields ignored, §1.4)."""
    r = Reader(data)
    r.int16()
    return r.array(r.string) or []


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """Assigned partitions of a ConsumerProtocolAssignment."""
    if not data:
        return {}
    r = Reader(data)
    r.int16()
    result: dict[str, list[int]] = {}
    for _ in range(r.int32()):
        topic = r.string()
        result[topic] = r.array(r.int32) or []
    return result


@dataclass
class LogRecord:
    """One record of `__consumer_offsets`, decoded by hand."""

    offset: int
    timestamp_type: int
    timestamp: int
    key: Any
    value: Any  # OffsetValue | GroupValue | None (tombstone)
    raw_key: bytes
    raw_value: bytes | None


def read_partition_raw(bootstrap: str, topic: str, partition: int, timeout: float = 15.0) -> list:
    """Every record of one partition, from the beginning to the end seen at call time, through a
    plain (assign-only, never committing) confluent-kafka consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("log-reader"),
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high == 0:
            return []
        consumer.assign([TopicPartition(topic, partition, 0)])
        messages: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if messages and messages[-1].offset() >= high - 1:
                        return messages
                    continue
                raise KafkaException(msg.error())
            messages.append(msg)
        raise AssertionError(f"read {len(messages)} records of {topic}-{partition}, end {high}, in {timeout}s")
    finally:
        consumer.close()


def read_offsets_log(bootstrap: str, group: str, partitions: int = 50) -> list[LogRecord]:
    """The records of `group`'s `__consumer_offsets` partition, decoded per §4.4-§4.7."""
    records = []
    for msg in read_partition_raw(bootstrap, OFFSETS_TOPIC, partition_for(group, partitions)):
        raw_key, raw_value = msg.key(), msg.value()
        key = decode_key(raw_key)
        if raw_value is None:
            value = None
        elif isinstance(key, OffsetKey):
            value = decode_offset_value(raw_value)
        elif isinstance(key, GroupKey):
            value = decode_group_value(raw_value)
        else:
            value = raw_value
        ts_type, ts = msg.timestamp()
        records.append(LogRecord(msg.offset(), ts_type, ts, key, value, raw_key, raw_value))
    return records


def records_of_group(records: Iterable[LogRecord], group: str) -> list[LogRecord]:
    return [r for r in records if isinstance(r.key, (OffsetKey, GroupKey)) and r.key.group == group]


# --------------------------------------------------------------------------------------------
# confluent-kafka group members driven from one test thread


def member_conf(bootstrap: str, group: str, **conf) -> dict:
    """Consumer config for group tests: manual commits, earliest reset, quick heartbeats."""
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": 300,
        "session.timeout.ms": 10000,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    base.update(conf)
    return base


@dataclass(frozen=True)
class _Record:
    partition: int
    offset: int


class Member:
    """A confluent-kafka consumer in a group, recording its rebalance callbacks, errors and
    messages. Poll it (or several with `poll_all`) from the test thread."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], name: str, **conf) -> None:
        self.name = name
        self.events: list[tuple[str, frozenset]] = []
        self.errors: list[KafkaError] = []
        self.messages: list = []
        conf.setdefault("client.id", name)
        self.consumer = Consumer({**member_conf(bootstrap, group, **conf), "error_cb": self.errors.append})
        self.closed = False
        self.consumer.subscribe(topics, on_assign=self._on("assign"), on_revoke=self._on("revoke"),
                                on_lost=self._on("lost"))

    def _on(self, kind: str):
        def callback(consumer, partitions):
            self.events.append((kind, frozenset((tp.topic, tp.partition) for tp in partitions)))
        return callback

    def poll(self, timeout: float = 0.05) -> None:
        if self.closed:
            return
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                self.errors.append(msg.error())
        else:
            self.messages.append(msg)

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def partitions(self) -> set[int]:
        return {p for _, p in self.assignment()}

    def messages_as_records(self) -> list:
        """The messages as (partition, offset) records, the shape kafka-python and aiokafka use."""
        return [_Record(m.partition(), m.offset()) for m in self.messages]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_all(members: Iterable, timeout: float = 0.05) -> None:
    for m in members:
        m.poll(timeout)


def poll_until(members: list, condition, timeout: float = 15.0, message: str = "condition"):
    """Poll every member round-robin until `condition()` is truthy; fail with the members'
    assignments and errors after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        poll_all(members)
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            state = {m.name: (sorted(m.partitions()) if not getattr(m, "closed", False) else "closed",
                              [str(e) for e in m.errors][-3:]) for m in members}
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; members: {state}")


def balanced(members: list, partitions: int, per_member: int | None = None) -> bool:
    """True when the members' assignments are disjoint, cover range(partitions), and (when
    given) each member holds exactly `per_member` partitions."""
    sets = [m.partitions() for m in members]
    union = set().union(*sets)
    if union != set(range(partitions)) or sum(len(s) for s in sets) != partitions:
        return False
    return per_member is None or all(len(s) == per_member for s in sets)


# --------------------------------------------------------------------------------------------
# a group member in its own process, for kill -9


class SubprocessMember:
    """A confluent-kafka group member running `python group_helpers.py member ...`. Its stdout
    reports every assignment change; `kill9()` SIGKILLs it (no LeaveGroup is ever sent)."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **conf) -> None:
        self.name = name
        self.errors: list[str] = []
        self.current: set[int] = set()
        self.lines: list[str] = []
        self._changed = threading.Event()
        conf.setdefault("client.id", name)
        config = member_conf(bootstrap, group, **conf)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "member", topic, json.dumps(config)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            self.lines.append(line)
            if line.startswith("ASSIGNED"):
                body = line[len("ASSIGNED"):].strip()
                self.current = {int(p) for p in body.split(",") if p}
            elif line.startswith("ERROR"):
                self.errors.append(line)
            self._changed.set()

    def poll(self, timeout: float = 0.05) -> None:
        """The process polls itself; this waits (at most `timeout`) for its next report."""
        if self._changed.wait(timeout):
            self._changed.clear()

    def partitions(self) -> set[int]:
        return set(self.current)

    def assignment(self) -> set[tuple[str, int]]:
        return {("?", p) for p in self.current}

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.kill9()


def _member_main(topic: str, config_json: str) -> None:
    config = json.loads(config_json)
    last: list[int] | None = None

    def on_error(err):
        print(f"ERROR {err}", flush=True)

    consumer = Consumer({**config, "error_cb": on_error})
    consumer.subscribe([topic])
    while True:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
            print(f"ERROR {msg.error()}", flush=True)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != last:
            last = now
            print("ASSIGNED " + ",".join(map(str, now)), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "member":
        _member_main(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: group_helpers.py member TOPIC CONFIG_JSON")


# --------------------------------------------------------------------------------------------
# a kafka-python consumer on its own thread (kafka-python consumers are not thread-safe, and
# several of them polled round-robin from one thread with short timeouts can stall mid-join)


class ThreadedKafkaPythonMember:
    """Runs `make_consumer()` and its poll loop on a dedicated thread; `call(fn)` runs
    `fn(consumer)` on that thread (commit, committed, ...) and returns its result."""

    def __init__(self, make_consumer, name: str) -> None:
        import queue
        from concurrent.futures import Future

        self._Future = Future
        self.name = name
        self.errors: list = []
        self.records: list = []
        self.current: set[int] = set()
        self._commands: "queue.Queue" = queue.Queue()
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._make = make_consumer
        self._thread = threading.Thread(target=self._run, name=f"kp-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._make()
        try:
            while not self._stop.is_set():
                while not self._commands.empty():
                    fn, future = self._commands.get()
                    try:
                        future.set_result(fn(consumer))
                    except BaseException as exc:  # handed to the caller
                        future.set_exception(exc)
                try:
                    for records in consumer.poll(timeout_ms=100).values():
                        self.records.extend(records)
                        self._changed.set()
                except Exception as exc:  # surfaced through .errors
                    self.errors.append(exc)
                    self._changed.set()
                current = {tp.partition for tp in consumer.assignment()}
                if current != self.current:
                    self.current = current
                    self._changed.set()
        finally:
            consumer.close()

    def call(self, fn, timeout: float = 20.0):
        future = self._Future()
        self._commands.put((fn, future))
        return future.result(timeout)

    def poll(self, timeout: float = 0.05) -> None:
        """The member polls on its own thread; this waits (at most `timeout`) for its next change."""
        if self._changed.wait(timeout):
            self._changed.clear()

    def partitions(self) -> set[int]:
        return set(self.current)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


# --------------------------------------------------------------------------------------------
# exact requests through the kio-based raw client (tests/raw_client.py)

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, METADATA = 8, 9, 15, 3


def request_schema(api_key: int, version: int):
    from kio.index import load_request_schema

    cls = load_request_schema(api_key, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def raw_offset_commit(bootstrap: str, group: str, topic: str, partitions: dict[int, tuple[int, str | None, int]],
                      version: int = 9, generation: int = -1, member_id: str = "",
                      retention_ms: int = -1) -> dict[int, int]:
    """One OffsetCommit of `partitions` {p: (offset, metadata, leader_epoch)} at `version` (the
    standalone path by default: generation -1, no member). Returns {partition: error code}."""
    import datetime

    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32, i64
    from raw_client import RawClient

    cls, mod = request_schema(OFFSET_COMMIT, version)

    def partition(p: int, offset: int, metadata: str | None, epoch: int):
        fields = {"partition_index": i32(p), "committed_offset": i64(offset), "committed_metadata": metadata}
        if version >= 6:
            fields["committed_leader_epoch"] = i32(epoch)
        if version == 1:
            fields["commit_timestamp"] = i64(-1)
        return mod.OffsetCommitRequestPartition(**fields)

    body = {"group_id": GroupId(group), "topics": (mod.OffsetCommitRequestTopic(
        name=TopicName(topic), partitions=tuple(partition(p, *v) for p, v in sorted(partitions.items()))),)}
    if version >= 1:
        body.update(generation_id_or_member_epoch=i32(generation), member_id=member_id)
    if 2 <= version <= 4:
        body["retention_time"] = datetime.timedelta(milliseconds=retention_ms)
    if version >= 7:
        body["group_instance_id"] = None
    with RawClient(bootstrap) as client:
        response = client.call(OFFSET_COMMIT, version, cls(**body))
    return {r.partition_index: int(r.error_code.value) for t in response.topics for r in t.partitions}


def raw_offset_fetch(bootstrap: str, group: str, topic: str, partitions: list[int],
                     require_stable: bool = True) -> dict[int, tuple]:
    """OffsetFetch v8 for one group: {partition: (offset, leader epoch, metadata, error code)}."""
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32
    from raw_client import RawClient

    cls, mod = request_schema(OFFSET_FETCH, 8)
    request = cls(groups=(mod.OffsetFetchRequestGroup(group_id=GroupId(group), topics=(
        mod.OffsetFetchRequestTopics(name=TopicName(topic), partition_indexes=tuple(i32(p) for p in partitions)),)),),
        require_stable=require_stable)
    with RawClient(bootstrap) as client:
        response = client.call(OFFSET_FETCH, 8, request)
    [group_result] = response.groups
    assert int(group_result.error_code.value) == 0, group_result
    return {r.partition_index: (r.committed_offset, r.committed_leader_epoch, r.metadata, int(r.error_code.value))
            for t in group_result.topics for r in t.partitions}


def raw_describe_groups(bootstrap: str, groups: list[str], version: int = 5):
    """DescribeGroups (v5 unless told); returns the response's `groups` tuple (kio dataclasses)."""
    from kio.schema.types import GroupId
    from raw_client import RawClient

    cls, _ = request_schema(DESCRIBE_GROUPS, version)
    with RawClient(bootstrap) as client:
        response = client.call(DESCRIBE_GROUPS, version, cls(groups=tuple(GroupId(g) for g in groups),
                                                              include_authorized_operations=False))
    return response.groups


def raw_metadata(bootstrap: str, topics: list[str]):
    """Metadata v12 for `topics` (no auto-creation); returns the response's `topics` tuple."""
    from kio.schema.types import TopicName
    from raw_client import RawClient

    cls, mod = request_schema(METADATA, 12)
    request = cls(topics=tuple(mod.MetadataRequestTopic(name=TopicName(t), topic_id=None) for t in topics),
                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with RawClient(bootstrap) as client:
        return client.call(METADATA, 12, request).topics
