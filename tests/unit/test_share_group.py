"""The sans-IO share group (KIP-932 membership, share-groups.md §2) with a fake clock: joins,
the simple assignor's spread and sharing, leave, session expiry, fencing, max size, and replay
of the written records (through the byte codecs) rebuilding the same state.

Error codes are numbers from the reference's table, not imported from the code under test."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.config import GroupCoordinatorConfig, ShareGroupConfig
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.coordinator.share_assignor import simple_assign
from offsetd.coordinator.group_heartbeat import GroupHeartbeatResponse
from offsetd.coordinator.share_group_ops import ShareGroupHeartbeatRequest, ShareGroupOperations
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records.offsets import encode_key, encode_value
from offsetd.records.share_group_records import ShareGroupMetadataKey, TopicPartitionsInfo, decode_key, decode_value

NONE, UNKNOWN_MEMBER_ID, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 0, 25, 42, 69
GROUP_MAX_SIZE_REACHED, FENCED_MEMBER_EPOCH, INCONSISTENT_GROUP_PROTOCOL = 81, 110, 23

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA2)


def new_member_id() -> str:
    """What the clients send: a uuid in URL-safe base64 without padding, 22 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class Harness:
    """Share-group operations with a fake clock, a topic image and the records they wrote."""

    config: ShareGroupConfig = field(default_factory=ShareGroupConfig)
    now: int = 0
    topics: TopicsImage = field(default_factory=lambda: TopicsImage({"foo": (FOO, 6), "bar": (BAR, 1)}, 1))
    log: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ops = ShareGroupOperations(self.config)

    def hb(self, member_id: str, epoch: int, topics: tuple[str, ...] | None = None, group: str = "g",
           rack: str | None = None) -> GroupHeartbeatResponse:
        req = ShareGroupHeartbeatRequest(group, member_id, epoch, rack, topics, "client", "/127.0.0.1")
        result = self.ops.share_group_heartbeat("t", req, self.now, self.topics)
        self.log.extend(result.records)
        [(token, response)] = result.completions
        return response

    def join(self, topics: tuple[str, ...] = ("foo",), group: str = "g") -> tuple[str, GroupHeartbeatResponse]:
        member_id = new_member_id()
        return member_id, self.hb(member_id, 0, topics, group)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.log.extend(self.ops.fire_timers(self.now).records)

    def replayed(self) -> ShareGroupOperations:
        fresh = ShareGroupOperations(self.config)
        for key, value in self.log:
            raw_key = encode_key(key)
            fresh.replay(decode_key(raw_key), decode_value(decode_key(raw_key), None if value is None
                                                            else encode_value(value)))
        return fresh


def assigned(response: GroupHeartbeatResponse) -> dict[uuid.UUID, set[int]]:
    return {tp.topic_id: set(tp.partitions) for tp in response.assignment or ()}


def test_join_gets_every_partition_and_epochs_move() -> None:
    h = Harness()
    m, r = h.join(("foo", "bar"))
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (NONE, m, 1, 5000)
    assert assigned(r) == {FOO: set(range(6)), BAR: {0}}
    steady = h.hb(m, 1)
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (NONE, 1, None)
    group = h.ops.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state().value) == (1, 1, "Stable")
    assert {t.topic_name for t in group.state_metadata.initialized_topics} == {"foo", "bar"}


def test_two_members_spread_a_topic_and_share_a_single_partition() -> None:
    h = Harness()
    a, _ = h.join(("foo", "bar"))
    b, rb = h.join(("foo", "bar"))
    assert rb.member_epoch == 2
    ra = h.hb(a, 1)
    assert ra.member_epoch == 2
    foo_a, foo_b = assigned(ra)[FOO], assigned(rb)[FOO]
    assert foo_a | foo_b == set(range(6)) and not foo_a & foo_b and len(foo_a) == len(foo_b) == 3
    assert assigned(ra)[BAR] == assigned(rb)[BAR] == {0}  # a single partition is shared


def test_simple_assignor_sharing_and_balance() -> None:
    subs = {m: frozenset([FOO]) for m in "abc"}
    assert simple_assign(subs, {FOO: 1}, {}) == {m: {FOO: frozenset({0})} for m in "abc"}
    two = simple_assign(subs, {FOO: 2}, {})
    assert sorted(len(a[FOO]) for a in two.values()) == [1, 1, 2]
    assert all(sum(0 in a[FOO] for a in two.values()) == 2 for _ in (0,))  # desired sharing 2
    six = simple_assign(subs, {FOO: 6}, {})
    assert sorted(len(a[FOO]) for a in six.values()) == [2, 2, 2]
    previous = {"a": {FOO: frozenset({0, 1, 2})}, "b": {FOO: frozenset({3, 4, 5})}}
    sticky = simple_assign(subs, {FOO: 6}, previous)
    assert sticky["a"][FOO] < previous["a"][FOO] and sticky["b"][FOO] < previous["b"][FOO]


