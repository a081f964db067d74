"""format("offsetd-offsets-log"): the commits and group records a test made, through the
protocol and from the broker's segment files; decoding of transactional batches; filter
pushdown (filterPushdown=true): a group filter plans only the group's log partition,
record_type / tombstone / log_partition filters give the rows Spark's own filtering gives."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from broker_process import wait_for
from confluent_kafka import Consumer, TopicPartition
from helpers import commit, create_topic, records, unique
from pyspark.sql.datasource import EqualTo, In, IsNotNull, Not

from offsetd.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, build_batch
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    encode_key,
    encode_value,
    partition_for,
)
from offsetd.spark import FILTER_PUSHDOWN_CONF, register
from offsetd.spark.offsets_log_decode import COMMIT, GROUP, decode_segment
from offsetd.spark.offsets_log_source import OffsetsLogReader, PushdownOffsetsLogReader

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


def _planned_partitions(reader: OffsetsLogReader) -> list[int]:
    """The log partitions a reader's tasks read, in task order."""
    return [item.log_partition for task in reader.partitions() for item in task.items]


def test_group_filter_plans_only_the_groups_log_partition(spark, broker, tmp_path):
    topic, mine = unique("pushdown"), unique("mine")
    other = next(g for g in (unique("other") for _ in range(100)) if partition_for(g) != partition_for(mine))
    create_topic(broker.bootstrap, topic, 2)
    commit(broker.bootstrap, mine, {(topic, 0): 1})
    commit(broker.bootstrap, other, {(topic, 0): 7})
    commit(broker.bootstrap, mine, {(topic, 1): 2})
    by_protocol = {"kafka.bootstrap.servers": broker.bootstrap, "minPartitions": "50"}

    pushed = _log(spark, filterPushdown="true", **by_protocol)
    query = pushed.where(pushed.group == mine)
    assert [tuple(r) for r in query.orderBy("log_offset").select(*COMMIT_COLUMNS).collect()] == [
        (mine, topic, 0, 1, "", False), (mine, topic, 1, 2, "", False)]
    assert query.rdd.getNumPartitions() == 1  # one task: the group's log partition
    plain = _log(spark, **by_protocol)
    assert plain.where(plain.group == mine).rdd.getNumPartitions() == 2  # without pushdown: both

    group_filter = EqualTo(("group",), mine)
    reader = PushdownOffsetsLogReader(by_protocol)
    assert list(reader.pushFilters([group_filter])) == [group_filter]  # Spark still filters the rows
    assert _planned_partitions(reader) == [partition_for(mine)]
    many, both = PushdownOffsetsLogReader(by_protocol), In(("group",), [mine, other])
    assert list(many.pushFilters([both])) == [both]
    assert _planned_partitions(many) == sorted([partition_for(mine), partition_for(other)])

    # files: the count comes from offsetd's topics.json, or option offsetsTopicPartitions
    from_files = PushdownOffsetsLogReader({"path": str(broker.data_dir)})
    list(from_files.pushFilters([group_filter]))
    assert _planned_partitions(from_files) == [partition_for(mine)]
    copy = tmp_path / "copy"  # the two partition directories, without the catalogue
    for p in (partition_for(mine), partition_for(other)):
        shutil.copytree(broker.data_dir / f"{OFFSETS_TOPIC}-{p}", copy / f"{OFFSETS_TOPIC}-{p}")
    unknown = PushdownOffsetsLogReader({"path": str(copy)})
    list(unknown.pushFilters([group_filter]))
    assert _planned_partitions(unknown) == sorted([partition_for(mine), partition_for(other)])  # N unknown: all
    told = PushdownOffsetsLogReader({"path": str(copy), "offsetsTopicPartitions": "50"})
    list(told.pushFilters([group_filter]))
    assert _planned_partitions(told) == [partition_for(mine)]
    files = spark.read.format("offsetd-offsets-log").options(path=str(copy), offsetsTopicPartitions="50",
                                                             filterPushdown="true").load()
    assert sorted(r.offset for r in files.where(files.group == mine).collect()) == [1, 2]


