"""The `simple` share-group assignor (KIP-932, share-groups.md §2), pure code.

Every subscribed partition is assigned. When a topic has at least as many partitions as
subscribers, each partition goes to exactly one member; when it has fewer, each partition is
shared by ceil(members / partitions) members, so that every subscriber gets some. Members'
loads on a topic differ by at most one; balance comes first, then stickiness (a member keeps
what it had where the balance allows), then the member's load over all topics, then its id.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from .consumer_assignors import Assignment, TopicId


def simple_assign(subscriptions: Mapping[str, frozenset[TopicId]], partition_counts: Mapping[TopicId, int],
                  previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """A target assignment for every member: {member id: {topic id: partitions}}."""
    out: dict[str, dict[TopicId, set[int]]] = {m: {} for m in subscriptions}
    load: Counter[str] = Counter()
    for topic in sorted(partition_counts):
        n = partition_counts[topic]
        subscribers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if n <= 0 or not subscribers:
            continue
        for member, partitions in _assign_topic(topic, n, subscribers, previous, load).items():
            if partitions:
                out[member][topic] = partitions
                load[member] += len(partitions)
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in out.items()}


def _assign_topic(topic: TopicId, n: int, subscribers: list[str], previous: Mapping[str, Assignment],
                  load: Counter[str]) -> dict[str, set[int]]:
    """One topic's partitions over its subscribers: `sharing` holders per partition, per-member
    quotas differing by at most one (the extra slots to those that held more of it before)."""
    sharing = -(-len(subscribers) // n)  # ceil: 1 unless members outnumber partitions
    slots = n * sharing
    base, extra = divmod(slots, len(subscribers))
    held = {m: {p for p in previous.get(m, {}).get(topic, ()) if p < n} for m in subscribers}
    by_preference = sorted(subscribers, key=lambda m: (-len(held[m]), load[m], m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_preference)}
    owners: dict[int, set[str]] = {p: set() for p in range(n)}
    got: dict[str, set[int]] = {m: set() for m in subscribers}
    for m in by_preference:  # stickiness, within the quotas and the sharing
        for p in sorted(held[m]):
            if len(got[m]) < quota[m] and len(owners[p]) < sharing:
                got[m].add(p)
                owners[p].add(m)
    for p in range(n):
        while len(owners[p]) < sharing:
            free = [m for m in subscribers if m not in owners[p]]
            if not free:
                break
            open_quota = [m for m in free if len(got[m]) < quota[m]] or free
            m = min(open_quota, key=lambda c: (len(got[c]), load[c], c))
            got[m].add(p)
            owners[p].add(m)
    return got
