"""expiry_forecast's rules on a hand-written offsets log (segment files through the source):
explicit expire timestamps, group deletion and re-creation, Empty groups, per-group retention
and "never", non-consumer protocols; KIP-848 consumer groups' states (Assigning, a static member
away, a group downgraded back to classic). The broker comparisons (test_pipelines,
test_pipelines_consumer_groups) cover the live cases; these are the ones a live broker makes
awkward to reach."""

from __future__ import annotations

from offsetd.records import consumer_group_records as cgr
from offsetd.records.batch import build_batch
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value
from offsetd.spark.pipelines import expiry_forecast, load_offsets_log

RETENTION = 100_000


def _commit(group: str, partition: int, offset: int, ts: int, expire: int = -1) -> tuple:
    return (encode_key(OffsetCommitKey(group, "t", partition)),
            encode_value(OffsetCommitValue(offset, -1, "", ts, expire)), ts, ())


def _group(group: str, protocol_type: str, state_ts: int, members: int, protocol: str | None = "range") -> tuple:
    value = GroupMetadataValue(protocol_type, 1, protocol if members else None, "m0" if members else None, state_ts,
                               tuple(MemberMetadata(f"m{i}", None, "c", "/h", 10, 10, b"", b"") for i in range(members)))
    return (encode_key(GroupMetadataKey(group)), encode_value(value), state_ts, ())


def _consumer(key: object, value: object | None, ts: int = 3000) -> tuple:
    """A consumer group's record (types 3-8, 16) as stored; value None: its tombstone."""
    return (cgr.encode_key(key), None if value is None else cgr.encode_value(value), ts, ())  # type: ignore[arg-type]


def _consumer_group(group: str, group_epoch: int, assignment_epoch: int, member_epoch: int) -> list[tuple]:
    """Records 3, 6, 5 and 8 of a one-member group subscribed to topic "t"."""
    return [
        _consumer(cgr.ConsumerGroupMetadataKey(group), cgr.ConsumerGroupMetadataValue(group_epoch)),
        _consumer(cgr.ConsumerGroupTargetAssignmentMetadataKey(group),
                  cgr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch)),
        _consumer(cgr.ConsumerGroupMemberMetadataKey(group, "m"), cgr.ConsumerGroupMemberMetadataValue(
            "i" if member_epoch == -2 else None, None, "c", "/h", ("t",), None, 30_000, None)),
        _consumer(cgr.ConsumerGroupCurrentMemberAssignmentKey(group, "m"),
                  cgr.ConsumerGroupCurrentMemberAssignmentValue(member_epoch, 1, 0, (), ())),
    ]


def _tombstones(group: str) -> list[tuple]:
    """The group's records in Kafka's tombstone order (8, 6, 5, 3: the group of _consumer_group)."""
    return [_consumer(cgr.ConsumerGroupCurrentMemberAssignmentKey(group, "m"), None),
            _consumer(cgr.ConsumerGroupTargetAssignmentMetadataKey(group), None),
            _consumer(cgr.ConsumerGroupMemberMetadataKey(group, "m"), None),
            _consumer(cgr.ConsumerGroupMetadataKey(group), None)]


def test_consumer_group_states_on_a_scripted_log(spark, tmp_path):
    records = [
        *_consumer_group("assigning", 2, 1, 1), _commit("assigning", 0, 1, 1000), _commit("assigning", 1, 1, 1000),
        *_consumer_group("away", 1, 1, -2), _commit("away", 0, 1, 1000),  # a static member away (-2)
        *_consumer_group("downgraded", 1, 1, 1), *_tombstones("downgraded"),
        _group("downgraded", "consumer", 3000, members=1), _commit("downgraded", 0, 1, 1000),
    ]
    partition_dir = tmp_path / "__consumer_offsets-0"
    partition_dir.mkdir()
    (partition_dir / "00000000000000000000.log").write_bytes(
        b"".join(build_batch([r], base_offset=i) for i, r in enumerate(records)))
    log = load_offsets_log(spark, path=str(tmp_path))
    rows = expiry_forecast(log, RETENTION).collect()
    got = {(r.group, r.partition): (r.group_type, r.group_state, r.rule, r.expires_at_ms) for r in rows}
    assert got == {
        ("assigning", 0): ("consumer", "Assigning", "subscribed", None),
        ("assigning", 1): ("consumer", "Assigning", "subscribed", None),
        ("away", 0): ("consumer", "Reconciling", "subscribed", None),  # it keeps its place and partitions
        # a classic group again: Stable, a subscription it cannot decode counts as subscribed
        ("downgraded", 0): ("classic", "Stable", "subscribed", None),
    }


def test_expiry_rules_on_a_scripted_log(spark, tmp_path):
    records = [
        _commit("explicit", 0, 1, 1000, expire=7777),          # OffsetCommit value v1: its own expiry
        _commit("reborn", 0, 1, 1000),
        (encode_key(GroupMetadataKey("reborn")), None, 1500, ()),  # group deleted with its offsets
        _commit("reborn", 1, 2, 2000),                          # re-created by a standalone commit
        _group("empty", "consumer", 3000, members=0),
        _commit("empty", 0, 5, 1000),
        _commit("short", 0, 1, 4000),
        _commit("forever", 0, 1, 4000),
        _group("connect", "connect", 3000, members=1),          # Stable, not the consumer protocol
        _commit("connect", 0, 9, 4000),
    ]
    partition_dir = tmp_path / "__consumer_offsets-0"
    partition_dir.mkdir()
    (partition_dir / "00000000000000000000.log").write_bytes(
        b"".join(build_batch([r], base_offset=i) for i, r in enumerate(records)))
    log = load_offsets_log(spark, path=str(tmp_path))
    rows = expiry_forecast(log, RETENTION, {"short": 60_000, "forever": -1}, now_ms=50_000).collect()
    got = {(r.group, r.partition): (r.rule, r.expires_at_ms, r.expired) for r in rows}
    assert got == {
        ("explicit", 0): ("standalone", 7777, True),
        ("reborn", 1): ("standalone", 2000 + RETENTION, False),
        ("empty", 0): ("empty", 3000 + RETENTION, False),
        ("short", 0): ("standalone", 4000 + 60_000, False),
        ("forever", 0): ("standalone", None, False),
        ("connect", 0): ("active", None, False),
    }
