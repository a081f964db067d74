"""Producer state of one partition: epochs, the last 5 batches and the open transaction per producer id.

Used by PartitionLog.append to drop retried duplicates and reject out-of-order or fenced
batches, following Kafka's rules:

* same epoch, (first_seq, last_seq) equal to one of the last 5 appended batches → duplicate:
  not appended again, the original offsets are returned;
* lower epoch than known → INVALID_PRODUCER_EPOCH (47);
* higher epoch → the producer's history resets and the batch must start at sequence 0,
  else OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* same epoch, first_seq != last_seq + 1 (int32 wraparound) → OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* unknown producer id → any sequence is accepted (its state may predate the scanned segments).

Transactions (reference A4, A7): the first transactional batch (attribute 0x10, with or without
a sequence) opens the producer's transaction at its offset; a COMMIT/ABORT marker closes it. A
non-transactional batch while a transaction is open → INVALID_TXN_STATE (48); a marker whose
epoch is below the producer's → INVALID_PRODUCER_EPOCH (47); a marker whose coordinator epoch is
below the last one seen → TRANSACTION_COORDINATOR_FENCED (52); a marker with no open transaction
is appended but changes nothing. Batches with baseSequence -1 skip the sequence checks.

Pure code: no files. The snapshot helpers turn the state into JSON-able data; PartitionLog
decides where it is stored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from offsetd.records.batch import BatchHeader
from offsetd.records.control import CONTROL_ABORT, parse_marker

__all__ = [
    "ProduceError",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "TRANSACTION_COORDINATOR_FENCED",
    "AbortedTxn",
    "PendingBatch",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
    "PendingProducerState",
]

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1


class ProduceError(Exception):
    """An append was refused for a Kafka-level reason; `error_code` goes into the response."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequence range and assigned offsets of one appended batch."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: a `.txnindex` entry (reference A9)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the LSO right after the abort


PendingBatch = tuple[BatchHeader, int, "tuple[int, int] | None"]
"""(header, assigned base offset, (control type, coordinator epoch) for a marker)."""


@dataclass(slots=True)
class ProducerEntry:
    """What the log remembers about one producer id."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction, -1 when none

    @property
    def last_seq(self) -> int | None:
        """Sequence of the last appended record, None when no batch is remembered."""
        return self.batches[-1].last_seq if self.batches else None

    def copy(self) -> "ProducerEntry":
        """An independent copy (PendingProducerState changes it, the log's entry stays)."""
        return ProducerEntry(self.epoch, deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN), self.last_timestamp,
                             self.coordinator_epoch, self.txn_first_offset)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The remembered batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when next_seq directly follows last_seq (with int32 wraparound to 0)."""
    return next_seq == last_seq + 1 or (last_seq == _INT32_MAX and next_seq == 0)


def _check_marker(pid: int, h: BatchHeader, coordinator_epoch: int, view: "_View | None") -> None:
    """The log's checks of a COMMIT/ABORT marker (A7); an unknown producer passes."""
    if view is None:
        return
    if h.producer_epoch < view.epoch:
        raise ProduceError(INVALID_PRODUCER_EPOCH, f"marker for producer {pid} has epoch {h.producer_epoch}, "
                           f"older than the current epoch {view.epoch}")
    if coordinator_epoch < view.coordinator_epoch:
        raise ProduceError(TRANSACTION_COORDINATOR_FENCED, f"marker for producer {pid} has coordinator epoch "
                           f"{coordinator_epoch}, older than {view.coordinator_epoch}")


def _check_batch(pid: int, h: BatchHeader, view: "_View | None") -> None:
    """Epoch, transaction-state and sequence checks of a data batch (A4 and the idempotence rules)."""
    if view is None:
        return
    epoch = h.producer_epoch
    if epoch < view.epoch:
        raise ProduceError(INVALID_PRODUCER_EPOCH,
                           f"producer {pid} epoch {epoch} is older than the current epoch {view.epoch} (fenced)")
    if view.txn_open and not h.is_transactional:
        raise ProduceError(INVALID_TXN_STATE,
                           f"producer {pid} sent a non-transactional batch while its transaction is open")
    first_seq = h.base_sequence
    if first_seq < 0:
        return
    if epoch > view.epoch:
        if first_seq != 0:
            raise ProduceError(OUT_OF_ORDER_SEQUENCE_NUMBER,
                               f"producer {pid} new epoch {epoch} must start at sequence 0, got {first_seq}")
    elif view.last_seq != -2 and not _in_sequence(view.last_seq, first_seq):
        raise ProduceError(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {pid} epoch {epoch}: out of order sequence {first_seq}, "
            f"expected {0 if view.last_seq == _INT32_MAX else view.last_seq + 1}",
        )


