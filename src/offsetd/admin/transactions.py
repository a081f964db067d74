"""`offsetd transactions` results: the model of what the cluster reports, the hanging-transaction
rule of Kafka's `kafka-transactions.sh find-hanging`, and the tables each action prints (Kafka's
columns, `None` for an absent value as Kafka's tool prints it). No I/O here: the client
(`transactions_client`) fills these types and the command (`transactions_cli`) prints them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .table import Column, render

NONE = "None"  # Kafka's tool prints an absent Optional as "None"

# Coordinator states in which a transactional id still holds partitions it will write markers to:
# an open transaction on a partition the coordinator lists under one of these is not hanging.
ACTIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A partition as the tool names it (`topic-partition` when printed)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class TransactionListing:
    """One ListTransactions row and the broker (coordinator) that answered it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions for one id, from its coordinator."""

    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction in progress
    partitions: tuple[TopicPartition, ...] = field(default=())


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # -1: no marker seen yet
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True)
class OpenTransaction:
    """A producer's open transaction on a partition (a find-hanging candidate or result)."""

    partition: TopicPartition
    producer: ProducerState
    duration_ms: int


# --- find-hanging --------------------------------------------------------------------------------


def open_transactions(producers: Mapping[TopicPartition, Sequence[ProducerState]], now_ms: int,
                      max_transaction_timeout_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer has written nothing for longer than the maximum
    transaction timeout: the coordinator should have aborted them by then, so they are
    candidates for hanging (Kafka's first step; the time is since the producer's last write)."""
    found = []
    for tp in sorted(producers):
        for producer in producers[tp]:
            if producer.current_txn_start_offset < 0:
                continue
            duration = now_ms - producer.last_timestamp
            if duration > max_transaction_timeout_ms:
                found.append(OpenTransaction(tp, producer, duration))
    return found


def is_hanging(candidate: OpenTransaction, description: TransactionDescription | None) -> bool:
    """Whether the coordinator has forgotten this open transaction: no transactional id owns the
    producer id, the id now has another producer id, or its transaction is not active on the
    partition (so the coordinator will never write a marker there)."""
    if description is None or description.producer_id != candidate.producer.producer_id:
        return True
    return description.state not in ACTIVE_STATES or candidate.partition not in description.partitions


def hanging_transactions(candidates: Iterable[OpenTransaction], transactional_ids: Mapping[int, str],
                         descriptions: Mapping[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """The candidates that hang, given producer id -> transactional id (ListTransactions) and
    the descriptions of those ids (None: the coordinator answered TRANSACTIONAL_ID_NOT_FOUND)."""
    result = []
    for candidate in candidates:
        txn_id = transactional_ids.get(candidate.producer.producer_id)
        if is_hanging(candidate, descriptions.get(txn_id) if txn_id is not None else None):
            result.append(candidate)
    return result


def find_open_transaction(producers: Sequence[ProducerState], start_offset: int) -> ProducerState | None:
    """The producer whose open transaction starts at `start_offset` (abort --start-offset)."""
    return next((p for p in producers if p.current_txn_start_offset == start_offset), None)


# --- tables --------------------------------------------------------------------------------------


def _columns(*headers: str) -> list[Column]:
    """Columns as wide as the header or the longest value; the last one unpadded."""
    return [Column(h, len(h), grows=True) for h in headers[:-1]] + [Column(headers[-1], 0)]


def _table(columns: list[Column], rows: list[list[Any]]) -> str:
    """Header and rows as printed text."""
    return "\n".join(render(columns, rows)) + "\n"


LIST_COLUMNS = _columns("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = _columns("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                            "TopicPartitions")
PRODUCERS_COLUMNS = _columns("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                             "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_COLUMNS = _columns("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                           "StartOffset", "LastTimestamp", "Duration(min)")


def format_list(listings: Sequence[TransactionListing]) -> str:
    """The `list` table, sorted by transactional id."""
    rows = [[t.transactional_id, t.coordinator, t.producer_id, t.state]
            for t in sorted(listings, key=lambda t: (t.transactional_id, t.coordinator))]
    return _table(LIST_COLUMNS, rows)


def describe_row(d: TransactionDescription, now_ms: int) -> list[Any]:
    """One `describe` row: start time and duration are None without a transaction in progress."""
    started = d.start_time_ms >= 0
    return [d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
            d.start_time_ms if started else NONE, now_ms - d.start_time_ms if started else NONE,
            ",".join(str(tp) for tp in sorted(d.partitions))]


def format_describe(description: TransactionDescription, now_ms: int) -> str:
    """The `describe` table (one row)."""
    return _table(DESCRIBE_COLUMNS, [describe_row(description, now_ms)])


def producer_row(p: ProducerState) -> list[Any]:
    """One `describe-producers` row (no open transaction: None)."""
    return [p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
            p.current_txn_start_offset if p.current_txn_start_offset >= 0 else NONE]


def format_producers(producers: Sequence[ProducerState]) -> str:
    """The `describe-producers` table, by producer id."""
    return _table(PRODUCERS_COLUMNS, [producer_row(p) for p in sorted(producers, key=lambda p: p.producer_id)])


def format_hanging(hanging: Sequence[OpenTransaction]) -> str:
    """The `find-hanging` table; Duration(min) is whole minutes since the producer's last write."""
    rows = [[h.partition.topic, h.partition.partition, h.producer.producer_id, h.producer.producer_epoch,
             h.producer.coordinator_epoch, h.producer.current_txn_start_offset, h.producer.last_timestamp,
             h.duration_ms // 60_000] for h in hanging]
    return _table(HANGING_COLUMNS, rows)


# --- JSON documents (--output json) ----------------------------------------------------------------


def listing_json(t: TransactionListing) -> dict[str, Any]:
    """A `list` row for --output json."""
    return {"transactional_id": t.transactional_id, "coordinator": t.coordinator, "producer_id": t.producer_id,
            "state": t.state}


def description_json(d: TransactionDescription, now_ms: int) -> dict[str, Any]:
    """The `describe` result for --output json (null where the table says None)."""
    started = d.start_time_ms >= 0
    return {"coordinator_id": d.coordinator_id, "transactional_id": d.transactional_id,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "state": d.state,
            "transaction_timeout_ms": d.timeout_ms, "start_time_ms": d.start_time_ms if started else None,
            "duration_ms": now_ms - d.start_time_ms if started else None,
            "topic_partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(d.partitions)]}


def producer_json(p: ProducerState) -> dict[str, Any]:
    """A `describe-producers` row for --output json (no open transaction: null)."""
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch, "last_sequence": p.last_sequence,
            "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None}


def hanging_json(h: OpenTransaction) -> dict[str, Any]:
    """A `find-hanging` row for --output json."""
    return {"topic": h.partition.topic, "partition": h.partition.partition, **producer_json(h.producer),
            "duration_ms": h.duration_ms}
