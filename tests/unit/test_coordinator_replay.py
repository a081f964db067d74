"""Loading (§5.1) on the sans-IO GroupCoordinatorShard: replaying the records that live operations
emitted rebuilds the same observable state (§6.2 testReplay*, §6.3 testReplayGroupMetadataRecords,
§6.4 load tests)."""

from __future__ import annotations

import pytest

from coordinator_helpers import (
    EMPTY, EMPTY_CONSUMER, PREPARING, SESSION_MS, STABLE, STABLE_CONSUMER, SUBSCRIBED, OTHER_TOPIC,
    GROUP_SUBSCRIBED_TO_TOPIC, NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
    Harness, build_group, connect_protocols, form_group, make_config, replay_into_fresh_shard, stabilize,
)
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records.consumer_protocol import encode_consumer_subscription
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey


def observable(shard: GroupCoordinatorShard, group_ids: list[str]) -> dict:
    """What clients can see: ListGroups, and DescribeGroups + an all-topics OffsetFetch per group."""
    return {
        "list": sorted(shard.list_groups()),
        "groups": {g: (shard.describe_group(g), list(shard.fetch_offsets(g, None))) for g in group_ids},
    }


def live_scenario() -> tuple[Harness, list[str]]:
    """Groups in every durable shape (Stable or Empty, as load can only produce those, §1.11)."""
    h = Harness.new()
    # a simple group: commits, an overwrite, an OffsetDelete
    h.commit("simple", [("t", 0, 1, -1, "first"), ("t", 1, 5, 3, None), ("u", 0, 9, -1, "x")])
    h.advance(10)
    h.commit("simple", [("t", 0, 2, -1, "second")], retention_ms=60_000, version=2)  # v2: no leader epoch
    h.delete_offsets("simple", [("u", [0])])
    # a Stable consumer group with member commits
    stable = build_group(h, "stable", STABLE_CONSUMER)
    h.advance(10)
    h.commit("stable", [(SUBSCRIBED, 0, 100, 1, "m")], member_id=stable.leader, generation=stable.generation)
    # a static member replaced without a rebalance (its new id must survive a reload)
    static = form_group(h, "static", ["inst-a", None])
    stabilize(h, static)
    h.advance(10)
    h.join("static", instance_id="inst-a")
    assert h.state("static") == STABLE
    # a "connect" group, Stable
    connect = form_group(h, "connect", [None, None], protocol_type="connect", protocols=connect_protocols())
    stabilize(h, connect)
    # a consumer group whose members all left, with offsets
    emptied = build_group(h, "emptied", STABLE_CONSUMER)
    h.commit("emptied", [(OTHER_TOPIC, 3, 33, -1, None)], member_id=emptied.leader,
             generation=emptied.generation)
    h.advance(10)
    h.leave("emptied", [(m, None) for m in emptied.members])
    assert h.state("emptied") == EMPTY
    # a deleted group
    h.commit("deleted", [("t", 0, 1, -1, None)])
    h.delete_groups(["deleted"])
    return h, ["simple", "stable", "static", "connect", "emptied", "deleted", "never-existed"]


def test_replay_rebuilds_live_state():
    """§5.1: replaying, in order, every record the live operations emitted (offset commits and
    tombstones, GroupMetadata values and tombstones) into a fresh shard gives the same ListGroups,
    DescribeGroups and OffsetFetch answers as the live shard."""
    h, group_ids = live_scenario()
    loaded = replay_into_fresh_shard(h.log)
    assert observable(loaded, group_ids) == observable(h.shard, group_ids)
    # and the durable fields a GroupMetadata record persists (§4.7), incl. the retention clock (§2)
    assert {g: durable(loaded, g) for g in group_ids} == {g: durable(h.shard, g) for g in group_ids}


def durable(shard: GroupCoordinatorShard, group_id: str) -> tuple | None:
    group = shard.groups.get(group_id)
    if group is None:
        return None
    return (group.state, group.generation, group.protocol_type, group.protocol_name, group.leader_id,
            group.state_timestamp, sorted(group.static_members.items()))