def _advance(view: "_View | None", h: BatchHeader, marker: tuple[int, int] | None) -> "_View":
    """The view after batch `h` (mirrors ProducerStateManager.update)."""
    if view is None:
        view = _View(h.producer_epoch, -2, False, -1)
    if marker is not None:
        if view.txn_open:
            view.txn_open = False
            view.coordinator_epoch = marker[1]
            if h.producer_epoch != view.epoch:
                view.epoch, view.last_seq = h.producer_epoch, -2
        return view
    if h.producer_epoch != view.epoch:
        view.epoch, view.last_seq = h.producer_epoch, -2
    if h.base_sequence >= 0:
        view.last_seq = h.last_sequence
    if h.is_transactional:
        view.txn_open = True
    return view


@dataclass(slots=True)
class _View:
    """A producer as validate() sees it, including the earlier batches of the same blob."""

    epoch: int
    last_seq: int  # -2: no sequence known, anything goes
    txn_open: bool
    coordinator_epoch: int


class ProducerStateManager:
    """Per-partition producer state; validate a blob's batches, then commit them after the write."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def __len__(self) -> int:
        return len(self.producers)

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of the open transactions, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def validate(
        self, headers: Iterable[BatchHeader], first_offset: int,
        data: bytes | bytearray | memoryview | None = None,
    ) -> tuple[list[PendingBatch], BatchMetadata | None]:
        """Check the batches of one append that would start at `first_offset`.

        Returns (pending, duplicate). `duplicate` is the original BatchMetadata when a batch is a
        retry of an already appended one (nothing must be written then). `pending` lists the
        batches of producers to pass to commit() after writing. `data` is the blob the headers
        were parsed from (needed for control batches, whose marker is read from it). Raises
        ProduceError for fenced epochs, sequence gaps and transaction state. Does not modify state.
        """
        pending: list[PendingBatch] = []
        views: dict[int, _View] = {}
        offset = first_offset
        pos = 0
        for h in headers:
            pid = h.producer_id
            if pid >= 0:
                view = views.get(pid)
                entry = self.producers.get(pid)
                if view is None and entry is not None:
                    if h.base_sequence >= 0 and not h.is_control:
                        dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                        if dup is not None:
                            return [], dup
                    view = views[pid] = _View(
                        entry.epoch, entry.last_seq if entry.last_seq is not None else -2,
                        entry.txn_first_offset >= 0, entry.coordinator_epoch,
                    )
                marker = None
                if h.is_control:
                    if data is None:
                        raise ValueError("validate: a control batch needs the blob to read its marker")
                    marker = parse_marker(data, pos)
                    _check_marker(pid, h, marker[1], view)
                elif h.base_sequence >= 0 or h.is_transactional:
                    _check_batch(pid, h, view)
                else:  # an id without sequence or transaction: nothing to check or remember
                    pid = -1
                if pid >= 0:
                    views[pid] = _advance(view, h, marker)
                    pending.append((h, offset, marker))
            offset += h.last_offset_delta + 1
            pos += h.batch_length + 12
        return pending, None

    @staticmethod
    def replica_pending(headers: Iterable[BatchHeader], data: bytes | bytearray | memoryview) -> list[PendingBatch]:
        """The pending list of batches copied from the log of record with their own offsets
        (already judged there): recorded, not checked."""
        pending: list[PendingBatch] = []
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                pending.append((h, h.base_offset, parse_marker(data, pos) if h.is_control else None))
            pos += h.batch_length + 12
        return pending

    def commit(self, pending: list[PendingBatch], now_ms: int) -> list[AbortedTxn]:
        """Record batches returned by validate() once they are written; the transactions their
        ABORT markers ended."""
        aborted = []
        for h, base, marker in pending:
            # Kafka's producer entry keeps the batch's largest timestamp (what DescribeProducers
            # shows as LastTimestamp and producer.id.expiration.ms counts from)
            done = self.update(h, base, h.max_timestamp if h.max_timestamp >= 0 else now_ms, marker)
            if done is not None:
                aborted.append(done)
        return aborted

    def update(
        self, h: BatchHeader, base_offset: int, timestamp: int, marker: tuple[int, int] | None = None
    ) -> AbortedTxn | None:
        """Apply one appended batch without checks (also used when rebuilding); `marker` is
        (control type, coordinator epoch) of a control batch. Returns the aborted transaction
        when this is an ABORT marker that ended an open one."""
        pid = h.producer_id
        if pid < 0:
            return None
        if h.is_control:
            return self._end_txn(h, base_offset, timestamp, marker) if marker is not None else None
        if h.base_sequence < 0 and not h.is_transactional:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(h.producer_epoch)
        elif h.producer_epoch != entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        if h.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(h.base_sequence, h.last_sequence, base_offset, base_offset + h.last_offset_delta)
            )
        if h.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = self.ongoing[pid] = base_offset
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        return None

    def _end_txn(self, h: BatchHeader, offset: int, timestamp: int, marker: tuple[int, int]) -> AbortedTxn | None:
        """A marker at `offset`: closes the producer's open transaction, if any."""
        pid = h.producer_id
        entry = self.producers.get(pid)
        if entry is None or entry.txn_first_offset < 0:
            return None  # no open transaction: a resent marker changes nothing
        first = entry.txn_first_offset
        entry.txn_first_offset = -1
        del self.ongoing[pid]
        if h.producer_epoch != entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = marker[1]
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if marker[0] != CONTROL_ABORT:
            return None
        lso = min(self.ongoing.values(), default=offset + 1)
        return AbortedTxn(pid, first, offset, lso)

    def describe(self) -> list[dict[str, int]]:
        """Every producer as DescribeProducers lists it (-1: no sequence / no open transaction)."""
        return [
            {"producer_id": pid, "producer_epoch": e.epoch,
             "last_sequence": -1 if e.last_seq is None else e.last_seq, "last_timestamp": e.last_timestamp,
             "coordinator_epoch": e.coordinator_epoch, "current_txn_start_offset": e.txn_first_offset}
            for pid, e in sorted(self.producers.items())
        ]

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is `expiration_ms` (producer.id.expiration.ms) or more
        older than now, as Kafka counts it."""
        cutoff = now_ms - expiration_ms
        # A producer with an open transaction is kept: it holds the LSO.
        dead = [pid for pid, e in self.producers.items() if e.last_timestamp <= cutoff and e.txn_first_offset < 0]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def clear(self) -> None:
        """Forget every producer (log truncated or deleted)."""
        self.producers.clear()
        self.ongoing.clear()

    def to_snapshot(self) -> dict[str, Any]:
        """JSON-able form of the state."""
        return {
            str(pid): {
                "epoch": e.epoch,
                "last_timestamp": e.last_timestamp,
                "batches": [[b.first_seq, b.last_seq, b.base_offset, b.last_offset] for b in e.batches],
                "coordinator_epoch": e.coordinator_epoch,
                "txn_first_offset": e.txn_first_offset,
            }
            for pid, e in self.producers.items()
        }

    def load_snapshot(self, data: dict[str, Any]) -> None:
        """Replace the state with one produced by to_snapshot()."""
        self.clear()
        for pid, e in data.items():
            entry = ProducerEntry(int(e["epoch"]), last_timestamp=int(e["last_timestamp"]),
                                  coordinator_epoch=int(e.get("coordinator_epoch", -1)),
                                  txn_first_offset=int(e.get("txn_first_offset", -1)))
            for fs, ls, bo, lo in e["batches"]:
                entry.batches.append(BatchMetadata(int(fs), int(ls), int(bo), int(lo)))
            self.producers[int(pid)] = entry
            if entry.txn_first_offset >= 0:
                self.ongoing[int(pid)] = entry.txn_first_offset


class PendingProducerState(ProducerStateManager):
    """The producer state as it will be once the appends still being stored are in the log
    (cluster mode: appends queued behind statements in flight, storage/append_pipeline.py):
    a producer's entry is copied from the log's `base` when a pending append first names it,
    and every pending append is committed here as soon as it is decided, so the next one's
    sequence, epoch and transaction checks (and its duplicate search) see it. The log's own
    state is committed only after the store acknowledged."""

    def __init__(self, base: ProducerStateManager) -> None:
        super().__init__()
        self._base = base

    def validate(
        self, headers: Iterable[BatchHeader], first_offset: int,
        data: bytes | bytearray | memoryview | None = None,
    ) -> tuple[list[PendingBatch], BatchMetadata | None]:
        """ProducerStateManager.validate, on the log's entries with the pending appends applied."""
        headers = list(headers)
        for h in headers:
            pid = h.producer_id
            if pid >= 0 and pid not in self.producers:
                entry = self._base.producers.get(pid)
                if entry is not None:
                    self.producers[pid] = entry.copy()
                    if entry.txn_first_offset >= 0:
                        self.ongoing[pid] = entry.txn_first_offset
        return super().validate(headers, first_offset, data)
