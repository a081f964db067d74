"""OffsetDelete (§1.4), DeleteGroups (§1.5), DescribeGroups and ListGroups (§1.10) on the sans-IO
GroupCoordinatorShard, driven by the §3 checklist written down as data (SECTION_3)."""

from __future__ import annotations

import pytest

from coordinator_helpers import (
    COMPLETING, COMPLETING_CONNECT, COMPLETING_CONSUMER, DEAD, DEAD_GROUP, EMPTY, EMPTY_CONNECT, EMPTY_CONSUMER,
    EMPTY_SIMPLE, MISSING, OTHER_TOPIC, PREPARING, PREPARING_CONNECT, PREPARING_CONSUMER, STABLE, STABLE_CONNECT,
    STABLE_CONSUMER, STABLE_CONSUMER_UNPARSABLE, SUBSCRIBED,
    GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, INVALID_GROUP_ID, NON_EMPTY_GROUP, NONE,
    Harness, build_group, consumer_protocols, form_group, stabilize,
)
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey

DELETED = "deleted: offset tombstones + group tombstone"
NOT_REPRESENTABLE = "n/a: DeleteGroups group names are non-nullable strings in the shard API"
ALL = "every requested topic"

# ------------------------------------------------------------------------------------------
# §3 OffsetDelete / DeleteGroups checklist, one row per case.
# (case, situation, group id, OffsetDelete top-level error, topics answered 86 by OffsetDelete,
#  DeleteGroups result)

SECTION_3 = [
    ("group id null", MISSING, None, INVALID_GROUP_ID, None, NOT_REPRESENTABLE),
    ('group id ""', MISSING, "", INVALID_GROUP_ID, None, GROUP_ID_NOT_FOUND),
    ("group unknown", MISSING, "g", GROUP_ID_NOT_FOUND, None, GROUP_ID_NOT_FOUND),
    ("group Dead", DEAD_GROUP, "g", GROUP_ID_NOT_FOUND, None, GROUP_ID_NOT_FOUND),
    ("Empty classic, no protocol (simple)", EMPTY_SIMPLE, "g", NONE, set(), DELETED),
    ("Empty classic, consumer", EMPTY_CONSUMER, "g", NONE, set(), DELETED),
    ("Empty classic, other protocol", EMPTY_CONNECT, "g", NONE, set(), DELETED),
    ("non-empty consumer, PreparingRebalance", PREPARING_CONSUMER, "g", NONE, {SUBSCRIBED}, NON_EMPTY_GROUP),
    ("non-empty consumer, CompletingRebalance", COMPLETING_CONSUMER, "g", NONE, {SUBSCRIBED}, NON_EMPTY_GROUP),
    ("non-empty consumer, Stable", STABLE_CONSUMER, "g", NONE, {SUBSCRIBED}, NON_EMPTY_GROUP),
    # §1.4: subscription unknown (unparsable metadata) and protocol "consumer" -> subscribed to
    # every topic (OLD testDeleteOffsetOfConsumerGroupWithUnparsableProtocol -> 86).
    ("non-empty consumer, unparsable subscription", STABLE_CONSUMER_UNPARSABLE, "g", NONE, ALL, NON_EMPTY_GROUP),
    ("non-empty other protocol, PreparingRebalance", PREPARING_CONNECT, "g", NON_EMPTY_GROUP, None,
     NON_EMPTY_GROUP),
    ("non-empty other protocol, CompletingRebalance", COMPLETING_CONNECT, "g", NON_EMPTY_GROUP, None,
     NON_EMPTY_GROUP),
    ("non-empty other protocol, Stable", STABLE_CONNECT, "g", NON_EMPTY_GROUP, None, NON_EMPTY_GROUP),
]

# Committed before the operation; (OTHER_TOPIC, 9) is requested but never committed ("partition
# without offset -> NONE, no tombstone").
COMMITTED = {(SUBSCRIBED, 0): 10, (SUBSCRIBED, 1): 11, (OTHER_TOPIC, 0): 20}
REQUEST = [(SUBSCRIBED, [0, 1]), (OTHER_TOPIC, [0, 9])]


def prepared(situation: str) -> Harness:
    h = Harness.new()
    build_group(h, "g", situation)
    if situation != MISSING:
        h.seed_offsets("g", COMMITTED)
    return h


@pytest.mark.parametrize("situation,group_id,top,subscribed",
                         [pytest.param(s, g, t, sub, id=c) for c, s, g, t, sub, _ in SECTION_3])
