"""Incremental fetch sessions (KIP-227), sans-IO: the session cache and the per-request context.

A FetchRequest v7+ carries `session_id` / `session_epoch`:

* id 0, epoch -1 (FINAL): a sessionless full fetch (nothing here is touched);
* id 0, epoch 0 (INITIAL): a full fetch that asks for a new session; the session is created when
  the response is sent, if a cache slot is free or can be freed (else the answer is sessionless);
* id X, epoch 0 or -1: session X is closed first; then as above;
* id X, epoch N > 0: an incremental fetch of session X: unknown X -> FETCH_SESSION_ID_NOT_FOUND,
  N not the expected epoch -> INVALID_FETCH_SESSION_EPOCH; otherwise the request's partitions are
  added to / updated in the session, `forgotten_topics_data` leaves it, and the response holds only
  the partitions with records, a changed high watermark / last stable offset / log start offset,
  or an error since the last response sent.

Eviction when `max.incremental.fetch.session.cache.slots` sessions exist (the rule of Kafka's
FetchSessionCache.tryEvict, KIP-227; read in apache/kafka core/.../server/FetchSession.scala):
a new session may take the slot of the session unused the longest if that one has been unused for
more than EVICTION_MS (120 s, Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS); otherwise of
the smallest session (fewest partitions, then lowest id) among those older than EVICTION_MS at
their last use, and only if the new session has more partitions. Clients are all "unprivileged"
here (no followers). Kafka 3.8+ splits the slots over 8 shards; offsetd keeps one cache, so
slots=1 means one session, not none.

Time is passed in (ms); nothing here does I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Hashable, Iterable

from ..protocol.errors import Error

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000
INT32_MAX = 2**31 - 1

PartitionKey = tuple[Hashable, int]  # (topic name, or topic id from v13 on; partition index)


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: wraps from INT32_MAX to 1, never back to INITIAL."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What the session remembers of one partition: the client's position, and the watermarks
    last sent to it (-1: never sent, or an error was, so the partition is sent again)."""

    fetch_offset: int
    max_bytes: int
    client_log_start: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    current_leader_epoch: int = -1  # the client's leader epochs (KIP-320), sent again when they change
    last_fetched_epoch: int = -1

    def must_respond(self, entry: dict[str, Any]) -> bool:
        """Kafka's rule: records, an error, a diverging epoch, or a watermark that differs from the
        one last sent."""
        return bool(entry["records"]) or entry["error_code"] != 0 or "diverging_epoch" in entry or (
            entry["high_watermark"] != self.high_watermark
            or entry.get("last_stable_offset", -1) != self.last_stable_offset
            or entry.get("log_start_offset", -1) != self.log_start_offset)

    def sent(self, entry: dict[str, Any]) -> None:
        """Remember what a response told the client about this partition."""
        if entry["error_code"] != 0:
            self.high_watermark = self.last_stable_offset = self.log_start_offset = -1
        else:
            self.high_watermark = entry["high_watermark"]
            self.last_stable_offset = entry.get("last_stable_offset", -1)
            self.log_start_offset = entry.get("log_start_offset", -1)


@dataclass(eq=False, slots=True)
class FetchSession:
    """One incremental fetch session: its partitions in fetch order (responded ones rotate to the
    end, so a byte limit cannot starve the partitions behind them)."""

    id: int
    uses_topic_ids: bool
    partitions: dict[PartitionKey, CachedPartition]
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    cached_size: int = 0  # the size as of the last touch (Kafka ranks sessions by it)
    evictable: bool = False  # older than EVICTION_MS at its last touch


@dataclass(slots=True)
class FetchRequestPartition:
    """A partition as a request names it."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


class FetchSessionCache:
    """The sessions of this broker, at most `max_slots` of them."""

    def __init__(self, max_slots: int, eviction_ms: int = EVICTION_MS, rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}  # ordered by last use: oldest first
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._sessions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return sum(s.cached_size for s in self._sessions.values())

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now: int) -> None:
        """Mark a use: moves it to the young end and re-ranks it by its current size."""
        if self._sessions.get(session.id) is not session:
            return  # evicted or closed meanwhile
        del self._sessions[session.id]
        self._sessions[session.id] = session
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        session.evictable = now - session.created_ms > self.eviction_ms

    def maybe_create(self, now: int, partitions: dict[PartitionKey, CachedPartition], uses_topic_ids: bool) -> int:
        """A new session holding `partitions`: its id, or INVALID_SESSION_ID if there is no slot."""
        if len(self._sessions) >= self.max_slots and not self._try_evict(len(partitions), now):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(session_id, uses_topic_ids, partitions, now, now, next_epoch(INITIAL_EPOCH))
        self._sessions[session_id] = session
        self.touch(session, now)
        return session_id

    def _try_evict(self, size: int, now: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [s for s in self._sessions.values() if s.evictable]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.cached_size, s.id))
        # Kafka compares (size, id) with the newcomer's id as 0: a tie in size keeps the old one
        if (size, 0) < (victim.cached_size, victim.id):
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.evictions += 1

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX - 1)
            if session_id not in self._sessions:
                return session_id


@dataclass(slots=True)
class FetchContext:
    """How one request is answered. kind: "full" (create a session when answered), "incremental"
    (session's partitions, changed ones only), "sessionless" (the request's partitions, id 0),
    "error" (top-level error_code, nothing read)."""

    kind: str
    error_code: int = 0
    session: FetchSession | None = None
    uses_topic_ids: bool = False


def new_context(cache: FetchSessionCache, session_id: int, epoch: int, uses_topic_ids: bool,
                fetch_data: Iterable[tuple[PartitionKey, FetchRequestPartition]],
                forgotten: Iterable[PartitionKey], now: int) -> FetchContext:
    """Resolve a request's session fields (Kafka's FetchManager.newContext); the incremental path
    updates the session's partitions and expected epoch now, as Kafka does."""
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        return FetchContext("sessionless" if epoch == FINAL_EPOCH else "full", uses_topic_ids=uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return FetchContext("error", Error.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext("error", Error.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext("error", Error.FETCH_SESSION_TOPIC_ID_ERROR)
    parts = session.partitions
    for key, req in fetch_data:
        cached = parts.get(key)
        if cached is None:
            parts[key] = CachedPartition(req.fetch_offset, req.max_bytes, req.log_start_offset,
                                         current_leader_epoch=req.current_leader_epoch,
                                         last_fetched_epoch=req.last_fetched_epoch)
        else:
            cached.fetch_offset, cached.max_bytes, cached.client_log_start = (
                req.fetch_offset, req.max_bytes, req.log_start_offset)
            cached.current_leader_epoch, cached.last_fetched_epoch = req.current_leader_epoch, req.last_fetched_epoch
    for key in forgotten:
        parts.pop(key, None)
    if not parts:
        cache.remove(session.id)
        return FetchContext("sessionless", uses_topic_ids=uses_topic_ids)
    cache.touch(session, now)
    session.epoch = next_epoch(session.epoch)
    return FetchContext("incremental", session=session, uses_topic_ids=uses_topic_ids)


def session_sent(session: FetchSession, responded: Iterable[tuple[PartitionKey, dict[str, Any]]]) -> None:
    """An incremental response went out: remember what it said of each partition it held, and
    move those partitions to the end of the session's fetch order."""
    parts = session.partitions
    for key, entry in responded:
        cached = parts.pop(key, None)
        if cached is not None:
            cached.sent(entry)
            parts[key] = cached
