"""Idempotent-producer state of one partition: epochs and the last 5 batches per producer id.

Used by PartitionLog.append to drop retried duplicates and reject out-of-order or fenced
batches, following Kafka's rules:

* same epoch, (first_seq, last_seq) equal to one of the last 5 appended batches → duplicate:
  not appended again, the original offsets are returned;
* lower epoch than known → INVALID_PRODUCER_EPOCH (47);
* higher epoch → the producer's history resets and the batch must start at sequence 0,
  else OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* same epoch, first_seq != last_seq + 1 (int32 wraparound) → OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* unknown producer id → any sequence is accepted (its state may predate the scanned segments).

Pure code: no files. The snapshot helpers turn the state into JSON-able data; PartitionLog
decides where it is stored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from offsetd.records.batch import BatchHeader

__all__ = [
    "ProduceError",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
]

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
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


@dataclass(slots=True)
class ProducerEntry:
    """What the log remembers about one producer id."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int | None:
        """Sequence of the last appended record, None when no batch is remembered."""
        return self.batches[-1].last_seq if self.batches else None

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


class ProducerStateManager:
    """Per-partition idempotence state; validate a blob's batches, then commit them after the write."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def validate(
        self, headers: Iterable[BatchHeader], first_offset: int
    ) -> tuple[list[tuple[BatchHeader, int]], BatchMetadata | None]:
        """Check the batches of one append that would start at `first_offset`.

        Returns (pending, duplicate). `duplicate` is the original BatchMetadata when a batch is a
        retry of an already appended one (nothing must be written then). `pending` lists
        (header, assigned base offset) of idempotent batches to pass to commit() after writing.
        Raises ProduceError for fenced epochs and sequence gaps. Does not modify state.
        """
        pending: list[tuple[BatchHeader, int]] = []
        # Sequence/epoch view including earlier batches of this same blob.
        seen: dict[int, tuple[int, int]] = {}
        offset = first_offset
        for h in headers:
            pid = h.producer_id
            if pid >= 0 and h.base_sequence >= 0 and not h.is_control:
                epoch = h.producer_epoch
                first_seq = h.base_sequence
                last_seq = h.last_sequence
                known = seen.get(pid)
                entry = self.producers.get(pid)
                if known is None and entry is not None:
                    dup = entry.find_duplicate(epoch, first_seq, last_seq)
                    if dup is not None:
                        return [], dup
                    known = (entry.epoch, entry.last_seq if entry.last_seq is not None else -2)
                if known is not None:
                    known_epoch, known_last = known
                    if epoch < known_epoch:
                        raise ProduceError(
                            INVALID_PRODUCER_EPOCH,
                            f"producer {pid} epoch {epoch} is older than the current epoch "
                            f"{known_epoch} (fenced)",
                        )
                    if epoch > known_epoch:
                        if first_seq != 0:
                            raise ProduceError(
                                OUT_OF_ORDER_SEQUENCE_NUMBER,
                                f"producer {pid} new epoch {epoch} must start at sequence 0, "
                                f"got {first_seq}",
                            )
                    elif known_last != -2 and not _in_sequence(known_last, first_seq):
                        raise ProduceError(
                            OUT_OF_ORDER_SEQUENCE_NUMBER,
                            f"producer {pid} epoch {epoch}: out of order sequence {first_seq}, "
                            f"expected {0 if known_last == _INT32_MAX else known_last + 1}",
                        )
                seen[pid] = (epoch, last_seq)
                pending.append((h, offset))
            offset += h.last_offset_delta + 1
        return pending, None

    def commit(self, pending: list[tuple[BatchHeader, int]], now_ms: int) -> None:
        """Record batches returned by validate() once they are written."""
        for h, base in pending:
            self.update(h, base, now_ms)

    def update(self, h: BatchHeader, base_offset: int, timestamp: int) -> None:
        """Apply one appended idempotent batch without checks (also used when rebuilding)."""
        pid = h.producer_id
        if pid < 0 or h.base_sequence < 0 or h.is_control:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(h.producer_epoch)
        elif h.producer_epoch != entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(h.base_sequence, h.last_sequence, base_offset, base_offset + h.last_offset_delta)
        )
        entry.last_timestamp = max(entry.last_timestamp, timestamp)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for longer than `expiration_ms` (producer.id.expiration.ms)."""
        cutoff = now_ms - expiration_ms
        dead = [pid for pid, e in self.producers.items() if e.last_timestamp < cutoff]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def clear(self) -> None:
        """Forget every producer (log truncated or deleted)."""
        self.producers.clear()

    def to_snapshot(self) -> dict[str, Any]:
        """JSON-able form of the state."""
        return {
            str(pid): {
                "epoch": e.epoch,
                "last_timestamp": e.last_timestamp,
                "batches": [[b.first_seq, b.last_seq, b.base_offset, b.last_offset] for b in e.batches],
            }
            for pid, e in self.producers.items()
        }

    def load_snapshot(self, data: dict[str, Any]) -> None:
        """Replace the state with one produced by to_snapshot()."""
        self.producers.clear()
        for pid, e in data.items():
            entry = ProducerEntry(int(e["epoch"]), last_timestamp=int(e["last_timestamp"]))
            for fs, ls, bo, lo in e["batches"]:
                entry.batches.append(BatchMetadata(int(fs), int(ls), int(bo), int(lo)))
            self.producers[int(pid)] = entry