def test_offset_delete(situation, group_id, top, subscribed):
    """§3 / §1.4 OffsetDelete: null or "" -> 24; unknown or Dead -> 69; a non-empty group whose
    protocol is not "consumer" -> 68; a top-level error empties the topics array. Otherwise each
    partition of a topic the group is subscribed to gets GROUP_SUBSCRIBED_TO_TOPIC(86) (nothing
    deleted); every other partition gets NONE and a tombstone exactly when an offset is committed."""
    h = prepared(situation)
    body, result = h.delete_offsets(group_id, REQUEST)
    assert body["error_code"] == top
    if top != NONE:
        assert not body["topics"]
        assert result.records == []
        if situation not in (MISSING, DEAD_GROUP):  # (a Dead group reads as -1 anyway, §1.3)
            for (t, p), offset in COMMITTED.items():
                assert h.offset("g", t, p) == offset
        return
    subscribed_topics = {t for t, _ in REQUEST} if subscribed == ALL else subscribed
    expected_answer = {t: {p: GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed_topics else NONE for p in parts}
                       for t, parts in REQUEST}
    assert body["topics"] == expected_answer
    tombstoned = [(t, p) for t, parts in REQUEST for p in parts
                  if t not in subscribed_topics and (t, p) in COMMITTED]
    assert result.records == [(OffsetCommitKey("g", t, p), None) for t, p in tombstoned]
    assert result.replay is True
    for (t, p), offset in COMMITTED.items():  # after replay: tombstoned offsets are gone, others stay
        assert h.offset("g", t, p) == (-1 if (t, p) in tombstoned else offset)
    assert h.state("g") != DEAD  # §1.4: OffsetDelete never deletes the group itself


def test_offset_delete_empty_string_group_even_if_it_exists():
    """§1.4 / §7.3: "" is INVALID_GROUP_ID for OffsetDelete, even though OffsetCommit accepts it."""
    h = Harness.new()
    errors, _, _ = h.commit("", [("t", 0, 1, -1, None)])
    assert errors == {("t", 0): NONE}
    body, result = h.delete_offsets("", [("t", [0])])
    assert (body["error_code"], result.records) == (INVALID_GROUP_ID, [])
    assert not body["topics"]


@pytest.mark.parametrize("situation,group_id,expected",
                         [pytest.param(s, g, d, id=c) for c, s, g, _, _, d in SECTION_3 if d != NOT_REPRESENTABLE])
def test_delete_groups(situation, group_id, expected):
    """§3 / §1.5 DeleteGroups: unknown (incl. "") or Dead -> 69; Stable, PreparingRebalance or
    CompletingRebalance -> 68 for any protocol type; Empty -> deleted: an OffsetCommit tombstone
    per committed offset, then one GroupMetadata tombstone, in that order; the group leaves memory
    when the tombstone is replayed."""
    h = prepared(situation)
    state_before = h.state("g")
    answer, result = h.delete_groups([group_id])
    if expected != DELETED:
        assert answer == {group_id: expected}
        assert result.records == []
        assert h.state("g") == state_before
        return
    assert answer == {group_id: NONE}
    *offset_tombstones, last = result.records
    assert last == (GroupMetadataKey("g"), None)
    assert sorted(offset_tombstones, key=lambda r: (r[0].topic, r[0].partition)) == sorted(
        [(OffsetCommitKey("g", t, p), None) for t, p in COMMITTED], key=lambda r: (r[0].topic, r[0].partition))
    assert result.replay is True
    assert h.state("g") == DEAD  # DescribeGroups of an unknown group
    assert "g" not in [g for g, _, _ in h.shard.list_groups()]
    assert list(h.shard.fetch_offsets("g", None)) == []
    assert h.offset("g", SUBSCRIBED, 0) == -1


def test_delete_groups_batch_per_group_results_and_record_order():
    """§1.5: one request, per-group results; each deleted group's offset tombstones come before its
    group tombstone; groups that are not deleted write nothing."""
    h = Harness.new()
    build_group(h, "empty-a", EMPTY_SIMPLE)
    build_group(h, "stable", STABLE_CONSUMER)
    build_group(h, "empty-b", EMPTY_CONSUMER)
    h.seed_offsets("empty-a", {("x", 0): 1, ("x", 1): 2})
    h.seed_offsets("empty-b", {("y", 0): 3})
    h.seed_offsets("stable", {("z", 0): 4})
    answer, result = h.delete_groups(["empty-a", "stable", "missing", "empty-b"])
    assert answer == {"empty-a": NONE, "stable": NON_EMPTY_GROUP, "missing": GROUP_ID_NOT_FOUND, "empty-b": NONE}
    by_group: dict[str, list] = {}
    for key, value in result.records:
        assert value is None
        by_group.setdefault(key.group, []).append(key)
    assert set(by_group) == {"empty-a", "empty-b"}
    for group, keys in by_group.items():
        assert keys[-1] == GroupMetadataKey(group)
        assert all(isinstance(k, OffsetCommitKey) for k in keys[:-1])
    assert len(by_group["empty-a"]) == 1 + 2 + 1  # build_group's commit + two seeded + group tombstone
    assert len(by_group["empty-b"]) == 1 + 1
    assert h.offset("stable", "z", 0) == 4
    assert sorted(g for g, _, _ in h.shard.list_groups()) == ["stable"]


def test_delete_groups_accepts_empty_string_group():
    """§1.5 / §7.3: "" is a valid group id for DeleteGroups: an existing "" group is deleted."""
    h = Harness.new()
    h.commit("", [("t", 0, 1, -1, None)])
    answer, result = h.delete_groups([""])
    assert answer == {"": NONE}
    assert result.records == [(OffsetCommitKey("", "t", 0), None), (GroupMetadataKey(""), None)]


