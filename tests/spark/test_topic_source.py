"""format("offsetd") against a real broker: batch ranges, startingOffsets=group, streaming with
commitToGroup (group offsets and lag through AdminClient), admission control, restart from a
checkpoint without loss or duplicates, partitions added while the query runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from broker_process import wait_for
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from helpers import commit, create_topic, group_offsets, log_end_offsets, produce, records, unique

from offsetd.spark.topic_source import cap_rows


def _reader(spark, broker, **options):
    return spark.read.format("offsetd").option("kafka.bootstrap.servers", broker.bootstrap).options(**options).load()


def _stream(spark, broker, **options):
    return (spark.readStream.format("offsetd").option("kafka.bootstrap.servers", broker.bootstrap)
            .options(**options).load())


def test_batch_read_between_json_offsets_has_kafka_source_schema(spark, shared_broker):
    topic = unique("batch")
    create_topic(shared_broker.bootstrap, topic, 2)
    produce(shared_broker.bootstrap, topic, [
        {"key": f"k{i}", "value": f"v{i}", "partition": i % 2, "headers": [("h", f"{i}".encode())]}
        for i in range(20)])
    df = _reader(spark, shared_broker, subscribe=topic,
                 startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
                 endingOffsets=json.dumps({topic: {"0": 7, "1": -1}}))
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.orderBy("partition", "offset").collect()
    assert [(r.partition, r.offset) for r in rows] == [(0, o) for o in range(2, 7)] + [(1, o) for o in range(10)]
    first = rows[0]
    assert (first.key, first.value, first.topic, first.timestampType) == (b"k4", b"v4", topic, 0)
    assert [(h.key, h.value) for h in first.headers] == [("h", b"4")]
    assert first.timestamp is not None


def test_batch_read_starting_from_a_plain_groups_committed_offsets(spark, shared_broker):
    topic, group = unique("from-group"), unique("plain")
    create_topic(shared_broker.bootstrap, topic, 2)
    records(shared_broker.bootstrap, topic, 20, 2)
    commit(shared_broker.bootstrap, group, {(topic, 0): 3, (topic, 1): 8})
    df = _reader(spark, shared_broker, subscribe=topic, startingOffsets="group", **{"kafka.group.id": group})
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(8, 10)]


def test_subscribe_pattern_and_assign(spark, shared_broker):
    prefix = unique("pat")
    for name in ("a", "b"):
        create_topic(shared_broker.bootstrap, f"{prefix}-{name}", 1)
        records(shared_broker.bootstrap, f"{prefix}-{name}", 3, 1)
    by_pattern = _reader(spark, shared_broker, subscribePattern=f"{prefix}-.*")
    assert sorted(r.topic for r in by_pattern.select("topic").collect()) == [f"{prefix}-a"] * 3 + [f"{prefix}-b"] * 3
    assigned = _reader(spark, shared_broker, assign=json.dumps({f"{prefix}-b": [0]}))
    assert assigned.count() == 3


def test_cap_rows_shares_the_limit_by_backlog():
    begin = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    end = {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert cap_rows(begin, end, 10) == {("t", 0): 9, ("t", 1): 1, ("t", 2): 100}
    assert cap_rows(begin, end, 1000) == end
    assert sum(v - begin[k] for k, v in cap_rows(begin, end, 1).items()) == 1


def committed(query, broker, group: str) -> dict:
    """The group's offsets while `query` runs; a failed query fails the test at once."""
    if not query.isActive:
        raise AssertionError(f"streaming query stopped: {query.exception()}")
    return group_offsets(broker.bootstrap, group)


def _run_to_parquet(spark, broker, topic, checkpoint: Path, out: Path, group: str, sizes: list[int],
                    until_offsets: dict) -> None:
    """Stream topic -> Parquet (exactly-once file sink) with commitToGroup until the group has
    committed `until_offsets`; records each micro-batch's size."""
    df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="7",
                 commitToGroup=group)

    def sink(batch_df, batch_id):
        rows = batch_df.select("partition", "offset", "value").persist()
        sizes.append(rows.count())
        rows.write.mode("append").parquet(str(out / f"b{batch_id}"))
        rows.unpersist()

    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: committed(query, broker, group) == until_offsets, timeout=120, interval=0.2,
                 message=f"group {group} to commit {until_offsets}")
    finally:
        query.stop()


