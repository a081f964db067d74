"""A fake-clock shell around TransactionCoordinatorShard for the transaction unit tests (no tests here).

It plays the server's part: records of a result are appended to an in-memory log and replayed
("durable"), marker jobs are collected and run on demand, each completion is returned.
"""

from __future__ import annotations

import itertools
from typing import Any

from offsetd.records.transaction_log import TransactionLogValue, decode_key, decode_value, encode_key, encode_value
from offsetd.transaction.config import TransactionConfig
from offsetd.transaction.metadata import TransactionMetadata, TxnState
from offsetd.transaction.result import MarkerJob, TxnResult
from offsetd.transaction.shard import TransactionCoordinatorShard

S = TxnState
TIMEOUT = 60_000
TP = ("topic", 0)
FIRST_PID = 1000


class Harness:
    """One shard, its log and its pending marker jobs; `now` is a plain int the tests pass."""

    def __init__(self, **config: int) -> None:
        self.pids = itertools.count(FIRST_PID)
        self.config = TransactionConfig(**config)
        self.shard = TransactionCoordinatorShard(7, self.config, lambda: next(self.pids))
        self.shard.coordinator_epoch = 3
        self.log: list[tuple[bytes, bytes | None]] = []
        self.markers: list[MarkerJob] = []
        self.last = TxnResult()

    # ------------------------------------------------------------------ the shell's part

    def write(self, result: TxnResult) -> TxnResult:
        """Make a result durable: append and replay its records, queue its marker jobs."""
        for key, value in result.records:
            self.log.append((key, value))
            if not result.applied:  # installed by the operation itself (Complete*)
                self.shard.replay(key, value)
        self.markers.extend(result.markers)
        return result

    def reply(self, result: TxnResult, durable: bool = True) -> Any:
        """The single completion of a request's result (written first unless `durable` is false)."""
        self.last = result
        if durable:
            self.write(result)
        assert len(result.completions) == 1, result.completions
        return result.completions[0][1]

    def run_markers(self, now: int = 0) -> list[MarkerJob]:
        """Run every queued marker job, then report it written (writes Complete*)."""
        jobs, self.markers = self.markers, []
        for job in jobs:
            self.write(self.shard.markers_written(job.transactional_id, job.producer_id, job.producer_epoch, now))
        return jobs

    def reload(self) -> TransactionCoordinatorShard:
        """A new shard loaded from this log (as after a restart); it replaces the current one."""
        shard = TransactionCoordinatorShard(7, self.config, lambda: next(self.pids))
        shard.coordinator_epoch = self.shard.coordinator_epoch
        for key, value in self.log:
            shard.replay(key, value)
        self.shard = shard
        return shard

    # -------------------------------------------------------------------- requests

    def init(self, txn: str | None = "tx", now: int = 0, pid: int = -1, epoch: int = -1, version: int = 4,
             timeout: int = TIMEOUT, durable: bool = True) -> dict:
        return self.reply(self.shard.init_producer_id("init", txn, timeout, pid, epoch, version, now), durable)

    def add(self, pid: int, epoch: int, partitions: list[tuple[str, int]] | None = None, txn: str = "tx",
            now: int = 0, version: int = 3, durable: bool = True) -> dict:
        parts = [TP] if partitions is None else partitions
        return self.reply(self.shard.add_partitions("add", txn, pid, epoch, parts, version, now), durable)

    def end(self, pid: int, epoch: int, commit: bool, txn: str | None = "tx", now: int = 0, version: int = 3,
            durable: bool = True) -> dict:
        return self.reply(self.shard.end_txn("end", txn, pid, epoch, commit, version, now), durable)

    # --------------------------------------------------------------------- set-ups

    def to_state(self, state: TxnState, txn: str = "tx", now: int = 0) -> tuple[int, int]:
        """Drive a fresh id to `state` through the API; returns its (producer id, epoch)."""
        r = self.init(txn, now)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        if state is S.EMPTY:
            return pid, epoch
        assert self.add(pid, epoch, txn=txn, now=now)[TP] == 0
        if state is S.ONGOING:
            return pid, epoch
        commit = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        assert self.end(pid, epoch, commit, txn=txn, now=now)["error_code"] == 0
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self.run_markers(now)
        assert self.meta(txn).state is state
        return pid, epoch

    def meta(self, txn: str = "tx") -> TransactionMetadata:
        return self.shard.transactions[txn]

    def load_value(self, value: TransactionLogValue, txn: str = "tx") -> None:
        """Replay a crafted record, e.g. to start from a nearly exhausted epoch."""
        self.write(TxnResult(records=[(encode_key(txn), encode_value(value))]))


def decoded(result: TxnResult) -> list[tuple[str | None, TransactionLogValue | None]]:
    """The records of a result, decoded."""
    return [(decode_key(k), None if v is None else decode_value(v)) for k, v in result.records]
