"""ConsumerGroup replay alone (B3, B6), in the manner of Kafka's ConsumerGroupTest: records build
members, owners, static ids and the derived state; tombstones take them away."""

from __future__ import annotations

import uuid

from offsetd.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState, MemberState
from offsetd.records.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
)

T = uuid.UUID(int=7)


def subscription(instance_id: str | None = None) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(instance_id, None, "client", "/10.0.0.1", ("foo",), None, 30000, None)


def current(epoch: int, state: int, assigned: tuple[int, ...], pending: tuple[int, ...] = ()):
    return ConsumerGroupCurrentMemberAssignmentValue(
        epoch, epoch - 1, state, (TopicPartitions(T, assigned),) if assigned else (),
        (TopicPartitions(T, pending),) if pending else ())


def test_members_owners_and_state_from_records() -> None:
    g = ConsumerGroup("g")
    assert g.state() is ConsumerGroupState.EMPTY
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), subscription("ia"))
    g.replay(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1))
    assert g.state() is ConsumerGroupState.ASSIGNING
    g.replay(ConsumerGroupTargetAssignmentMemberKey("g", "a"),
             ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(T, (0, 1)),)))
    g.replay(ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(1))
    assert g.state() is ConsumerGroupState.RECONCILING  # a is still at epoch 0
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), current(1, 0, (0, 1)))
    assert g.state() is ConsumerGroupState.STABLE
    assert g.static_members == {"ia": "a"}
    assert g.owner_of(T, 0) == "a" and g.owner_of(T, 2) is None
    assert g.members["a"].client_host == "/10.0.0.1"
    assert g.target_assignment == {"a": {T: frozenset({0, 1})}}


def test_pending_revocation_partitions_still_have_their_owner() -> None:
    g = ConsumerGroup("g")
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), subscription())
    unrevoked = current(1, int(MemberState.UNREVOKED_PARTITIONS), (0,), (1,))
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), unrevoked)
    assert g.owner_of(T, 1) == "a"
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), current(2, 0, (0,)))
    assert g.owner_of(T, 1) is None and g.partition_owners == {(T, 0): ("a", 2)}


def test_tombstones_remove_the_member_its_partitions_and_its_instance_id() -> None:
    g = ConsumerGroup("g")
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), subscription("ia"))
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), current(1, 0, (0, 1)))
    for key, value in g.member_tombstones("a"):
        g.replay(key, value)
    assert g.members == {} and g.partition_owners == {} and g.static_members == {}


def test_static_replacement_in_either_order_keeps_the_instance_id() -> None:
    g = ConsumerGroup("g")
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), subscription("ia"))
    g.replay(ConsumerGroupMemberMetadataKey("g", "b"), subscription("ia"))
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), None)
    assert g.static_members == {"ia": "b"}


def test_current_assignment_tombstone_resets_the_member() -> None:
    g = ConsumerGroup("g")
    g.replay(ConsumerGroupMemberMetadataKey("g", "a"), subscription())
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), current(3, 0, (0,)))
    g.replay(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), None)
    member = g.members["a"]
    assert (member.member_epoch, member.assigned_partitions) == (0, {}) and g.partition_owners == {}