def test_replayed_group_keeps_working():
    """§5.1/§1.11: a loaded group with members is Stable with its generation; after on_loaded its
    members can heartbeat, sync (their assignment) and commit with that generation."""
    h = Harness.new()
    info = build_group(h, "g", STABLE_CONSUMER)
    loaded_h = Harness(replay_into_fresh_shard(h.log), now=h.now)
    loaded_h.shard.on_loaded(loaded_h.now)
    assert loaded_h.state("g") == STABLE
    assert loaded_h.heartbeat("g", info.follower, info.generation) == NONE
    tok, done, _ = loaded_h.sync("g", info.follower, info.generation)
    assert done[tok]["assignment"] == f"assignment-{info.follower}".encode()
    errors, _, _ = loaded_h.commit("g", [("t", 0, 1, -1, None)], member_id=info.leader, generation=info.generation)
    assert errors == {("t", 0): NONE}


def test_on_loaded_schedules_session_timers():
    """§5.1 after load: every loaded member gets a session timer; a member that never heartbeats is
    removed when it expires and the group rebalances."""
    h = Harness.new()
    info = build_group(h, "g", STABLE_CONSUMER)
    loaded = Harness(replay_into_fresh_shard(h.log), now=h.now + 50_000)
    loaded.shard.on_loaded(loaded.now)
    start = loaded.now
    loaded.advance(SESSION_MS - 1)
    assert loaded.heartbeat("g", info.leader, info.generation) == NONE
    loaded.fire(start + SESSION_MS - 1)
    assert sorted(loaded.member_ids("g")) == sorted(info.members)
    loaded.fire(start + SESSION_MS)
    assert loaded.member_ids("g") == [info.leader]
    assert loaded.state("g") == PREPARING


def test_replay_group_metadata_record_restores_fields_and_subscriptions():
    """§5.1 / §6.3 testReplayGroupMetadataRecords: a GroupMetadata value rebuilds the group:
    Stable with members (generation, protocol type and name, leader, currentStateTimestamp,
    members); subscribed topics are recomputed (OffsetDelete answers 86 for them, §1.4)."""
    shard = GroupCoordinatorShard(0, make_config())
    sub = encode_consumer_subscription([SUBSCRIBED])
    member = MemberMetadata(member_id="m1", group_instance_id="i1", client_id="c", client_host="/h",
                            rebalance_timeout=30_000, session_timeout=10_000, subscription=sub, assignment=b"as")
    shard.replay(GroupMetadataKey("g"), GroupMetadataValue(
        protocol_type="consumer", generation=7, protocol="range", leader="m1", current_state_timestamp=1234,
        members=(member,)))
    d = shard.describe_group("g")
    assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == (STABLE, "consumer", "range")
    assert [(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"], m["member_metadata"],
             m["member_assignment"]) for m in d["members"]] == [("m1", "i1", "c", "/h", sub, b"as")]
    group = shard.groups["g"]
    assert (group.generation, group.leader_id, group.state_timestamp) == (7, "m1", 1234)
    shard.replay(OffsetCommitKey("g", SUBSCRIBED, 0), OffsetCommitValue(5))
    shard.replay(OffsetCommitKey("g", OTHER_TOPIC, 0), OffsetCommitValue(6))
    result = shard.delete_offsets("del", "g", [(SUBSCRIBED, [0]), (OTHER_TOPIC, [0])])
    assert dict(result.completions)["del"]["topics"] == {SUBSCRIBED: {0: GROUP_SUBSCRIBED_TO_TOPIC},
                                                         OTHER_TOPIC: {0: NONE}}


@pytest.mark.parametrize("members,state", [((), EMPTY), ("one", STABLE)], ids=["no members", "members"])
def test_loaded_group_state(members, state):
    """§1.11: a group loaded from a GroupMetadata record is Stable if it has members, else Empty."""
    shard = GroupCoordinatorShard(0, make_config())
    ms = () if not members else (MemberMetadata("m", None, "c", "/h", 30_000, 10_000, b"", b""),)
    shard.replay(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, "range" if ms else None,
                                                           "m" if ms else None, 99, ms))
    assert shard.describe_group("g")["group_state"] == state


