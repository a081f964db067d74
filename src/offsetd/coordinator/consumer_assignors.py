"""Server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.

Pure functions of (members with their subscribed topic ids and current target assignment,
partition count per topic id) -> the new target assignment per member (reference B5). Both are
deterministic (members and topics are visited in sorted order), sticky (a member keeps what it
can) and give every subscribed partition to exactly one of its topic's subscribers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]
"""Partitions per topic id; a topic with no partition for the member is absent."""

__all__ = [
    "TopicId",
    "Assignment",
    "AssignmentMemberSpec",
    "Assignor",
    "uniform_assign",
    "range_assign",
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
]


@dataclass(frozen=True)
class AssignmentMemberSpec:
    """What an assignor knows of a member: its subscribed topics and its current target."""

    subscribed_topic_ids: frozenset[TopicId]
    assignment: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)


Assignor = Callable[[Mapping[str, AssignmentMemberSpec], Mapping[TopicId, int]], dict[str, Assignment]]


def _freeze(owned: dict[str, dict[TopicId, set[int]]]) -> dict[str, Assignment]:
    """The assignors' result form: frozensets, empty topics dropped, topics sorted."""
    return {m: {t: frozenset(ps) for t, ps in sorted(topics.items()) if ps} for m, topics in owned.items()}


def _kept_partitions(members: Mapping[str, AssignmentMemberSpec], partition_counts: Mapping[TopicId, int],
                     order: list[str]) -> dict[str, dict[TopicId, set[int]]]:
    """Per member, its current partitions that still exist and that it still subscribes to;
    a partition two members claim stays with the first in `order`."""
    claimed: set[tuple[TopicId, int]] = set()
    kept: dict[str, dict[TopicId, set[int]]] = {}
    for member_id in order:
        spec = members[member_id]
        mine: dict[TopicId, set[int]] = {}
        for topic_id in sorted(spec.assignment):
            count = partition_counts.get(topic_id)
            if count is None or topic_id not in spec.subscribed_topic_ids:
                continue
            for p in sorted(spec.assignment[topic_id]):
                if 0 <= p < count and (topic_id, p) not in claimed:
                    claimed.add((topic_id, p))
                    mine.setdefault(topic_id, set()).add(p)
        kept[member_id] = mine
    return kept


# ------------------------------------------------------------------------------ uniform


def uniform_assign(members: Mapping[str, AssignmentMemberSpec],
                   partition_counts: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Balance first, then stickiness: members keep their partitions; free partitions go to the
    least-loaded subscriber; then partitions move one at a time from a member to a subscriber
    of their topic holding at least two fewer, until no such move exists. With homogeneous
    subscriptions the counts then differ by at most one."""
    order = sorted(members)
    owned = _kept_partitions(members, partition_counts, order)
    load = {m: sum(len(ps) for ps in owned[m].values()) for m in order}
    subscribers: dict[TopicId, list[str]] = {}
    for member_id in order:
        for topic_id in members[member_id].subscribed_topic_ids:
            if topic_id in partition_counts:
                subscribers.setdefault(topic_id, []).append(member_id)
    taken = {(t, p) for m in order for t, ps in owned[m].items() for p in ps}
    # Free partitions, topics with the fewest subscribers first (the most constrained).
    for topic_id in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        candidates = subscribers[topic_id]
        for p in range(partition_counts[topic_id]):
            if (topic_id, p) in taken:
                continue
            target = min(candidates, key=lambda m: (load[m], m))
            owned[target].setdefault(topic_id, set()).add(p)
            load[target] += 1
    _rebalance(owned, load, subscribers)
    return _freeze(owned)


def _rebalance(owned: dict[str, dict[TopicId, set[int]]], load: dict[str, int],
               subscribers: dict[TopicId, list[str]]) -> None:
    """Move single partitions from a member to a subscriber with at least two fewer until none
    can move; every move lowers the sum of squared loads, so this ends."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(load, key=lambda m: (-load[m], m)):
            for topic_id in sorted(owned[giver], reverse=True):
                partitions = owned[giver][topic_id]
                if not partitions:
                    continue
                taker = min(subscribers[topic_id], key=lambda m: (load[m], m))
                if load[taker] < load[giver] - 1:
                    p = max(partitions)
                    partitions.discard(p)
                    owned[taker].setdefault(topic_id, set()).add(p)
                    load[giver] -= 1
                    load[taker] += 1
                    moved = True
                    break
            if moved:
                break


# -------------------------------------------------------------------------------- range


def range_assign(members: Mapping[str, AssignmentMemberSpec],
                 partition_counts: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Per topic, its subscribers (by member id) get contiguous ranges, the first `count % n`
    one partition more, as the classic range assignor; sticky: a member keeps its partitions up
    to its quota, and an extra partition goes first to members already holding more."""
    order = sorted(members)
    kept = _kept_partitions(members, partition_counts, order)
    owned: dict[str, dict[TopicId, set[int]]] = {m: {} for m in order}
    for topic_id in sorted(partition_counts):
        subs = [m for m in order if topic_id in members[m].subscribed_topic_ids]
        count = partition_counts[topic_id]
        if not subs or count <= 0:
            continue
        base, extra = divmod(count, len(subs))
        current = {m: sorted(kept[m].get(topic_id, ())) for m in subs}
        extra_first = [m for m in subs if len(current[m]) > base] + [m for m in subs if len(current[m]) <= base]
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(extra_first)}
        taken: set[int] = set()
        for m in subs:
            keep = current[m][:quota[m]]
            if keep:
                owned[m][topic_id] = set(keep)
                taken.update(keep)
        free = iter(p for p in range(count) if p not in taken)
        for m in subs:
            mine = owned[m].setdefault(topic_id, set())
            while len(mine) < quota[m]:
                mine.add(next(free))
    return _freeze(owned)


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
"""`group.consumer.assignors`: the names ServerAssignor may carry."""

DEFAULT_ASSIGNOR = "uniform"
