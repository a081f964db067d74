"""ConsumerGroupHeartbeat (68) sans-IO: validation and error table (B2), join, leave and static
members (B4), reconciliation (B3), timers; Kafka's GroupMetadataManagerTest cases re-created (B10)."""

from __future__ import annotations

import pytest

from consumer_group_helpers import (
    BAR,
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    FOO,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    REBALANCE_MS,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    Client,
    Harness,
    as_dict,
    tps,
)
from offsetd.coordinator.consumer_group import ConsumerGroupState, MemberState
from offsetd.coordinator.config import ConsumerGroupConfig
from offsetd.coordinator.consumer_group_ops import ConsumerGroupOperations, TopicsImage
from offsetd.records.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    encode_key,
    encode_value,
)


def kinds(records) -> list[str]:
    """Record types with a trailing '-' for tombstones, e.g. ['8-', '7-', '5-', '3']."""
    names = {ConsumerGroupMetadataKey: "3", ConsumerGroupPartitionMetadataKey: "4", ConsumerGroupMemberMetadataKey: "5",
             ConsumerGroupTargetAssignmentMetadataKey: "6", ConsumerGroupTargetAssignmentMemberKey: "7",
             ConsumerGroupCurrentMemberAssignmentKey: "8", ConsumerGroupRegularExpressionKey: "16"}
    return [names[type(k)] + ("-" if v is None else "") for k, v in records]


# ===================================================================== validation (B2)

JOIN = dict(member_id="m", member_epoch=0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=("foo",),
            topic_partitions=())