def test_stream_commits_to_group_limits_batches_and_restarts_without_loss_or_duplicates(
        spark, shared_broker, tmp_path):
    topic, group = unique("stream"), unique("spark-job")
    create_topic(shared_broker.bootstrap, topic, 3)
    records(shared_broker.bootstrap, topic, 30, 3)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    sizes: list[int] = []
    first_end = log_end_offsets(shared_broker.bootstrap, topic, 3)
    _run_to_parquet(spark, shared_broker, topic, checkpoint, out, group, sizes, first_end)
    # admission control: no micro-batch above maxOffsetsPerTrigger, several batches in all
    assert max(sizes) <= 7 and len([s for s in sizes if s]) >= 5, sizes
    # lag as Kafka tools see it: committed == log end
    assert group_offsets(shared_broker.bootstrap, group) == first_end
    # a standalone group: no members, no protocol type -> offsets expire by commit time (KIP-211)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})  # must outlive its futures
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    assert description.members == [] and description.is_simple_consumer_group

    produce(shared_broker.bootstrap, topic, [{"value": f"w{i}", "partition": i % 3} for i in range(12)])
    second_end = log_end_offsets(shared_broker.bootstrap, topic, 3)
    _run_to_parquet(spark, shared_broker, topic, checkpoint, out, group, sizes, second_end)
    rows = spark.read.parquet(str(out / "*")).collect()
    seen = sorted((r.partition, r.offset) for r in rows)
    assert seen == sorted((p, o) for (_, p), end in second_end.items() for o in range(end)), "lost or duplicated"
    assert sorted(r.value for r in rows if r.value.startswith(b"w")) == sorted(f"w{i}".encode() for i in range(12))


def test_stream_picks_up_partitions_added_while_running(spark, shared_broker, tmp_path):
    topic, group = unique("grow"), unique("grow-job")
    create_topic(shared_broker.bootstrap, topic, 1)
    records(shared_broker.bootstrap, topic, 4, 1)
    df = _stream(spark, shared_broker, subscribe=topic, startingOffsets="earliest", commitToGroup=group)
    query = (df.writeStream.format("memory").queryName(group.replace("-", "_"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: committed(query, shared_broker, group) == {(topic, 0): 4}, timeout=60, interval=0.2,
                 message="first partition committed")
        admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(15)
        produce(shared_broker.bootstrap, topic, [{"value": b"new", "partition": 1}])
        wait_for(lambda: committed(query, shared_broker, group) == {(topic, 0): 4, (topic, 1): 1},
                 timeout=60, interval=0.2, message="the new partition to be read and committed")
    finally:
        query.stop()
    rows = spark.sql(f"select partition, offset from {group.replace('-', '_')}").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]


def test_available_now_reads_what_exists_in_limited_batches_and_commits_it(spark, shared_broker, tmp_path):
    topic, group = unique("avail"), unique("avail-job")
    create_topic(shared_broker.bootstrap, topic, 2)
    records(shared_broker.bootstrap, topic, 20, 2)
    sizes: list[int] = []
    df = _stream(spark, shared_broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="6",
                 commitToGroup=group)
    query = (df.writeStream.foreachBatch(lambda batch, _: sizes.append(batch.count()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sum(sizes) == 20 and max(sizes) <= 6, sizes
    assert group_offsets(shared_broker.bootstrap, group) == {(topic, 0): 10, (topic, 1): 10}


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_deleted_topic_fails_the_query_unless_fail_on_data_loss_is_false(spark, shared_broker, tmp_path,
                                                                         fail_on_data_loss):
    keep, doomed, group = unique("keep"), unique("doomed"), unique("loss-job")
    for topic in (keep, doomed):
        create_topic(shared_broker.bootstrap, topic, 1)
        records(shared_broker.bootstrap, topic, 3, 1)
    df = _stream(spark, shared_broker, subscribe=f"{keep},{doomed}", startingOffsets="earliest",
                 commitToGroup=group, failOnDataLoss=fail_on_data_loss)
    query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: committed(query, shared_broker, group) == {(keep, 0): 3, (doomed, 0): 3}, timeout=60,
                 interval=0.2, message="both topics read")
        admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
        admin.delete_topics([doomed], operation_timeout=10)[doomed].result(15)
        records(shared_broker.bootstrap, keep, 2, 1)
        if fail_on_data_loss == "true":
            with pytest.raises(StreamingQueryException, match="no longer exist"):
                query.awaitTermination(60)
        else:
            wait_for(lambda: committed(query, shared_broker, group).get((keep, 0)) == 5, timeout=60, interval=0.2,
                     message="the remaining topic to go on")
    finally:
        query.stop()
