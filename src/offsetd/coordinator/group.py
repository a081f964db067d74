"""Classic consumer groups: members, the state machine, protocol selection and subscriptions.

Pure data and rules (reference §1.11, §1.4); the shard drives it. Durable fields (generation,
protocol, leader, members' metadata and assignments, state timestamp) are what a GroupMetadata
record persists; parked requests and timers are ephemeral, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Hashable

from ..records.consumer_protocol import parse_subscription_topics
from ..records.group_metadata_value import GroupMetadataValue, MemberMetadata

CONSUMER_PROTOCOL = "consumer"


class GroupState(str, Enum):
    """Classic group states; the values are the wire strings DescribeGroups/ListGroups use."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Allowed previous states of each state (§1.11).
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A transition §1.11 does not allow: a coordinator bug, never a client error."""


# The id sets a group holds only during a join or a sync share this empty one until written.
_NO_IDS: frozenset[str] = frozenset()


@dataclass
class ClassicGroupMember:
    """One member of a classic group, with its parked Join/Sync request tokens."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: Hashable | None = None
    sync_token: Hashable | None = None
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        """This member's metadata for `protocol` (b"" if it does not offer it)."""
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, in the same order, with the same metadata."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass(slots=True)
class ClassicGroup:
    """A classic (JoinGroup/SyncGroup) group, or a simple group created by a manual commit.
    Slotted, with its two id sets shared until written: a broker holds one per group, and most
    groups of a million are offsets-only (an empty set alone is 216 bytes)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Ids handed out by MEMBER_ID_REQUIRED, and members that have not synced this generation;
    # changed only through the methods below.
    pending_members: set[str] | frozenset[str] = _NO_IDS
    pending_sync: set[str] | frozenset[str] = _NO_IDS
    subscribed_topics: set[str] | None = None
    new_member_added: bool = False
    initial_delay_remaining_ms: int = 0

    # ------------------------------------------------------------------ state machine

    def transition(self, target: GroupState, now: int) -> None:
        """Move to `target`, stamping current_state_timestamp (the KIP-211 retention clock)."""
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp = now

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # ------------------------------------------------------------------------ members

    def add(self, member: ClassicGroupMember) -> None:
        """Add a member; the first one becomes leader; the group takes its protocol type."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        """Remove a member; a new leader is the first remaining member."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.synced(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def add_pending_member(self, member_id: str) -> None:
        if isinstance(self.pending_members, set):
            self.pending_members.add(member_id)
        else:
            self.pending_members = {member_id}

    def discard_pending_member(self, member_id: str) -> bool:
        """Forget a pending member id; whether it was pending."""
        ids = self.pending_members
        if isinstance(ids, set) and member_id in ids:
            ids.discard(member_id)
            return True
        return False

    def clear_pending_members(self) -> None:
        self.pending_members = _NO_IDS

    def await_sync(self) -> None:
        """A generation starts: every member has yet to sync."""
        self.pending_sync = set(self.members)

    def synced(self, member_id: str) -> None:
        if isinstance(self.pending_sync, set):
            self.pending_sync.discard(member_id)

    def clear_pending_sync(self) -> None:
        self.pending_sync = _NO_IDS

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicGroupMember:
        """A static member rejoined with a fresh member id: keep its place and assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if isinstance(self.pending_sync, set) and old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_token is not None)

    def all_joined(self) -> bool:
        """Every known member has rejoined and no MEMBER_ID_REQUIRED handshake is open."""
        return self.awaiting_join() == len(self.members) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---------------------------------------------------------------------- protocols

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """JoinGroup's INCONSISTENT_GROUP_PROTOCOL check (§1.6)."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        common = self.candidate_protocols()
        return bool(common & names)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its preferred common protocol; the most votes wins (ties: the
        first member's preference)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        first = next(iter(self.members.values()))
        return next(name for name in first.protocol_names() if votes.get(name) == best)

    # ------------------------------------------------------------------ subscriptions

    def compute_subscribed_topics(self) -> None:
        """KIP-496 subscription set: known only for the "consumer" protocol with parsable metadata."""
        if self.protocol_type != CONSUMER_PROTOCOL:
            self.subscribed_topics = None
            return
        if not self.members:
            self.subscribed_topics = set()
            return
        if self.protocol_name is None:
            self.subscribed_topics = None
            return
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                self.subscribed_topics = None
                return
            topics.update(parsed)
        self.subscribed_topics = topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """§1.4: the known set decides; unknown means subscribed iff the protocol is "consumer"."""
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == CONSUMER_PROTOCOL

    # ----------------------------------------------------------------------- records

    def to_record(self) -> GroupMetadataValue:
        """The GroupMetadata value persisting this group's durable fields."""
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                    client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms, subscription=m.metadata(self.protocol_name),
                    assignment=m.assignment)
                for m in self.members.values()),
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> "ClassicGroup":
        """Rebuild a group when loading: Stable if it has members, else Empty (§1.11)."""
        group = cls(group_id=group_id, generation=value.generation,
                    protocol_type=value.protocol_type or None, protocol_name=value.protocol,
                    leader_id=value.leader, state_timestamp=value.current_state_timestamp,
                    state=GroupState.STABLE if value.members else GroupState.EMPTY)
        for m in value.members:
            member = ClassicGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout, protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", m.subscription)], assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.compute_subscribed_topics()
        return group
