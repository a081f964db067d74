"""The history of a chaos run: every client operation with its outcome (`Op`, appended to
`ops.jsonl` once decided), the faults injected, and how a client error decides an outcome. Shared
by the one-node harness (harness.py) and the cluster harness (cluster_harness.py)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import KafkaError

# Client errors after which the operation may or may not have taken effect.
_UNKNOWN_ERRORS = {"_MSG_TIMED_OUT", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT", "_TRANSPORT",
                   "_PURGE_INFLIGHT", "NETWORK_EXCEPTION", "_DESTROY", "_FATAL", "_ALL_BROKERS_DOWN"}

CLIENT_TIMEOUTS = {
    # Longer than the longest pause (stop: 2 s), so no request times out while the broker is only
    # paused and then lands after a newer one sent on a fresh connection.
    "socket.timeout.ms": 8000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 2000,
    "log_level": 0,
}


# ----------------------------------------------------------------------------------------------
# The history of operations


@dataclass
class Op:
    """One client operation and its outcome."""

    op: int
    round: int
    kind: str             # "produce" | "commit" | "txn"
    client: str           # producer instance ("p1.3"), committer ("c2") or transactional instance
    group: str | None     # commits: the group id; txn: the group whose offsets the transaction commits
    partition: int        # txn: -1 (a transaction spans partitions)
    value: str            # produce: the payload; commit: the offset sent; txn: the transaction's label
    start: float          # seconds since the harness started
    end: float | None = None
    outcome: str = "pending"  # ok | failed | unknown; txn: ok (committed) | aborted | unknown
    offset: int | None = None  # produce: the acknowledged offset
    error: str | None = None
    topic: str = ""       # commit: the committed topic ("": the run's commit topic); txn: the output topic
    count: int | None = None  # txn: how many records the transaction produced
    metadata: str | None = None  # commit: the metadata sent, when a client process named it (else commit_metadata)

    def line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


@dataclass
class FaultEvent:
    """One injected fault (or an unexpected broker exit, kind "crash")."""

    round: int
    kind: str
    start: float
    end: float
    detail: str = ""


class History:
    """All operations and faults of a run; thread-safe; ops go to `ops.jsonl` once decided."""

    def __init__(self, path: Path) -> None:
        self.t0 = time.monotonic()
        self.ops: list[Op] = []
        self.faults: list[FaultEvent] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._next = 0
        self._file = open(path, "a", buffering=1)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def invoke(self, round_no: int, kind: str, client: str, group: str | None, partition: int,
               value: str, topic: str = "") -> Op:
        with self._lock:
            self._next += 1
            op = Op(self._next, round_no, kind, client, group, partition, value, self.now(), topic=topic)
            self.ops.append(op)
            return op

    def complete(self, op: Op, outcome: str, *, offset: int | None = None, error: str | None = None) -> None:
        """Decide an op; an op already frozen as unknown keeps that outcome (a late answer is noted)."""
        with self._lock:
            if op.outcome != "pending":
                self.notes.append(f"late answer for op {op.op} after round end: {outcome} {offset} {error}")
                return
            op.end, op.outcome, op.offset, op.error = self.now(), outcome, offset, error
            self._file.write(op.line() + "\n")

    def freeze(self, reason: str) -> int:
        """Every op still pending becomes unknown; returns how many."""
        count = 0
        with self._lock:
            for op in self.ops:
                if op.outcome == "pending":
                    op.end, op.outcome, op.error = self.now(), "unknown", reason
                    self._file.write(op.line() + "\n")
                    count += 1
        return count

    def snapshot(self) -> list[Op]:
        """The operations so far (a copy)."""
        with self._lock:
            return list(self.ops)

    def fault(self, event: FaultEvent) -> None:
        with self._lock:
            self.faults.append(event)
            self._file.write(json.dumps({"fault": asdict(event)}) + "\n")

    def close(self) -> None:
        self._file.close()


def classify(err: KafkaError) -> str:
    return "unknown" if err.name() in _UNKNOWN_ERRORS or err.code() == KafkaError._TIMED_OUT else "failed"


def commit_metadata(op: Op, size: int) -> str:
    """The metadata a commit attempt sends: its op id, padded to the configured size."""
    return f"op{op.op}:".ljust(size, "x")

