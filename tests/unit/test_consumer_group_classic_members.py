"""Classic-protocol members inside a consumer group (reference B7), through the shard with a fake
clock: JoinGroup joins with the subscription decoded, generation = member epoch, SyncGroup hands
out the server-side assignment, Heartbeat says 27/22, LeaveGroup and the session timeout remove
the member, no partition ever has two owners. Error codes are the reference's numbers."""

from __future__ import annotations

import uuid

from coordinator_helpers import Harness, consumer_protocols, replay_into_fresh_shard

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.records.consumer_group_records import TopicPartitions
from offsetd.records.consumer_protocol import encode_consumer_assignment, encode_consumer_subscription, \
    parse_assignment_partitions

FOO = uuid.UUID(int=0xF00)
TOPICS = TopicsImage({"foo": (FOO, 4)}, 1)
NONE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 22, 23, 25, 27
FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED = 82, 79
SESSION_MS = 10_000


def heartbeat(h: Harness, member_id: str, epoch: int = 0, **fields):
    """A consumer-protocol member's heartbeat on group "g"."""
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 30_000)
        fields.setdefault("subscribed_topic_names", ("foo",))
        fields.setdefault("topic_partitions", ())
    req = ConsumerGroupHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=epoch, **fields)
    token = h.token("cg")
    return h.run(h.shard.consumer_group_heartbeat(token, req, 1, h.now, TOPICS))[token]


def settle(h: Harness, member_id: str):
    """A consumer-protocol member's heartbeat reporting it owns only its assigned partitions
    (what it was revoking is let go)."""
    group = h.shard.consumer.groups["g"]
    member = group.members[member_id]
    heartbeat(h, member_id, epoch=member.member_epoch)  # learns what to revoke
    member = group.members[member_id]
    owned = tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(member.assigned_partitions.items()))
    return heartbeat(h, member_id, epoch=member.member_epoch, topic_partitions=owned)


def join(h: Harness, member_id: str = "", protocols=None, protocol_type: str = "consumer",
         instance_id: str | None = None):
    """A classic member's JoinGroup (v4+) on group "g", through the MEMBER_ID_REQUIRED handshake."""
    req = JoinRequest("g", member_id, instance_id, "cli", "/h", SESSION_MS, 30_000, protocol_type,
                      protocols if protocols is not None else consumer_protocols(["foo"]), True)
    token = h.token("join")
    answer = h.run(h.shard.join_group(token, req, h.now, TOPICS))[token]
    if answer["error_code"] != MEMBER_ID_REQUIRED:
        return answer
    return join(h, answer["member_id"], protocols, protocol_type, instance_id)


def sync(h: Harness, member_id: str, generation: int) -> tuple[int, list[tuple[str, int]] | None]:
    token = h.token("sync")
    body = h.run(h.shard.sync_group(token, "g", member_id, None, generation, "consumer", "range", {}, h.now))[token]
    return body["error_code"], parse_assignment_partitions(body["assignment"])


def beat(h: Harness, member_id: str, generation: int) -> int:
    token = h.token("hb")
    return h.run(h.shard.heartbeat(token, "g", member_id, None, generation, h.now))[token]["error_code"]


def owners(h: Harness) -> dict[int, str]:
    """Partition of foo -> the member holding (or revoking) it."""
    group = h.shard.consumer.groups["g"]
    return {p: owner for (t, p), (owner, _) in group.partition_owners.items()}


