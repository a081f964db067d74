"""Clients from before Kafka 4, configured to send the request versions Kafka 3.9 still accepted.

kafka-python with api_version=(0, 9) / (0, 10, 1), librdkafka (confluent-kafka) and kcat with
api.version.request=false and broker.version.fallback=0.9.0 / 0.10.0. Produce v0-2 and Fetch v0-3
carry message formats v0/v1: old clients produce and consume (compressed and not), and what they
write reads back right for a modern client and the other way round. The broker runs with DEBUG
request logging, and each test asserts on the (API, version) pairs the client really sent, so a
client that silently upgraded would fail the test.
"""

from __future__ import annotations

import re
import struct
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition as CTP
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from broker_process import BrokerProcess, wait_for
from clients import consume_all, create_topic, kafka_python_subscriber, produce
from raw_client import RawClient

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_REQUEST_LINE = re.compile(r" ([A-Z_]+) v(\d+) corr=")


@pytest.fixture
def old_broker(broker_factory, monkeypatch) -> BrokerProcess:
    """A broker logging every request's API and version."""
    monkeypatch.setattr(BrokerProcess, "log_level", "DEBUG")  # read when the class is defined, not per start
    return broker_factory({"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"})


def sent(broker: BrokerProcess) -> set[tuple[str, int]]:
    """The (API, version) pairs the broker received."""
    return {(m.group(1), int(m.group(2))) for m in _REQUEST_LINE.finditer(broker.log())}


def refused(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log().splitlines() if "unsupported request" in line or "malformed" in line
            or "handler failed" in line]


def _seed(broker: BrokerProcess, topic: str, counts: tuple[int, int]) -> None:
    """Two partitions holding counts[0] and counts[1] records, written by a modern client."""
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [{"value": b"x", "partition": p} for p in (0, 1) for _ in range(counts[p])])


# ------------------------------------------------------------------------------ kafka-python


@pytest.mark.parametrize("api_version,expected", [
    ((0, 9), {("FIND_COORDINATOR", 0), ("JOIN_GROUP", 0), ("SYNC_GROUP", 0), ("HEARTBEAT", 0),
              ("OFFSET_COMMIT", 2), ("OFFSET_FETCH", 1), ("LIST_OFFSETS", 0), ("METADATA", 0),
              ("LEAVE_GROUP", 0), ("LIST_GROUPS", 0), ("DESCRIBE_GROUPS", 0)}),
    ((0, 10, 1), {("FIND_COORDINATOR", 0), ("JOIN_GROUP", 1), ("SYNC_GROUP", 0), ("HEARTBEAT", 0),
                  ("OFFSET_COMMIT", 2), ("OFFSET_FETCH", 1), ("LIST_OFFSETS", 1), ("METADATA", 2),
                  ("LEAVE_GROUP", 0), ("LIST_GROUPS", 0), ("DESCRIBE_GROUPS", 0)}),
])
def test_kafka_python_old_group_member(old_broker, api_version, expected):
    """Join, sync, heartbeat, commit, fetch committed offsets, list offsets, leave; then the admin
    client lists and describes the group, all at the old versions."""
    topic = "kp-old"
    _seed(old_broker, topic, (5, 7))
    consumer = kafka_python_subscriber(topic, bootstrap_servers=old_broker.bootstrap, group_id="old-kp",
                                       api_version=api_version, enable_auto_commit=False,
                                       auto_offset_reset="earliest", session_timeout_ms=6000,
                                       heartbeat_interval_ms=100)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    try:
        # Join and sync without fetching (old-version fetching is tested below): the coordinator's own poll.
        wait_for(lambda: consumer._coordinator.poll(timeout_ms=500) and consumer.assignment() == {tp0, tp1},
                 timeout=15, message="assignment of both partitions")
        wait_for(lambda: ("HEARTBEAT", min(v for a, v in expected if a == "HEARTBEAT")) in sent(old_broker),
                 timeout=10, message="a heartbeat")
        consumer.commit({tp0: OffsetAndMetadata(3, "meta-0", -1), tp1: OffsetAndMetadata(6, "", -1)})
        assert consumer.committed(tp0) == 3 and consumer.committed(tp1) == 6
        consumer.seek_to_end(tp0)
        assert consumer.position(tp0) == 5  # ListOffsets (v0 at 0.9: the offsets array)
        consumer.seek_to_beginning(tp1)
        assert consumer.position(tp1) == 0
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=old_broker.bootstrap, api_version=api_version)
    try:
        assert {"group_id": "old-kp", "protocol_type": "consumer"} in admin.list_groups()
        described = admin.describe_groups(["old-kp"])["old-kp"]
        assert described["error"] is None and described["group_state"] == "Empty"  # it left
    finally:
        admin.close()
    # A modern client reads what the old one committed.
    modern = Consumer({"bootstrap.servers": old_broker.bootstrap, "group.id": "old-kp"})
    try:
        got = {tp.partition: tp.offset for tp in modern.committed([CTP(topic, 0), CTP(topic, 1)], timeout=10)}
    finally:
        modern.close()
    assert got == {0: 3, 1: 6}
    used = sent(old_broker)
    assert expected <= used, f"missing {expected - used}; sent {sorted(used)}"
    assert not refused(old_broker), refused(old_broker)