def test_group_metadata_tombstone_removes_group():
    """§5.1: a GroupMetadata tombstone removes the group."""
    h = Harness.new()
    build_group(h, "g", EMPTY_CONSUMER)
    loaded = replay_into_fresh_shard(h.log + [(GroupMetadataKey("g"), None)])
    assert loaded.describe_group("g")["group_state"] == "Dead"
    assert list(loaded.list_groups()) == []
    h.shard.replay(GroupMetadataKey("g"), None)  # the same on a live shard
    assert h.state("g") == "Dead"


def test_offset_tombstone_removes_one_offset():
    """§5.1 / §6.1 test 53: an OffsetCommit tombstone removes that partition's offset only."""
    shard = GroupCoordinatorShard(0, make_config())
    shard.replay(OffsetCommitKey("g", "t", 0), OffsetCommitValue(10))
    shard.replay(OffsetCommitKey("g", "t", 1), OffsetCommitValue(11, 2, "m"))
    shard.replay(OffsetCommitKey("g", "t", 0), None)
    assert shard.fetch_offsets("g", [("t", [0, 1])]) == [("t", [(0, -1, -1, ""), (1, 11, 2, "m")])]
    assert shard.fetch_offsets("g", None) == [("t", [(1, 11, 2, "m")])]
    shard.replay(OffsetCommitKey("g", "t", 7), None)  # a tombstone for nothing is harmless
    shard.replay(OffsetCommitKey("other", "t", 0), None)
    assert shard.fetch_offsets("g", None) == [("t", [(1, 11, 2, "m")])]


def test_offset_record_without_group_creates_simple_group():
    """§5.1: an OffsetCommit value for a group that does not exist creates an Empty simple classic
    group, so offset-only groups come back as simple groups."""
    shard = GroupCoordinatorShard(0, make_config())
    shard.replay(OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, -1, "", 5, -1))
    assert list(shard.list_groups()) == [("g", "", EMPTY)]
    assert shard.fetch_offsets("g", None) == [("t", [(0, 10, -1, "")])]


def test_replay_of_last_leave_restores_empty_generation():
    """§1.9 + §5.1: after the last member left, a reload gives an Empty group whose next join starts
    at the incremented generation + 1; the old members are unknown."""
    h = Harness.new()
    info = build_group(h, "g", EMPTY_CONSUMER)
    loaded = Harness(replay_into_fresh_shard(h.log), now=h.now)
    assert loaded.state("g") == EMPTY
    assert loaded.shard.groups["g"].generation == info.generation
    assert loaded.heartbeat("g", info.former[0], info.generation) == UNKNOWN_MEMBER_ID
    again = form_group(loaded, "g", [None])
    assert again.generation == info.generation + 1


def test_on_loaded_over_capacity_group_rebalances():
    """§5.1 after load / §6.3 testOnLoadedExceedGroupMaxSizeTriggersRebalance: a loaded group with
    more members than group.max.size (the config changed) is forced to rebalance; members learn it
    from their heartbeats (27). A group within the limit stays Stable."""
    h = Harness.new()
    big = form_group(h, "big", [None, None, None])
    stabilize(h, big)
    small = form_group(h, "small", [None, None])
    stabilize(h, small)
    loaded = Harness(replay_into_fresh_shard(h.log, make_config(group_max_size=2)), now=h.now + 1000)
    assert loaded.state("big") == STABLE  # load itself only rebuilds (§1.11)
    loaded.shard.on_loaded(loaded.now)
    assert loaded.state("big") == PREPARING
    assert loaded.heartbeat("big", big.leader, big.generation) == REBALANCE_IN_PROGRESS
    assert loaded.state("small") == STABLE
    assert loaded.heartbeat("small", small.leader, small.generation) == NONE