def test_a_classic_member_joins_syncs_and_heartbeats_inside_a_consumer_group():
    h = Harness.new()
    assert heartbeat(h, "m1").assignment == (TopicPartitions(FOO, (0, 1, 2, 3)),)
    joined = join(h)
    assert joined["error_code"] == NONE and joined["leader"] == "" and joined["protocol_name"] == "range"
    classic_id, generation = joined["member_id"], joined["generation_id"]
    group = h.shard.consumer.groups["g"]
    member = group.members[classic_id]
    assert member.classic_member_metadata.session_timeout_ms == SESSION_MS
    assert member.subscribed_topic_names == ("foo",)
    assert generation == member.member_epoch == 2
    # m1 still holds what the newcomer should get: nothing given yet, nothing owned twice
    assert sync(h, classic_id, generation) == (NONE, [])
    assert beat(h, classic_id, generation) == NONE
    revoking = heartbeat(h, "m1", epoch=1)
    assert revoking.member_epoch == 1  # must revoke first
    assert heartbeat(h, "m1", epoch=1, topic_partitions=revoking.assignment).member_epoch == 2
    assert set(owners(h).values()) == {"m1"} and len(owners(h)) == 2
    # released: the classic member is told to rejoin, then gets its half
    assert beat(h, classic_id, generation) == REBALANCE_IN_PROGRESS
    rejoined = join(h, classic_id)
    assert rejoined["generation_id"] == 2
    error, partitions = sync(h, classic_id, 2)
    assert error == NONE and len(partitions) == 2
    assert {p for _, p in partitions}.isdisjoint({p for p, o in owners(h).items() if o == "m1"})
    assert beat(h, classic_id, 2) == NONE
    assert beat(h, classic_id, 1) == ILLEGAL_GENERATION
    described = h.shard.describe_consumer_group("g", str)["members"]
    assert sorted((m["member_id"], m["member_type"]) for m in described) == sorted([(classic_id, 0), ("m1", 1)])
    loaded = replay_into_fresh_shard(h.log).consumer.groups["g"]
    assert loaded.members[classic_id].classic_member_metadata == member.classic_member_metadata


def test_a_group_epoch_bump_makes_the_classic_member_rejoin_and_it_revokes_through_the_rejoin():
    h = Harness.new()
    heartbeat(h, "m1")
    classic = join(h)
    cid = classic["member_id"]
    settle(h, "m1")
    join(h, cid)
    assert len(sync(h, cid, 2)[1]) == 2
    heartbeat(h, "m2")  # a third member: group epoch 3
    assert beat(h, cid, 2) == REBALANCE_IN_PROGRESS
    # an eager client revoked everything before rejoining (subscription v0: owns nothing)
    again = join(h, cid)
    assert again["generation_id"] == 3
    classic_partitions = {p for _, p in sync(h, cid, 3)[1]}
    held = owners(h)
    assert all(held[p] == cid for p in classic_partitions)
    assert beat(h, cid, 3) == NONE


def test_a_cooperative_classic_member_keeps_what_it_reports_owned_until_it_revokes():
    h = Harness.new()
    heartbeat(h, "m0")
    cid = join(h)["member_id"]
    settle(h, "m0")
    join(h, cid)
    mine = {p for _, p in sync(h, cid, h.shard.consumer.groups["g"].members[cid].member_epoch)[1]}
    assert len(mine) == 2
    heartbeat(h, "m2")
    epoch = h.shard.consumer.groups["g"].members[cid].member_epoch
    owned = encode_consumer_subscription(["foo"], version=1) + encode_consumer_assignment(
        {"foo": sorted(mine)})[2:-4]
    rejoined = join(h, cid, protocols=[("cooperative-sticky", owned)])
    member = h.shard.consumer.groups["g"].members[cid]
    assert rejoined["generation_id"] == epoch and member.partitions_pending_revocation  # still revoking
    assert beat(h, cid, epoch) == NONE  # it rejoins by itself once revoked
    kept = {p for _, p in sync(h, cid, epoch)[1]}
    assert kept < mine
    after = encode_consumer_subscription(["foo"], version=1) + encode_consumer_assignment(
        {"foo": sorted(kept)})[2:-4]
    assert join(h, cid, protocols=[("cooperative-sticky", after)])["generation_id"] == epoch + 1