@pytest.mark.parametrize("version,fields,message", [
    (1, dict(JOIN, member_id=""), "MemberId can't be empty."),
    (0, dict(JOIN, member_id="", member_epoch=1), "MemberId can't be empty."),
    (0, dict(JOIN, member_id="", member_epoch=-1), "MemberId can't be empty."),
    (1, dict(JOIN, group_id=""), "GroupId can't be empty."),
    (1, dict(JOIN, instance_id=""), "InstanceId can't be empty."),
    (1, dict(JOIN, rack_id=""), "RackId can't be empty."),
    (1, dict(JOIN, rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
    (1, dict(JOIN, topic_partitions=None), "TopicPartitions must be empty when (re-)joining."),
    (1, dict(JOIN, topic_partitions=tps({FOO: {0}})), "TopicPartitions must be empty when (re-)joining."),
    (1, dict(JOIN, group_id="   "), "GroupId can't be empty."),
    (1, dict(JOIN, subscribed_topic_names=None),
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (1, dict(JOIN, member_epoch=-2), "InstanceId can't be null."),
    (1, dict(JOIN, member_epoch=-3), "MemberEpoch is invalid."),
    # Kafka's order: the join rows come before InstanceId and RackId.
    (1, dict(JOIN, rebalance_timeout_ms=-1, instance_id=""), "RebalanceTimeoutMs must be provided in first request."),
])
def test_consumer_heartbeat_request_validation(version, fields, message) -> None:
    h = Harness()
    response = h.heartbeat(api_version=version, **fields)
    assert (response.error_code, response.error_message) == (INVALID_REQUEST, message)
    assert h.log == [] and h.ops.groups == {}


def test_empty_names_or_regex_are_a_valid_first_subscription() -> None:
    h = Harness()
    assert h.heartbeat(**dict(JOIN, subscribed_topic_names=())).error_code == NONE
    regex_only = dict(JOIN, member_id="n", subscribed_topic_names=None, subscribed_topic_regex="")
    assert h.heartbeat(**regex_only).error_code == NONE


def test_v0_join_without_member_id_gets_one() -> None:
    h = Harness()
    response = h.heartbeat(api_version=0, **dict(JOIN, member_id=""))
    assert response.error_code == NONE and response.member_id
    assert response.member_id in h.group().members


def test_unsupported_assignor() -> None:
    h = Harness()
    response = h.heartbeat(**dict(JOIN, server_assignor="sticky"))
    assert response.error_code == UNSUPPORTED_ASSIGNOR and h.log == []


def test_consumer_heartbeat_regex_validation() -> None:
    h = Harness()
    for bad in ("[", "(?=foo).*", r"(f)\1"):
        response = h.heartbeat(**dict(JOIN, subscribed_topic_names=None, subscribed_topic_regex=bad))
        assert response.error_code == INVALID_REGULAR_EXPRESSION, bad
    assert h.log == []


def test_group_id_not_found_for_a_non_zero_epoch() -> None:
    h = Harness()
    assert h.heartbeat(member_id="m", member_epoch=1).error_code == GROUP_ID_NOT_FOUND
    assert h.heartbeat(member_id="m", member_epoch=-1).error_code == GROUP_ID_NOT_FOUND


def test_unknown_member_id() -> None:
    h = Harness()
    Client(h, "a")
    assert h.heartbeat(member_id="x", member_epoch=1).error_code == UNKNOWN_MEMBER_ID
    assert h.heartbeat(member_id="x", member_epoch=-1).error_code == UNKNOWN_MEMBER_ID
    assert h.heartbeat(member_id="x", member_epoch=-1, instance_id="i").error_code == UNKNOWN_MEMBER_ID


def test_group_max_size_reached_for_new_members_only() -> None:
    h = Harness(ConsumerGroupConfig(max_size=1))
    a = Client(h, "a")
    assert h.join("b").error_code == GROUP_MAX_SIZE_REACHED
    assert a.beat().error_code == NONE


def test_consumer_group_member_epoch_validation() -> None:
    h = Harness()
    a = Client(h, "a")
    assert a.epoch == 1
    assert h.heartbeat(member_id="a", member_epoch=2, topic_partitions=tps(a.owned)).error_code == FENCED_MEMBER_EPOCH
    Client(h, "b")  # group epoch 2; a moves to epoch 2 at its next heartbeat (after revoking)
    a.beat()  # UNREVOKED at epoch 1
    a.beat()  # revoked: epoch 2
    member = h.group().members["a"]
    assert (member.member_epoch, member.previous_member_epoch) == (2, 1)
    # The previous epoch with owned partitions all still assigned: the bump's answer was lost.
    ok = h.heartbeat(member_id="a", member_epoch=1, topic_partitions=tps(a.owned))
    assert (ok.error_code, ok.member_epoch) == (NONE, 2)
    # The previous epoch owning one it should not, or not saying what it owns: fenced.
    assert h.heartbeat(member_id="a", member_epoch=1, topic_partitions=tps({FOO: set(range(6))})).error_code \
        == FENCED_MEMBER_EPOCH
    assert h.heartbeat(member_id="a", member_epoch=1, topic_partitions=None).error_code == FENCED_MEMBER_EPOCH
    # An epoch older than the previous one: fenced.
    a.beat(subscribed_topic_names=("foo", "bar"))  # revokes first, at epoch 2
    a.beat()
    assert h.group().members["a"].member_epoch == 3
    assert h.heartbeat(member_id="a", member_epoch=1, topic_partitions=()).error_code == FENCED_MEMBER_EPOCH


def test_fenced_or_unknown_heartbeats_write_nothing() -> None:
    h = Harness()
    a = Client(h, "a")
    before = list(h.log)
    h.heartbeat(member_id="a", member_epoch=7, topic_partitions=tps(a.owned))
    h.heartbeat(member_id="zz", member_epoch=1)
    assert h.log == before


# ================================================================== join and leave (B4)

def test_member_joins_empty_consumer_group() -> None:
    h = Harness()
    response = h.join("m")
    assert response.error_code == NONE
    assert (response.member_id, response.member_epoch, response.heartbeat_interval_ms) == ("m", 1, 5000)
    assert as_dict(response.assignment) == {FOO: set(range(6))}
    # member (5), subscribed topics (4), group epoch (3), target (7, 6), current assignment (8)
    assert kinds(h.last_records) == ["5", "4", "3", "7", "6", "8"]
    assert h.last_records[2] == (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1))
    assert h.last_records[4] == (ConsumerGroupTargetAssignmentMetadataKey("g"),
                                 ConsumerGroupTargetAssignmentMetadataValue(1))
    group = h.group()
    assert (group.group_epoch, group.assignment_epoch, group.state()) == (1, 1, ConsumerGroupState.STABLE)


def test_unchanged_heartbeat_writes_nothing_and_omits_the_assignment() -> None:
    h = Harness()
    a = Client(h, "a")
    response = h.heartbeat(member_id="a", member_epoch=1)
    assert (response.error_code, response.member_epoch, response.assignment) == (NONE, 1, None)
    assert h.last_records == []
    # A full request (timeout, subscription and owned set) gets the assignment again.
    full = h.heartbeat(member_id="a", member_epoch=1, rebalance_timeout_ms=REBALANCE_MS,
                       subscribed_topic_names=("foo",), topic_partitions=tps(a.owned))
    assert as_dict(full.assignment) == {FOO: set(range(6))} and h.last_records == []


def test_leaving_member_bumps_group_epoch() -> None:
    h = Harness()
    a, b = Client(h, "a"), Client(h, "b")
    a.beat(), a.beat(), b.beat()
    epoch = h.group().group_epoch
    response = h.heartbeat(member_id="b", member_epoch=-1)
    assert (response.error_code, response.member_id, response.member_epoch) == (NONE, "b", -1)
    assert kinds(h.last_records) == ["8-", "7-", "5-", "3"]
    assert h.group().group_epoch == epoch + 1 and "b" not in h.group().members
    # a takes everything back at its next heartbeat.
    a.beat()
    assert a.owned == {FOO: set(range(6))}


def test_leave_of_the_last_regex_user_tombstones_the_regex() -> None:
    h = Harness()
    h.heartbeat(**dict(JOIN, subscribed_topic_names=None, subscribed_topic_regex="fo.*"))
    h.heartbeat(member_id="m", member_epoch=-1)
    assert kinds(h.last_records) == ["8-", "7-", "5-", "16-", "4", "3"]


def test_rejoin_with_epoch_zero_of_a_present_member_is_a_fresh_join() -> None:
    # KAFKA-19233: accepted as a new join rather than fenced until the session expires.
    h = Harness()
    Client(h, "a")
    response = h.join("a")
    assert (response.error_code, response.member_epoch) == (NONE, 1)
    assert as_dict(response.assignment) == {FOO: set(range(6))}


# ====================================================================== static members

def test_static_member_gets_back_assignment_upon_rejoin() -> None:
    h = Harness()
    a = Client(h, "a", instance_id="ia")
    b = Client(h, "b", instance_id="ib")
    a.beat(), a.beat(), b.beat()
    epoch, owned = h.group().group_epoch, dict(b.owned)
    left = h.heartbeat(member_id="b", member_epoch=-2, instance_id="ib")
    assert (left.error_code, left.member_epoch) == (NONE, -2)
    # A new incarnation with a new member id and the same instance id takes b's place.
    response = h.join("b2", instance_id="ib")
    assert response.error_code == NONE
    assert as_dict(response.assignment) == owned
    assert response.member_epoch == epoch
    assert h.group().group_epoch == epoch  # no rebalance
    assert "b" not in h.group().members and h.group().static_members["ib"] == "b2"
    assert kinds(h.last_records)[:3] == ["8-", "7-", "5-"]
    assert a.beat().assignment is None  # a is unaffected


def test_no_group_epoch_bump_when_static_member_temporarily_leaves() -> None:
    h = Harness()
    Client(h, "a", instance_id="ia")
    h.heartbeat(member_id="a", member_epoch=-2, instance_id="ia")
    assert kinds(h.last_records) == ["8"]
    member = h.group().members["a"]
    assert member.member_epoch == -2 and member.assigned_partitions == {FOO: frozenset(range(6))}
    assert h.group().group_epoch == 1


def test_unreleased_instance_id_rejects_the_newcomer() -> None:
    h = Harness()
    Client(h, "a", instance_id="ia")
    response = h.join("a2", instance_id="ia")
    assert response.error_code == UNRELEASED_INSTANCE_ID
    assert set(h.group().members) == {"a"}


def test_fenced_instance_id() -> None:
    h = Harness()
    Client(h, "a", instance_id="ia")
    assert h.heartbeat(member_id="x", member_epoch=1, instance_id="ia").error_code == FENCED_INSTANCE_ID
    assert h.heartbeat(member_id="x", member_epoch=-2, instance_id="ia").error_code == FENCED_INSTANCE_ID
    assert h.heartbeat(member_id="x", member_epoch=-1, instance_id="ia").error_code == FENCED_INSTANCE_ID


def test_static_member_that_never_returns_is_removed_at_its_session_timeout() -> None:
    h = Harness()
    Client(h, "a", instance_id="ia")
    h.heartbeat(member_id="a", member_epoch=-2, instance_id="ia")
    assert h.advance(44_999) == []
    # The last member gone, no topic is subscribed any more: record 4 changes too.
    assert kinds(h.advance(1)) == ["8-", "7-", "5-", "4", "3"]
    assert h.group().members == {} and h.group().static_members == {}


# ========================================================================= reconciliation

def test_reconciliation_process() -> None:
    h = Harness()
    a = Client(h, "a")
    assert a.owned == {FOO: set(range(6))} and a.epoch == 1
    b = Client(h, "b")
    # b is at the new epoch but its partitions are still a's: nothing yet.
    assert b.epoch == 2 and b.owned == {}
    assert h.group().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert h.group().state() is ConsumerGroupState.RECONCILING
    # a must revoke first: it stays at epoch 1 with the kept half only.
    r = a.beat(topic_partitions=tps({FOO: set(range(6))}))
    assert r.member_epoch == 1 and as_dict(r.assignment) == {FOO: {0, 1, 2}}
    member = h.group().members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert member.partitions_pending_revocation == {FOO: frozenset({3, 4, 5})}
    # Still reporting the revoked partitions (or not reporting at all): nothing moves.
    assert h.heartbeat(member_id="a", member_epoch=1, topic_partitions=tps({FOO: set(range(6))})).member_epoch == 1
    assert h.heartbeat(member_id="a", member_epoch=1).member_epoch == 1
    assert b.beat().assignment is None and b.owned == {}
    # Revoked: a moves to epoch 2; then b gets the released partitions.
    assert a.beat().member_epoch == 2
    assert h.group().members["a"].state is MemberState.STABLE
    r = b.beat()
    assert as_dict(r.assignment) == {FOO: {3, 4, 5}} and r.member_epoch == 2
    assert h.group().state() is ConsumerGroupState.STABLE


def test_no_partition_ever_has_two_owners_during_reconciliation() -> None:
    h = Harness()
    clients = [Client(h, "a")]
    for name in "bcd":
        clients.append(Client(h, name, topics=("foo", "bar")))
        for _ in range(4):
            for c in clients:
                c.beat()
                owners: dict = {}
                for member in h.group().members.values():
                    for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                        for t, ps in assignment.items():
                            for p in ps:
                                assert (t, p) not in owners, "two owners"
                                owners[(t, p)] = member.member_id
                # what the clients believe they own never overlaps either
                seen: set = set()
                for other in clients:
                    mine = {(t, p) for t, ps in other.owned.items() for p in ps}
                    assert not (mine & seen)
                    seen |= mine
    assert h.group().state() is ConsumerGroupState.STABLE
    sizes = sorted(sum(len(ps) for ps in c.owned.values()) for c in clients)
    assert sum(sizes) == 9 and sizes[-1] - sizes[0] <= 1


def test_consumer_group_states() -> None:
    h = Harness()
    assert h.join("a").error_code == NONE
    group = h.group()
    assert group.state() is ConsumerGroupState.STABLE
    Client(h, "b")
    assert group.state() is ConsumerGroupState.RECONCILING
    # A group epoch ahead of the assignment epoch is Assigning (seen when loading such a log).
    h.ops.replay(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(group.group_epoch + 1))
    assert group.state() is ConsumerGroupState.ASSIGNING
    h2 = Harness()
    h2.join("a")
    h2.heartbeat(member_id="a", member_epoch=-1)
    assert h2.group().state() is ConsumerGroupState.EMPTY


def test_subscription_change_bumps_and_reassigns() -> None:
    h = Harness()
    a = Client(h, "a")
    r = a.beat(subscribed_topic_names=("foo", "bar"))
    assert h.group().group_epoch == 2 and r.member_epoch == 2
    assert as_dict(r.assignment) == {FOO: set(range(6)), BAR: {0, 1, 2}}


def test_topic_metadata_change_bumps_the_group_epoch() -> None:
    h = Harness()
    a = Client(h, "a")
    h.topics = TopicsImage({"foo": (FOO, 8), "bar": (BAR, 3)}, 2)
    r = a.beat()
    assert h.group().group_epoch == 2 and as_dict(r.assignment) == {FOO: set(range(8))}


def test_range_assignor_by_server_assignor() -> None:
    h = Harness()
    a = Client(h, "a", server_assignor="range")
    b = Client(h, "b", server_assignor="range")
    for _ in range(2):
        a.beat(), b.beat()
    assert a.owned == {FOO: {0, 1, 2}} and b.owned == {FOO: {3, 4, 5}}


# ================================================================================ regex

def test_regex_subscription_full_match_and_later_topics() -> None:
    h = Harness(topics=TopicsImage({"foo": (FOO, 2), "foo-1": (BAR, 1)}, 1))
    r = h.heartbeat(**dict(JOIN, subscribed_topic_names=None, subscribed_topic_regex="foo"))
    assert as_dict(r.assignment) == {FOO: {0, 1}}  # full match: "foo" is not "foo-1"
    assert kinds(h.last_records) == ["5", "16", "4", "3", "7", "6", "8"]
    # A topic created later is picked up once the image changed and 10 s passed.
    h2 = Harness(topics=TopicsImage({"foo": (FOO, 2)}, 1))
    h2.heartbeat(**dict(JOIN, subscribed_topic_names=None, subscribed_topic_regex="fo.*"))
    h2.topics = TopicsImage({"foo": (FOO, 2), "fox": (BAR, 1)}, 2)
    h2.now += 5_000
    assert h2.heartbeat(member_id="m", member_epoch=1).assignment is None
    h2.now += 5_000
    r = h2.heartbeat(member_id="m", member_epoch=1)
    assert as_dict(r.assignment) == {FOO: {0, 1}, BAR: {0}} and h2.group().group_epoch == 2


# ================================================================================ timers

def test_session_timeout_expiration() -> None:
    h = Harness()
    a, b = Client(h, "a"), Client(h, "b")
    a.beat(), a.beat(), b.beat()  # settled: no rebalance timer runs
    h.now += 40_000
    a.beat()
    records = h.advance(5_000)  # b's 45 s session is over; a heartbeat 5 s ago
    assert kinds(records) == ["8-", "7-", "5-", "3"]
    assert set(h.group().members) == {"a"}
    assert h.advance(39_999) == []  # a's session was re-armed by its heartbeat at 40 s
    assert kinds(h.advance(1)) == ["8-", "7-", "5-", "4", "3"]
    assert b.member_id not in h.group().members


def test_rebalance_timeout_expiration() -> None:
    h = Harness()
    a = Client(h, "a", rebalance_timeout_ms=10_000)
    Client(h, "b")
    a.beat(topic_partitions=tps({FOO: set(range(6))}))  # enters UNREVOKED_PARTITIONS
    assert h.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    h.now += 5_000
    h.heartbeat(member_id="a", member_epoch=1, topic_partitions=tps({FOO: set(range(6))}))  # still revoking
    h.heartbeat(member_id="b", member_epoch=2)
    records = h.advance(5_000)  # 10 s after entering the state
    assert kinds(records) == ["8-", "7-", "5-", "3"]
    assert set(h.group().members) == {"b"}


def test_rebalance_timer_cancelled_once_revoked() -> None:
    h = Harness()
    a = Client(h, "a", rebalance_timeout_ms=10_000)
    b = Client(h, "b")
    a.beat(topic_partitions=tps({FOO: set(range(6))}))
    a.beat()  # revoked
    b.beat()
    h.now += 9_000
    a.beat(), b.beat()
    assert h.advance(2_000) == []


# ================================================================================ replay

def test_replaying_the_log_rebuilds_the_same_groups() -> None:
    h = Harness()
    a = Client(h, "a", instance_id="ia")
    b = Client(h, "b", topics=("foo", "bar"))
    c = Client(h, "c")
    h.heartbeat(**dict(JOIN, member_id="r", subscribed_topic_names=None, subscribed_topic_regex="ba.*"))
    for _ in range(3):
        a.beat(), b.beat(), c.beat()
    h.heartbeat(member_id="c", member_epoch=-1)
    h.heartbeat(member_id="a", member_epoch=-2, instance_id="ia")
    fresh = h.replayed()
    assert fresh.groups == h.ops.groups


def test_group_tombstones_in_kafkas_order() -> None:
    h = Harness()
    Client(h, "a")
    h.heartbeat(**dict(JOIN, member_id="b", subscribed_topic_names=None, subscribed_topic_regex="fo.*"))
    records = h.group().group_tombstones()
    assert kinds(records) == ["8-", "8-", "7-", "7-", "6-", "5-", "5-", "16-", "4-", "3-"]
    for key, value in records:
        h.ops.replay(key, value)
    assert h.ops.groups == {}


def test_loading_from_bytes_rearms_the_timers() -> None:
    h = Harness()
    a = Client(h, "a", rebalance_timeout_ms=10_000)
    Client(h, "b")
    a.beat(topic_partitions=tps({FOO: set(range(6))}))  # a is revoking
    loaded = ConsumerGroupOperations(h.config)
    for key, value in h.log:
        assert loaded.replay_raw(encode_key(key), None if value is None else encode_value(value))
    assert not loaded.replay_raw(bytes.fromhex("0002" "0001" "67"), None)  # a classic group's record
    assert loaded.groups == h.ops.groups
    loaded.on_loaded(1_000)
    assert loaded.next_deadline() == 11_000  # a's rebalance timeout, re-armed from the load
    removed = loaded.fire_timers(11_000).records
    assert kinds(removed) == ["8-", "7-", "5-", "3"] and set(loaded.groups["g"].members) == {"b"}
    assert kinds(loaded.fire_timers(46_000).records) == ["8-", "7-", "5-", "4", "3"]  # b's session
