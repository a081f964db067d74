"""KIP-848 consumer groups: members, epochs and target assignment, changed only by replay.

Pure state (reference B3, B4, B6): everything here is what records 3-8 and 16 of
`__consumer_offsets` say, rebuilt by `ConsumerGroup.replay`, the same function during operation
and when loading. Operations (consumer_group_ops.py) read this state, emit records and replay
them; nothing else assigns these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from ..records.consumer_group_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicMetadata,
    TopicPartitions,
)
from .consumer_assignors import Assignment, TopicId
from .errors import ILLEGAL_GENERATION, NONE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION

ConsumerGroupRecord = tuple[ConsumerGroupKey, "ConsumerGroupValue | None"]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(IntEnum):
    """A member's reconciliation state as record 8 stores it."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


class ConsumerGroupState(str, Enum):
    """Derived group state; the values are the strings ConsumerGroupDescribe and ListGroups use."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def assignment_of(tps: tuple[TopicPartitions, ...]) -> Assignment:
    """Record form ([]TopicPartitions) -> {topic id: partitions}; empty topics dropped."""
    return {tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions}


def topic_partitions_of(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    """{topic id: partitions} -> record form, sorted so equal assignments encode equally."""
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


@dataclass(frozen=True)
class ConsumerGroupMember:
    """One member: its subscription (record 5) and its current assignment (record 8)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        """Record 5's value for this member."""
        return ConsumerGroupMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor,
            self.classic_member_metadata)

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        """Record 8's value for this member."""
        return ConsumerGroupCurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state),
            topic_partitions_of(self.assigned_partitions), topic_partitions_of(self.partitions_pending_revocation))

    def with_metadata(self, value: ConsumerGroupMemberMetadataValue) -> "ConsumerGroupMember":
        """This member with record 5's fields."""
        return replace(
            self, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor, classic_member_metadata=value.classic_member_metadata)

    def with_assignment(self, value: ConsumerGroupCurrentMemberAssignmentValue) -> "ConsumerGroupMember":
        """This member with record 8's fields."""
        return replace(
            self, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=MemberState(value.state), assigned_partitions=assignment_of(value.assigned_partitions),
            partitions_pending_revocation=assignment_of(value.partitions_pending_revocation))

    def same_assignment(self, other: "ConsumerGroupMember") -> bool:
        """Record 8 would not change: its fields compared as they are, not encoded (every steady
        heartbeat asks this; encoding both sides cost a quarter of the heartbeat's CPU)."""
        return (self.member_epoch == other.member_epoch and self.previous_member_epoch == other.previous_member_epoch
                and self.state == other.state
                and _held(self.assigned_partitions) == _held(other.assigned_partitions)
                and _held(self.partitions_pending_revocation) == _held(other.partitions_pending_revocation))


def _held(assignment: Assignment) -> Assignment:
    """The topics with partitions: what record 8 encodes of an assignment (empty topics drop out)."""
    return assignment if all(assignment.values()) else {t: ps for t, ps in assignment.items() if ps}


