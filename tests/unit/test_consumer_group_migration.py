"""Online upgrade of a live classic group to a consumer group, and its downgrade when the last
consumer-protocol member leaves or a classic static member replaces it (reference B7), through the
shard with a fake clock. Error codes are the reference's numbers."""

from __future__ import annotations

import uuid

from coordinator_helpers import Harness, consumer_protocols, replay_into_fresh_shard

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.config import ConsumerGroupConfig
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.records.consumer_protocol import encode_consumer_assignment, parse_assignment_partitions

FOO = uuid.UUID(int=0xF00)
TOPICS = TopicsImage({"foo": (FOO, 4)}, 1)
NONE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 0, 22, 27, 42, 69
UNRELEASED_INSTANCE_ID = 111


def join(h: Harness, member_id: str = "", protocol_type: str = "consumer"):
    """A classic JoinGroup on "g"; returns (token, result) (the answer may be parked)."""
    req = JoinRequest("g", member_id, None, "cli", "/h", 10_000, 30_000, protocol_type,
                      consumer_protocols(["foo"]), False)
    token = h.token("join")
    return token, h.run(h.shard.join_group(token, req, h.now, TOPICS))


def sync(h: Harness, member_id: str, generation: int, assignments: dict[str, bytes] | None = None):
    token = h.token("sync")
    body = h.run(h.shard.sync_group(token, "g", member_id, None, generation, "consumer", "range",
                                    assignments or {}, h.now)).get(token)
    return body if body is None else (body["error_code"], parse_assignment_partitions(body["assignment"]))


def beat(h: Harness, member_id: str, generation: int) -> int:
    token = h.token("hb")
    return h.run(h.shard.heartbeat(token, "g", member_id, None, generation, h.now))[token]["error_code"]


def consumer_heartbeat(h: Harness, member_id: str, epoch: int = 0, **fields):
    if epoch == 0:
        fields.update(rebalance_timeout_ms=30_000, subscribed_topic_names=("foo",), topic_partitions=())
    req = ConsumerGroupHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=epoch, **fields)
    token = h.token("cg")
    return h.run(h.shard.consumer_group_heartbeat(token, req, 1, h.now, TOPICS))[token]


def live_classic_group(h: Harness, assignment: bytes | None = None) -> tuple[str, str, str]:
    """Member A stable at generation 1 owning foo 0-3, then B joining: the group is preparing a
    rebalance with B's JoinGroup parked. Returns (A, B, B's parked join token)."""
    token, done = join(h)
    a = done[token]["member_id"]
    assert sync(h, a, 1, {a: assignment or encode_consumer_assignment({"foo": [0, 1, 2, 3]})})[0] == NONE
    token, done = join(h)
    assert token not in done  # parked until A rejoins
    b = next(iter(m for m in h.shard.groups["g"].members if m != a))
    return a, b, token


def assert_single_owners(h: Harness) -> None:
    """No partition is assigned to (or being revoked by) two members."""
    seen: list[tuple[uuid.UUID, int]] = []
    for m in h.shard.consumer.groups["g"].members.values():
        for assignment in (m.assigned_partitions, m.partitions_pending_revocation):
            seen += [(t, p) for t, ps in assignment.items() for p in ps]
    assert len(seen) == len(set(seen))


