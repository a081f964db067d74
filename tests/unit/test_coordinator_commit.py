"""OffsetCommit (§1.1) and OffsetFetch (§1.3) on the sans-IO GroupCoordinatorShard.

The §1.1 result matrix is written down once, as data (COMMIT_MATRIX), and every cell is a test.
"""

from __future__ import annotations

import pytest

from coordinator_helpers import (
    COMPLETING_CONSUMER, DEAD_GROUP, EMPTY, EMPTY_CONSUMER, EMPTY_SIMPLE, MISSING, OTHER_TOPIC,
    PREPARING_CONSUMER, SESSION_MS, STABLE_CONSUMER, SUBSCRIBED,
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION,
    INVALID_GROUP_ID, NONE, OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
    GroupInfo, Harness, build_group, form_group, stabilize, decoded,
)
from offsetd.coordinator.group import GroupState
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value

# ------------------------------------------------------------------------------------------
# §1.1 result matrix (classic/simple), verbatim.
#
# V9 marks the "does not exist, generation >= 0" cells: GROUP_ID_NOT_FOUND(69) for request
# version >= 9, ILLEGAL_GENERATION(22) for v0-8.

V9 = "69 if v9+ else 22"
OK = NONE

COLUMNS = (
    'gen<0, member "", no instance id',
    "gen<0, existing member id",
    "gen=G (current), valid member",
    "gen!=G, valid member",
    "unknown member",
)

