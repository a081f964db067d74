"""format("offsetd") against a real broker: batch ranges, startingOffsets=group, streaming with
commitToGroup (group offsets and lag through AdminClient), admission control, restart from a
checkpoint without loss or duplicates, partitions added while the query runs; includeHeaders,
offsets by timestamp, minOffsetsPerTrigger / maxTriggerDelay; option validation."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from broker_process import BrokerProcess, wait_for
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery
from helpers import commit, create_topic, group_offsets, log_end_offsets, produce, records, records_at, unique

from offsetd.spark.kafka_client import LATEST, Cluster
from offsetd.spark.streaming import TriggerDelay, cap_rows
from offsetd.spark.topic_source import STARTING_OPTIONS, TopicOptions, parse_bound


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
    df = _reader(spark, shared_broker, subscribe=topic, includeHeaders="true",
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


def test_log_ends_leave_out_a_topic_deleted_after_the_metadata_named_it(shared_broker):
    """The race a streaming query meets when a topic is deleted: the metadata still names it, but
    ListOffsets answers UNKNOWN_TOPIC_OR_PART. The source's log ends leave its partitions out, so
    failOnDataLoss judges them as gone (the test above) instead of the query dying on a raw error."""
    keep, doomed = unique("keep"), unique("doomed")
    for topic in (keep, doomed):
        create_topic(shared_broker.bootstrap, topic, 1)
        records(shared_broker.bootstrap, topic, 3, 1)
    cluster = Cluster({"kafka.bootstrap.servers": shared_broker.bootstrap})
    named = cluster.partitions_of(subscribe=[keep, doomed])  # the metadata, taken before the delete
    assert named == sorted([(keep, 0), (doomed, 0)])
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(15)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        cluster.list_offsets(named, LATEST)
    assert cluster.list_offsets(named, LATEST, skip_unknown=True) == {(keep, 0): 3}


def test_headers_column_only_with_include_headers(spark: SparkSession, shared_broker: BrokerProcess) -> None:
    """As Spark: no headers column by default; includeHeaders=true adds it, null header values kept."""
    topic = unique("headers")
    create_topic(shared_broker.bootstrap, topic, 1)
    produce(shared_broker.bootstrap, topic, [{"value": b"a", "headers": [("trace", b"t1"), ("empty", None)]},
                                             {"value": b"b"}])
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    plain = _reader(spark, shared_broker, subscribe=topic)
    assert plain.columns == columns and _stream(spark, shared_broker, subscribe=topic).columns == columns
    assert sorted(r.value for r in plain.collect()) == [b"a", b"b"]
    with_headers = _reader(spark, shared_broker, subscribe=topic, includeHeaders="true")
    assert with_headers.columns == [*columns, "headers"]
    assert _stream(spark, shared_broker, subscribe=topic, includeHeaders="true").columns == [*columns, "headers"]
    got = {r.value: [(h.key, h.value) for h in r.headers] for r in with_headers.collect()}
    assert got == {b"a": [("trace", b"t1"), ("empty", None)], b"b": []}


BASE_MS = 1_700_000_000_000


def _timestamped_topic(broker: BrokerProcess, prefix: str) -> str:
    """Two partitions of ten records: partition 0 at BASE_MS + 0, 10, ..., 90 and partition 1 at
    BASE_MS + 1000, 1010, ..., 1090 (CreateTime)."""
    topic = unique(prefix)
    create_topic(broker.bootstrap, topic, 2)
    records_at(broker.bootstrap, topic, {0: [BASE_MS + 10 * i for i in range(10)],
                                         1: [BASE_MS + 1000 + 10 * i for i in range(10)]})
    return topic


def _positions(rows: list[Row]) -> list[tuple[int, int]]:
    """Sorted (partition, offset) of rows."""
    return sorted((r.partition, r.offset) for r in rows)


def test_batch_bounds_by_timestamp(spark: SparkSession, shared_broker: BrokerProcess) -> None:
    """startingOffsetsByTimestamp / endingOffsetsByTimestamp and the global startingTimestamp /
    endingTimestamp resolve with ListOffsets by timestamp."""
    topic = _timestamped_topic(shared_broker, "by-ts")
    # start at the first record at or after each partition's timestamp; end (exclusive) at the first
    # record at or after the ending timestamp, or at the log end when there is none
    by_partition = _reader(spark, shared_broker, subscribe=topic,
                           startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 25, "1": BASE_MS + 1000}}),
                           endingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 70, "1": BASE_MS + 5000}}))
    rows = by_partition.collect()
    assert _positions(rows) == [(0, o) for o in range(3, 7)] + [(1, o) for o in range(10)]
    first = min(rows, key=lambda r: (r.partition, r.offset))
    assert (first.value, int(first.timestamp.timestamp() * 1000)) == (b"p0-3", BASE_MS + 30)
    # one timestamp for every partition, taking precedence over startingOffsets / endingOffsets
    everywhere = _reader(spark, shared_broker, subscribe=topic, startingTimestamp=str(BASE_MS + 45),
                         startingOffsets="earliest", endingTimestamp=str(BASE_MS + 1045),
                         endingOffsets=json.dumps({topic: {"0": 6, "1": 6}}))
    assert _positions(everywhere.collect()) == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(5)]
    # a starting timestamp after every record fails (startingOffsetsByTimestampStrategy=error) ...
    with pytest.raises(Exception, match=f"startingTimestamp: no record at or after the timestamp in {topic}-0"):
        _reader(spark, shared_broker, subscribe=topic, startingTimestamp=str(BASE_MS + 5000)).collect()
    # ... and invalid values are a ValueError naming the option
    with pytest.raises(Exception, match="option startingOffsetsByTimestamp is not valid JSON"):
        _reader(spark, shared_broker, subscribe=topic, startingOffsetsByTimestamp="{" + topic).collect()


def test_stream_starts_by_timestamp_and_strategy_latest_starts_unmatched_partitions_at_the_end(
        spark: SparkSession, shared_broker: BrokerProcess, tmp_path: Path) -> None:
    """A new streaming query starts by timestamp; startingOffsetsByTimestampStrategy=latest."""
    topic = _timestamped_topic(shared_broker, "ts-stream")
    rows: list = []
    df = _stream(spark, shared_broker, subscribe=topic, startingOffsetsByTimestampStrategy="latest",
                 startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 45, "1": BASE_MS + 1095}}))
    query = (df.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.select("partition", "offset").collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    # partition 1 has no record at or after its timestamp: it starts at its log end (10)
    assert _positions(rows) == [(0, o) for o in range(5, 10)]


def running(query: StreamingQuery) -> list:
    """The query's recent progress events; a failed query fails the test at once."""
    if not query.isActive:
        raise AssertionError(f"streaming query stopped: {query.exception()}")
    return query.recentProgress