def test_a_consumer_member_upgrades_a_live_classic_group_and_the_last_one_leaving_downgrades_it():
    h = Harness.new()
    a, b, parked = live_classic_group(h)
    assert h.commit("g", [("foo", 0, 9, -1, None)], member_id=a, generation=1)[0] == {("foo", 0): NONE}
    response = consumer_heartbeat(h, "m1")
    assert response.error_code == NONE and response.member_epoch == 2
    assert response.assignment == ()  # A still holds everything
    assert h.log[-1][0].group_id == "g"
    group = h.shard.consumer.groups["g"]
    assert set(group.members) == {a, b, "m1"} and group.group_epoch == 2
    assert group.members[a].member_epoch == 1 and group.members[a].classic_member_metadata is not None
    assert not h.shard.groups["g"].members  # the classic group is Empty, its offsets kept
    assert h.offset("g", "foo", 0) == 9
    assert_single_owners(h)
    # parked classic requests were told to rejoin; the classic members move through rejoins
    assert beat(h, a, 1) == REBALANCE_IN_PROGRESS
    for member_id in (a, b):
        token, done = join(h, member_id)
        assert done[token]["generation_id"] == 2
        assert_single_owners(h)
    a_parts = {p for _, p in sync(h, a, 2)[1]}
    b_parts = {p for _, p in sync(h, b, 2)[1]}
    m1 = consumer_heartbeat(h, "m1", epoch=2)
    m1_parts = {p for tp in m1.assignment for p in tp.partitions}
    assert a_parts | b_parts | m1_parts == {0, 1, 2, 3}
    assert len(a_parts) + len(b_parts) + len(m1_parts) == 4 and m1_parts
    assert_single_owners(h)
    loaded = replay_into_fresh_shard(h.log)
    assert set(loaded.consumer.groups["g"].members) == {a, b, "m1"} and not loaded.groups["g"].members
    assert loaded.fetch_offsets("g", [("foo", [0])]) == [("foo", [(0, 9, -1, "")])]

    # the consumer-protocol member leaves: A and B are a classic group again, rebalancing
    assert consumer_heartbeat(h, "m1", epoch=-1).member_epoch == -1
    assert "g" not in h.shard.consumer.groups
    classic = h.shard.groups["g"]
    assert set(classic.members) == {a, b} and classic.state.value == "PreparingRebalance"
    assert beat(h, a, 2) == REBALANCE_IN_PROGRESS
    token_a, _ = join(h, a)
    token_b, done = join(h, b)
    assert done[token_b]["error_code"] == NONE and done[token_a]["generation_id"] == 3
    leader = done[token_a]["leader"]
    assert leader in (a, b) and done[token_a]["protocol_name"] == "range"
    plan = {a: encode_consumer_assignment({"foo": [0, 1]}), b: encode_consumer_assignment({"foo": [2, 3]})}
    follower = b if leader == a else a
    assert sync(h, follower, 3) is None  # waits for the leader's assignment
    assert sync(h, leader, 3, plan)[1] == parse_assignment_partitions(plan[leader])
    assert classic.state.value == "Stable"
    loaded = replay_into_fresh_shard(h.log)
    assert "g" not in loaded.consumer.groups and set(loaded.groups["g"].members) == {a, b}
    assert loaded.fetch_offsets("g", [("foo", [0])]) == [("foo", [(0, 9, -1, "")])]


def test_parked_requests_get_rebalance_in_progress_on_upgrade():
    h = Harness.new()
    a, b, parked = live_classic_group(h)
    req = ConsumerGroupHeartbeatRequest(group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=30_000,
                                        subscribed_topic_names=("foo",), topic_partitions=())
    token = h.token("cg")
    done = h.run(h.shard.consumer_group_heartbeat(token, req, 1, h.now, TOPICS))
    assert done[parked]["error_code"] == REBALANCE_IN_PROGRESS
    assert done[token].error_code == NONE


def test_upgrade_refused():
    for policy in ("disabled", "downgrade"):
        h = Harness.new(consumer=ConsumerGroupConfig(migration_policy=policy))
        live_classic_group(h)
        assert consumer_heartbeat(h, "m1").error_code == GROUP_ID_NOT_FOUND
    h = Harness.new(consumer=ConsumerGroupConfig(max_size=1))
    live_classic_group(h)
    assert consumer_heartbeat(h, "m1").error_code == GROUP_ID_NOT_FOUND
    h = Harness.new()
    live_classic_group(h, assignment=b"\x00\x00\xff")  # an assignment that does not decode
    assert consumer_heartbeat(h, "m1").error_code == GROUP_ID_NOT_FOUND
    h = Harness.new()
    a, _, _ = live_classic_group(h)
    assert consumer_heartbeat(h, "m1", epoch=3).error_code == GROUP_ID_NOT_FOUND  # not a join
    invalid = ConsumerGroupHeartbeatRequest(group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=-1,
                                            subscribed_topic_names=("foo",), topic_partitions=())
    token = h.token("cg")
    assert h.run(h.shard.consumer_group_heartbeat(token, invalid, 1, h.now, TOPICS))[token].error_code == INVALID_REQUEST
    assert set(h.shard.groups["g"].members) >= {a} and "g" not in h.shard.consumer.groups


def test_no_downgrade_under_the_upgrade_policy_and_a_session_timeout_downgrades():
    h = Harness.new(consumer=ConsumerGroupConfig(migration_policy="upgrade"))
    live_classic_group(h)
    consumer_heartbeat(h, "m1")
    consumer_heartbeat(h, "m1", epoch=-1)
    assert "m1" not in h.shard.consumer.groups["g"].members  # stays a consumer group
    h = Harness.new()
    a, b, _ = live_classic_group(h)
    consumer_heartbeat(h, "m1")
    for member_id in (a, b):
        join(h, member_id)
        sync(h, member_id, 2)
    for _ in range(10):  # the classic members heartbeat (10 s sessions); m1 (45 s) falls silent
        h.advance(5_000)
        for member_id in (a, b):
            assert beat(h, member_id, 2) in (NONE, REBALANCE_IN_PROGRESS)
        h.run(h.shard.fire_timers(h.now))
    assert "g" not in h.shard.consumer.groups  # m1's session timeout downgraded the group
    assert set(h.shard.groups["g"].members) == {a, b}


