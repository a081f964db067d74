"""format("offsetd-offsets-log"): the commits and group records a test made, through the
protocol and from the broker's segment files; decoding of transactional batches."""

from __future__ import annotations

import struct

from broker_process import wait_for
from confluent_kafka import Consumer, TopicPartition
from helpers import commit, create_topic, records, unique

from offsetd.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, build_batch
from offsetd.records.offsets import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value, partition_for
from offsetd.spark.offsets_log_source import decode_segment

COMMIT_COLUMNS = ["group", "topic", "partition", "offset", "metadata", "tombstone"]


def _log(spark, **options):
    return spark.read.format("offsetd-offsets-log").options(**options).load()


def _commits(df, groups):
    rows = (df.where(df.record_type == "offset_commit").where(df.group.isin(groups))
            .orderBy("log_partition", "log_offset").select(*COMMIT_COLUMNS).collect())
    return [tuple(r) for r in rows]


def test_offsets_log_returns_exactly_the_commits_made_via_protocol_and_files(spark, broker):
    topic, standalone, members = unique("olog"), unique("standalone"), unique("members")
    create_topic(broker.bootstrap, topic, 2)
    records(broker.bootstrap, topic, 10, 2)
    commit(broker.bootstrap, standalone, {(topic, 0): 5})
    commit(broker.bootstrap, standalone, {(topic, 0): 7, (topic, 1): 2}, metadata="by-test")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": members, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "client.id": "olog-client"})
    consumer.subscribe([topic])
    wait_for(lambda: consumer.poll(0.2) is not None and consumer.assignment(), timeout=30, message="assignment")
    consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    consumer.close()

    # confluent-kafka-python sends commit metadata with its C string terminator (and strips it
    # when reading back); the log holds the bytes the client sent, and so do our rows.
    sent = "by-test\x00"
    expected = [
        (standalone, topic, 0, 5, "", False),
        (standalone, topic, 0, 7, sent, False),
        (standalone, topic, 1, 2, sent, False),
    ]
    by_protocol = _log(spark, **{"kafka.bootstrap.servers": broker.bootstrap})
    assert _commits(by_protocol, [standalone]) == expected
    assert _commits(by_protocol, [members]) == [(members, topic, 0, 3, "", False), (members, topic, 1, 4, "", False)]

    assert by_protocol.where(by_protocol.group == standalone).select("log_partition").distinct().collect()[0][0] \
        == partition_for(standalone)
    groups = (by_protocol.where((by_protocol.record_type == "group_metadata") & (by_protocol.group == members))
              .orderBy("log_offset").collect())
    stable = [g for g in groups if g.members]
    assert stable and stable[0].protocol_type == "consumer" and stable[0].generation >= 1
    assert stable[0].protocol == "range" and stable[0].leader == stable[0].members[0].member_id
    assert [m.client_id for m in stable[0].members] == ["olog-client"]
    assert stable[0].members[0].subscribed_topics == [topic]
    last = groups[-1]  # the member left: the group is Empty, still of protocol type "consumer"
    assert last.members == [] and last.protocol_type == "consumer" and last.generation == stable[-1].generation + 1

    from_files = _log(spark, path=str(broker.data_dir))
    assert _commits(from_files, [standalone]) == expected
    columns = [c for c in by_protocol.columns if c != "members"]
    ours = [standalone, members]
    assert (sorted(map(tuple, from_files.where(from_files.group.isin(ours)).select(*columns).collect()))
            == sorted(map(tuple, by_protocol.where(by_protocol.group.isin(ours)).select(*columns).collect())))
    # a user schema naming some columns prunes the rest (only those are decoded)
    pruned = (spark.read.format("offsetd-offsets-log").schema("`group` string, `offset` bigint, tombstone boolean")
              .option("path", str(broker.data_dir)).load())
    assert pruned.columns == ["group", "offset", "tombstone"]
    assert sorted(tuple(r) for r in pruned.where(pruned.group == standalone).collect()) == \
        [(standalone, 2, False), (standalone, 5, False), (standalone, 7, False)]
    one_partition = _log(spark, path=str(broker.data_dir), partitions=str(partition_for(standalone)))
    assert set(r.log_partition for r in one_partition.select("log_partition").collect()) == {partition_for(standalone)}


def _control(producer_id: int, offset: int, commit: bool) -> bytes:
    """A control batch with one COMMIT or ABORT marker (key: int16 version 0, int16 type)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return build_batch([(key, b"\x00\x00\x00\x00\x00\x00", 5, ())], base_offset=offset, producer_id=producer_id,
                       producer_epoch=0, attributes=CONTROL_MASK | TRANSACTIONAL_MASK)


def test_segment_decoding_keeps_committed_transactions_only():
    def rec(group: str, offset: int) -> tuple:
        return (encode_key(OffsetCommitKey(group, "t", 0)), encode_value(OffsetCommitValue(offset, -1, "", 1, -1)),
                1, ())

    txn = TRANSACTIONAL_MASK
    data = b"".join([
        build_batch([rec("plain", 1), rec("plain", 2)], base_offset=0),
        build_batch([rec("committed", 10)], base_offset=2, producer_id=7, producer_epoch=0, attributes=txn),
        build_batch([rec("aborted", 20)], base_offset=3, producer_id=8, producer_epoch=0, attributes=txn),
        _control(7, 4, commit=True),
        _control(8, 5, commit=False),
        build_batch([rec("plain", 3)], base_offset=6),
        b"\x00" * 30,  # torn tail
    ])
    rows = [r for batch in decode_segment(data, 3) for r in batch.to_pylist()]
    assert sorted((r["group"], r["offset"], r["log_offset"]) for r in rows) == [
        ("committed", 10, 2), ("plain", 1, 0), ("plain", 2, 1), ("plain", 3, 6)]
    assert {r["log_partition"] for r in rows} == {3}