def test_leave_fences_the_member_and_bumps_the_group_epoch() -> None:
    h = Harness()
    a, _ = h.join()
    b, _ = h.join()
    left = h.hb(b, -1)
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    group = h.ops.groups["g"]
    assert set(group.members) == {a} and group.group_epoch == 3
    kinds = [type(k).__name__ for k, v in h.log[-4:]]
    assert kinds == ["ShareGroupCurrentMemberAssignmentKey", "ShareGroupTargetAssignmentMemberKey",
                     "ShareGroupMemberMetadataKey", "ShareGroupMetadataKey"]
    back = h.hb(a, 1)  # a never heard of epoch 2
    assert back.member_epoch == 3 and back.assignment is None  # it holds all six still: unchanged
    assert group.members[a].assigned_partitions == {FOO: frozenset(range(6))}
    assert h.hb(b, 2).error_code == UNKNOWN_MEMBER_ID
    assert h.hb(b, -1).error_code == UNKNOWN_MEMBER_ID


def test_session_expiry_removes_the_member() -> None:
    h = Harness()
    a, _ = h.join()
    b, _ = h.join()
    h.advance(40_000)
    assert h.hb(a, 1).error_code == NONE  # a's heartbeat re-arms its session
    h.advance(6_000)  # b's 45 s are over
    assert set(h.ops.groups["g"].members) == {a}
    assert h.hb(b, 2).error_code == UNKNOWN_MEMBER_ID
    rejoined = h.hb(b, 0, ("foo",))
    assert rejoined.error_code == NONE and rejoined.member_epoch == 4


def test_fenced_epochs() -> None:
    h = Harness()
    a, _ = h.join()
    b, _ = h.join()
    h.hb(a, 1)  # a moves to epoch 2, its previous epoch is 1
    assert h.hb(a, 5).error_code == FENCED_MEMBER_EPOCH
    assert h.hb(a, 1).error_code == NONE  # the previous epoch: the bump's answer was lost
    h.hb(b, -1)
    h.hb(a, 2)  # epoch 3 now, previous 2
    assert h.hb(a, 1).error_code == FENCED_MEMBER_EPOCH
    assert h.hb(a, 0, ("foo",)).error_code == NONE  # a fenced member may rejoin at 0


def test_validation_and_unknown_group() -> None:
    h = Harness()
    assert h.hb("", 0, ("foo",)).error_code == INVALID_REQUEST
    assert h.hb("x" * 37, 0, ("foo",)).error_code == INVALID_REQUEST
    assert h.hb("m", 0, None).error_code == INVALID_REQUEST
    assert h.hb("m", 0, ()).error_code == INVALID_REQUEST
    assert h.hb("m", -2).error_code == INVALID_REQUEST
    assert h.hb("m", 0, ("foo",), rack="").error_code == INVALID_REQUEST
    assert h.hb("m", 0, ("foo",), group="").error_code == INVALID_REQUEST
    assert h.hb("m", 1, group="nope").error_code == GROUP_ID_NOT_FOUND
    assert h.hb("m", -1, group="nope").error_code == GROUP_ID_NOT_FOUND
    assert h.log == []


def test_max_size() -> None:
    h = Harness(ShareGroupConfig(max_size=2))
    a, _ = h.join()
    h.join()
    _, third = h.join()
    assert third.error_code == GROUP_MAX_SIZE_REACHED
    assert h.hb(a, 0, ("foo",)).error_code == NONE  # a member already in counts once


def test_missing_topic_then_created_and_subscription_change() -> None:
    h = Harness(topics=TopicsImage({}, 1))
    a, r = h.join(("later",))
    assert (r.member_epoch, assigned(r)) == (1, {})
    later = uuid.UUID(int=0x1A7)
    h.topics = TopicsImage({"later": (later, 3)}, 2)
    r = h.hb(a, 1)
    assert r.member_epoch == 2 and assigned(r) == {later: {0, 1, 2}}
    h.topics = TopicsImage({"later": (later, 3), "foo": (FOO, 2)}, 3)
    r = h.hb(a, 2, ("foo",))
    assert r.member_epoch == 3 and assigned(r) == {FOO: {0, 1}}


def test_replay_rebuilds_the_same_state() -> None:
    h = Harness()
    a, _ = h.join(("foo", "bar"))
    b, _ = h.join(("foo",))
    c, _ = h.join(("bar",))
    h.hb(a, 1)
    h.hb(c, -1)
    h.advance(50_000)  # every session expires except none renewed: all fenced
    h.join(("foo",))
    fresh = h.replayed()
    assert fresh.groups.keys() == h.ops.groups.keys()
    assert fresh.groups["g"] == h.ops.groups["g"]
    deleted = ShareGroupOperations()
    for key, value in [*h.log, *h.ops.groups["g"].group_tombstones()]:
        deleted.replay(key, value)
    assert deleted.groups == {}
    assert isinstance(h.ops.groups["g"].group_tombstones()[-1][0], ShareGroupMetadataKey)