def _group_value(members: int) -> bytes:
    """A consumer group's GroupMetadata value with `members` members (Empty without any)."""
    return encode_value(GroupMetadataValue(
        "consumer", 3, "range" if members else None, "m0" if members else None, 5000,
        tuple(MemberMetadata(f"m{i}", None, "c", "/h", 10, 10, b"", b"") for i in range(members))))


# (log partition, record_type, group, key, value): every kind of record, tombstones too
SCRIPT = [
    (0, "offset_commit", "a", OffsetCommitKey("a", "t", 0), OffsetCommitValue(1, -1, "", 1000, -1)),
    (0, "offset_commit", "a", OffsetCommitKey("a", "t", 1), OffsetCommitValue(2, -1, "", 1000, -1)),
    (0, "group_metadata", "a", GroupMetadataKey("a"), 1),
    (0, "offset_commit", "a", OffsetCommitKey("a", "t", 1), None),
    (0, "group_metadata", "a", GroupMetadataKey("a"), 0),
    (1, "offset_commit", "b", OffsetCommitKey("b", "t", 0), OffsetCommitValue(5, -1, "", 2000, -1)),
    (1, "group_metadata", "b", GroupMetadataKey("b"), None),
    (1, "offset_commit", "c", OffsetCommitKey("c", "u", 3), OffsetCommitValue(8, -1, "m", 3000, -1)),
]


def _scripted_log(root: Path) -> Path:
    """SCRIPT as segment files of two log partitions under `root`."""
    for log_partition in (0, 1):
        part = root / f"{OFFSETS_TOPIC}-{log_partition}"
        part.mkdir(parents=True)
        entries = [(key, value) for p, _, _, key, value in SCRIPT if p == log_partition]
        part.joinpath("00000000000000000000.log").write_bytes(b"".join(
            build_batch([(encode_key(key), _group_value(value) if isinstance(value, int)
                          else None if value is None else encode_value(value), 1000, ())], base_offset=i)
            for i, (key, value) in enumerate(entries)))
    return root


ROW_COLUMNS = ["log_partition", "log_offset", "record_type", "group", "tombstone", "offset", "generation"]


@pytest.mark.parametrize("where, kept", [
    ("record_type = 'offset_commit'", lambda p, kind, tomb: kind == "offset_commit"),
    ("record_type = 'group_metadata' and tombstone", lambda p, kind, tomb: kind == "group_metadata" and tomb),
    ("not tombstone", lambda p, kind, tomb: not tomb),
    ("tombstone = true", lambda p, kind, tomb: tomb),
    ("record_type <> 'offset_commit'", lambda p, kind, tomb: kind != "offset_commit"),
    ("record_type in ('group_metadata', 'other') and log_partition = 0",
     lambda p, kind, tomb: kind == "group_metadata" and p == 0),
    ("log_partition in (1, 7) and not tombstone", lambda p, kind, tomb: p == 1 and not tomb),
    ("record_type = 'no_such_type'", lambda p, kind, tomb: False),
])
def test_pushed_row_filters_give_the_rows_spark_filtering_gives(spark, tmp_path, where, kept):
    path = str(_scripted_log(tmp_path))

    def rows(**options: str) -> list[tuple]:
        df = _log(spark, path=path, **options)  # a DataFrame per query (PushdownOffsetsLogReader)
        return sorted(tuple(r) for r in df.where(where).select(*ROW_COLUMNS).collect())

    pushed = rows(filterPushdown="true")
    assert pushed == rows()
    expected = sorted((p, kind, group, value is None) for p, kind, group, _, value in SCRIPT
                      if kept(p, kind, value is None))
    assert sorted((r[0], r[2], r[3], r[4]) for r in pushed) == expected