def test_a_classic_member_that_does_not_sync_within_its_rebalance_timeout_is_removed():
    h = Harness.new()
    a, b, _ = live_classic_group(h)
    consumer_heartbeat(h, "m1")
    join(h, a)
    join(h, b)  # the rebalance timeout is 30 s; B heartbeats but never syncs
    assert sync(h, a, 2)[0] == NONE
    members, joined = h.shard.consumer.groups["g"].members, h.now
    for step in (9_000, 9_000, 9_000, 3_001):
        h.advance(step)
        beat(h, a, 2)
        beat(h, b, 2)
        h.run(h.shard.fire_timers(h.now))
        assert a in members and (b in members) == (h.now - joined < 30_000)


def test_no_downgrade_without_a_protocol_every_classic_member_supports():
    h = Harness.new()
    heartbeat_first = consumer_heartbeat(h, "m1")
    assert heartbeat_first.error_code == NONE
    for name in ("range", "roundrobin"):
        req = JoinRequest("g", "", None, "cli", "/h", 10_000, 30_000, "consumer",
                          consumer_protocols(["foo"], names=(name,)), False)
        token = h.token("join")
        assert h.run(h.shard.join_group(token, req, h.now, TOPICS))[token]["error_code"] == NONE
    consumer_heartbeat(h, "m1", epoch=-1)
    group = h.shard.consumer.groups["g"]  # still a consumer group: no common protocol to rebalance with
    assert len(group.members) == 2 and all(m.classic_member_metadata for m in group.members.values())


def static_join(h: Harness, instance_id: str = "i1"):
    """A classic JoinGroup of a static member (no member id yet) on "g"; returns its answer."""
    req = JoinRequest("g", "", instance_id, "classic-cli", "/h", 10_000, 30_000, "consumer",
                      consumer_protocols(["foo"]), True)
    token = h.token("join")
    return h.run(h.shard.join_group(token, req, h.now, TOPICS))[token]


def static_consumer_group(h: Harness) -> None:
    """Static consumer-protocol member m1 (instance i1) owning foo 0-3 at epoch 1 with a commit,
    then away (epoch -2, its slot and partitions kept)."""
    first = consumer_heartbeat(h, "m1", instance_id="i1")
    assert first.error_code == NONE and first.member_epoch == 1
    assert {p for tp in first.assignment for p in tp.partitions} == {0, 1, 2, 3}
    assert h.commit("g", [("foo", 2, 42, -1, None)], member_id="m1", generation=1)[0] == {("foo", 2): NONE}
    assert consumer_heartbeat(h, "m1", epoch=-2, instance_id="i1").member_epoch == -2


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_without_a_rebalance():
    h = Harness.new()
    static_consumer_group(h)
    answer = static_join(h)
    newcomer = answer["member_id"]
    assert answer["error_code"] == NONE and newcomer != "m1"
    assert answer["generation_id"] == 1 and answer["leader"] == "" and answer["protocol_name"] == "range"
    assert "g" not in h.shard.consumer.groups
    assert all(h.shard.consumer.timers.deadline((kind, "g", newcomer)) is None for kind in ("session", "sync"))
    classic = h.shard.groups["g"]
    assert classic.state.value == "Stable" and classic.generation == 1 and set(classic.members) == {newcomer}
    assert classic.members[newcomer].group_instance_id == "i1"
    assert h.shard.list_groups() == [("g", "consumer", "Stable")]
    # no rebalance: the newcomer syncs at its generation and gets m1's partitions
    error, partitions = sync(h, newcomer, 1)
    assert error == NONE and sorted(partitions) == [("foo", p) for p in range(4)]
    assert beat(h, newcomer, 1) == NONE
    assert h.offset("g", "foo", 2) == 42
    # the log says the same: consumer-group records tombstoned, then the classic group
    loaded = replay_into_fresh_shard(h.log)
    assert "g" not in loaded.consumer.groups and set(loaded.groups["g"].members) == {newcomer}
    assert loaded.fetch_offsets("g", [("foo", [2])]) == [("foo", [(2, 42, -1, "")])]


def test_no_downgrade_when_a_consumer_member_stays_or_the_policy_forbids_it():
    h = Harness.new(consumer=ConsumerGroupConfig(migration_policy="upgrade"))
    static_consumer_group(h)
    assert static_join(h)["error_code"] == NONE
    group = h.shard.consumer.groups["g"]  # a consumer group of one classic member
    assert len(group.members) == 1 and next(iter(group.members.values())).classic_member_metadata
    h = Harness.new()
    static_consumer_group(h)
    assert consumer_heartbeat(h, "m2").error_code == NONE  # a second consumer-protocol member
    assert static_join(h)["error_code"] == NONE
    assert {m.classic_member_metadata is None for m in h.shard.consumer.groups["g"].members.values()} == {True, False}
    h = Harness.new()
    consumer_heartbeat(h, "m1", instance_id="i1")  # not away: the newcomer is refused, nothing moves
    assert static_join(h)["error_code"] == UNRELEASED_INSTANCE_ID
    assert set(h.shard.consumer.groups["g"].members) == {"m1"}