def _start_counting_batches(spark: SparkSession, df: DataFrame, checkpoint: Path, batches: list[int]) -> StreamingQuery:
    """foreachBatch query appending each micro-batch's row count, triggered every 100 ms, with a
    progress event for every trigger that runs no batch too (so skipped triggers can be seen)."""
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # read when the query starts
    try:
        return (df.writeStream.foreachBatch(lambda batch, _: batches.append(batch.count()))
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start())
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def _skipped_seeing(query: StreamingQuery, topic: str, available: int, batch_id: int) -> list:
    """Progress events of triggers that saw `available` offsets of `topic` yet ran no batch
    while batch `batch_id` was the next to run."""
    return [p for p in running(query) if p.batchId == batch_id and p.numInputRows == 0 and p.sources[0].latestOffset
            and sum(json.loads(p.sources[0].latestOffset)[topic].values()) == available]


def _min_offsets_query(spark: SparkSession, broker: BrokerProcess, tmp_path: Path, partitions: int,
                       **options: str) -> tuple[str, StreamingQuery, list[int]]:
    """A stream of a new, empty topic with these admission options, running, past its batch 0
    (the first trigger of a run is never skipped, as in Spark): (topic, query, batch sizes)."""
    topic = unique("min-offsets")
    create_topic(broker.bootstrap, topic, partitions)
    batches: list[int] = []
    df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest", **options)
    query = _start_counting_batches(spark, df, tmp_path / "cp", batches)
    try:
        wait_for(lambda: running(query) and batches, timeout=60, interval=0.1, message="batch 0")
    except BaseException:
        query.stop()
        raise
    return topic, query, batches


