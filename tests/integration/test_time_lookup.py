"""Record-exact time lookups (ListOffsets by timestamp and -3 max timestamp) in batches of every
codec, produced by confluent-kafka (librdkafka) and asked through its Consumer.offsets_for_times
and AdminClient.list_offsets; every answer is cross-checked against a consumer reading the
partition (the first record, in log order, with timestamp >= target). Also `offsetd groups
--reset-offsets --to-datetime --execute` on gzip data, and lookups below a log start truncated by
retention.

Layout of each codec's topic (one partition): batches 0..3 of 100 records, record i of batch b
at offset 100b + i stamped T + 2000b + 10i (so 1010 ms of silence between batches), then two
batches whose largest timestamp T + 60000 appears three times: offsets 430 and 470 (batch 4)
and 510 (batch 5); Kafka answers the first of tied records (RecordBatch.offsetOfMaxTimestamp).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker_process import BrokerProcess, wait_for
from integration.clients import consume_all, create_topic
from offsetd.admin.groups_cli import main as groups_main
from offsetd.records.batch import iter_batches
from offsetd.records.compression import XERIAL_MAGIC

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
T = (int(time.time() * 1000) // 1000 - 7200) * 1000  # two hours ago, a whole second
OLD = 1_000_000_000_000  # 2001: older than any retention
MAX_TS = T + 60_000
BATCHES: list[list[int]] = [[T + 2000 * b + 10 * i for i in range(100)] for b in range(4)]
BATCHES.append([MAX_TS if i in (30, 70) else T + 8000 + 10 * i for i in range(100)])  # 400..499
BATCHES.append([MAX_TS if i == 10 else T + 9000 + i for i in range(40)])  # 500..539
TOTAL = sum(map(len, BATCHES))


def produce_batches(bootstrap: str, topic: str, codec: str, batches: list[list[int]]) -> None:
    """Each list of timestamps becomes one batch: linger long, then flush() sends it at once."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 10_000,
                         "batch.num.messages": 1000, "batch.size": 1 << 20, "acks": "all"})
    # The partition's leader known before the first record: a record produced while librdkafka
    # still looks the topic up was once sent in a batch of its own on a busy box.
    producer.list_topics(topic, timeout=10)
    errors: list = []
    offset = 0
    for stamps in batches:
        for ts in stamps:
            value = f"{codec}-{offset}-".encode() + b"x" * 60  # compressible
            producer.produce(topic, value=value, partition=0, timestamp=ts,
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)
            offset += 1
        assert producer.flush(30) == 0 and not errors, errors


def segment_batches(broker: BrokerProcess, topic: str) -> list[tuple[int, int, int, bytes]]:
    """(base offset, record count, codec, first payload bytes) of every batch in the partition's files."""
    out = []
    for path in sorted((broker.data_dir / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        out += [(h.base_offset, h.records_count, h.compression, data[pos + 61 : pos + 69])
                for pos, h in iter_batches(data)]
    return out


def first_at_or_after(records: list[tuple[int, int]], target: int) -> tuple[int, int]:
    """The consumer's view: (offset, timestamp) of the first record with timestamp >= target."""
    return next(((o, ts) for o, ts in records if ts >= target), (-1, -1))


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    proc = BrokerProcess(tmp_path_factory.mktemp("time-lookup") / "data",
                         {"log.retention.check.interval.ms": "100"}).start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture(scope="module")
def topics(broker: BrokerProcess) -> dict[str, list[tuple[int, int]]]:
    """One topic per codec, loaded and verified batch by batch; codec -> consumed (offset, timestamp)."""
    consumed = {}
    for codec, codec_id in CODECS.items():
        topic = f"tl-{codec}"
        create_topic(broker.bootstrap, topic)
        produce_batches(broker.bootstrap, topic, codec, BATCHES)
        layout = segment_batches(broker, topic)
        assert [(base, n, c) for base, n, c, _ in layout] == [
            (0, 100, codec_id), (100, 100, codec_id), (200, 100, codec_id), (300, 100, codec_id),
            (400, 100, codec_id), (500, 40, codec_id)], codec
        if codec == "snappy":  # librdkafka writes raw snappy blocks (Java clients would frame them)
            assert not any(head.startswith(XERIAL_MAGIC) for *_, head in layout)
        records = consume_all(broker.bootstrap, topic, [0], TOTAL)
        consumed[codec] = [(m.offset(), m.timestamp()[1]) for m in records]
        assert consumed[codec] == [(o, ts) for o, ts in enumerate(t for b in BATCHES for t in b)]
    return consumed


TARGETS = {
    "before the first record": (T - 1000, (0, T)),
    "exactly at a record": (T + 2000 + 500, (150, T + 2500)),
    "inside a batch, between records": (T + 4000 + 505, (251, T + 4510)),
    "a batch's last record": (T + 6000 + 990, (399, T + 6990)),
    "between batches": (T + 6000 + 1500, (400, T + 8000)),
    "the tied maximum": (MAX_TS, (430, MAX_TS)),
    "beyond the log end": (MAX_TS + 1, (-1, -1)),
}


@pytest.mark.parametrize("codec", list(CODECS))
def test_offsets_for_times_and_list_offsets_are_record_exact(broker, topics, codec: str) -> None:
    topic = f"tl-{codec}"
    consumed = topics[codec]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tl"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        by_consumer = [consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)[0].offset
                       for target, _ in TARGETS.values()]  # one partition per call: librdkafka keys by it
        tp = TopicPartition(topic, 0)
        by_admin = []
        for target, _ in TARGETS.values():
            info = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)})[tp].result(10)
            by_admin.append((info.offset, info.timestamp))
        maximum = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
    finally:
        consumer.close()
    for (name, (target, want)), got_consumer, got_admin in zip(TARGETS.items(), by_consumer, by_admin):
        assert first_at_or_after(consumed, target) == want, name  # the test's own arithmetic
        assert got_admin == want, (name, codec)
        assert got_consumer == want[0], (name, codec)
    # max timestamp: the first of the three records stamped MAX_TS, as the consumer saw them
    assert [o for o, ts in consumed if ts == MAX_TS] == [430, 470, 510]
    assert (maximum.offset, maximum.timestamp) == (430, MAX_TS)


