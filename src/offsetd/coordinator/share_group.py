"""KIP-932 share groups: members, epochs and target assignment, changed only by replay.

Pure state (share-groups.md §2, §5): everything here is what records 10-15 of
`__consumer_offsets` say, rebuilt by `ShareGroup.replay`, the same function during operation and
when loading. share_group_ops.py reads this state, emits records and replays them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from ..records.share_group_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareGroupValue,
)
from .consumer_assignors import Assignment
from .consumer_group import assignment_of, topic_partitions_of

ShareGroupRecord = tuple[ShareGroupKey, "ShareGroupValue | None"]

LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareGroupState(str, Enum):
    """A share group's state as ShareGroupDescribe and ListGroups show it."""

    EMPTY = "Empty"
    STABLE = "Stable"


@dataclass(frozen=True)
class ShareGroupMember:
    """One member: its subscription (record 10) and its current assignment (record 14)."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0
    assigned_partitions: Assignment = field(default_factory=dict)

    def metadata_value(self) -> ShareGroupMemberMetadataValue:
        """Record 10's value for this member."""
        return ShareGroupMemberMetadataValue(self.rack_id, self.client_id, self.client_host,
                                             self.subscribed_topic_names)

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        """Record 14's value for this member."""
        return ShareGroupCurrentMemberAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state,
                                                      topic_partitions_of(self.assigned_partitions))


@dataclass
class ShareGroup:
    """A share group's replayed state."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    state_metadata: ShareGroupStatePartitionMetadataValue = field(
        default_factory=lambda: ShareGroupStatePartitionMetadataValue((), (), ()))

    def state(self) -> ShareGroupState:
        """Empty without members, else Stable (share members have nothing to revoke)."""
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def replay(self, key: ShareGroupKey, value: ShareGroupValue | None) -> None:
        """Apply one record of this group (the caller routes by group id; record 11's tombstone,
        which removes the whole group, is the caller's business)."""
        t = type(key)
        if t is ShareGroupMetadataKey:
            if value is not None:
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash  # type: ignore[union-attr]
        elif t is ShareGroupMemberMetadataKey:
            self._replay_member_metadata(key.member_id, value)  # type: ignore[union-attr, arg-type]
        elif t is ShareGroupTargetAssignmentMetadataKey:
            self.assignment_epoch = value.assignment_epoch if value is not None else 0  # type: ignore[union-attr]
        elif t is ShareGroupTargetAssignmentMemberKey:
            if value is None:
                self.target_assignment.pop(key.member_id, None)  # type: ignore[union-attr]
            else:
                self.target_assignment[key.member_id] = assignment_of(value.topic_partitions)  # type: ignore
        elif t is ShareGroupCurrentMemberAssignmentKey:
            self._replay_member_assignment(key.member_id, value)  # type: ignore[union-attr, arg-type]
        elif t is ShareGroupStatePartitionMetadataKey:
            self.state_metadata = value or ShareGroupStatePartitionMetadataValue((), (), ())  # type: ignore

    def _replay_member_metadata(self, member_id: str, value: ShareGroupMemberMetadataValue | None) -> None:
        """Record 10: create or update a member; its tombstone removes it."""
        if value is None:
            self.members.pop(member_id, None)
            return
        old = self.members.get(member_id) or ShareGroupMember(member_id)
        self.members[member_id] = replace(old, rack_id=value.rack_id, client_id=value.client_id,
                                          client_host=value.client_host,
                                          subscribed_topic_names=value.subscribed_topic_names)

    def _replay_member_assignment(self, member_id: str, value: ShareGroupCurrentMemberAssignmentValue | None) -> None:
        """Record 14: a member's epochs and partitions; its tombstone resets them."""
        old = self.members.get(member_id)
        if old is None and value is None:
            return
        base = old or ShareGroupMember(member_id)
        if value is None:
            self.members[member_id] = replace(base, member_epoch=0, previous_member_epoch=0, state=0,
                                              assigned_partitions={})
        else:
            self.members[member_id] = replace(
                base, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                state=value.state, assigned_partitions=assignment_of(value.assigned_partitions))

    def member_tombstones(self, member_id: str) -> list[ShareGroupRecord]:
        """Records removing one member, in Kafka's order: current assignment, target, subscription."""
        g = self.group_id
        return [(ShareGroupCurrentMemberAssignmentKey(g, member_id), None),
                (ShareGroupTargetAssignmentMemberKey(g, member_id), None),
                (ShareGroupMemberMetadataKey(g, member_id), None)]

    def group_tombstones(self) -> list[ShareGroupRecord]:
        """Records deleting the whole group: every 14, every 13, 12, every 10, 15, and 11 last
        (replaying 11's tombstone removes the group)."""
        g = self.group_id
        members = sorted(self.members)
        return [
            *((ShareGroupCurrentMemberAssignmentKey(g, m), None) for m in members),
            *((ShareGroupTargetAssignmentMemberKey(g, m), None) for m in sorted(self.target_assignment)),
            (ShareGroupTargetAssignmentMetadataKey(g), None),
            *((ShareGroupMemberMetadataKey(g, m), None) for m in members),
            (ShareGroupStatePartitionMetadataKey(g), None),
            (ShareGroupMetadataKey(g), None),
        ]


def metadata_record(group_id: str, epoch: int, metadata_hash: int) -> ShareGroupRecord:
    """Record 11: the group epoch and the subscribed topics' hash."""
    return ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(epoch, metadata_hash)


def member_metadata_record(group_id: str, member: ShareGroupMember) -> ShareGroupRecord:
    """Record 10: a member's subscription."""
    return ShareGroupMemberMetadataKey(group_id, member.member_id), member.metadata_value()


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> ShareGroupRecord:
    """Record 13: a member's target assignment."""
    return (ShareGroupTargetAssignmentMemberKey(group_id, member_id),
            ShareGroupTargetAssignmentMemberValue(topic_partitions_of(assignment)))


def target_metadata_record(group_id: str, epoch: int) -> ShareGroupRecord:
    """Record 12: the target assignment's epoch."""
    return ShareGroupTargetAssignmentMetadataKey(group_id), ShareGroupTargetAssignmentMetadataValue(epoch)


def current_assignment_record(group_id: str, member: ShareGroupMember) -> ShareGroupRecord:
    """Record 14: a member's epochs and partitions."""
    return ShareGroupCurrentMemberAssignmentKey(group_id, member.member_id), member.assignment_value()


def state_metadata_record(group_id: str, value: ShareGroupStatePartitionMetadataValue) -> ShareGroupRecord:
    """Record 15: the topics whose share-partition state is initialized (or initializing, deleting)."""
    return ShareGroupStatePartitionMetadataKey(group_id), value
