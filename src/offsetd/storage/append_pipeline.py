"""Appends of one partition queued behind the statement in flight (cluster mode), without I/O.

The PostgreSQL engine (storage/postgres_log.py) keeps one statement per partition in flight and
lets later appends wait, already decided: each is prepared against the log as it will be once
everything ahead of it is stored (offsets follow on from the last pending append, producer rules
judged by a PendingProducerState that has the pending appends committed). When the statement
returns, everything queued meanwhile becomes the next statement. The shell applies stored appends
to its local copy in offset order, and on a failure every pending append fails with the statement:
the queued ones were decided on a log end the failed statement would have made.

A duplicate (an idempotent producer's retry) of an append still pending is answered only when
that append is stored: `AppendPipeline.holder` names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from offsetd.records.batch import BatchHeader
from offsetd.storage.log_append import AppendResult, PreparedAppend
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.producer_state import PendingProducerState

__all__ = ["AppendPipeline", "PendingAppend", "STATEMENT_BYTES"]

W = TypeVar("W")
STATEMENT_BYTES = 8 * 1024 * 1024  # appends stored by one statement, at most (unless one is larger)


@dataclass(slots=True)
class PendingAppend(Generic[W]):
    """An append decided and waiting to be stored: at leader `epoch`, answered through `waiter`
    (the shell's, e.g. a future)."""

    prepared: PreparedAppend
    now_ms: int
    epoch: int
    waiter: W


class AppendPipeline(Generic[W]):
    """The pending appends of one partition: `in_flight` (the statement being stored) and `queued`
    (the next statement), all in offset order after the log's end."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self.in_flight: list[PendingAppend[W]] = []
        self.queued: list[PendingAppend[W]] = []
        self._producers: PendingProducerState | None = None  # while anything is pending

    @property
    def idle(self) -> bool:
        """Nothing pending: the log's end and producer state are the whole truth."""
        return not self.in_flight and not self.queued

    @property
    def end(self) -> int:
        """Where the next append starts: after the last pending one, else at the log's end."""
        last = self.queued or self.in_flight
        return last[-1].prepared.next_offset if last else self._log.log_end_offset

    def prepare(self, records: bytes, validated: list[BatchHeader] | None, epoch: int, now_ms: int,
                waiter: W) -> "PendingAppend[W] | AppendResult":
        """Decide an append after every pending one and queue it; a duplicate gives its original
        AppendResult and queues nothing (see `holder`). Raises what prepare_append raises
        (ProduceError, InvalidBatch), leaving the pipeline as it was."""
        if self.idle or self._producers is None:  # the log's state is the whole truth: start from it
            self._producers = PendingProducerState(self._log.producer_state)
        producers = self._producers
        prepared = self._log.prepare_append(records, validated, leader_epoch=epoch, after=(producers, self.end))
        if isinstance(prepared, AppendResult):
            return prepared
        producers.commit(prepared.pending, now_ms)
        pending = PendingAppend(prepared, now_ms, epoch, waiter)
        self.queued.append(pending)
        return pending

    def holder(self, result: AppendResult) -> "PendingAppend[W] | None":
        """The pending append holding a duplicate's original offsets, None when it is in the log."""
        for pending in (*self.in_flight, *self.queued):
            if pending.prepared.first <= result.base_offset < pending.prepared.next_offset:
                return pending
        return None

    def take(self, max_bytes: int = STATEMENT_BYTES) -> list[PendingAppend[W]]:
        """The queued appends, oldest first, up to `max_bytes` (at least one), become the statement
        in flight (none: nothing to store); a statement stays well within the store's timeout."""
        if self.in_flight:
            raise ValueError("a statement is already in flight")
        size, count = 0, 0
        for pending in self.queued:
            size += pending.prepared.size
            if count and size > max_bytes:
                break
            count += 1
        self.in_flight, self.queued = self.queued[:count], self.queued[count:]
        return self.in_flight

    def stored(self) -> list[PendingAppend[W]]:
        """The statement in flight was stored: its appends, to apply to the log in this order."""
        done, self.in_flight = self.in_flight, []
        if not self.queued:
            self._producers = None  # the log has (or will have, as applied) what it held
        return done

    def fail(self) -> list[PendingAppend[W]]:
        """The statement in flight failed: it and everything queued behind it, to be refused."""
        failed = self.in_flight + self.queued
        self.in_flight, self.queued = [], []
        self._producers = None
        return failed