COMMIT_MATRIX: dict[str, tuple] = {
    MISSING:             (OK, OK, V9, V9, V9),
    EMPTY_SIMPLE:        (OK, OK, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID),
    EMPTY_CONSUMER:      (OK, OK, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID),
    PREPARING_CONSUMER:  (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, OK, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
    COMPLETING_CONSUMER: (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
                          UNKNOWN_MEMBER_ID),
    STABLE_CONSUMER:     (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, OK, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
    DEAD_GROUP:          (COORDINATOR_NOT_AVAILABLE,) * 5,
}

# For a group that does not exist there is no "current" generation; §6.1 test 1 uses 10.
MISSING_GROUP_GENERATION = 10


def commit_request(info: GroupInfo, column: int, exists: bool) -> tuple[str, int]:
    """(member id, generation) of the matrix column for this group. In an Empty group nobody is a
    member any more, so the "valid member" is a former member (the reference's "25 (no members)")."""
    generation = info.generation if exists else MISSING_GROUP_GENERATION
    member = info.some_member
    return [
        ("", -1),
        (member, -1),
        (member, generation),
        (member, generation + 1),
        ("unknown-member", generation),
    ][column]


def expected_code(cell, version: int) -> int:
    if cell == V9:
        return GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION
    return cell


MATRIX_CASES = [
    pytest.param(situation, column, id=f"{situation} | {COLUMNS[column]}")
    for situation in COMMIT_MATRIX for column in range(len(COLUMNS))
]


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("situation,column", MATRIX_CASES)
def test_offset_commit_result_matrix(situation, column, version):
    """§1.1 result matrix, every cell: accepted commits write one OffsetCommit record per
    partition and become visible once replayed; rejected ones copy the group-level error into
    every partition and write nothing (§1.1 "no top-level error")."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    seeded = {(SUBSCRIBED, 0): 5}
    if situation != MISSING:
        h.seed_offsets("g", seeded)
    member_id, generation = commit_request(info, column, exists=situation != MISSING)
    expected = expected_code(COMMIT_MATRIX[situation][column], version)

    offsets = [(SUBSCRIBED, 0, 100, 7, "m0"), (SUBSCRIBED, 1, 101, -1, None)]
    errors, _, result = h.commit("g", offsets, member_id=member_id, generation=generation, version=version)

    assert errors == {(SUBSCRIBED, 0): expected, (SUBSCRIBED, 1): expected}
    if expected == NONE:
        assert [k for k, _ in decoded(result.records)] == [OffsetCommitKey("g", SUBSCRIBED, 0),
                                                  OffsetCommitKey("g", SUBSCRIBED, 1)]
        assert (h.offset("g", SUBSCRIBED, 0), h.offset("g", SUBSCRIBED, 1)) == (100, 101)
    else:
        assert result.records == []
        if situation == MISSING:
            assert "g" not in [g for g, _, _ in h.shard.list_groups()]
        elif situation != DEAD_GROUP:  # (a Dead group reads as -1 anyway, §1.3: see test_fetch_dead_group)
            assert (h.offset("g", SUBSCRIBED, 0), h.offset("g", SUBSCRIBED, 1)) == (5, -1)


@pytest.mark.parametrize("version", range(1, 10))
@pytest.mark.parametrize("member_id", ["", "some-member"])
def test_commit_to_missing_group_with_generation_is_rejected_per_version(version, member_id):
    """§1.1 step 7 / §6.1 test 1 / §7.1: generation >= 0 against a missing group gives
    GROUP_ID_NOT_FOUND for v9+ and ILLEGAL_GENERATION for v0-8, whether or not a member id is set."""
    h = Harness.new()
    errors, _, result = h.commit("g", [("t", 0, 1, -1, None)], member_id=member_id, generation=10,
                                 version=version)
    assert errors == {("t", 0): GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION}
    assert result.records == []


# ------------------------------------------------------------------------------------------
# §1.1 step 8.3: static members

STATIC_CASES = [
    # (commit instance id, who commits ("static" = the member owning the instance id), expected)
    pytest.param("inst-unknown", "static", UNKNOWN_MEMBER_ID, id="instance id not mapped -> 25"),
    pytest.param("inst-a", "dynamic", FENCED_INSTANCE_ID, id="instance id mapped to another member -> 82"),
    pytest.param("inst-a", "static", NONE, id="instance id mapped to this member -> OK"),
    pytest.param(None, "static", NONE, id="no instance id, valid member -> OK"),
]


@pytest.mark.parametrize("instance_id,who,expected", STATIC_CASES)
def test_commit_instance_id_validation(instance_id, who, expected):
    """§1.1 step 8.3 (§6.1 tests 5, 6): instance id unknown -> 25; mapped to another member -> 82."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    static = next(m for m, i in info.instance_ids.items() if i == "inst-a")
    dynamic = next(m for m in info.members if m != static)
    member = static if who == "static" else dynamic
    errors, _, _ = h.commit("g", [("t", 0, 1, -1, None)], member_id=member, instance_id=instance_id,
                            generation=info.generation)
    assert errors == {("t", 0): expected}


@pytest.mark.parametrize("situation", [MISSING, EMPTY_SIMPLE, EMPTY_CONSUMER])
def test_admin_commit_ignores_member_and_instance_id(situation):
    """§1.1 steps 7 and 8.2 (§6.1 test 12): generation < 0 on a missing or Empty group is accepted;
    MemberId and GroupInstanceId are not checked."""
    h = Harness.new()
    build_group(h, "g", situation)
    errors, _, _ = h.commit("g", [("t", 0, 1, -1, None)], member_id="whoever", instance_id="no-such-instance",
                            generation=-1)
    assert errors == {("t", 0): NONE}
    assert h.offset("g", "t", 0) == 1


@pytest.mark.parametrize("group_id,expected", [
    pytest.param(None, INVALID_GROUP_ID, id="null -> 24"),
    pytest.param("", NONE, id='"" accepted'),
])
def test_commit_group_id_validation(group_id, expected):
    """§1.1 step 5 / §7.3: a null group id is INVALID_GROUP_ID; "" is a valid group id for OffsetCommit."""
    h = Harness.new()
    errors, _, _ = h.commit(group_id, [("t", 0, 1, -1, None), ("t", 1, 2, -1, None)])
    assert errors == {("t", 0): expected, ("t", 1): expected}


# ------------------------------------------------------------------------------------------
# §1.1 steps 10-11: per-partition metadata limit and the records written

# (metadata, expected): the limit is 4096 UTF-16 code units (Java String.length()), not bytes
# and not code points.
METADATA_CASES = [
    pytest.param(None, NONE, id="null"),
    pytest.param("a" * 4096, NONE, id="4096 ASCII"),
    pytest.param("a" * 4097, OFFSET_METADATA_TOO_LARGE, id="4097 ASCII"),
    pytest.param("\u00e9" * 4096, NONE, id="4096 e-acute (8192 UTF-8 bytes)"),
    pytest.param("\U0001F600" * 2048, NONE, id="2048 emoji = 4096 UTF-16 units"),
    pytest.param("\U0001F600" * 2049, OFFSET_METADATA_TOO_LARGE, id="2049 emoji = 4098 UTF-16 units"),
]


@pytest.mark.parametrize("metadata,expected", METADATA_CASES)
def test_offset_metadata_too_large_is_per_partition(metadata, expected):
    """§1.1 step 10 / §7.12: metadata longer than offset.metadata.max.bytes (4096 UTF-16 code units)
    gives OFFSET_METADATA_TOO_LARGE(12) for that partition only, with no record; the other
    partitions still commit."""
    h = Harness.new()
    offsets = [("t", 0, 10, -1, "fine"), ("t", 1, 11, -1, metadata), ("t", 2, 12, -1, None)]
    errors, _, result = h.commit("g", offsets)
    assert errors == {("t", 0): NONE, ("t", 1): expected, ("t", 2): NONE}
    written = [k.partition for k, _ in decoded(result.records)]
    assert written == ([0, 1, 2] if expected == NONE else [0, 2])
    assert h.offset("g", "t", 0) == 10 and h.offset("g", "t", 2) == 12
    assert h.offset("g", "t", 1) == (11 if expected == NONE else -1)


@pytest.mark.parametrize("retention_ms,expire", [
    pytest.param(-1, lambda now: -1, id="no retention (v0-1, v5+) -> expire absent"),
    pytest.param(1234, lambda now: now + 1234, id="retention 1234 (v2-4) -> now + 1234"),
])
@pytest.mark.parametrize("situation", [MISSING, STABLE_CONSUMER])
def test_commit_records(situation, retention_ms, expire):
    """§1.1 steps 10-11 (§6.1 tests 9, 11): one OffsetCommit record per accepted partition, key
    (group, topic, partition); value offset, leader epoch (-1 = absent), metadata (null stored as
    ""), commit timestamp = now, expire timestamp = now + RetentionTimeMs when given, else absent;
    negative offsets are not validated."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    h.advance(777)
    member, generation = (info.leader, info.generation) if info.members else ("", -1)
    version = 4 if retention_ms != -1 else 9
    epoch = 3 if version >= 6 else -1  # CommittedLeaderEpoch exists from v6; RetentionTimeMs only in v2-4
    offsets = [("t", 0, 42, epoch, "meta"), ("t", 1, -5, -1, None), ("u", 7, 0, -1, "")]
    errors, _, result = h.commit("g", offsets, member_id=member, generation=generation,
                                 retention_ms=retention_ms, version=version)
    assert errors == {("t", 0): NONE, ("t", 1): NONE, ("u", 7): NONE}
    now = h.now
    assert result.replay is True
    assert decoded(result.records) == [
        (OffsetCommitKey("g", "t", 0), OffsetCommitValue(42, epoch, "meta", now, expire(now))),
        (OffsetCommitKey("g", "t", 1), OffsetCommitValue(-5, -1, "", now, expire(now))),
        (OffsetCommitKey("g", "u", 7), OffsetCommitValue(0, -1, "", now, expire(now))),
    ]
    # encoded once by the commit path, as the log holds them: v3, or v1 with an expire timestamp
    assert [(k, v) for k, v in result.records] == [(encode_key(k), encode_value(v)) for k, v in decoded(result.records)]
    # and, replayed, they read back through OffsetFetch
    assert h.shard.fetch_offsets("g", [("t", [0, 1]), ("u", [7])]) == [
        ("t", [(0, 42, epoch, "meta"), (1, -5, -1, "")]), ("u", [(7, 0, -1, "")])]


def test_commit_to_missing_group_creates_simple_group_on_replay():
    """§1.1 step 7 (§6.1 test 11): generation -1 on a missing group creates a simple group (classic,
    Empty, no protocol type, generation 0); no GroupMetadata record is written for it. OffsetFetch
    (§1.3) reads the commit back; ListGroups (§1.10) lists it with protocol type "" and Empty."""
    h = Harness.new()
    errors, _, result = h.commit("simple", [("t", 0, 10, 2, "hello"), ("t", 1, 11, -1, None)],
                                 member_id="ignored", instance_id="ignored-too", generation=-1)
    assert errors == {("t", 0): NONE, ("t", 1): NONE}
    assert not any(isinstance(k, GroupMetadataKey) for k, _ in result.records)
    described = h.shard.describe_group("simple")
    assert (described["group_state"], described["protocol_type"], list(described["members"])) == (EMPTY, "", [])
    assert ("simple", "", EMPTY) in list(h.shard.list_groups())
    assert h.shard.fetch_offsets("simple", [("t", [0, 1])]) == [("t", [(0, 10, 2, "hello"), (1, 11, -1, "")])]
    assert h.shard.fetch_offsets("simple", None) == [("t", [(0, 10, 2, "hello"), (1, 11, -1, "")])]
    assert h.shard.groups["simple"].generation == 0


# ------------------------------------------------------------------------------------------
# §1.1 step 9: a commit keeps the committing member's session alive

@pytest.mark.parametrize("situation", [STABLE_CONSUMER, PREPARING_CONSUMER])
@pytest.mark.parametrize("commits", [True, False], ids=["follower commits", "follower silent"])
def test_commit_refreshes_member_session(situation, commits):
    """§1.1 step 9 (§6.1 test 10): in Stable or PreparingRebalance the committing member's session
    timer is rescheduled, so at the old deadline it is not removed (and without the commit it is)."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    start = h.now
    follower = info.follower
    h.advance(SESSION_MS - 2000)
    h.heartbeat("g", info.leader, info.generation)  # keep the leader alive in both variants
    if commits:
        errors, _, _ = h.commit("g", [("t", 0, 1, -1, None)], member_id=follower, generation=info.generation)
        assert errors == {("t", 0): NONE}
    h.fire(start + SESSION_MS)
    assert (follower in h.member_ids("g")) is commits
    if commits:  # the new deadline is one session after the commit
        h.fire(start + 2 * SESSION_MS - 2000)
        assert follower not in h.member_ids("g")


# ------------------------------------------------------------------------------------------
# §1.3 OffsetFetch

def test_fetch_unknown_group():
    """§1.3 (§6.1 tests 28, 32): unknown group: explicit partitions are -1 / -1 / "" with no error;
    an all-topics fetch returns an empty list."""
    h = Harness.new()
    assert h.shard.fetch_offsets("nope", [("t", [0, 3]), ("u", [1])]) == [
        ("t", [(0, -1, -1, ""), (3, -1, -1, "")]), ("u", [(1, -1, -1, "")])]
    assert list(h.shard.fetch_offsets("nope", None)) == []


def test_fetch_dead_group():
    """§1.3 (§6.1 tests 27, 31): a Dead group is answered like an unknown one: explicit partitions
    -1 / -1 / "", all-topics []; stored offsets are not returned."""
    h = Harness.new()
    h.commit("g", [("t", 0, 10, 1, "m")])
    h.shard.groups["g"].transition(GroupState.DEAD, h.now)
    assert h.shard.fetch_offsets("g", [("t", [0, 1])]) == [("t", [(0, -1, -1, ""), (1, -1, -1, "")])]
    assert list(h.shard.fetch_offsets("g", None)) == []


def test_fetch_existing_group_partitions_never_committed():
    """§1.3: partitions with no committed offset (including unknown topics) are -1 / -1 / "" with
    no error; committed ones return offset, leader epoch (-1 if absent) and metadata."""
    h = Harness.new()
    h.commit("g", [("t", 0, 10, 4, "m0"), ("t", 2, 12, -1, None)])
    assert h.shard.fetch_offsets("g", [("t", [0, 1, 2]), ("no-such-topic", [0])]) == [
        ("t", [(0, 10, 4, "m0"), (1, -1, -1, ""), (2, 12, -1, "")]),
        ("no-such-topic", [(0, -1, -1, "")]),
    ]
    assert h.shard.fetch_offsets("g", None) == [("t", [(0, 10, 4, "m0"), (2, 12, -1, "")])]


def test_later_commit_overwrites_earlier():
    """§1.1/§5.1: replaying a newer OffsetCommit record for the same partition replaces the value."""
    h = Harness.new()
    h.commit("g", [("t", 0, 10, -1, "a")])
    h.commit("g", [("t", 0, 20, 5, "b")])
    assert h.shard.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 20, 5, "b")])]


def test_offsets_of_other_groups_are_separate():
    """§1.3: fetch answers for the named group only."""
    h = Harness.new()
    h.commit("g1", [("t", 0, 10, -1, None)])
    h.commit("g2", [(OTHER_TOPIC, 0, 20, -1, None)])
    assert h.shard.fetch_offsets("g1", None) == [("t", [(0, 10, -1, "")])]
    assert h.shard.fetch_offsets("g2", [("t", [0])]) == [("t", [(0, -1, -1, "")])]
