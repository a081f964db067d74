"""One share-partition's in-flight records on its leader (KIP-932; reference share-groups.md §3-§4).

A share group reads a partition through a window: the share-partition start offset (SPSO), below
which every record is done, and the end offset (SPEO), the last offset ever acquired. Each offset
in the window has a state, a delivery count and, while a member holds it, a lock that runs out.

Sans-IO: the caller brings the time (`now_ms`), the offsets of the log batches it read, and
persists what the methods return (`StateBatch` runs of `__share_group_state`, written through the
share coordinator before an acknowledgement is answered). Acquisitions are never persisted: a new
leader reads the state back and finds every unacknowledged record AVAILABLE with its last
persisted delivery count.

Per-offset state, not Kafka's per-batch cache with optional per-offset state: the window is
capped (`group.share.partition.max.record.locks`, at most 10,000), so a dict of offsets stays
small, and the rules are the same whichever granularity holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Container, Iterable, Sequence

from ..records.share_state_records import StateBatch


class RecordState(IntEnum):
    """A record's state, with Kafka's numbers (the persisted DeliveryState uses 0, 2 and 4)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(IntEnum):
    """ShareFetch / ShareAcknowledge AcknowledgeTypes (RENEW from v2)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


# Error codes the state machine answers (per partition).
NONE = 0
INVALID_REQUEST = 42
INVALID_RECORD_STATE = 121


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """ShareFetchResponse AcquiredRecords: offsets first..last, delivered for the count-th time."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch: a single type for the whole range, or one type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0


def validate_ack_batches(batches: Sequence[AckBatch], renew_allowed: bool) -> int:
    """INVALID_REQUEST for batches Kafka refuses (§3 "Ack validation"), else NONE: first past
    last, out of order, no type, a type list of the wrong length, an unknown type, RENEW
    outside a renew request."""
    previous_last = -1
    highest = AckType.RENEW if renew_allowed else AckType.REJECT
    for batch in batches:
        if batch.first_offset > batch.last_offset or batch.first_offset < previous_last or not batch.types:
            return INVALID_REQUEST
        if len(batch.types) > 1 and len(batch.types) != batch.last_offset - batch.first_offset + 1:
            return INVALID_REQUEST
        if any(t < AckType.GAP or t > highest for t in batch.types):
            return INVALID_REQUEST
        previous_last = batch.last_offset
    return NONE