def test_offset_delete_in_empty_consumer_group_ignores_old_subscriptions():
    """§3: an Empty consumer group has no subscriptions (86 impossible): every partition NONE."""
    h = Harness.new()
    build_group(h, "g", EMPTY_CONSUMER)
    h.seed_offsets("g", {(SUBSCRIBED, 0): 1})
    body, result = h.delete_offsets("g", [(SUBSCRIBED, [0])])
    assert body == {"error_code": NONE, "topics": {SUBSCRIBED: {0: NONE}}}
    assert result.records == [(OffsetCommitKey("g", SUBSCRIBED, 0), None)]


def test_offset_delete_uses_union_of_member_subscriptions():
    """§1.4: the subscribed-topic set is the union of every member's subscription for the selected
    protocol."""
    h = Harness.new()
    tok, done, _ = h.join("g", require_known=True, protocols=consumer_protocols(["a"]))
    m1 = done[tok]["member_id"]
    tok, done, _ = h.join("g", require_known=True, protocols=consumer_protocols(["b"]))
    m2 = done[tok]["member_id"]
    h.join("g", m1, require_known=True, protocols=consumer_protocols(["a"]))
    h.join("g", m2, require_known=True, protocols=consumer_protocols(["b"]))
    assert h.state("g") == COMPLETING
    h.seed_offsets("g", {("a", 0): 1, ("b", 0): 2, ("c", 0): 3})
    body, result = h.delete_offsets("g", [("a", [0]), ("b", [0]), ("c", [0])])
    assert body["topics"] == {"a": {0: GROUP_SUBSCRIBED_TO_TOPIC}, "b": {0: GROUP_SUBSCRIBED_TO_TOPIC},
                              "c": {0: NONE}}
    assert result.records == [(OffsetCommitKey("g", "c", 0), None)]


# ------------------------------------------------------------------------------------------
# §1.10 DescribeGroups

DESCRIBE_CASES = [
    # (situation, state, protocol type, members listed, protocol data / metadata / assignment filled)
    (MISSING, DEAD, "", False, False),
    (EMPTY_SIMPLE, EMPTY, "", False, False),
    (EMPTY_CONSUMER, EMPTY, "consumer", False, False),
    (PREPARING_CONSUMER, PREPARING, "consumer", True, False),
    (COMPLETING_CONSUMER, COMPLETING, "consumer", True, False),
    (STABLE_CONSUMER, STABLE, "consumer", True, True),
    (STABLE_CONNECT, STABLE, "connect", True, True),
]


@pytest.mark.parametrize("situation,state,protocol_type,listed,filled",
                         [pytest.param(*c, id=c[0]) for c in DESCRIBE_CASES])
def test_describe_group(situation, state, protocol_type, listed, filled):
    """§1.10 DescribeGroups: an unknown group is error NONE, state "Dead", ProtocolType "" and no
    members; ProtocolData (the protocol name), MemberMetadata and MemberAssignment are filled only
    in Stable."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    d = h.shard.describe_group("g")
    assert (d["error_code"], d["group_id"], d["group_state"], d["protocol_type"]) == (NONE, "g", state, protocol_type)
    members = list(d["members"])
    assert sorted(m["member_id"] for m in members) == (sorted(info.members) if listed else [])
    protocol = "default" if "connect" in situation else "range"
    assert d["protocol_data"] == (protocol if filled else "")
    for m in members:
        assert (m["client_id"], m["client_host"]) == ("client", "/127.0.0.1")
        if filled:
            assert m["member_metadata"] != b""
            assert m["member_assignment"] == f"assignment-{m['member_id']}".encode()
        else:
            assert (m["member_metadata"], m["member_assignment"]) == (b"", b"")


def test_describe_static_member_instance_id():
    """§1.10 (v4+): members carry their GroupInstanceId."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    got = {m["member_id"]: m["group_instance_id"] for m in h.shard.describe_group("g")["members"]}
    assert got == {m: info.instance_ids.get(m) for m in info.members}


# ------------------------------------------------------------------------------------------
# §1.10 ListGroups


def test_list_groups():
    """§1.10 ListGroups: every group with its protocol type and state; simple groups are listed with
    ProtocolType "" and state "Empty"; deleted groups are gone."""
    h = Harness.new()
    build_group(h, "simple", EMPTY_SIMPLE)
    build_group(h, "stable", STABLE_CONSUMER)
    build_group(h, "connect", PREPARING_CONNECT)
    build_group(h, "emptied", EMPTY_CONSUMER)
    assert sorted(h.shard.list_groups()) == [
        ("connect", "connect", PREPARING), ("emptied", "consumer", EMPTY), ("simple", "", EMPTY),
        ("stable", "consumer", STABLE)]
    h.delete_groups(["simple"])
    assert "simple" not in [g for g, _, _ in h.shard.list_groups()]