# ----------------------------------------------------------------------- librdkafka / kcat


def _old_conf(fallback: str) -> dict[str, str]:
    return {"api.version.request": "false", "broker.version.fallback": fallback}


@pytest.mark.parametrize("fallback,commit_version", [("0.9.0", 2), ("0.8.2", 1)])
def test_librdkafka_old_commit_fetch_list_offsets(old_broker, fallback, commit_version):
    """A standalone consumer at the fallback versions: metadata, commit, committed offsets and
    watermarks (ListOffsets v0). Group membership is covered below."""
    topic = "rd-old"
    _seed(old_broker, topic, (4, 9))
    consumer = Consumer({"bootstrap.servers": old_broker.bootstrap, "group.id": "old-rd",
                         "enable.auto.commit": False, **_old_conf(fallback)})
    try:
        assert set(consumer.list_topics(topic, timeout=10).topics[topic].partitions) == {0, 1}
        consumer.commit(offsets=[CTP(topic, 0, 2), CTP(topic, 1, 8)], asynchronous=False)
        committed = consumer.committed([CTP(topic, 0), CTP(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 2, None), (1, 8, None)]
        assert consumer.get_watermark_offsets(CTP(topic, 1), timeout=10) == (0, 9)
    finally:
        consumer.close()
    used = sent(old_broker)
    assert {("METADATA", 0), ("LIST_OFFSETS", 0), ("OFFSET_FETCH", 1)} <= used, sorted(used)
    assert ("OFFSET_COMMIT", commit_version) in used, sorted(used)
    assert not refused(old_broker), refused(old_broker)


def test_librdkafka_old_group_member(old_broker):
    """Subscribe at fallback 0.9.0: FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup
    v0, and a member's commit (with its generation). The group has no committed offsets and
    auto.offset.reset is "error", so the member has nowhere to start and never fetches (old-version
    fetching is tested below)."""
    topic = "rd-grp"
    _seed(old_broker, topic, (3, 3))
    assigned: list[int] = []

    def on_assign(consumer, partitions):
        assigned.extend(p.partition for p in partitions)

    consumer = Consumer({"bootstrap.servers": old_broker.bootstrap, "group.id": "old-rd-grp",
                         "enable.auto.commit": False, "auto.offset.reset": "error", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 100, **_old_conf("0.9.0")})
    try:
        consumer.subscribe([topic], on_assign=on_assign)
        wait_for(lambda: (consumer.poll(0.1), sorted(assigned) == [0, 1])[1], timeout=20, message="assignment")
        wait_for(lambda: ("HEARTBEAT", 0) in sent(old_broker), timeout=10, message="a heartbeat")
        consumer.commit(offsets=[CTP(topic, 0, 1), CTP(topic, 1, 2)], asynchronous=False)
    finally:
        consumer.close()
    check = Consumer({"bootstrap.servers": old_broker.bootstrap, "group.id": "old-rd-grp"})
    try:
        assert [tp.offset for tp in check.committed([CTP(topic, 0), CTP(topic, 1)], timeout=10)] == [1, 2]
    finally:
        check.close()
    used = sent(old_broker)
    assert {("FIND_COORDINATOR", 0), ("JOIN_GROUP", 0), ("SYNC_GROUP", 0), ("HEARTBEAT", 0),
            ("LEAVE_GROUP", 0), ("OFFSET_COMMIT", 2), ("OFFSET_FETCH", 1)} <= used, sorted(used)
    assert not refused(old_broker), refused(old_broker)


def test_kcat_old_metadata_and_offsets(old_broker):
    """kcat -L (Metadata v0) and -Q (ListOffsets v0) with broker.version.fallback=0.9.0."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed (Debian package kcat)"
    _seed(old_broker, "kc-old", (6, 2))
    opts = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0"]
    listing = subprocess.run([kcat, "-b", old_broker.bootstrap, *opts, "-L", "-t", "kc-old"],
                             capture_output=True, text=True, timeout=20)
    assert listing.returncode == 0, listing.stderr
    assert "topic \"kc-old\" with 2 partitions" in listing.stdout
    query = subprocess.run([kcat, "-b", old_broker.bootstrap, *opts, "-Q", "-t", "kc-old:0:-1", "-t", "kc-old:1:-2"],
                           capture_output=True, text=True, timeout=20)
    assert query.returncode == 0, query.stderr
    assert "kc-old [0] offset 6" in query.stdout and "kc-old [1] offset 0" in query.stdout, query.stdout
    assert {("METADATA", 0), ("LIST_OFFSETS", 0)} <= sent(old_broker)
    assert not refused(old_broker), refused(old_broker)


def test_kafka_python_old_admin_and_idempotent_producer(old_broker):
    """CreateTopics v0 / DeleteTopics v0 (api_version 0.10.1), DescribeConfigs v0 and InitProducerId
    v0 (0.11: its idempotent producer, which then produces with Produce v3)."""
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

    admin = KafkaAdminClient(bootstrap_servers=old_broker.bootstrap, api_version=(0, 10, 1))
    try:
        created = admin.create_topics([NewTopic("adm-old", 3, 1, topic_configs={"retention.ms": "123456"})])
        assert created["topics"] == [{"name": "adm-old", "error_code": 0}]
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("adm-old", 3, 1)])
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["adm-gone"])
    finally:
        admin.close()
    admin = KafkaAdminClient(bootstrap_servers=old_broker.bootstrap, api_version=(0, 11))
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-old")])
        assert described["topic"]["adm-old"]["retention.ms"]["value"] == "123456", described
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=old_broker.bootstrap, api_version=(0, 11), enable_idempotence=True)
    try:
        assert producer.send("adm-old", b"v", partition=2).get(timeout=10).offset == 0
    finally:
        producer.close()
    admin = KafkaAdminClient(bootstrap_servers=old_broker.bootstrap, api_version=(0, 10, 1))
    try:
        assert admin.delete_topics(["adm-old"])["topics"] == [{"name": "adm-old", "error_code": 0}]
    finally:
        admin.close()
    used = sent(old_broker)
    assert {("CREATE_TOPICS", 0), ("DELETE_TOPICS", 0), ("DESCRIBE_CONFIGS", 0), ("INIT_PRODUCER_ID", 0)} <= used, \
        sorted(used)
    assert not refused(old_broker), refused(old_broker)


# ----------------------------------------------------------- versions no installed client sends


def _frame(api_key: int, version: int, correlation_id: int, body_hex: str) -> bytes:
    """A request frame with header v1 (client id "raw") and a body built by hand from the layout."""
    return struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw" + bytes.fromhex(body_hex)


def _string(value: str) -> str:
    return struct.pack(">h", len(value)).hex() + value.encode().hex()


def test_raw_offset_commit_v0_then_offset_fetch_v0_and_list_offsets_v0(old_broker):
    """OffsetCommit v0 (no generation or member: a simple group) and OffsetFetch v0 round-trip, and
    ListOffsets v0 with room for several offsets, on the wire."""
    _seed(old_broker, "raw-old", (4, 0))
    commit = (_string("raw-g") + "00000001" + _string("raw-old") + "00000002"
              + "00000000" + "0000000000000003" + _string("m0")
              + "00000001" + "0000000000000000" + "ffff")
    fetch = _string("raw-g") + "00000001" + _string("raw-old") + "00000003" + "00000000" + "00000001" + "00000007"
    list_v0 = ("ffffffff" + "00000001" + _string("raw-old") + "00000002"
               + "00000000" + "ffffffffffffffff" + "00000005" + "00000001" + "fffffffffffffffe" + "00000005")
    with RawClient(old_broker.bootstrap) as client:
        client.send_frame(_frame(8, 0, 1, commit))
        assert client.read_frame().hex() == ("00000001" + "00000001" + _string("raw-old") + "00000002"
                                             + "00000000" + "0000" + "00000001" + "0000")
        client.send_frame(_frame(9, 0, 2, fetch))
        assert client.read_frame().hex() == ("00000002" + "00000001" + _string("raw-old") + "00000003"
                                             + "00000000" + "0000000000000003" + _string("m0") + "0000"
                                             + "00000001" + "0000000000000000" + _string("") + "0000"
                                             + "00000007" + "ffffffffffffffff" + _string("") + "0000")  # none: -1 (§1.3)
        client.send_frame(_frame(2, 0, 3, list_v0))
        # partition 0: [log end 4, start of its only segment 0]; partition 1 is empty: [0]
        assert client.read_frame().hex() == ("00000003" + "00000001" + _string("raw-old") + "00000002"
                                             + "00000000" + "0000" + "00000002" + "0000000000000004"
                                             + "0000000000000000"
                                             + "00000001" + "0000" + "00000001" + "0000000000000000")
    assert {("OFFSET_COMMIT", 0), ("OFFSET_FETCH", 0), ("LIST_OFFSETS", 0)} <= sent(old_broker)


# ------------------------------------------------- message formats v0/v1: Produce v0-2, Fetch v0-3

_T0 = 1_700_000_000_000


def _rows(n: int) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, timestamp) with null keys, null values (never both) and empty ones among them."""
    return [(None if i % 4 == 1 else b"key-%d" % i, None if i % 5 == 3 and i % 4 != 1 else (b"value-%d " % i) * (i % 7),
             _T0 + 10 * i) for i in range(n)]


def _modern_read(broker: BrokerProcess, topic: str, count: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of partition 0 as confluent-kafka (Fetch v11+) reads it."""
    return [(m.offset(), m.key(), m.value(), m.timestamp()[1]) for m in consume_all(broker.bootstrap, topic, [0], count)]


def _modern_write(broker: BrokerProcess, topic: str, rows, compression: str) -> None:
    """rows produced to partition 0 by confluent-kafka (Produce v7+, magic-v2 batches with headers)."""
    produce(broker.bootstrap, topic, [{"key": k, "value": v, "timestamp": ts, "partition": 0,
                                       "headers": [("h", b"x")]} for k, v, ts in rows],
            **{"compression.type": compression, "linger.ms": 50})


_KP_VERSIONS = {(0, 9): ("PRODUCE", 1, "FETCH", 1), (0, 10, 1): ("PRODUCE", 2, "FETCH", 3)}


@pytest.mark.parametrize("api_version,compression", [
    ((0, 9), None), ((0, 9), "gzip"), ((0, 9), "snappy"),  # lz4 at 0.9 needs the xxhash package in kafka-python
    ((0, 10, 1), None), ((0, 10, 1), "gzip"), ((0, 10, 1), "snappy"), ((0, 10, 1), "lz4"),
])
def test_kafka_python_old_produce_and_group_consume(old_broker, api_version, compression):
    """An old producer writes (magic 0 at 0.9, magic 1 at 0.10.1), an old group member already
    waiting in a long poll consumes and commits, and confluent-kafka reads the same records."""
    from kafka import KafkaProducer

    topic = f"kp-msg-{len(api_version)}-{compression}"
    create_topic(old_broker.bootstrap, topic, partitions=1)
    tp = TopicPartition(topic, 0)
    consumer = kafka_python_subscriber(topic, bootstrap_servers=old_broker.bootstrap, group_id=f"g-{topic}",
                                       api_version=api_version, enable_auto_commit=False,
                                       auto_offset_reset="earliest", session_timeout_ms=6000,
                                       heartbeat_interval_ms=100, fetch_max_wait_ms=2000)
    rows = _rows(60)
    try:
        wait_for(lambda: (consumer.poll(100), consumer.assignment() == {tp})[1], timeout=15, message="assignment")
        producer = KafkaProducer(bootstrap_servers=old_broker.bootstrap, api_version=api_version,
                                 compression_type=compression, linger_ms=20)
        try:
            futures = [producer.send(topic, key=k, value=v, partition=0,
                                     timestamp_ms=ts if api_version >= (0, 10) else None) for k, v, ts in rows]
            producer.flush(timeout=20)
            assert [f.get(timeout=10).offset for f in futures] == list(range(60))
        finally:
            producer.close()
        got: list = []
        wait_for(lambda: (got.extend(r for rs in consumer.poll(200).values() for r in rs), len(got) >= 60)[1],
                 timeout=20, message="60 records")
        consumer.commit({tp: OffsetAndMetadata(60, "", -1)})
        assert consumer.committed(tp) == 60
    finally:
        consumer.close()
    used = sent(old_broker)  # before the modern client below adds its own
    stamped = api_version >= (0, 10)
    assert [(r.offset, r.key, r.value, r.timestamp if stamped else None) for r in got] == \
        [(i, k, v, ts if stamped else None) for i, (k, v, ts) in enumerate(rows)]
    # magic 0 has no timestamp: stored as -1 (NO_TIMESTAMP), which a modern client reads as such
    assert _modern_read(old_broker, topic, 60) == [(i, k, v, ts if stamped else -1) for i, (k, v, ts) in enumerate(rows)]
    produce_api, produce_v, fetch_api, fetch_v = _KP_VERSIONS[api_version]
    assert {(produce_api, produce_v), (fetch_api, fetch_v)} <= used, sorted(used)
    assert not {(a, v) for a, v in used if a in ("PRODUCE", "FETCH") and v >= (3 if a == "PRODUCE" else 4)}, sorted(used)
    assert not refused(old_broker), refused(old_broker)


@pytest.mark.parametrize("api_version,compression", [
    # kafka-python reads magic-0 lz4 only with the xxhash package; kcat reads it at 0.9.0 below
    ((0, 9), "none"), ((0, 9), "gzip"), ((0, 9), "snappy"),
    ((0, 10, 1), "none"), ((0, 10, 1), "gzip"), ((0, 10, 1), "snappy"), ((0, 10, 1), "lz4"),
])
def test_modern_data_read_by_old_kafka_python(old_broker, api_version, compression):
    """confluent-kafka writes v2 batches (with headers), an old consumer reads them down-converted,
    from an offset inside the data: offsets, keys, null values and (magic 1) timestamps."""
    topic = f"mod-{len(api_version)}-{compression}"
    create_topic(old_broker.bootstrap, topic, partitions=1)
    rows = _rows(80)
    _modern_write(old_broker, topic, rows, compression)
    consumer = KafkaConsumer(bootstrap_servers=old_broker.bootstrap, api_version=api_version,
                             enable_auto_commit=False, group_id=None, max_partition_fetch_bytes=2048)
    tp = TopicPartition(topic, 0)
    got: list = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 7)
        wait_for(lambda: (got.extend(r for rs in consumer.poll(200).values() for r in rs), len(got) >= 73)[1],
                 timeout=20, message="73 records")
    finally:
        consumer.close()
    stamped = api_version >= (0, 10)
    assert [(r.offset, r.key, r.value, r.timestamp if stamped else None) for r in got] == \
        [(i, k, v, ts if stamped else None) for i, (k, v, ts) in enumerate(rows)][7:]
    fetch_v = _KP_VERSIONS[api_version][3]
    assert ("FETCH", fetch_v) in sent(old_broker) and not refused(old_broker)


def _kcat(broker: BrokerProcess, fallback: str, *args: str, stdin: str | None = None) -> str:
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed (Debian package kcat)"
    done = subprocess.run([kcat, "-b", broker.bootstrap, "-X", "api.version.request=false",
                           "-X", f"broker.version.fallback={fallback}", *args],
                          input=stdin, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
def test_kcat_fallback_0_9_0_produces_and_consumes_message_format_v0(old_broker, compression):
    """kcat at 0.9.0 produces with Produce v1 (magic 0; lz4 with Kafka's historical header checksum)
    and consumes with Fetch v1; confluent-kafka reads the same data, and kcat reads data that
    confluent-kafka wrote."""
    topic = f"kc9-{compression}"
    create_topic(old_broker.bootstrap, topic, partitions=1)
    lines = [f"k{i}:v{i}" if i % 3 else f":v{i}" for i in range(1, 31)] + ["knull:"]
    _kcat(old_broker, "0.9.0", "-P", "-t", topic, "-p", "0", "-z", compression, "-K", ":", "-Z",
          stdin="\n".join(lines) + "\n")
    expected = [(None if line.startswith(":") else line.split(":")[0].encode(),
                 None if line.endswith(":") else line.split(":")[1].encode()) for line in lines]
    assert [(k, v, ts) for _, k, v, ts in _modern_read(old_broker, topic, 31)] == [(k, v, -1) for k, v in expected]
    out = _kcat(old_broker, "0.9.0", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z",
                "-f", "%o|%k|%s\\n")
    assert out.splitlines() == [f"{i}|{'NULL' if k is None else k.decode()}|{'NULL' if v is None else v.decode()}"
                                for i, (k, v) in enumerate(expected)]
    # the other way: a modern producer's batches, down-converted to magic 0 for kcat
    _modern_write(old_broker, topic, [(b"m", b"modern", _T0), (b"n", None, _T0 + 1)], compression)
    out = _kcat(old_broker, "0.9.0", "-C", "-t", topic, "-p", "0", "-o", "31", "-e", "-Z", "-f", "%o|%k|%s\\n")
    assert out.splitlines() == ["31|m|modern", "32|n|NULL"]
    used = sent(old_broker)
    assert {("PRODUCE", 1), ("FETCH", 1)} <= used, sorted(used)
    assert not refused(old_broker), refused(old_broker)


def test_kcat_fallback_0_10_0_negotiates_instead(old_broker):
    """What librdkafka really does at broker.version.fallback=0.10.0: a fallback of 0.10 or later
    turns the ApiVersions request back on whatever api.version.request says, so kcat negotiates
    and uses current Produce/Fetch versions (magic 1 is reached with kafka-python at 0.10.1)."""
    _kcat(old_broker, "0.10.0", "-P", "-t", "kc10", "-p", "0", "-z", "gzip", "-K", ":", stdin="a:1\nb:2\n")
    out = _kcat(old_broker, "0.10.0", "-C", "-t", "kc10", "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%s\\n")
    assert out.splitlines() == ["0|a|1", "1|b|2"]
    versions = {a: v for a, v in sent(old_broker) if a in ("PRODUCE", "FETCH")}
    assert versions["PRODUCE"] >= 3 and versions["FETCH"] >= 4, versions


def test_raw_produce_v0_to_v2_and_fetch_v0_errors(old_broker):
    """On the wire: Produce v2 of a magic-1 message set is answered with its base offset and
    log_append_time -1; a bad CRC is CORRUPT_MESSAGE (2) and nothing is appended; Fetch v0 of a
    zstd batch (which message format v0 cannot hold) is UNSUPPORTED_COMPRESSION_TYPE (76)."""
    from offsetd.records.legacy_messages import build_message_set

    create_topic(old_broker.bootstrap, "raw-msg", partitions=2)
    good = build_message_set([(0, b"k", b"v", _T0), (1, None, b"w", _T0 + 1)], 1)
    bad = bytearray(good)
    bad[-1] ^= 1

    def produce_body(records: bytes) -> str:  # acks -1, timeout, [topic [partition 0, records]]
        return "ffff" + "00002710" + "00000001" + _string("raw-msg") + "00000001" + "00000000" \
            + struct.pack(">i", len(records)).hex() + records.hex()

    create_topic(old_broker.bootstrap, "raw-zstd")
    _modern_write(old_broker, "raw-zstd", [(b"z", b"z" * 1000, _T0)], "zstd")  # compressible: really zstd
    with RawClient(old_broker.bootstrap) as client:
        client.send_frame(_frame(0, 2, 1, produce_body(good)))
        partition = "00000001" + _string("raw-msg") + "00000001" + "00000000"
        assert client.read_frame().hex() == ("00000001" + partition + "0000" + "0000000000000000"
                                             + "ffffffffffffffff" + "00000000")
        client.send_frame(_frame(0, 0, 2, produce_body(bytes(bad))))
        assert client.read_frame().hex() == "00000002" + partition + "0002" + "ffffffffffffffff"
        # Fetch v0: replica -1, max_wait 0, min_bytes 0, [topic [partition 0, offset 0, max 1 MiB]]
        client.send_frame(_frame(1, 0, 3, "ffffffff" + "00000000" + "00000000" + "00000001" + _string("raw-zstd")
                                 + "00000001" + "00000000" + "0000000000000000" + "00100000"))
        assert client.read_frame().hex() == ("00000003" + "00000001" + _string("raw-zstd") + "00000001" + "00000000"
                                             + "004c" + "0000000000000001" + "00000000")
    assert _modern_read(old_broker, "raw-msg", 2) == [(0, b"k", b"v", _T0), (1, None, b"w", _T0 + 1)]
    assert {("PRODUCE", 2), ("PRODUCE", 0), ("FETCH", 0)} <= sent(old_broker)


@pytest.mark.parametrize("compression", ["gzip", "lz4"])
def test_librdkafka_fallback_0_9_0_producer_and_group_consumer(old_broker, compression):
    """confluent-kafka at fallback 0.9.0: its producer writes magic-0 message sets (Produce v1), a
    group member (JoinGroup v0) consumes them with Fetch v1 from the committed position and commits;
    a modern consumer reads the same records."""
    topic = f"rd9-{compression}"
    create_topic(old_broker.bootstrap, topic, partitions=1)
    rows = [(r[0], r[1]) for r in _rows(40)]
    produce(old_broker.bootstrap, topic, [{"key": k, "value": v, "partition": 0} for k, v in rows],
            **{"compression.type": compression, **_old_conf("0.9.0")})
    consumer = Consumer({"bootstrap.servers": old_broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 100, **_old_conf("0.9.0")})
    consumer.subscribe([topic])
    got: list = []

    def poll_some() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
        return len(got) >= 40

    try:
        wait_for(poll_some, timeout=30, message="40 records")
        consumer.commit(offsets=[CTP(topic, 0, 40)], asynchronous=False)
    finally:
        consumer.close()
    assert got == [(i, k, v) for i, (k, v) in enumerate(rows)]
    used = sent(old_broker)
    assert {("PRODUCE", 1), ("FETCH", 1), ("JOIN_GROUP", 0), ("OFFSET_COMMIT", 2)} <= used, sorted(used)
    assert not {(a, v) for a, v in used if (a == "PRODUCE" and v >= 3) or (a == "FETCH" and v >= 4)}, sorted(used)
    assert [(o, k, v) for o, k, v, _ in _modern_read(old_broker, topic, 40)] == got
    assert not refused(old_broker), refused(old_broker)


def test_raw_fetch_v3_response_max_bytes_and_v2_long_poll(old_broker):
    """Fetch v3's response max_bytes (stored bytes): the first partition gets its first batch
    whole, the next nothing. Fetch v2 waiting in a long poll is answered, down-converted to
    magic 1, when a record arrives."""
    from offsetd.protocol.codec import response_class
    from offsetd.protocol.tolerant_reader import tolerant_reader
    from offsetd.records.legacy_messages import flatten, parse_message_set

    create_topic(old_broker.bootstrap, "raw-max", partitions=2)
    for p in (0, 1):
        produce(old_broker.bootstrap, "raw-max",
                [{"key": b"k%d" % i, "value": b"v" * 100, "timestamp": _T0 + i, "partition": p} for i in range(3)])

    def fetch_body(version: int, max_wait: int, min_bytes: int, max_bytes: int | None, offsets: dict[int, int]) -> str:
        return ("ffffffff" + struct.pack(">ii", max_wait, min_bytes).hex()
                + ("" if max_bytes is None else struct.pack(">i", max_bytes).hex())
                + "00000001" + _string("raw-max") + struct.pack(">i", len(offsets)).hex()
                + "".join(struct.pack(">iqi", p, o, 1 << 20).hex() for p, o in offsets.items()))

    def partitions(frame: bytes, version: int) -> dict[int, list]:
        body, _ = tolerant_reader(response_class(1, version))(memoryview(frame), 4)
        return {p.partition_index: [(o, m.magic, m.key, m.timestamp) for m, o in
                                    flatten(parse_message_set(p.records, partial_tail=True))]
                for t in body.responses for p in t.partitions}

    with RawClient(old_broker.bootstrap) as client:
        client.send_frame(_frame(1, 3, 1, fetch_body(3, 0, 0, 1, {0: 0, 1: 0})))
        got = partitions(client.read_frame(), 3)
        assert got == {0: [(i, 1, b"k%d" % i, _T0 + i) for i in range(3)], 1: []}
        client.send_frame(_frame(1, 2, 2, fetch_body(2, 10_000, 1, None, {1: 3})))
        wait_for(lambda: ("FETCH", 2) in sent(old_broker), message="the Fetch v2 received (then waiting)")
        produce(old_broker.bootstrap, "raw-max", [{"key": b"late", "value": b"x", "timestamp": _T0 + 9, "partition": 1}])
        assert partitions(client.read_frame(), 2) == {1: [(3, 1, b"late", _T0 + 9)]}
    assert {("FETCH", 3), ("FETCH", 2)} <= sent(old_broker)
