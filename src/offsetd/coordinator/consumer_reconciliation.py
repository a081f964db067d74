"""KIP-848 reconciliation: a member's next current assignment on its way to the target (B3).

Pure function, no records: given the member as replayed, the target epoch and assignment, what
the member reports owning, and who else holds each partition, it returns the member as it
should be next. Revocation always precedes assignment, and a partition still held by another
member is never given, so no partition ever has two owners.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from .consumer_assignors import Assignment, TopicId
from .consumer_group import ConsumerGroupMember, MemberState

OtherOwner = Callable[[TopicId, int], bool]
"""True when a member other than the one reconciled holds (or is revoking) the partition."""


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owned: Assignment | None,
              held_by_other: OtherOwner) -> ConsumerGroupMember:
    """The member's next state. `owned` is the request's TopicPartitions (None: not sent, so the
    member is assumed to still hold everything)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member  # still revoking
        return _next(member, target_epoch, target, owned, held_by_other)
    if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    # STABLE behind the target, or UNRELEASED_PARTITIONS (perhaps released by now).
    return _next(member, target_epoch, target, owned, held_by_other)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still holds any of `partitions` (not saying counts as holding all)."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def _next(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owned: Assignment | None,
          held_by_other: OtherOwner) -> ConsumerGroupMember:
    """keep = current ∩ target, revoke = current − target, add = target − current minus what
    another member still holds. Partitions to revoke that the member still holds keep it at its
    epoch until it lets them go; otherwise it moves to the target epoch with what is free."""
    current = member.assigned_partitions
    keep: dict[TopicId, frozenset[int]] = {}
    revoke: dict[TopicId, frozenset[int]] = {}
    add: dict[TopicId, set[int]] = {}
    unreleased = False
    for topic_id in set(current) | set(target):
        mine = current.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        if mine & wanted:
            keep[topic_id] = mine & wanted
        if mine - wanted:
            revoke[topic_id] = mine - wanted
        for p in wanted - mine:
            if held_by_other(topic_id, p):
                unreleased = True
            else:
                add.setdefault(topic_id, set()).add(p)
    if revoke and _owns_any(owned, revoke):
        return _with(member, member.member_epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    assigned = dict(keep)
    for topic_id, ps in add.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with(member, target_epoch, state, assigned, {})


def _with(member: ConsumerGroupMember, epoch: int, state: MemberState, assigned: Assignment,
          pending: Assignment) -> ConsumerGroupMember:
    """The member at `epoch`, its epoch before becoming the previous one (as Kafka records it)."""
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch, state=state,
                   assigned_partitions=assigned, partitions_pending_revocation=pending)
