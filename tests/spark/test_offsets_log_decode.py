"""The offsets-log source's column-wise decoding agrees with the project's row codecs
(records.log_walker.iter_log_records + decode_key / decode_value) on every batch shape: the
coordinator's uniform batches (framing proven column-wise), and batches that need the record
walk (timestamp deltas, headers, LogAppendTime, long batches, tombstones, other key versions); and
the KIP-848 consumer groups' records (types 3-8, 16) as typed rows, tombstones included."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from offsetd.records import consumer_group_records as cgr

from offsetd.records.batch import CONTROL_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, build_batch
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.log_walker import iter_log_records
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from offsetd.spark import offsets_log_decode
from offsetd.spark.offsets_log_decode import ALL_COLUMNS, Selection, decode_segment
from offsetd.spark.offsets_log_source import OffsetsLogReader, pack, task_target
from offsetd.spark.schemas import OFFSET_COMMIT


def _commit(group: str, partition: int, offset: int, ts: int, metadata: str = "", headers=()) -> tuple:
    return (encode_key(OffsetCommitKey(group, "tópic", partition)),
            encode_value(OffsetCommitValue(offset, 4, metadata, ts, -1)), ts, headers)


def _expected(data: bytes) -> list[tuple]:
    """(log_offset, record_timestamp, group, topic, partition, offset, metadata, tombstone) by the row codecs."""
    out = []
    for offset, ts, key, value, _ in iter_log_records(data):
        k = decode_key(key)
        if isinstance(k, UnknownRecordKey):
            consumer = cgr.decode_key(key)
            if consumer is not None:  # a consumer group's record: key fields only here
                out.append((offset, ts, consumer.group_id, None, None, None, None, value is None))
            continue
        v = decode_value(k, value)
        if isinstance(k, OffsetCommitKey):
            out.append((offset, ts, k.group, k.topic, k.partition, None if v is None else v.offset,
                        None if v is None else v.metadata, v is None))
        else:
            out.append((offset, ts, k.group, None, None, None, None, v is None))
    return out


def _decoded(data: bytes) -> list[tuple]:
    rows = [r for b in decode_segment(data, 0) for r in b.to_pylist()]
    return [(r["log_offset"], r["record_timestamp"], r["group"], r["topic"], r["partition"], r["offset"],
             r["metadata"], r["tombstone"]) for r in rows]


GROUP = encode_value(GroupMetadataValue("consumer", 2, "range", "m", 77, (
    MemberMetadata("m", None, "c", "/h", 10, 10, b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", b""),)))
UNIFORM = [build_batch([_commit("g1", p, 10 + p, 1000) for p in range(16)], base_offset=0),
           build_batch([_commit("g2", 0, 5, 1001), (encode_key(OffsetCommitKey("g2", "tópic", 1)), None, 1001, ()),
                        (encode_key(GroupMetadataKey("g2")), GROUP, 1001, ())], base_offset=16),
           build_batch([_commit("g3", p, p, 1002) for p in range(300)], base_offset=19)]  # 2-byte offset deltas
CASES = {
    "uniform coordinator batches": UNIFORM,
    "timestamp deltas": [build_batch([_commit("g", p, p, 1000 + p) for p in range(5)], base_offset=0)],
    "LogAppendTime": [build_batch([_commit("g", 0, 1, 5)], base_offset=3, attributes=TIMESTAMP_TYPE_MASK)],
    "headers": [build_batch([_commit("g", 0, 1, 5, headers=[("h", b"v")])], base_offset=0)],
    "metadata and long keys": [build_batch([_commit("g" * 300, 0, 1, 5, metadata="m" * 200)], base_offset=0)],
    "other key versions": [build_batch([(b"\x00\x63\x00\x01x", b"\x00", 5, ()), _commit("g", 0, 1, 5)], base_offset=0)],
    "mixed": UNIFORM + [build_batch([_commit("h", 0, 1, 2000 + p) for p in range(3)], base_offset=400)],
}


@pytest.mark.parametrize("name", CASES)
def test_column_decoding_equals_the_row_codecs(name):
    data = b"".join(CASES[name])
    assert _decoded(data) == _expected(data)


def test_chunk_boundaries_do_not_change_the_rows(monkeypatch):
    data = b"".join(CASES["mixed"])
    whole = _decoded(data)
    monkeypatch.setattr(offsets_log_decode, "CHUNK_RECORDS", 7)
    assert len(list(decode_segment(data, 0))) == 3  # whole batches: 16 | 3 + 300 | 3 records
    assert _decoded(data) == whole


def test_records_without_a_key_are_skipped_and_offsets_stay_exact():
    data = build_batch([_commit("g", 0, 1, 5), (None, b"x", 5, ()), _commit("g", 1, 2, 5)], base_offset=40)
    assert [(r[0], r[4]) for r in _decoded(data)] == [(40, 0), (42, 1)]


SELECTIONS = [
    ({"recordTypes": "offset_commit"}, lambda r: r[3] is not None),
    ({"recordTypes": "group_metadata"}, lambda r: r[3] is None),
    ({"includeTombstones": "false"}, lambda r: not r[7]),
    ({"recordTypes": "offset_commit, group_metadata", "includeTombstones": "FALSE"}, lambda r: not r[7]),
    ({"recordTypes": OFFSET_COMMIT, "includeTombstones": "false"}, lambda r: r[3] is not None and not r[7]),
]


@pytest.mark.parametrize("options,kept", SELECTIONS, ids=lambda o: str(o) if isinstance(o, dict) else "")
def test_row_selection_options(options, kept):
    data = b"".join(UNIFORM)
    selection = Selection.from_options(options, ALL_COLUMNS)
    rows = [(r["log_offset"], r["record_timestamp"], r["group"], r["topic"], r["partition"], r["offset"],
             r["metadata"], r["tombstone"]) for b in decode_segment(data, 0, selection) for r in b.to_pylist()]
    expected = [r for r in _expected(data) if kept(r)]
    assert rows == expected and 0 < len(expected) < len(_expected(data))


@pytest.mark.parametrize("options,message", [
    ({"recordTypes": "commits"}, "option recordTypes: unknown record type 'commits'"),
    ({"includeTombstones": "no"}, "option includeTombstones must be true or false, got 'no'"),
])
def test_invalid_row_selection_options_name_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        Selection.from_options(options, ALL_COLUMNS)


@pytest.mark.parametrize("sizes,target,groups", [
    ([5, 5, 5, 5], 10, [[0, 1], [2, 3]]),
    ([5, 5, 5, 5], 11, [[0, 1], [2, 3]]),
    ([5, 5, 5, 5], 20, [[0, 1, 2, 3]]),
    ([30, 1, 1], 10, [[0], [1, 2]]),  # an item larger than the target is a group of its own
    ([1], 1, [[0]]),
    ([], 5, []),
])
def test_pack_keeps_order_and_never_passes_the_target_but_for_single_items(sizes, target, groups):
    assert [list(g) for g in pack(sizes, target)] == groups


def test_task_target_spreads_over_min_partitions_within_the_cap():
    assert task_target(100, {"minPartitions": "2"}, None) == 50
    assert task_target(101, {"minPartitions": "2"}, None) == 51  # 2 tasks, not 3
    assert task_target(100, {"minPartitions": "2"}, 30) == 30
    with pytest.raises(ValueError, match="option minPartitions must be a positive integer, got '0'"):
        task_target(100, {"minPartitions": "0"}, None)


def _txn(group: str, offset: int, producer: int) -> bytes:
    return build_batch([_commit(group, 0, 1, 5)], base_offset=offset, producer_id=producer, producer_epoch=0,
                       attributes=TRANSACTIONAL_MASK)


def _marker(offset: int, producer: int) -> bytes:
    """A COMMIT control batch (key: int16 version 0, int16 type 1)."""
    return build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 5, ())], base_offset=offset,
                       producer_id=producer, producer_epoch=0, attributes=CONTROL_MASK | TRANSACTIONAL_MASK)


def test_reader_packs_segments_in_log_order_and_a_transaction_may_span_a_roll(tmp_path):
    part = tmp_path / "__consumer_offsets-7"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(UNIFORM[0] + _txn("spans", 16, producer=9))
    (part / "00000000000000000017.log").write_bytes(_marker(17, producer=9) + UNIFORM[2])
    other = tmp_path / "__consumer_offsets-3"
    other.mkdir()
    (other / "00000000000000000000.log").write_bytes(UNIFORM[1])
    reader = OffsetsLogReader({"path": str(tmp_path), "minPartitions": "1"})
    tasks = reader.partitions()
    assert len(tasks) == 1
    assert [(Path(f.path).parent.name, f.log_partition) for f in tasks[0].items] == [
        ("__consumer_offsets-3", 3), ("__consumer_offsets-7", 7), ("__consumer_offsets-7", 7)]
    rows = [r for batch in reader.read(tasks[0]) for r in batch.to_pylist()]
    assert [(r["log_partition"], r["group"]) for r in rows if r["group"] == "spans"] == [(7, "spans")]
    assert len(rows) == 3 + 16 + 1 + 300
    assert len(OffsetsLogReader({"path": str(tmp_path), "minPartitions": "3"}).partitions()) == 3


def test_key_table_starts_afresh_between_chunks_past_its_limit(monkeypatch):
    data = b"".join(CASES["mixed"])
    whole = _decoded(data)
    monkeypatch.setattr(offsets_log_decode, "CHUNK_RECORDS", 7)
    monkeypatch.setattr(offsets_log_decode, "KEY_TABLE_LIMIT", 2)
    assert _decoded(data) == whole


# ---------------------------------------------------------------- KIP-848 consumer groups' records

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
MEMBER = "m-1"


def _cg(key, value, ts: int = 3000) -> tuple:
    return (cgr.encode_key(key), None if value is None else cgr.encode_value(value), ts, ())


# A member joins (records in Kafka's order), then leaves: its records' tombstones, a new group epoch.
CONSUMER_GROUP = [
    _cg(cgr.ConsumerGroupMemberMetadataKey("cg", MEMBER), cgr.ConsumerGroupMemberMetadataValue(
        None, "rack-a", "client-1", "/10.0.0.1", ("t",), "t.*", 45000, "uniform",
        cgr.ClassicMemberMetadata(10000, (cgr.ClassicProtocol("range", b"\x01"),)))),
    _cg(cgr.ConsumerGroupPartitionMetadataKey("cg"), cgr.ConsumerGroupPartitionMetadataValue(
        (cgr.TopicMetadata(TOPIC_ID, "t", 3),))),
    _cg(cgr.ConsumerGroupMetadataKey("cg"), cgr.ConsumerGroupMetadataValue(1)),
    _cg(cgr.ConsumerGroupTargetAssignmentMemberKey("cg", MEMBER), cgr.ConsumerGroupTargetAssignmentMemberValue(
        (cgr.TopicPartitions(TOPIC_ID, (0, 1, 2)),))),
    _cg(cgr.ConsumerGroupTargetAssignmentMetadataKey("cg"), cgr.ConsumerGroupTargetAssignmentMetadataValue(1)),
    _cg(cgr.ConsumerGroupCurrentMemberAssignmentKey("cg", MEMBER), cgr.ConsumerGroupCurrentMemberAssignmentValue(
        1, 0, 1, (cgr.TopicPartitions(TOPIC_ID, (0, 1)),), (cgr.TopicPartitions(TOPIC_ID, (2,)),))),
    _cg(cgr.ConsumerGroupRegularExpressionKey("cg", "t.*"),
        cgr.ConsumerGroupRegularExpressionValue(("t", "tx"), 7, 2500)),
    _cg(cgr.ConsumerGroupCurrentMemberAssignmentKey("cg", MEMBER), None),
    _cg(cgr.ConsumerGroupTargetAssignmentMemberKey("cg", MEMBER), None),
    _cg(cgr.ConsumerGroupMemberMetadataKey("cg", MEMBER), None),
    _cg(cgr.ConsumerGroupMetadataKey("cg"), cgr.ConsumerGroupMetadataValue(2)),
]
TP = [{"topic_id": str(TOPIC_ID), "partitions": [0, 1, 2]}]
# (record_type, member_id, tombstone) and the cells each row fills beyond them (others null)
EXPECTED_CONSUMER_GROUP_ROWS = [
    ("consumer_group_member_metadata", MEMBER, False, {
        "protocol": "uniform", "rack_id": "rack-a", "regular_expression": "t.*",
        "members": [{"member_id": MEMBER, "group_instance_id": None, "client_id": "client-1",
                     "client_host": "/10.0.0.1", "rebalance_timeout": 45000, "session_timeout": 10000,
                     "subscribed_topics": ["t"], "subscription": None, "assignment": None}]}),
    ("consumer_group_partition_metadata", None, False,
     {"topics": [{"topic_id": str(TOPIC_ID), "topic": "t", "num_partitions": 3}]}),
    ("consumer_group_metadata", None, False, {"generation": 1}),
    ("consumer_group_target_assignment_member", MEMBER, False, {"assigned_partitions": TP}),
    ("consumer_group_target_assignment_metadata", None, False, {"generation": 1}),
    ("consumer_group_current_member_assignment", MEMBER, False, {
        "member_epoch": 1, "previous_member_epoch": 0, "member_state": "UNREVOKED_PARTITIONS",
        "assigned_partitions": [{"topic_id": str(TOPIC_ID), "partitions": [0, 1]}],
        "partitions_pending_revocation": [{"topic_id": str(TOPIC_ID), "partitions": [2]}]}),
    ("consumer_group_regular_expression", None, False, {
        "regular_expression": "t.*", "state_timestamp": 2500,
        "topics": [{"topic_id": None, "topic": "t", "num_partitions": None},
                   {"topic_id": None, "topic": "tx", "num_partitions": None}]}),
    ("consumer_group_current_member_assignment", MEMBER, True, {}),
    ("consumer_group_target_assignment_member", MEMBER, True, {}),
    ("consumer_group_member_metadata", MEMBER, True, {}),
    ("consumer_group_metadata", None, False, {"generation": 2}),
]
KEY_COLUMNS = {"record_type", "group", "member_id", "tombstone", "log_partition", "log_offset", "record_timestamp"}


def _consumer_group_rows(data: bytes, selection: Selection = Selection()) -> list[dict]:
    return [r for b in decode_segment(data, 5, selection) for r in b.to_pylist() if r["group"] == "cg"]


@pytest.mark.parametrize("layout", ["alone", "among new commit keys", "commits then consumer records"])
def test_consumer_group_records_are_typed_rows(layout, monkeypatch):
    by_row: list[int] = []
    decode_each = offsets_log_decode._key_columns_by_row
    monkeypatch.setattr(offsets_log_decode, "_key_columns_by_row",
                        lambda keys: by_row.append(len(keys)) or decode_each(keys))
    commits = [_commit("g", p, p, 1000) for p in range(40)]
    batches = {
        "alone": [build_batch(CONSUMER_GROUP, base_offset=0)],
        # new classic and consumer-group keys in one chunk: the classic ones are still decoded column-wise
        "among new commit keys": [build_batch(commits[:20] + CONSUMER_GROUP + commits[20:], base_offset=0)],
        "commits then consumer records": [build_batch(commits, base_offset=0),
                                          build_batch(CONSUMER_GROUP, base_offset=40)],
    }[layout]
    data = b"".join(batches)
    rows = _consumer_group_rows(data)
    assert by_row == [7]  # only the consumer group's distinct keys are decoded one by one
    assert [(r["record_type"], r["member_id"], r["tombstone"]) for r in rows] == [
        e[:3] for e in EXPECTED_CONSUMER_GROUP_ROWS]
    for row, (_, _, _, cells) in zip(rows, EXPECTED_CONSUMER_GROUP_ROWS):
        assert row["log_partition"] == 5 and row["record_timestamp"] == 3000
        assert {k: v for k, v in row.items() if v is not None and k not in KEY_COLUMNS} == cells
    # the commits around them keep their rows
    assert sorted(r["partition"] for b in decode_segment(data, 5) for r in b.to_pylist() if r["group"] == "g") == \
        ([] if layout == "alone" else list(range(40)))
    assert _decoded(data) == _expected(data)


def test_consumer_group_records_through_chunk_boundaries_and_a_fresh_key_table(monkeypatch):
    data = b"".join([build_batch([_commit("g", p, p, 1000) for p in range(5)], base_offset=0),
                     build_batch(CONSUMER_GROUP, base_offset=5)])
    whole = _consumer_group_rows(data)
    monkeypatch.setattr(offsets_log_decode, "CHUNK_RECORDS", 3)
    monkeypatch.setattr(offsets_log_decode, "KEY_TABLE_LIMIT", 2)
    assert _consumer_group_rows(data) == whole


def test_consumer_group_record_types_select_rows_and_columns_prune():
    data = build_batch([_commit("cg", 0, 9, 1000)] + CONSUMER_GROUP, base_offset=0)
    selection = Selection.from_options({"recordTypes": "consumer_group_current_member_assignment"},
                                       ("record_type", "member_id", "member_epoch", "tombstone"))
    rows = [
        r for b in decode_segment(data, 0, selection) for r in b.to_pylist()]
    assert rows == [
        {"record_type": "consumer_group_current_member_assignment", "member_id": MEMBER, "member_epoch": 1,
         "tombstone": False},
        {"record_type": "consumer_group_current_member_assignment", "member_id": MEMBER, "member_epoch": None,
         "tombstone": True},
    ]
    live = Selection.from_options({"includeTombstones": "false"}, ALL_COLUMNS)
    assert [r["record_type"] for b in decode_segment(data, 0, live) for r in b.to_pylist()].count(
        "consumer_group_member_metadata") == 1


def test_the_dump_and_the_source_name_record_types_alike():
    from offsetd.admin.offsets_log import decode_entry

    names = [decode_entry(0, i, ts, key, value).record_type for i, (key, value, ts, _) in enumerate(CONSUMER_GROUP)]
    assert names == [e[0] for e in EXPECTED_CONSUMER_GROUP_ROWS]
