"""Who owns which partition: the sans-IO lease and claim rules of cluster mode.

Every broker holds a lease (a row whose expiry PostgreSQL's clock judges) and owns some
partitions, each with an epoch bumped on every claim (the leader epoch clients see). This module
decides, from a snapshot of the shared state and the broker's own clock, what the broker must do:
claim, release, or give up. It reads no clock and touches no database (cluster/postgres_shell.py
does); tests drive it with a fake clock.

Rules (reference cluster-on-postgres.md §3):
* A partition's preferred owner is the live broker with the highest rendezvous hash of
  (partition, broker): every broker computes the same answer, so claims rarely race, and a broker
  joining takes over about 1/N of the partitions and nothing else moves.
* A broker claims a partition that has no owner, or whose owner's lease expired, when it is the
  preferred owner among the live brokers. It re-claims (a new epoch) what its own earlier
  incarnation owned: that process may still be alive as a zombie, and the new epoch fences it.
* It releases (graceful handoff) a partition whose preferred owner is now another live broker,
  and sets free one recorded as its own that it does not hold (peers would wait for it forever).
* It serves only until its local lease deadline: the monotonic time the last successful renewal
  was *sent*, plus the TTL, minus a margin. Past it everything it owns is lost at once, so a
  frozen or partitioned broker stops acknowledging before anyone else may claim.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Mapping

PartitionKey = tuple[str, int]  # (topic id as hex, partition index)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """A partition's ownership as the shared state has it."""

    key: PartitionKey
    owner: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What a broker does after looking at the shared state: partitions to claim, to release
    (graceful, it still owns them) and lost (another broker holds them now, or the lease ran out)."""

    claim: list[PartitionKey] = field(default_factory=list)
    release: list[PartitionKey] = field(default_factory=list)
    lost: list[PartitionKey] = field(default_factory=list)
    # Recorded as ours in the shared state but not held by this process (an earlier incarnation's,
    # or given up after an append with an unknown outcome) and preferred elsewhere: peers see a
    # live owner and would never claim it, so it is set free: (partition, its epoch).
    disown: list[tuple[PartitionKey, int]] = field(default_factory=list)


def rendezvous_owner(key: Hashable, brokers: Iterable[int]) -> int | None:
    """The broker with the highest hash of (key, broker): the same on every broker (no Python
    `hash`, which is salted per process)."""
    best: tuple[int, int] | None = None
    for node in brokers:
        score = (_score(key, node), node)
        if best is None or score > best:
            best = score
    return None if best is None else best[1]


def _score(key: Hashable, node: int) -> int:
    """The rendezvous score of (key, node): 64 bits of BLAKE2b over "repr(key)|node"."""
    return int.from_bytes(hashlib.blake2b(f"{key!r}|{node}".encode(), digest_size=8).digest(), "big")


class Lease:
    """This broker's lease, judged by its own monotonic clock: serving until the deadline."""

    def __init__(self, ttl_ms: int, margin_ms: int) -> None:
        if margin_ms >= ttl_ms:
            raise ValueError(f"lease margin {margin_ms} ms must be below the TTL {ttl_ms} ms")
        self.ttl_ms = ttl_ms
        self.margin_ms = margin_ms
        self.deadline_ms: float | None = None  # None: never renewed, or given up

    def renewed(self, sent_at_ms: float) -> None:
        """A renewal sent at `sent_at_ms` succeeded: PostgreSQL extended the lease by the TTL from
        a moment after that, so counting from the send time is the safe side."""
        deadline = sent_at_ms + self.ttl_ms - self.margin_ms
        if self.deadline_ms is None or deadline > self.deadline_ms:
            self.deadline_ms = deadline

    def expire(self) -> None:
        """The lease is gone (a renewal found the row taken, or the broker is stopping)."""
        self.deadline_ms = None

    def valid(self, now_ms: float) -> bool:
        return self.deadline_ms is not None and now_ms < self.deadline_ms


class Preferences:
    """Each partition's preferred owner among the live brokers, with the rendezvous scores kept per
    (partition, broker): at 100,000 partitions the hashes are most of what a look at ownership
    costs, and when a broker dies the survivors' scores are already known."""

    def __init__(self) -> None:
        self._brokers: tuple[int, ...] = ()
        self._owner: dict[Hashable, int | None] = {}
        self._scores: dict[Hashable, dict[int, int]] = {}

    def owner(self, key: Hashable, brokers: tuple[int, ...]) -> int | None:
        """rendezvous_owner(key, brokers), `brokers` sorted."""
        if brokers != self._brokers:
            self._brokers, self._owner = brokers, {}
        try:
            return self._owner[key]
        except KeyError:
            pass
        scores = self._scores.get(key)
        if scores is None:
            scores = self._scores[key] = {}
        best: tuple[int, int] | None = None
        for node in brokers:
            score = scores.get(node)
            if score is None:
                score = scores[node] = _score(key, node)
            if best is None or (score, node) > best:
                best = (score, node)
        owner = self._owner[key] = None if best is None else best[1]
        return owner

    def forget(self, keys: Iterable[Hashable]) -> None:
        """Partitions that are gone (their topic was deleted)."""
        for key in keys:
            self._owner.pop(key, None)
            self._scores.pop(key, None)


def plan(me: int, live: Iterable[int], rows: Iterable[PartitionRow], owned: Mapping[PartitionKey, int],
         lease_valid: bool, *, complete: bool = True, preferences: Preferences | None = None) -> Plan:
    """The broker's next moves. `live`: brokers whose lease PostgreSQL judges unexpired (with
    `me` among them when our lease is); `owned`: partition -> epoch this process holds; `rows`:
    every partition when `complete` (an owned one missing is gone), else only those that changed
    since a complete plan with the same live brokers (the others still stand as planned)."""
    result = Plan()
    if not lease_valid:
        result.lost.extend(owned)
        return result
    candidates = tuple(sorted(set(live) | {me}))
    live_set = set(live)
    prefs = preferences or Preferences()
    seen: set[PartitionKey] = set()
    for row in rows:
        seen.add(row.key)
        mine = owned.get(row.key)
        if mine is not None:
            if row.owner != me or row.epoch != mine:
                result.lost.append(row.key)  # claimed by someone else since (or released by a stale us)
                continue
            preferred = prefs.owner(row.key, candidates)
            if preferred != me and preferred in live_set:
                result.release.append(row.key)
            continue
        orphan = row.owner is None or row.owner == me or row.owner not in live_set
        if not orphan:
            continue
        if prefs.owner(row.key, candidates) == me:
            result.claim.append(row.key)
        elif row.owner == me:
            result.disown.append((row.key, row.epoch))
    if complete:
        result.lost.extend(key for key in owned if key not in seen)  # its topic was deleted
    return result