def test_push_filters_takes_the_filters_it_handles_and_returns_the_rest(tmp_path):
    reader = PushdownOffsetsLogReader({"path": str(_scripted_log(tmp_path)), "partitions": "0,1"})
    handled = [EqualTo(("record_type",), "offset_commit"), Not(EqualTo(("tombstone",), True)),
               In(("log_partition",), [1, 3])]
    kept = [IsNotNull(("group",)), EqualTo(("group",), "b"), EqualTo(("offset",), 5),
            Not(EqualTo(("group",), "a")), EqualTo(("log_partition",), "1")]
    assert list(reader.pushFilters(handled + kept)) == kept
    selection = reader.selection
    assert (selection.kinds, selection.tombstones, selection.live) == (frozenset([COMMIT]), False, True)
    assert reader.only == frozenset([1]) and reader.groups == frozenset(["b"])
    rows = [r for task in reader.partitions() for batch in reader.read(task) for r in batch.to_pylist()]
    assert [(r["group"], r["offset"]) for r in rows] == [("b", 5), ("c", 8)]  # c: Spark's group filter drops it
    tombstones = PushdownOffsetsLogReader({"path": str(tmp_path)})
    assert list(tombstones.pushFilters([EqualTo(("tombstone",), True), In(("record_type",), ["group_metadata"])])) == []
    assert (tombstones.selection.kinds, tombstones.selection.tombstones, tombstones.selection.live) == (
        frozenset([GROUP]), True, False)


def test_only_filter_pushdown_true_pushes_and_pyspark_reuses_a_dataframes_pushdown(spark, tmp_path):
    """Why filterPushdown is opt-in: pyspark 4.3 keeps one planned read per loaded DataFrame, so
    an action without filters after one with them reuses its pushdown. The default reader pushes
    nothing and stays right. When the last assert fails, pyspark plans each scan afresh and
    filterPushdown could default to true."""
    path = str(_scripted_log(tmp_path))
    in_partition_1 = len([p for p, *_ in SCRIPT if p == 1])
    plain = _log(spark, path=path)
    assert plain.where("log_partition = 1").count() == in_partition_1
    assert plain.count() == len(SCRIPT)
    pushed = _log(spark, path=path, filterPushdown="true")
    assert pushed.where("log_partition = 1").count() == in_partition_1
    assert pushed.count() == in_partition_1  # pyspark's reuse, not the log


def test_register_turns_filter_pushdown_on(spark, tmp_path):
    """pyspark refuses to plan a reader with pushFilters while the setting is off; register
    turns it on."""
    spark.conf.set(FILTER_PUSHDOWN_CONF, "false")
    try:
        with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            _log(spark, path=str(_scripted_log(tmp_path / "off")), filterPushdown="true").collect()
    finally:
        register(spark)
    assert spark.conf.get(FILTER_PUSHDOWN_CONF) == "true"
    df = _log(spark, path=str(_scripted_log(tmp_path / "on")), filterPushdown="true")
    assert sorted(r.group for r in df.where("tombstone").collect()) == ["a", "b"]


WORKER_CHECK = """
import sys
from pyspark.sql import SparkSession
from offsetd.spark import register
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
register(spark)
df = spark.read.format("offsetd-offsets-log").option("path", sys.argv[1]).load()
print("ROWS", df.count(), spark.sparkContext.pythonExec == sys.executable)
spark.stop()
"""


def test_register_from_an_interpreter_not_on_path_runs_workers_on_it(tmp_path):
    """A virtualenv that is not activated: PATH's `python3` has no offsetd, PYSPARK_PYTHON is
    unset. register() makes the local workers run the driver's interpreter, so the read works."""
    path = str(_scripted_log(tmp_path / "log"))
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d != venv_bin)
    done = subprocess.run([sys.executable, "-c", WORKER_CHECK, path], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ROWS {len(SCRIPT)} True" in done.stdout