def test_join_errors_leave_and_session_timeout():
    h = Harness.new()
    heartbeat(h, "m1")
    assert join(h, protocol_type="connect")["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    assert join(h, protocols=[("range", b"\x00")])["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    log = len(h.log)
    token = h.token("join")
    required = h.run(h.shard.join_group(token, JoinRequest("g", "", None, "cli", "/h", SESSION_MS, 30_000, "consumer",
                                                           consumer_protocols(["foo"]), True), h.now, TOPICS))[token]
    assert required["error_code"] == MEMBER_ID_REQUIRED and required["member_id"] and len(h.log) == log
    assert join(h, "m1")["error_code"] == UNKNOWN_MEMBER_ID  # a consumer-protocol member
    assert sync(h, "m1", 1)[0] == UNKNOWN_MEMBER_ID and beat(h, "m1", 1) == UNKNOWN_MEMBER_ID
    cid = join(h)["member_id"]
    generation = h.shard.consumer.groups["g"].members[cid].member_epoch
    token = h.token("sync")
    wrong = h.run(h.shard.sync_group(token, "g", cid, None, generation, "consumer", "roundrobin", {}, h.now))
    assert wrong[token]["error_code"] == INCONSISTENT_GROUP_PROTOCOL  # not a protocol it offered
    assert sync(h, cid, generation + 1)[0] == ILLEGAL_GENERATION
    token = h.token("hb")
    assert h.run(h.shard.heartbeat(token, "g", cid, "someone", generation, h.now))[token]["error_code"] == FENCED_INSTANCE_ID
    epoch = h.shard.consumer.groups["g"].group_epoch
    token = h.token("leave")
    body = h.run(h.shard.leave_group(token, "g", [(cid, None), ("nobody", None)], h.now))[token]
    assert [m["error_code"] for m in body["members"]] == [NONE, UNKNOWN_MEMBER_ID]
    group = h.shard.consumer.groups["g"]
    assert cid not in group.members and group.group_epoch == epoch + 1
    cid = join(h)["member_id"]
    h.advance(SESSION_MS - 1)
    heartbeat(h, "m1", epoch=h.shard.consumer.groups["g"].members["m1"].member_epoch)
    h.run(h.shard.fire_timers(h.now))
    assert cid in group.members
    assert beat(h, cid, group.members[cid].member_epoch) in (NONE, REBALANCE_IN_PROGRESS)
    h.advance(SESSION_MS)
    h.run(h.shard.fire_timers(h.now))
    assert cid not in h.shard.consumer.groups["g"].members


def test_offset_commit_of_a_classic_member_uses_its_generation():
    h = Harness.new()
    heartbeat(h, "m1")
    joined = join(h)
    cid, generation = joined["member_id"], joined["generation_id"]
    commit = [("foo", 0, 5, -1, None)]
    assert h.commit("g", commit, member_id=cid, generation=generation, version=7)[0] == {("foo", 0): NONE}
    assert h.commit("g", commit, member_id=cid, generation=generation - 1, version=7)[0] == {
        ("foo", 0): ILLEGAL_GENERATION}


def test_a_classic_static_member_rejoining_with_a_new_id_takes_over_its_partitions():
    h = Harness.new()
    heartbeat(h, "m1")
    first = join(h, instance_id="i1")
    settle(h, "m1")
    join(h, first["member_id"], instance_id="i1")
    group = h.shard.consumer.groups["g"]
    before = group.members[first["member_id"]].assigned_partitions
    epoch = group.group_epoch
    again = join(h, instance_id="i1")  # the restarted process: no member id
    assert again["error_code"] == NONE and again["member_id"] != first["member_id"]
    assert group.group_epoch == epoch and set(group.members) == {"m1", again["member_id"]}
    assert group.members[again["member_id"]].assigned_partitions == before
    assert sync(h, again["member_id"], again["generation_id"])[1] == [("foo", p) for p in sorted(before[FOO])]
    assert beat(h, first["member_id"], first["generation_id"]) == UNKNOWN_MEMBER_ID
    assert set(replay_into_fresh_shard(h.log).consumer.groups["g"].members) == {"m1", again["member_id"]}
