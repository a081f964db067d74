"""What a transaction coordinator operation returns: records, responses, and marker jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

Record = tuple[bytes, bytes | None]  # `__transaction_state` key and value (None: tombstone)
Response = dict[str, Any] | Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a COMMIT or ABORT marker of (producer_id, producer_epoch) to every partition, then
    call `markers_written` (A7). Run it only after the records of the same result are durable."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[tuple[str, int]]


@dataclass
class TxnResult:
    """Records (appended atomically, in order, then replayed), (token, response) completions to
    deliver once they are durable, and marker jobs to start once they are durable."""

    records: list[Record] = field(default_factory=list)
    completions: list[tuple[Hashable, Response]] = field(default_factory=list)
    markers: list[MarkerJob] = field(default_factory=list)
    # False: the records need no fsync of their own (Complete*: if a crash loses it, the loaded
    # Prepare* sends the markers again, and markers are idempotent); a later fsync of the same
    # partition makes them durable anyway.
    durable: bool = True
    # True: the operation installed its transition already (Complete*, which needs no
    # durability): the shell appends the records but does not replay them, may hold them back
    # a moment to go with the next write, and may leave out one that a later record of the same
    # batch supersedes (same key: the transactional id's next state).
    applied: bool = False

    def respond(self, token: Hashable, response: Response) -> "TxnResult":
        self.completions.append((token, response))
        return self