def test_min_offsets_per_trigger_skips_triggers_until_enough_records(spark: SparkSession, shared_broker: BrokerProcess,
                                                                      tmp_path: Path) -> None:
    """Triggers that find fewer than minOffsetsPerTrigger new offsets run no batch."""
    topic, query, batches = _min_offsets_query(spark, shared_broker, tmp_path, 2, minOffsetsPerTrigger="5",
                                               maxTriggerDelay="1h")
    try:
        records(shared_broker.bootstrap, topic, 3, 2)
        wait_for(lambda: len(_skipped_seeing(query, topic, 3, 1)) >= 3, timeout=60, interval=0.1,
                 message="triggers that see 3 records and run no batch")
        assert batches == [0]
        records(shared_broker.bootstrap, topic, 2, 2)
        wait_for(lambda: running(query) and len(batches) > 1, timeout=60, interval=0.1, message="a batch of 5")
    finally:
        query.stop()
    assert batches == [0, 5]


def test_max_trigger_delay_runs_a_batch_below_min_offsets(spark: SparkSession, shared_broker: BrokerProcess,
                                                           tmp_path: Path) -> None:
    """Once maxTriggerDelay has passed, a batch runs with fewer than minOffsetsPerTrigger offsets."""
    topic, query, batches = _min_offsets_query(spark, shared_broker, tmp_path, 1, minOffsetsPerTrigger="100",
                                               maxTriggerDelay="2s")
    try:
        records(shared_broker.bootstrap, topic, 3, 1)
        ran = wait_for(lambda: [p for p in running(query) if p.batchId == 1 and p.numInputRows], timeout=60,
                       interval=0.1, message="a batch below minOffsetsPerTrigger once maxTriggerDelay passed")
        progress = running(query)
    finally:
        query.stop()
    assert batches[:2] == [0, 3]
    # the 3 records (< minOffsetsPerTrigger) first waited, then ran maxTriggerDelay after batch 0
    assert [p for p in progress if p.batchId == 1 and p.numInputRows == 0
            and json.loads(p.sources[0].latestOffset)[topic] == {"0": 3}], "no trigger was skipped"
    first = min(datetime.fromisoformat(p.timestamp) for p in progress if p.batchId == 0)
    assert (datetime.fromisoformat(ran[0].timestamp) - first).total_seconds() >= 1.9


def test_trigger_delay_skips_below_min_offsets_until_max_trigger_delay() -> None:
    """TriggerDelay with a fake clock: Spark's minOffsetsPerTrigger / maxTriggerDelay rule."""
    now = [0.0]
    delay = TriggerDelay(min_offsets=5, max_delay_ms=2000, clock=lambda: now[0])
    assert not delay.skip(1)  # the first trigger of a run is never skipped
    now[0] = 0.5
    assert delay.skip(4)  # too few, too soon
    assert not delay.skip(5)  # enough: a batch, and the delay restarts
    now[0] = 2.0
    assert delay.skip(4)  # 1.5 s since the last batch
    now[0] = 2.5
    assert not delay.skip(1)  # maxTriggerDelay passed: a batch of what there is


