"""spark.readStream.format("offsetd-offsets-log") against a real broker: commits made before and
after the query started, in log order, exactly once across a restart from the checkpoint;
maxOffsetsPerTrigger with Trigger.AvailableNow; startingOffsets=latest; row selection and
column pruning in streams; a checkpoint left behind by retention; option validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from broker_process import BrokerProcess, wait_for
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery
from helpers import commit, create_topic, unique

from offsetd.records.offsets import OFFSETS_TOPIC
from offsetd.spark.offsets_log_source import LogRange, OffsetsLogStreamReader

ONE_LOG_PARTITION = {"offsets.topic.num.partitions": "1"}
COMMIT_ROWS = "`group` string, `partition` int, offset bigint, log_partition int, log_offset bigint"


def _stream(spark: SparkSession, broker: BrokerProcess, schema: str | None = None, **options: str) -> DataFrame:
    """A stream of the broker's offsets log (with a user schema: only those columns)."""
    reader = spark.readStream.format("offsetd-offsets-log").option("kafka.bootstrap.servers", broker.bootstrap)
    if schema:
        reader = reader.schema(schema)
    return reader.options(**options).load()


def _sink(batches: dict[int, list[Row]]) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function keeping each micro-batch's rows by batch id: a batch Spark runs
    again after a restart replaces its first run, as an idempotent sink would."""
    def keep(batch: DataFrame, batch_id: int) -> None:
        batches[batch_id] = batch.collect()
    return keep


def _rows(batches: dict[int, list[Row]]) -> list[Row]:
    """Every row in batch order."""
    return [row for batch_id in sorted(batches) for row in batches[batch_id]]


def _positions(batches: dict[int, list[Row]], group: str) -> list[tuple[int, int]]:
    """(partition, offset) of the group's commit rows, in batch order."""
    return [(r.partition, r.offset) for r in _rows(batches) if r.group == group]


def _offsets_of(query: StreamingQuery, batches: dict[int, list[Row]], group: str) -> list[tuple[int, int]]:
    """_positions while `query` runs; a failed query fails the test at once."""
    if not query.isActive:
        raise AssertionError(f"streaming query stopped: {query.exception()}")
    return _positions(batches, group)


def _run_available_now(df: DataFrame, checkpoint: Path) -> dict[int, list[Row]]:
    """Run a Trigger.AvailableNow query to its end; its micro-batches' rows by batch id."""
    batches: dict[int, list[Row]] = {}
    query = (df.writeStream.foreachBatch(_sink(batches)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    return batches


def test_stream_sees_commits_before_and_after_it_started_in_order_exactly_once_across_a_restart(
        spark: SparkSession, shared_broker: BrokerProcess, tmp_path: Path) -> None:
    topic, group = unique("tail"), unique("tailed")
    create_topic(shared_broker.bootstrap, topic, 2)
    for offset in (1, 2, 3):
        commit(shared_broker.bootstrap, group, {(topic, 0): offset})
    df = _stream(spark, shared_broker, COMMIT_ROWS)  # startingOffsets=earliest: the whole history
    batches: dict[int, list[Row]] = {}

    def start() -> StreamingQuery:
        return (df.writeStream.foreachBatch(_sink(batches)).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(processingTime="100 milliseconds").start())

    query = start()
    try:
        wait_for(lambda: _offsets_of(query, batches, group) == [(0, 1), (0, 2), (0, 3)], timeout=60, interval=0.1,
                 message="the commits made before the query started")
        commit(shared_broker.bootstrap, group, {(topic, 0): 4, (topic, 1): 9})
        commit(shared_broker.bootstrap, group, {(topic, 0): 5})
        wait_for(lambda: len(_offsets_of(query, batches, group)) == 6, timeout=60, interval=0.1,
                 message="the commits made while it runs")
    finally:
        query.stop()
    commit(shared_broker.bootstrap, group, {(topic, 1): 10})  # while it is stopped
    query = start()
    try:
        wait_for(lambda: len(_offsets_of(query, batches, group)) == 7, timeout=60, interval=0.1,
                 message="the commit made while it was stopped")
        commit(shared_broker.bootstrap, group, {(topic, 0): 6})
        wait_for(lambda: len(_offsets_of(query, batches, group)) == 8, timeout=60, interval=0.1,
                 message="a commit after the restart")
    finally:
        query.stop()
    # log order (one log partition holds a group), each commit once
    assert _positions(batches, group) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 9), (0, 5), (1, 10), (0, 6)]
    ours = [r for r in _rows(batches) if r.group == group]
    assert len({r.log_partition for r in ours}) == 1
    assert [r.log_offset for r in ours] == sorted({r.log_offset for r in ours})
    assert all(batch_rows == [] or list(batch_rows[0].asDict()) == ["group", "partition", "offset", "log_partition",
                                                                     "log_offset"] for batch_rows in batches.values())