def test_lookups_below_a_truncated_log_start(broker) -> None:
    """Retention deletes the first two (old) batches, each in its own segment; lookups land on
    records of the new log start, never on deleted ones."""
    topic = "tl-truncated"
    create_topic(broker.bootstrap, topic, config={"segment.bytes": "200", "retention.ms": "86400000"})
    batches = [[OLD + 10 * i for i in range(100)], [OLD + 5000 + 10 * i for i in range(100)]] + BATCHES[:2]
    produce_batches(broker.bootstrap, topic, "gzip", batches)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tl"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)
    try:
        low = lambda: consumer.get_watermark_offsets(tp, timeout=5, cached=False)[0]  # noqa: E731
        wait_for(lambda: low() == 200, timeout=15, message="retention to delete the two old segments")
        assert not (broker.data_dir / f"{topic}-0" / f"{0:020d}.log").exists()
        records = [(m.offset(), m.timestamp()[1]) for m in consume_all(broker.bootstrap, topic, [0], 200)]
        assert records[0] == (200, T)
        answers = {}
        for target in (OLD - 1, OLD + 505, OLD + 99_999, T - 1, T + 2000 + 505):
            info = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)})[tp].result(10)
            [by_consumer] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert by_consumer.offset == info.offset, target
            answers[target] = (info.offset, info.timestamp)
            assert answers[target] == first_at_or_after(records, target), target
        assert answers[OLD + 505] == (200, T)  # the record at OLD+510 was deleted with its segment
        assert answers[T + 2000 + 505] == (351, T + 2510)
    finally:
        consumer.close()


def test_reset_offsets_to_datetime_lands_on_the_exact_record_in_gzip(broker, topics, capsys, tmp_path,
                                                                     monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the tool's undo file lands there, not in the checkout
    group = "tl-reset"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("tl-gzip", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    moment = datetime.fromtimestamp((T + 4000 + 505) / 1000, timezone.utc)  # inside batch 2
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+00:00"
    code = groups_main(["--bootstrap-server", broker.bootstrap, "--group", group, "--reset-offsets",
                        "--to-datetime", text, "--topic", "tl-gzip", "--execute"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.split("\n")[2].split() == [group, "tl-gzip", "0", "251"], out
    assert first_at_or_after(topics["gzip"], T + 4505) == (251, T + 4510)
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "latest"})
    try:
        committed = member.committed([TopicPartition("tl-gzip", 0)], timeout=10)
        assert committed[0].offset == 251
        member.assign([TopicPartition("tl-gzip", 0, committed[0].offset)])
        msg = None
        deadline = time.monotonic() + 15
        while msg is None and time.monotonic() < deadline:
            msg = member.poll(0.5)
        assert msg is not None and not msg.error()
        assert (msg.offset(), msg.timestamp()[1], msg.value()[:9]) == (251, T + 4510, b"gzip-251-")
    finally:
        member.close()
