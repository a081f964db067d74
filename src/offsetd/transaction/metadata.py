"""TransactionMetadata: one transactional id's state, and the state table (reference A8) as data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Iterable

from ..records.transaction_log import RecordDecodeError, TransactionLogValue, encode_value

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767
"""Short.MAX_VALUE: reserved for fencing, never handed to a client as a usable epoch."""

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka rotates to a new producer id once the epoch reaches 32766 (32767 is kept for fencing)."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class TxnState(IntEnum):
    """Transaction states with their `TransactionStatus` byte in `__transaction_state` (A8)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7  # pending only, never persisted


S = TxnState

STATE_NAMES: dict[TxnState, str] = {
    S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort", S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead", S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
"""The names DescribeTransactions/ListTransactions use (and ListTransactions filters by)."""

STATE_BY_NAME: dict[str, TxnState] = {name: state for state, name in STATE_NAMES.items()}

COMPLETE_STATES = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})

VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY}) | COMPLETE_STATES,
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY}) | COMPLETE_STATES,
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # TV2 also aborts from Empty and Complete* (EndTxn v5 abort with a bump).
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY}) | COMPLETE_STATES,
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY}) | COMPLETE_STATES,
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""Which state may follow which: target -> the states it may be entered from (A8)."""


def split_state_filters(names: Iterable[str]) -> tuple[set[TxnState], list[str]]:
    """ListTransactions StateFilters: (known states, unknown names to echo in UnknownStateFilters)."""
    known: set[TxnState] = set()
    unknown: list[str] = []
    for name in names:
        state = STATE_BY_NAME.get(name)
        if state is None:
            unknown.append(name)
        else:
            known.add(state)
    return known, unknown


class IllegalTransition(Exception):
    """A transition the state table forbids (a coordinator bug, never a client error)."""


@dataclass(slots=True)
class TransactionMetadata:
    """A transactional id's producer id/epoch, state and partitions, plus the pending transition.

    `last_producer_id` is the producer id before the last InitProducerId (the previous pid after a
    rotation; KIP-360 accepts it with an exhausted epoch); `last_producer_epoch` the epoch a
    KIP-360 retry may present (-1 = none). `next_producer_id` is the id a TV2 EndTxn allocated
    because the epoch ran out; Complete* switches to it. `client_transaction_version` is 2 for a
    txn driven by TV2 requests (EndTxn v5, AddPartitions v4+), else 0. `pending` holds the
    metadata a record in flight will install; while it is set, other requests for the id get
    CONCURRENT_TRANSACTIONS.
    """

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_timestamp: int = -1
    last_update_timestamp: int = -1
    client_transaction_version: int = 0
    next_producer_id: int = NO_PRODUCER_ID
    pending: "TransactionMetadata | None" = None

    @property
    def pending_state(self) -> TxnState | None:
        return None if self.pending is None else self.pending.state

    def transit(self, state: TxnState, now: int, **changes: object) -> "TransactionMetadata":
        """The metadata after moving to `state` at `now` with `changes`; checks the state table.
        Moving to Empty records the current producer id as the last one (rotation, KIP-360)."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {STATE_NAMES[self.state]} -> {STATE_NAMES[state]}")
        if state is S.EMPTY:
            changes.setdefault("last_producer_id", self.producer_id)
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        values.update(changes, state=state, last_update_timestamp=now, pending=None)
        values["partitions"] = set(values["partitions"])
        return TransactionMetadata(**values)  # type: ignore[arg-type]

    def apply(self, target: "TransactionMetadata") -> None:
        """Install a transit whose record is now durable."""
        for name in _FIELD_NAMES:
            setattr(self, name, getattr(target, name))
        self.pending = None

    def sorted_partitions(self) -> list[TopicPartition]:
        return sorted(self.partitions)

    def record_value(self) -> bytes:
        """The stored value: v0 (offsetd's cluster is TV0), or v1 with its tagged fields for a TV2
        txn, so that a load keeps the producer id a TV2 EndTxn allocated."""
        return encode_value(self.to_value(), 1 if self.client_transaction_version >= 2 else 0)

    def to_value(self) -> TransactionLogValue:
        """The `__transaction_state` value of this metadata (Empty has null partitions, A9)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        partitions = None if self.state is S.EMPTY else tuple(
            (topic, tuple(sorted(parts))) for topic, parts in sorted(by_topic.items()))
        return TransactionLogValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state), partitions,
            self.last_update_timestamp, self.start_timestamp, self.last_producer_id, self.next_producer_id,
            self.client_transaction_version)

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> "TransactionMetadata":
        """Metadata as loaded from the log: no KIP-360 retry epoch survives a load (as in Kafka)."""
        try:
            state = TxnState(value.transaction_status)
        except ValueError:
            raise RecordDecodeError(
                f"{transactional_id}: unknown transaction status {value.transaction_status}") from None
        partitions = {(topic, p) for topic, parts in value.partitions or () for p in parts}
        return cls(transactional_id, value.producer_id, value.previous_producer_id, value.producer_epoch,
                   NO_PRODUCER_EPOCH, value.transaction_timeout_ms, state, partitions,
                   value.start_timestamp_ms, value.last_update_timestamp_ms,
                   value.client_transaction_version, value.next_producer_id)


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TransactionMetadata))
"""TransactionMetadata's fields, for transit() and apply() (dataclasses.fields() per call is slow)."""