def test_timestamp_options_take_precedence_over_offsets() -> None:
    """startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets (Spark's order)."""
    options = {"startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
               "startingOffsets": "earliest"}
    chosen = []
    for name in STARTING_OPTIONS:
        chosen.append(parse_bound(options, STARTING_OPTIONS, "latest", "error").option)
        del options[name]
    assert chosen == list(STARTING_OPTIONS)
    assert parse_bound(options, STARTING_OPTIONS, "latest", "error").kind == "latest"  # the default


SOURCE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}


@pytest.mark.parametrize("streaming, options, option", [
    (False, {"startingOffsetsByTimestamp": '{"t": {"0": 5'}, "startingOffsetsByTimestamp"),
    (False, {"startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, "startingOffsetsByTimestamp"),
    (False, {"endingOffsetsByTimestamp": '{"t": [0, 1]}'}, "endingOffsetsByTimestamp"),
    (False, {"endingOffsetsByTimestamp": '{"t": {"first": 5}}'}, "endingOffsetsByTimestamp"),
    (False, {"startingTimestamp": "-1"}, "startingTimestamp"),
    (True, {"startingTimestamp": "yesterday"}, "startingTimestamp"),
    (False, {"endingTimestamp": "1.5"}, "endingTimestamp"),
    (True, {"startingOffsetsByTimestampStrategy": "closest"}, "startingOffsetsByTimestampStrategy"),
    (False, {"startingOffsets": "{not json"}, "startingOffsets"),
    (False, {"startingOffsets": '{"t": {"0": -3}}'}, "startingOffsets"),
    (False, {"startingOffsets": "latest"}, "startingOffsets"),
    (False, {"startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets"),
    (False, {"endingOffsets": "earliest"}, "endingOffsets"),
    (False, {"endingOffsets": '{"t": {"0": -2}}'}, "endingOffsets"),
    (True, {"endingOffsets": "latest"}, "endingOffsets"),
    (True, {"endingTimestamp": "1000"}, "endingTimestamp"),
    (True, {"endingOffsetsByTimestamp": '{"t": {"0": 1000}}'}, "endingOffsetsByTimestamp"),
    (True, {"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
    (True, {"minOffsetsPerTrigger": "-3"}, "minOffsetsPerTrigger"),
    (True, {"maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger"),
    (True, {"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger"),
    (True, {"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    (True, {"maxTriggerDelay": "1.5s"}, "maxTriggerDelay"),
    (True, {"maxTriggerDelay": "-2s"}, "maxTriggerDelay"),
    (False, {"includeHeaders": "yes"}, "includeHeaders"),
    (False, {"failOnDataLoss": "maybe"}, "failOnDataLoss"),
])
def test_invalid_options_raise_a_value_error_naming_the_option(streaming: bool, options: dict[str, str],
                                                               option: str) -> None:
    """Bad JSON, negative or non-numeric values, unknown words and combinations Spark rejects."""
    with pytest.raises(ValueError, match=rf"\b{option}\b"):
        TopicOptions({**SOURCE, **options}, streaming=streaming)


def test_option_values_spark_accepts() -> None:
    """Case-insensitive words and booleans, Spark time strings (no unit = ms), and the defaults."""
    opts = TopicOptions({**SOURCE, "maxTriggerDelay": "2s", "minOffsetsPerTrigger": "5", "includeHeaders": "TRUE",
                         "startingOffsetsByTimestampStrategy": "Latest", "startingOffsets": "EARLIEST"},
                        streaming=True)
    assert (opts.max_trigger_delay_ms, opts.min_per_trigger, opts.include_headers) == (2000, 5, True)
    assert (opts.starting.kind, opts.ending.kind) == ("earliest", "latest")
    defaults = TopicOptions(SOURCE, streaming=True)
    assert (defaults.max_trigger_delay_ms, defaults.include_headers, defaults.starting.kind) == (15 * 60_000, False,
                                                                                                "latest")
    assert TopicOptions({**SOURCE, "maxTriggerDelay": "250"}, streaming=True).max_trigger_delay_ms == 250