def test_available_now_batches_are_bounded_by_max_offsets_per_trigger(
        spark: SparkSession, broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    broker = broker_factory(ONE_LOG_PARTITION)
    topic, group = unique("bounded"), unique("bounded")
    create_topic(broker.bootstrap, topic, 1)
    for offset in range(20):
        commit(broker.bootstrap, group, {(topic, 0): offset})  # one record each
    batches = _run_available_now(_stream(spark, broker, COMMIT_ROWS, maxOffsetsPerTrigger="6"), tmp_path / "cp")
    assert [len(batches[b]) for b in sorted(batches)] == [6, 6, 6, 2]
    assert [r.offset for r in _rows(batches)] == list(range(20))
    assert [r.log_offset for r in _rows(batches)] == list(range(20))


def test_stream_selects_rows_and_columns_as_a_batch_read_does(
        spark: SparkSession, broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    broker = broker_factory(ONE_LOG_PARTITION)
    topic, kept, gone = unique("select"), unique("kept"), unique("gone")
    create_topic(broker.bootstrap, topic, 1)
    commit(broker.bootstrap, kept, {(topic, 0): 1})
    commit(broker.bootstrap, gone, {(topic, 0): 2})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # must outlive its futures
    admin.delete_consumer_groups([gone], request_timeout=10)[gone].result(15)  # tombstones
    commit(broker.bootstrap, kept, {(topic, 0): 3})
    everything = _rows(_run_available_now(_stream(spark, broker), tmp_path / "all"))
    assert [(r.group, r.offset, r.tombstone) for r in everything if r.record_type == "offset_commit"] == [
        (kept, 1, False), (gone, 2, False), (gone, None, True), (kept, 3, False)]
    selected = _run_available_now(
        _stream(spark, broker, "`group` string, offset bigint", recordTypes="offset_commit", includeTombstones="false"),
        tmp_path / "selected")
    assert [tuple(r) for r in _rows(selected)] == [(kept, 1), (gone, 2), (kept, 3)]
    assert all(list(r.asDict()) == ["group", "offset"] for r in _rows(selected))


def test_starting_offsets_latest_skips_the_history(spark: SparkSession, shared_broker: BrokerProcess,
                                                  tmp_path: Path) -> None:
    topic, group = unique("latest"), unique("latest")
    create_topic(shared_broker.bootstrap, topic, 1)
    commit(shared_broker.bootstrap, group, {(topic, 0): 1})
    batches: dict[int, list[Row]] = {}
    query = (_stream(spark, shared_broker, COMMIT_ROWS, startingOffsets="latest").writeStream
             .foreachBatch(_sink(batches)).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: _offsets_of(query, batches, group) == [] and 0 in batches, timeout=60, interval=0.1,
                 message="batch 0 (from the log end)")
        commit(shared_broker.bootstrap, group, {(topic, 0): 2})
        seen = wait_for(lambda: _offsets_of(query, batches, group), timeout=60, interval=0.1,
                        message="the commit made after the start")
    finally:
        query.stop()
    assert seen == [(0, 2)]
    assert _positions(batches, group) == [(0, 2)]  # the commit before the start never came


def test_a_checkpoint_behind_the_log_start_resumes_from_the_log_start(
        spark: SparkSession, broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    """Retention removed segments the checkpoint had not read yet: the stream goes on from the
    log start instead of failing."""
    broker = broker_factory({**ONE_LOG_PARTITION, "offsets.topic.segment.bytes": "1024"})
    topic, group = unique("retained"), unique("retained")
    create_topic(broker.bootstrap, topic, 1)
    for offset in range(3):
        commit(broker.bootstrap, group, {(topic, 0): offset})
    df = _stream(spark, broker, COMMIT_ROWS)
    first = _run_available_now(df, tmp_path / "cp")
    assert [r.log_offset for r in _rows(first)] == [0, 1, 2]
    for offset in range(3, 40):
        commit(broker.bootstrap, group, {(topic, 0): offset})
    broker.stop()
    segments = sorted((broker.data_dir / f"{OFFSETS_TOPIC}-0").glob("*.log"))
    assert len(segments) >= 3, segments
    for segment in segments[:-2]:  # what retention would delete: the oldest segments
        for f in segment.parent.glob(f"{segment.stem}.*"):
            f.unlink()
    log_start = int(segments[-2].stem)
    assert log_start > 3
    broker.restart()
    second = _run_available_now(df, tmp_path / "cp")
    assert [r.log_offset for r in _rows(second)] == list(range(log_start, 40))
    assert [r.offset for r in _rows(second)] == list(range(log_start, 40))


@pytest.mark.parametrize("options, message", [
    ({"path": "/data/kafka"}, "streaming reads of offsetd-offsets-log need the option kafka.bootstrap.servers"),
    ({}, "streaming reads of offsetd-offsets-log need the option kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "b:9092", "startingOffsets": "group"}, "option startingOffsets must be one of"),
    ({"kafka.bootstrap.servers": "b:9092", "startingOffsets": json.dumps({OFFSETS_TOPIC: {"0": 1}})},
     "option startingOffsets must be one of"),
    ({"kafka.bootstrap.servers": "b:9092", "maxOffsetsPerTrigger": "0"}, "option maxOffsetsPerTrigger"),
    ({"kafka.bootstrap.servers": "b:9092", "partitions": "1,x"}, "option partitions"),
])
def test_invalid_stream_options_raise_a_value_error(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OffsetsLogStreamReader(options)


def test_a_stream_of_segment_files_fails_with_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.readStream.format("offsetd-offsets-log").option("path", str(tmp_path)).load()
    with pytest.raises(Exception, match="streaming reads of offsetd-offsets-log need the option "
                                        "kafka.bootstrap.servers"):
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start().awaitTermination(60)


def test_min_offsets_per_trigger_holds_small_batches_back_until_max_trigger_delay(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    """The stream reader alone (no query), with a fake clock: admission control as the topic
    source's, then the micro-batch's tasks and rows."""
    broker = broker_factory(ONE_LOG_PARTITION)
    topic, group = unique("held"), unique("held")
    create_topic(broker.bootstrap, topic, 1)
    now = [0.0]
    reader = OffsetsLogStreamReader({"kafka.bootstrap.servers": broker.bootstrap, "minOffsetsPerTrigger": "3",
                                     "maxTriggerDelay": "10s"}, clock=lambda: now[0])
    start = reader.initialOffset()
    assert start == {OFFSETS_TOPIC: {"0": 0}}
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == start  # the first trigger: nothing there yet
    for offset in (1, 2):
        commit(broker.bootstrap, group, {(topic, 0): offset})
    assert reader.latestOffset(start, limit) == start  # 2 new offsets < 3: skipped
    commit(broker.bootstrap, group, {(topic, 0): 3})
    end = reader.latestOffset(start, limit)
    assert end == {OFFSETS_TOPIC: {"0": 3}}
    commit(broker.bootstrap, group, {(topic, 0): 4})
    assert reader.latestOffset(end, limit) == end
    now[0] = 11.0  # maxTriggerDelay since the last batch: a batch of what there is
    assert reader.latestOffset(end, limit) == {OFFSETS_TOPIC: {"0": 4}}
    tasks = reader.partitions(start, end)
    assert [item for task in tasks for item in task.items] == [LogRange(0, 0, 3)]
    rows = [r for task in tasks for batch in reader.read(task) for r in batch.to_pylist()]
    assert [(r["group"], r["offset"], r["log_offset"]) for r in rows] == [(group, 1, 0), (group, 2, 1), (group, 3, 2)]