@dataclass
class ConsumerGroup:
    """A consumer group's replayed state, with the indexes derived from it."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)  # by topic name
    resolved_regexes: dict[str, ConsumerGroupRegularExpressionValue] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # (topic id, partition) -> (member id, its epoch): assigned and pending-revocation partitions
    partition_owners: dict[tuple[TopicId, int], tuple[str, int]] = field(default_factory=dict)

    # ------------------------------------------------------------------------- derived

    def state(self) -> ConsumerGroupState:
        """Empty, Assigning (epoch ahead of the target), Reconciling (a member behind), or Stable (B3)."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_of(self, topic_id: TopicId, partition: int) -> str | None:
        """The member that holds (or is still revoking) a partition, or None."""
        entry = self.partition_owners.get((topic_id, partition))
        return entry[0] if entry else None

    def subscribed_topics(self) -> set[str]:
        """Topics the members subscribe to now (names and resolved regexes that exist): their
        offsets never expire (B7); none while the group has no members."""
        return set(self.subscription_metadata) if self.members else set()

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int,
                               transactional: bool = False) -> int:
        """OffsetCommit / TxnOffsetCommit against this group (B7): a negative epoch with no
        members is a simple commit; else the member must exist (25), need v9+ for a plain commit
        (35), and carry its current epoch (113); a classic member's generation is its epoch (22)."""
        if member_epoch < 0 and not self.members:
            return NONE
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member.classic_member_metadata is not None:  # generation = member epoch, any version
            return NONE if member_epoch == member.member_epoch else ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return UNSUPPORTED_VERSION
        return NONE if member_epoch == member.member_epoch else STALE_MEMBER_EPOCH

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9 against this group (B7): no member and a negative epoch is not checked;
        else the member must exist (25) and carry its current epoch (113)."""
        if member_id is None and member_epoch < 0:
            return NONE
        member = self.members.get(member_id or "")
        if member is None:
            return UNKNOWN_MEMBER_ID
        return NONE if member_epoch == member.member_epoch else STALE_MEMBER_EPOCH

    def regex_users(self, regex: str, ignoring: str | None = None) -> int:
        """How many members (other than `ignoring`) subscribe with this regular expression."""
        return sum(1 for m in self.members.values() if m.subscribed_topic_regex == regex and m.member_id != ignoring)

    # -------------------------------------------------------------------------- replay

    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        """Apply one record of this group (the caller routes by group id). Record 3's tombstone
        is the caller's business: it removes the whole group."""
        t = type(key)
        if t is ConsumerGroupMetadataKey:
            if value is not None:
                self.group_epoch = value.epoch  # type: ignore[union-attr]
        elif t is ConsumerGroupPartitionMetadataKey:
            topics = value.topics if value is not None else ()  # type: ignore[union-attr]
            self.subscription_metadata = {tm.topic_name: tm for tm in topics}
        elif t is ConsumerGroupMemberMetadataKey:
            self._replay_member_metadata(key.member_id, value)  # type: ignore[union-attr, arg-type]
        elif t is ConsumerGroupTargetAssignmentMetadataKey:
            self.assignment_epoch = value.assignment_epoch if value is not None else 0  # type: ignore[union-attr]
        elif t is ConsumerGroupTargetAssignmentMemberKey:
            if value is None:
                self.target_assignment.pop(key.member_id, None)  # type: ignore[union-attr]
            else:
                target = assignment_of(value.topic_partitions)  # type: ignore[union-attr]
                self.target_assignment[key.member_id] = target  # type: ignore[union-attr]
        elif t is ConsumerGroupCurrentMemberAssignmentKey:
            self._replay_member_assignment(key.member_id, value)  # type: ignore[union-attr, arg-type]
        elif t is ConsumerGroupRegularExpressionKey:
            if value is None:
                self.resolved_regexes.pop(key.regular_expression, None)  # type: ignore[union-attr]
            else:
                self.resolved_regexes[key.regular_expression] = value  # type: ignore[union-attr, assignment]

    def _replay_member_metadata(self, member_id: str, value: ConsumerGroupMemberMetadataValue | None) -> None:
        """Record 5: create or update a member (and the instance-id index); its tombstone removes it."""
        old = self.members.get(member_id)
        if old is not None and old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        if value is None:
            if old is not None:
                self._set_owners(old, None)
                del self.members[member_id]
            return
        member = (old or ConsumerGroupMember(member_id)).with_metadata(value)
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _replay_member_assignment(self, member_id: str,
                                  value: ConsumerGroupCurrentMemberAssignmentValue | None) -> None:
        """Record 8: a member's assignment (and the owner index); its tombstone resets it."""
        old = self.members.get(member_id)
        if old is None and value is None:
            return
        base = old or ConsumerGroupMember(member_id)
        member = base.with_assignment(value) if value is not None else replace(
            base, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
            assigned_partitions={}, partitions_pending_revocation={})
        self._set_owners(old, member)
        self.members[member_id] = member

    def _set_owners(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None) -> None:
        """Move the partition-owner index from a member's old assignment to its new one."""
        if old is not None:
            for assignment in (old.assigned_partitions, old.partitions_pending_revocation):
                for t, ps in assignment.items():
                    for p in ps:
                        if self.partition_owners.get((t, p), (None,))[0] == old.member_id:
                            del self.partition_owners[(t, p)]
        if new is not None:
            for assignment in (new.assigned_partitions, new.partitions_pending_revocation):
                for t, ps in assignment.items():
                    for p in ps:
                        self.partition_owners[(t, p)] = (new.member_id, new.member_epoch)

    # ---------------------------------------------------------------------- tombstones

    def member_tombstones(self, member_id: str) -> list[ConsumerGroupRecord]:
        """Records removing one member, in Kafka's order: current assignment, target, subscription."""
        return [
            (ConsumerGroupCurrentMemberAssignmentKey(self.group_id, member_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(self.group_id, member_id), None),
            (ConsumerGroupMemberMetadataKey(self.group_id, member_id), None),
        ]

    def group_tombstones(self) -> list[ConsumerGroupRecord]:
        """Records deleting the whole group, in Kafka's order: every 8, every 7, 6, every 5, every
        16, 4, and 3 last (replaying 3's tombstone removes the group)."""
        g = self.group_id
        members = sorted(self.members)
        return [
            *((ConsumerGroupCurrentMemberAssignmentKey(g, m), None) for m in members),
            *((ConsumerGroupTargetAssignmentMemberKey(g, m), None) for m in sorted(self.target_assignment)),
            (ConsumerGroupTargetAssignmentMetadataKey(g), None),
            *((ConsumerGroupMemberMetadataKey(g, m), None) for m in members),
            *((ConsumerGroupRegularExpressionKey(g, r), None) for r in sorted(self.resolved_regexes)),
            (ConsumerGroupPartitionMetadataKey(g), None),
            (ConsumerGroupMetadataKey(g), None),
        ]


def metadata_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    """Record 3: the group epoch."""
    return ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch)


def partition_metadata_record(group_id: str, topics: dict[str, TopicMetadata]) -> ConsumerGroupRecord:
    """Record 4: the subscribed topics' metadata, sorted by name."""
    return ConsumerGroupPartitionMetadataKey(group_id), ConsumerGroupPartitionMetadataValue(
        tuple(topics[name] for name in sorted(topics)))


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> ConsumerGroupRecord:
    """Record 5: a member's subscription."""
    return ConsumerGroupMemberMetadataKey(group_id, member.member_id), member.metadata_value()


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> ConsumerGroupRecord:
    """Record 7: a member's target assignment."""
    return (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
            ConsumerGroupTargetAssignmentMemberValue(topic_partitions_of(assignment)))


def target_metadata_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    """Record 6: the target assignment's epoch."""
    return ConsumerGroupTargetAssignmentMetadataKey(group_id), ConsumerGroupTargetAssignmentMetadataValue(epoch)


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> ConsumerGroupRecord:
    """Record 8: a member's epochs, state and partitions."""
    return ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id), member.assignment_value()


def regex_record(group_id: str, regex: str, value: ConsumerGroupRegularExpressionValue | None) -> ConsumerGroupRecord:
    """Record 16 (None: its tombstone)."""
    return ConsumerGroupRegularExpressionKey(group_id, regex), value