def test_shard_keeps_group_kinds_apart() -> None:
    shard = GroupCoordinatorShard(0, GroupCoordinatorConfig())
    topics = TopicsImage({"foo": (FOO, 2)}, 1)
    req = ShareGroupHeartbeatRequest("q", new_member_id(), 0, None, ("foo",))
    result = shard.share_group_heartbeat("t", req, 0, topics)
    for key, value in result.records:  # what loading would replay, as bytes
        shard.replay_raw(encode_key(key), None if value is None else encode_value(value))
    assert result.completions[0][1].member_epoch == 1
    assert shard.group_overview("q") == ("Stable", "share", 1)
    assert shard.list_groups("share") == [("q", "share", "Stable")]
    assert shard.describe_group("q", 6)["error_code"] == GROUP_ID_NOT_FOUND
    assert shard.describe_group("q", 5)["group_state"] == "Dead"
    described = shard.describe_share_group("q", lambda t: "?")
    assert described["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == "foo"
    assert shard.describe_share_group("nope", lambda t: "?")["error_code"] == GROUP_ID_NOT_FOUND
    not_consumer = shard.describe_consumer_group("q", lambda t: "?")
    assert (not_consumer["error_code"], not_consumer["error_message"]) == (GROUP_ID_NOT_FOUND,
                                                                          "Group q is not a consumer group.")
    consumer = ConsumerGroupHeartbeatRequest("q", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("foo",),
                                             topic_partitions=())
    answer = shard.consumer_group_heartbeat("t", consumer, 1, 0, topics).completions[0][1]
    assert answer.error_code == GROUP_ID_NOT_FOUND
    shard.consumer_group_heartbeat("t", ConsumerGroupHeartbeatRequest(
        "c", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("foo",), topic_partitions=()), 1, 0, topics)
    refused = shard.share_group_heartbeat("t", ShareGroupHeartbeatRequest("c", new_member_id(), 0, None, ("foo",)),
                                          0, topics)
    assert refused.completions[0][1].error_code == GROUP_ID_NOT_FOUND
    join = JoinRequest("q", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")], True)
    assert shard.join_group("t", join, 0, topics).completions[0][1]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    commit = shard.commit_offsets("t", "q", "", None, -1, [("foo", 0, 5, -1, None)], -1, 9, 0)
    assert commit.completions[0][1] == {("foo", 0): GROUP_ID_NOT_FOUND} and not commit.records
    assert shard.delete_offsets("t", "q", [("foo", [0])]).completions[0][1]["error_code"] == GROUP_ID_NOT_FOUND
    delete = shard.delete_groups("t", ["q"])
    assert delete.completions[0][1] == {"q": 68}  # NON_EMPTY_GROUP


def _change(h: Harness, group: str, altered: dict | None = None, deleted: frozenset = frozenset(),
            create: bool = True) -> tuple[int, int]:
    result = h.ops.change_offsets("t", group, altered or {}, deleted, create)
    h.log.extend(result.records)
    [(_, answer)] = result.completions
    return answer


def test_offsets_admin_creates_an_empty_group_and_refuses_a_group_with_members() -> None:
    """Alter/DeleteShareGroupOffsets' group side: an alter creates a missing group and bumps its
    epoch, record 15 follows the altered and deleted topics; members make it NON_EMPTY_GROUP."""
    h = Harness()
    assert _change(h, "new", create=False) == (GROUP_ID_NOT_FOUND, 0)
    assert _change(h, "new", {FOO: TopicPartitionsInfo(FOO, "foo", (0, 2))}) == (NONE, 1)
    group = h.ops.groups["new"]
    assert (group.group_epoch, group.members) == (1, {})
    assert [t.partitions for t in group.state_metadata.initialized_topics] == [(0, 2)]
    assert _change(h, "new", {FOO: TopicPartitionsInfo(FOO, "foo", (1,))}) == (NONE, 2)
    assert [t.partitions for t in h.ops.groups["new"].state_metadata.initialized_topics] == [(0, 1, 2)]
    assert _change(h, "new", deleted=frozenset({FOO}), create=False) == (NONE, 2)
    assert h.ops.groups["new"].state_metadata.initialized_topics == ()
    assert h.replayed().groups["new"].group_epoch == 2
    h.join()
    assert _change(h, "g") == (68, 0)
    assert _change(h, "g", create=False) == (68, 0)


def test_a_groups_own_session_timeout_and_heartbeat_interval() -> None:
    """share.session.timeout.ms / share.heartbeat.interval.ms set on one group (the shell fills
    `group_configs`): its members get its interval and expire after its timeout; other groups keep
    the broker's (45 s / 5 s)."""
    h = Harness()
    h.ops.group_configs["fast"] = (20000, 2000)
    fast, r = h.join(group="fast")
    slow, s = h.join(group="g")
    assert (r.heartbeat_interval_ms, s.heartbeat_interval_ms) == (2000, 5000)
    h.advance(20001)
    assert fast not in h.ops.groups["fast"].members and slow in h.ops.groups["g"].members
    h.ops.group_configs["g"] = (None, 3000)  # only the interval: the broker's session timeout stays
    assert h.hb(slow, 1, group="g").heartbeat_interval_ms == 3000
    h.advance(44999)
    assert slow in h.ops.groups["g"].members
    h.advance(2)
    assert slow not in h.ops.groups["g"].members