class SharePartition:
    """The window of one (share group, topic, partition) on the partition's leader."""

    def __init__(self, start_offset: int, *, delivery_count_limit: int = 5, max_in_flight: int = 2000,
                 lock_duration_ms: int = 30_000, state: Iterable[StateBatch] = ()) -> None:
        self.start_offset = start_offset  # SPSO
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.lock_duration_ms = lock_duration_ms
        self._records: dict[int, _InFlight] = {}
        self._next_new = start_offset  # SPEO + 1: the first offset never taken into the window
        for batch in state:  # as read back: what was ACQUIRED was persisted AVAILABLE
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                self._records[offset] = _InFlight(RecordState(batch.delivery_state), batch.delivery_count)
            self._next_new = max(self._next_new, batch.last_offset + 1)
        self._advance()

    # ---------------------------------------------------------------------------- reading

    @property
    def end_offset(self) -> int:
        """SPEO: the last offset in the window; SPSO with an empty window (Kafka's convention)."""
        return self._next_new - 1 if self._records else self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next log read starts: the first AVAILABLE offset, else past the window."""
        available = [o for o, r in self._records.items() if r.state is RecordState.AVAILABLE]
        return min(available) if available else self._next_new

    def state_of(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, holder) of an offset in the window; None outside it."""
        record = self._records.get(offset)
        return None if record is None else (record.state, record.delivery_count, record.member_id)

    def in_flight(self) -> int:
        """Offsets in the window not yet done (the share group's lag on this partition, in part)."""
        return sum(1 for r in self._records.values() if r.state not in TERMINAL)

    def delivery_complete_count(self) -> int:
        """Offsets in the window whose delivery is complete (acknowledged or archived): the
        persisted DeliveryCompleteCount, so lag = log end - SPSO - this (KIP-1226)."""
        return sum(1 for r in self._records.values() if r.state in TERMINAL)

    def next_lock_deadline(self) -> int | None:
        """When the earliest acquisition lock runs out (the caller's timer), None if none is held."""
        return min((r.lock_deadline_ms for r in self._records.values() if r.state is RecordState.ACQUIRED),
                   default=None)

    def state_batches(self) -> list[StateBatch]:
        """The whole window as persisted runs (ShareSnapshot): ACQUIRED is written AVAILABLE."""
        return _runs((offset, self._persisted(record)) for offset, record in sorted(self._records.items()))

    # ---------------------------------------------------------------------------- acquire

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], max_records: int,
                now_ms: int, aborted: Container[tuple[int, int]] = ()) -> list[AcquiredRange]:
        """Acquire the AVAILABLE and new offsets of the log batches read (base offset, last offset),
        whole batches at a time (batch_optimized: the last one may pass `max_records`), for
        `member_id`, each count +1 and locked for the lock duration. Stops at the in-flight cap
        (released offsets inside the window can still be taken) and before a record on its last
        attempt, which goes out alone (Kafka 4.2's throttling, limit > 2). Batches in `aborted`
        (read_committed: an aborted transaction's) are archived instead, never delivered."""
        acquired: list[tuple[int, int]] = []  # (offset, new count)
        deadline = now_ms + self.lock_duration_ms
        for base, last in batches:
            if len(acquired) >= max_records:
                break
            if (base, last) in aborted:
                self._archive(base, last)
                continue
            for offset in range(max(base, self.start_offset), last + 1):
                record = self._records.get(offset)
                if record is None:
                    if offset < self._next_new:
                        continue  # a hole the window already passed (archived when it was seen)
                    if offset - self.start_offset + 1 > self.max_in_flight:
                        return self._ranges(acquired)
                    for missing in range(self._next_new, offset):  # no record there (compaction, a
                        self._records[missing] = _InFlight(RecordState.ARCHIVED, 0)  # marker): done
                    record = self._records[offset] = _InFlight(RecordState.AVAILABLE, 0)
                    self._next_new = offset + 1
                elif record.state is not RecordState.AVAILABLE:
                    continue
                last_attempt = self.delivery_count_limit > 2 and record.delivery_count == self.delivery_count_limit - 1
                if last_attempt and acquired:
                    return self._ranges(acquired)
                record.state, record.member_id, record.lock_deadline_ms = RecordState.ACQUIRED, member_id, deadline
                record.delivery_count += 1
                acquired.append((offset, record.delivery_count))
                if last_attempt:
                    return self._ranges(acquired)
        return self._ranges(acquired)

    # ---------------------------------------------------------------------------- acknowledge

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> tuple[int, list[StateBatch]]:
        """Apply one partition's acknowledgements, all or nothing: (error code, the runs that
        changed, to persist before answering). Offsets below SPSO are skipped; an offset past the
        window is INVALID_REQUEST; one not ACQUIRED by `member_id` is INVALID_RECORD_STATE."""
        if any(batch.last_offset > self.end_offset for batch in batches):
            return INVALID_REQUEST, []
        moves: list[tuple[int, AckType]] = []
        for batch in batches:
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                if offset < self.start_offset:
                    continue
                record = self._records.get(offset)
                if record is None:
                    return INVALID_RECORD_STATE, []
                if record.state is not RecordState.ACQUIRED or record.member_id != member_id:
                    return INVALID_RECORD_STATE, []
                moves.append((offset, AckType(batch.types[i] if len(batch.types) > 1 else batch.types[0])))
        changed: list[tuple[int, _InFlight]] = []
        for offset, kind in moves:
            record = self._records[offset]
            if kind is AckType.RENEW:
                record.lock_deadline_ms = now_ms + self.lock_duration_ms
                continue
            if kind is AckType.ACCEPT:
                self._finish(record, RecordState.ACKNOWLEDGED)
            elif kind is AckType.RELEASE:
                self._give_back(record, archive=False)
            else:  # GAP, REJECT
                self._finish(record, RecordState.ARCHIVED)
            changed.append((offset, record))
        result = _runs((offset, self._persisted(record)) for offset, record in changed)
        self._advance()
        return NONE, result

    # ---------------------------------------------------------------------------- time and sessions

    def expire_locks(self, now_ms: int) -> list[StateBatch]:
        """Locks run out: ACQUIRED -> AVAILABLE with the count kept, or ARCHIVED at the delivery
        limit or below SPSO. The runs to persist (the transition stands even if that write fails)."""
        changed = [(offset, record) for offset, record in sorted(self._records.items())
                   if record.state is RecordState.ACQUIRED and record.lock_deadline_ms <= now_ms]
        for offset, record in changed:
            self._give_back(record, archive=offset < self.start_offset)
        result = _runs((offset, self._persisted(record)) for offset, record in changed)
        self._advance()
        return result

    def release_member(self, member_id: str) -> list[StateBatch]:
        """A share session closed (ShareFetch/ShareAcknowledge epoch -1, or the connection
        dropped): everything `member_id` holds goes back, counts kept."""
        changed = [(offset, record) for offset, record in sorted(self._records.items())
                   if record.state is RecordState.ACQUIRED and record.member_id == member_id]
        for _offset, record in changed:
            self._give_back(record, archive=False)
        result = _runs((offset, self._persisted(record)) for offset, record in changed)
        self._advance()
        return result

    def move_log_start(self, log_start: int) -> None:
        """Retention or DeleteRecords moved the log start: AVAILABLE records below it are archived
        and SPSO follows; ACQUIRED ones are archived when their lock runs out."""
        if log_start <= self.start_offset:
            return
        for offset in [o for o in self._records if o < log_start]:
            record = self._records[offset]
            if record.state is RecordState.ACQUIRED:
                continue
            del self._records[offset]
        self.start_offset = log_start
        self._advance()

    # ---------------------------------------------------------------------------- rules

    def _archive(self, first: int, last: int) -> None:
        """Offsets no member may get: ARCHIVED as the window reaches them (AVAILABLE ones too)."""
        for offset in range(max(first, self.start_offset), last + 1):
            record = self._records.get(offset)
            if record is None:
                if offset < self._next_new or offset - self.start_offset + 1 > self.max_in_flight:
                    continue
                for missing in range(self._next_new, offset + 1):
                    self._records[missing] = _InFlight(RecordState.ARCHIVED, 0)
                self._next_new = offset + 1
            elif record.state is RecordState.AVAILABLE:
                self._finish(record, RecordState.ARCHIVED)

    def _finish(self, record: _InFlight, state: RecordState) -> None:
        record.state, record.member_id, record.lock_deadline_ms = state, None, 0

    def _give_back(self, record: _InFlight, archive: bool) -> None:
        """ACQUIRED -> AVAILABLE, or ARCHIVED once the delivery count reached the limit."""
        done = archive or record.delivery_count >= self.delivery_count_limit
        self._finish(record, RecordState.ARCHIVED if done else RecordState.AVAILABLE)

    def _advance(self) -> None:
        """SPSO moves past the run of done records at its front; they leave the window."""
        while True:
            record = self._records.get(self.start_offset)
            if record is None or record.state not in TERMINAL:
                break
            del self._records[self.start_offset]
            self.start_offset += 1
        for offset in [o for o, r in self._records.items() if o < self.start_offset and r.state in TERMINAL]:
            del self._records[offset]
        self._next_new = max(self._next_new, self.start_offset)

    @staticmethod
    def _persisted(record: _InFlight) -> tuple[RecordState, int]:
        state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
        return state, record.delivery_count

    @staticmethod
    def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
        """Contiguous offsets with the same count, as AcquiredRecords entries."""
        ranges: list[AcquiredRange] = []
        for offset, count in acquired:
            if ranges and ranges[-1].last_offset == offset - 1 and ranges[-1].delivery_count == count:
                ranges[-1] = AcquiredRange(ranges[-1].first_offset, offset, count)
            else:
                ranges.append(AcquiredRange(offset, offset, count))
        return ranges


def _runs(items: Iterable[tuple[int, tuple[RecordState, int]]]) -> list[StateBatch]:
    """Contiguous offsets with the same (state, count), as StateBatch runs."""
    runs: list[StateBatch] = []
    for offset, (state, count) in items:
        last = runs[-1] if runs else None
        if (last is not None and last.last_offset == offset - 1
                and (last.delivery_state, last.delivery_count) == (state, count)):
            runs[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            runs.append(StateBatch(offset, offset, state, count))
    return runs

