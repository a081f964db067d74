"""TransactionCoordinatorShard: the sans-IO transaction coordinator of one `__transaction_state`
partition.

Like the group coordinator shard: every operation takes an opaque request token and the time and
returns a TxnResult (records to append, (token, response) pairs and marker jobs the shell starts
once the records are durable). Metadata changes only through `replay()`, the function the loader
calls too. An operation that writes sets the id's pending transition; until the shell replays the
record, other requests for the id get CONCURRENT_TRANSACTIONS. The one exception is Complete*,
which needs no durability (a loaded Prepare* sends its markers again): it is installed when the
markers are written and its record appended without a replay (TxnResult.applied). When a write fails the shell calls
`reset()` and replays the log, which also drops the pending transitions.
Rules and error codes follow the transactions reference (A2, A3, A6, A7, A8 cited below).
"""

from __future__ import annotations

import logging
from typing import Callable, Hashable, Iterable

from ..records.transaction_log import decode_key, decode_value, encode_key
from .config import TransactionConfig
from .metadata import (
    COMPLETE_STATES, MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, PREPARE_STATES, STATE_NAMES,
    TopicPartition, TransactionMetadata, TxnState, is_epoch_exhausted, split_state_filters,
)
from .result import MarkerJob, TxnResult

log = logging.getLogger("offsetd.transaction")

S = TxnState

NONE = 0
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120

# Requests older than these versions get INVALID_PRODUCER_EPOCH where PRODUCER_FENCED applies (A2).
FENCED_SINCE_VERSION = {"init_producer_id": 4, "add_partitions": 2, "end_txn": 2}

# InitProducerId by state once the producer id checks passed (A2 rule 9).
BUMP, FENCE = "bump", "fence"
INIT_BY_STATE: dict[TxnState, str | int] = {
    S.EMPTY: BUMP, S.COMPLETE_COMMIT: BUMP, S.COMPLETE_ABORT: BUMP,
    S.ONGOING: FENCE,
    S.PREPARE_COMMIT: CONCURRENT_TRANSACTIONS, S.PREPARE_ABORT: CONCURRENT_TRANSACTIONS,
}

# EndTxn, TV1 (A6): (state, commit) -> error, or PREPARE (write PrepareCommit / PrepareAbort).
PREPARE = "prepare"
END_TXN_TV1: dict[tuple[TxnState, bool], str | int] = {
    (S.ONGOING, True): PREPARE, (S.ONGOING, False): PREPARE,
    (S.PREPARE_COMMIT, True): CONCURRENT_TRANSACTIONS, (S.PREPARE_COMMIT, False): INVALID_TXN_STATE,
    (S.PREPARE_ABORT, True): INVALID_TXN_STATE, (S.PREPARE_ABORT, False): CONCURRENT_TRANSACTIONS,
    (S.COMPLETE_COMMIT, True): NONE, (S.COMPLETE_COMMIT, False): INVALID_TXN_STATE,
    (S.COMPLETE_ABORT, True): INVALID_TXN_STATE, (S.COMPLETE_ABORT, False): NONE,
    (S.EMPTY, True): INVALID_TXN_STATE, (S.EMPTY, False): INVALID_TXN_STATE,
}

# EndTxn v5, TV2 (A6). The sent epoch must be: CURRENT (Ongoing, Empty), RETRY = current - 1
# (Prepare*, whose record bumped it), or ANY of those or the epoch-overflow retry (Complete*).
CURRENT, RETRY, ANY = "current", "retry", "any"
END_TXN_TV2_EPOCHS: dict[TxnState, str] = {
    S.ONGOING: CURRENT, S.EMPTY: CURRENT,
    S.PREPARE_COMMIT: RETRY, S.PREPARE_ABORT: RETRY,
    S.COMPLETE_COMMIT: ANY, S.COMPLETE_ABORT: ANY,
}
# (state, commit, is a retry) -> error, or PREPARE (bump the epoch and write Prepare*).
END_TXN_TV2: dict[tuple[TxnState, bool, bool], str | int] = {
    (S.ONGOING, True, False): PREPARE, (S.ONGOING, False, False): PREPARE,
    (S.EMPTY, True, False): INVALID_TXN_STATE, (S.EMPTY, False, False): PREPARE,
    (S.COMPLETE_COMMIT, True, False): INVALID_TXN_STATE, (S.COMPLETE_COMMIT, True, True): NONE,
    (S.COMPLETE_COMMIT, False, False): PREPARE, (S.COMPLETE_COMMIT, False, True): INVALID_TXN_STATE,
    (S.COMPLETE_ABORT, True, False): INVALID_TXN_STATE, (S.COMPLETE_ABORT, True, True): INVALID_TXN_STATE,
    (S.COMPLETE_ABORT, False, False): PREPARE, (S.COMPLETE_ABORT, False, True): NONE,
    (S.PREPARE_COMMIT, True, True): CONCURRENT_TRANSACTIONS, (S.PREPARE_COMMIT, False, True): INVALID_TXN_STATE,
    (S.PREPARE_ABORT, True, True): INVALID_TXN_STATE, (S.PREPARE_ABORT, False, True): CONCURRENT_TRANSACTIONS,
}

COMPLETE_OF = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}
EXPIRABLE_STATES = frozenset({S.EMPTY}) | COMPLETE_STATES


def _adding_partitions(meta: TransactionMetadata) -> bool:
    """Is the id's write in flight an Ongoing transaction gaining partitions (same producer)?"""
    target = meta.pending
    return (meta.state is S.ONGOING and target is not None and target.state is S.ONGOING
            and target.producer_id == meta.producer_id and target.producer_epoch == meta.producer_epoch)


def map_fenced(error: int, api: str, version: int) -> int:
    """PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for versions that predate it (A2)."""
    if error == PRODUCER_FENCED and version < FENCED_SINCE_VERSION[api]:
        return INVALID_PRODUCER_EPOCH
    return error


def _init_response(error: int, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": producer_epoch}


class TransactionCoordinatorShard:
    """Transactional ids of one `__transaction_state` partition: their producer ids and epochs,
    states and partitions, and the timers that abort and expire them."""

    def __init__(self, partition: int, config: TransactionConfig, allocate_producer_id: Callable[[], int]) -> None:
        self.partition = partition
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.coordinator_epoch = 0  # set by the shell: the partition's leader epoch (A7)
        self._abort_deadline: int | None = None
        self._expire_deadline: int | None = None
        self.reset()

    def reset(self) -> None:
        """Forget every transactional id (what replaying the log rebuilds): at creation, and after
        a failed write, so that pending transitions vanish. Timers and settings stay."""
        self.transactions: dict[str, TransactionMetadata] = {}
        self.skipped_records = 0
        # encoded key -> (transactional id, encoded value) of each record written and not yet
        # replayed: its replay installs the pending transition without decoding or re-encoding
        self._written: dict[bytes, tuple[str, bytes | None]] = {}

    # ============================================================================ replay

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one `__transaction_state` record (the last record of an id wins, A9). A record
        that matches the id's pending transition installs that transition (which also carries
        the in-memory KIP-360 fields); any other is loaded as stored. Unknown key versions are
        counted and skipped (so are records without a key); an unknown value version raises
        RecordDecodeError: the load must stop there (A9). The very value object this shard
        wrote (the shell replays what it appended) is recognised without decoding."""
        written = self._written.pop(key, None) if self._written and key is not None else None
        if written is not None and value is not None and written[1] is value:
            meta = self.transactions.get(written[0])
            if meta is not None and meta.pending is not None:
                meta.apply(meta.pending)
                return
        transactional_id = None if key is None else decode_key(key)
        if transactional_id is None:
            self.skipped_records += 1
            return
        if value is None:
            self.transactions.pop(transactional_id, None)
            return
        meta = self.transactions.get(transactional_id)
        if meta is not None and meta.pending is not None and meta.pending.record_value() == bytes(value):
            meta.apply(meta.pending)
        else:
            self.transactions[transactional_id] = TransactionMetadata.from_value(transactional_id, decode_value(value))

    def on_loaded(self, now: int) -> TxnResult:
        """After load: start the timers, and re-send the markers of every txn in Prepare* (A7)."""
        self._abort_deadline = now + self.config.abort_timed_out_transaction_cleanup_interval_ms
        self._expire_deadline = now + self.config.remove_expired_transaction_cleanup_interval_ms
        result = TxnResult()
        for meta in self.transactions.values():
            if meta.state in PREPARE_STATES and meta.pending is None:
                result.markers.append(self._marker_job(meta))
        return result

    # ============================================================================ writes

    def _write(self, meta: TransactionMetadata, target: TransactionMetadata, result: TxnResult) -> None:
        """Append the record of `target` and make it the id's pending transition."""
        meta.pending = target
        key, value = encode_key(meta.transactional_id), target.record_value()
        self._written[key] = (meta.transactional_id, value)
        result.records.append((key, value))

    def _marker_job(self, meta: TransactionMetadata) -> MarkerJob:
        return MarkerJob(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                         meta.state is S.PREPARE_COMMIT, self.coordinator_epoch, meta.sorted_partitions())

    def _write_prepare(self, meta: TransactionMetadata, commit: bool, now: int, result: TxnResult,
                       **changes: object) -> None:
        """Write PrepareCommit/PrepareAbort; its markers go out once that record is durable (A7)."""
        target = meta.transit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now, **changes)
        self._write(meta, target, result)
        result.markers.append(self._marker_job(target))

    def _fence_and_abort(self, meta: TransactionMetadata, now: int, result: TxnResult) -> None:
        """Ongoing txn of a fenced producer or past its timeout: bump the epoch (PrepareEpochFence,
        never persisted) and abort the txn with the bumped epoch (A2 rule 9, A8 timers)."""
        fence = meta.transit(S.PREPARE_EPOCH_FENCE, now, producer_epoch=meta.producer_epoch + 1,
                             last_producer_epoch=NO_PRODUCER_EPOCH)
        target = fence.transit(S.PREPARE_ABORT, now)
        self._write(meta, target, result)
        result.markers.append(self._marker_job(target))

    # =================================================================== InitProducerId

    def init_producer_id(self, token: Hashable, transactional_id: str | None, timeout_ms: int,
                         producer_id: int, producer_epoch: int, version: int, now: int) -> TxnResult:
        """InitProducerId (A2): get a producer id and bump its epoch, fencing older instances."""
        result = TxnResult()

        def reply(error: int, pid: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> TxnResult:
            error = map_fenced(error, "init_producer_id", version)
            return result.respond(token, _init_response(error, pid, epoch))

        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return reply(INVALID_REQUEST)
        if transactional_id is None:  # idempotent producer: a fresh producer id
            return reply(NONE, self.allocate_producer_id(), 0)
        if transactional_id == "":
            return reply(INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return reply(INVALID_TRANSACTION_TIMEOUT)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(transactional_id, self.allocate_producer_id(), NO_PRODUCER_ID,
                                       NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY,
                                       set(), -1, now)
            self.transactions[transactional_id] = meta
        if meta.pending is not None:
            return reply(CONCURRENT_TRANSACTIONS)
        if not self._valid_producer_id(meta, expected):
            return reply(PRODUCER_FENCED)
        action = INIT_BY_STATE.get(meta.state, CONCURRENT_TRANSACTIONS)
        if action == FENCE:
            # The bumped epoch is never returned: the client retries, which bumps again (A2).
            self._fence_and_abort(meta, now, result)
            return reply(CONCURRENT_TRANSACTIONS)
        if action != BUMP:
            return reply(action)  # type: ignore[arg-type]
        reset = {"timeout_ms": timeout_ms, "partitions": set(), "start_timestamp": -1}
        if is_epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            last_epoch = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            target = meta.transit(S.EMPTY, now, producer_id=self.allocate_producer_id(), producer_epoch=0,
                                  last_producer_epoch=last_epoch, **reset)
        else:
            epochs = self._next_epochs(meta, expected)
            if epochs is None:
                return reply(PRODUCER_FENCED)
            target = meta.transit(S.EMPTY, now, producer_epoch=epochs[0], last_producer_epoch=epochs[1], **reset)
        self._write(meta, target, result)
        return reply(NONE, target.producer_id, target.producer_epoch)

    @staticmethod
    def _valid_producer_id(meta: TransactionMetadata, expected: tuple[int, int] | None) -> bool:
        """A sent producer id must be the current one, or the previous one with an exhausted epoch,
        unless the id never had an epoch (A2 rule 8)."""
        if expected is None or meta.producer_epoch == NO_PRODUCER_EPOCH:
            return True
        pid, epoch = expected
        return pid == meta.producer_id or (pid == meta.last_producer_id and is_epoch_exhausted(epoch))

    @staticmethod
    def _next_epochs(meta: TransactionMetadata, expected: tuple[int, int] | None) -> tuple[int, int] | None:
        """(new epoch, last epoch) of a bump; a KIP-360 retry with the last epoch keeps the current
        values; any other sent epoch is fenced (None) (A2 rule 10)."""
        bumped = meta.producer_epoch + 1
        if expected is None:
            return bumped, NO_PRODUCER_EPOCH
        sent = expected[1]
        if meta.producer_epoch == NO_PRODUCER_EPOCH or sent == meta.producer_epoch:
            return bumped, meta.producer_epoch
        if sent == meta.last_producer_epoch:
            return meta.producer_epoch, meta.last_producer_epoch
        return None

    # =============================================================== AddPartitionsToTxn

    def _check_producer(self, transactional_id: str | None, producer_id: int,
                        producer_epoch: int) -> tuple[int, TransactionMetadata | None]:
        """The checks AddPartitions and its VerifyOnly form share (A3 step 3): (error, metadata);
        the metadata is set whenever the error is NONE."""
        if not transactional_id:
            return INVALID_REQUEST, None
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING, meta
        if meta.producer_epoch != producer_epoch:
            return PRODUCER_FENCED, meta
        if meta.pending is not None or meta.state in PREPARE_STATES:
            return CONCURRENT_TRANSACTIONS, meta
        return NONE, meta

    def add_partitions(self, token: Hashable, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition], version: int, now: int) -> TxnResult:
        """AddPartitionsToTxn / AddOffsetsToTxn (A3): the completion is {(topic, partition): error},
        one error for all partitions. Partitions already in an Ongoing txn need no write."""
        result = TxnResult()
        wanted = set(partitions)
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        already_in = meta is not None and meta.state is S.ONGOING and wanted <= meta.partitions
        if error == NONE and meta is not None and wanted and not already_in:
            # the start time is set when a txn begins, i.e. when leaving Empty or Complete*
            start = meta.start_timestamp if meta.state is S.ONGOING else now
            target = meta.transit(S.ONGOING, now, partitions=meta.partitions | wanted, start_timestamp=start,
                                  client_transaction_version=2 if version >= 4 else 0)
            self._write(meta, target, result)
        code = map_fenced(error, "add_partitions", version)
        return result.respond(token, {tp: code for tp in partitions})

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ VerifyOnly (A3): nothing is written; NONE for a partition in the
        txn, TRANSACTION_ABORTABLE otherwise. Codes are raw: callers rewrite them for old clients
        (120 -> 48, 90 -> 47)."""
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error == CONCURRENT_TRANSACTIONS and meta is not None and _adding_partitions(meta):
            # an AddPartitionsToTxn is being written: what the transaction durably holds already
            # is in it (TxnOffsetCommit right after AddOffsetsToTxn need not wait for that write)
            return {tp: NONE if tp in meta.partitions else CONCURRENT_TRANSACTIONS for tp in partitions}
        if error != NONE or meta is None:
            return {tp: error for tp in partitions}
        return {tp: NONE if tp in meta.partitions else TRANSACTION_ABORTABLE for tp in partitions}

    # ========================================================================== EndTxn

    def end_txn(self, token: Hashable, transactional_id: str | None, producer_id: int, producer_epoch: int,
                commit: bool, version: int, now: int) -> TxnResult:
        """EndTxn (A6): write Prepare*, reply once it is durable, then markers (A1 step 5).
        v5 is TV2 (the epoch is bumped at Prepare*; the reply carries the pid/epoch to use next)."""
        result = TxnResult()
        if version >= 5:
            error, pid, epoch = self._end_txn_tv2(transactional_id, producer_id, producer_epoch, commit, now, result)
            return result.respond(token, {"error_code": error, "producer_id": pid, "producer_epoch": epoch})
        error = self._end_txn_tv1(transactional_id, producer_id, producer_epoch, commit, now, result)
        return result.respond(token, {"error_code": map_fenced(error, "end_txn", version)})

    def _end_txn_tv1(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     commit: bool, now: int, result: TxnResult) -> int:
        """EndTxn v0-4: the error per A6's TV1 checks and table (Prepare* written on success)."""
        if not transactional_id:
            return INVALID_REQUEST
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        if meta.pending is not None:
            return CONCURRENT_TRANSACTIONS
        action = END_TXN_TV1.get((meta.state, commit), INVALID_TXN_STATE)
        if action == PREPARE:
            self._write_prepare(meta, commit, now, result)
            return NONE
        return action  # type: ignore[return-value]

    def _end_txn_tv2(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     commit: bool, now: int, result: TxnResult) -> tuple[int, int, int]:
        """EndTxn v5: (error, producer id, epoch) per A6's TV2 rules."""
        failed = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not transactional_id:
            return (INVALID_REQUEST, *failed)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return (INVALID_PRODUCER_ID_MAPPING, *failed)
        current = producer_id == meta.producer_id and producer_epoch == meta.producer_epoch
        retry_on_bump = producer_id == meta.producer_id and producer_epoch + 1 == meta.producer_epoch
        # the previous txn's Prepare* ran out of epochs and Complete* moved to a new producer id
        retry_on_overflow = (producer_id == meta.last_producer_id and meta.producer_epoch == 0
                             and producer_epoch == MAX_PRODUCER_EPOCH - 1)
        if producer_id != meta.producer_id and not retry_on_overflow:
            return (INVALID_PRODUCER_ID_MAPPING, *failed)
        allowed = {CURRENT: current, RETRY: retry_on_bump, ANY: current or retry_on_bump or retry_on_overflow}
        if not allowed[END_TXN_TV2_EPOCHS.get(meta.state, CURRENT)]:
            return (PRODUCER_FENCED, *failed)
        if meta.pending is not None:
            return (CONCURRENT_TRANSACTIONS, *failed)
        action = END_TXN_TV2.get((meta.state, commit, not current), INVALID_TXN_STATE)
        if action == NONE:
            return NONE, meta.producer_id, meta.producer_epoch  # a retry: the values to use now
        if action != PREPARE:
            return (action, *failed)  # type: ignore[return-value]
        next_pid = self.allocate_producer_id() if is_epoch_exhausted(meta.producer_epoch) else NO_PRODUCER_ID
        changes: dict[str, object] = {"producer_epoch": meta.producer_epoch + 1,
                                      "last_producer_epoch": meta.producer_epoch,
                                      "next_producer_id": next_pid, "client_transaction_version": 2}
        if meta.state is not S.ONGOING:  # an abort with no partitions: the txn starts and ends now
            changes.update(partitions=set(), start_timestamp=now)
        self._write_prepare(meta, commit, now, result, **changes)
        if next_pid != NO_PRODUCER_ID:
            return NONE, next_pid, 0
        return NONE, meta.producer_id, meta.producer_epoch + 1

    def markers_written(self, transactional_id: str, producer_id: int, producer_epoch: int, now: int) -> TxnResult:
        """Every marker of the txn is written: Complete* with the partitions cleared (A7),
        installed at once (TxnResult.applied: the id's next transaction need not wait for its
        write) and appended without an fsync of its own. A call that no longer matches the id's
        Prepare* state (stale job) writes nothing."""
        result = TxnResult()
        meta = self.transactions.get(transactional_id)
        if (meta is None or meta.pending is not None or meta.state not in PREPARE_STATES
                or meta.producer_id != producer_id or meta.producer_epoch != producer_epoch):
            return result
        changes: dict[str, object] = {"partitions": set()}
        if meta.next_producer_id != NO_PRODUCER_ID:  # TV2 epoch overflow: switch to the new producer id
            changes.update(producer_id=meta.next_producer_id, producer_epoch=0, next_producer_id=NO_PRODUCER_ID,
                           last_producer_id=meta.producer_id)
        target = meta.transit(COMPLETE_OF[meta.state], now, **changes)
        meta.apply(target)
        result.records.append((encode_key(transactional_id), target.record_value()))
        result.durable = False  # recoverable from Prepare*: no fsync of its own (TxnResult.durable)
        result.applied = True
        return result

    # ================================================================ Describe / List

    def describe(self, transactional_id: str) -> dict:
        """DescribeTransactions for one id (A8): ints in ms for the timeout and start time."""
        meta = self.transactions.get(transactional_id) if transactional_id else None
        error = INVALID_REQUEST if not transactional_id else TRANSACTIONAL_ID_NOT_FOUND
        if meta is None or meta.state is S.DEAD:
            return {"error_code": error, "transactional_id": transactional_id, "transaction_state": "",
                    "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                    "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH, "topics": []}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in meta.sorted_partitions():
            by_topic.setdefault(topic, []).append(partition)
        return {"error_code": NONE, "transactional_id": transactional_id,
                "transaction_state": STATE_NAMES[meta.state], "transaction_timeout_ms": meta.timeout_ms,
                "transaction_start_time_ms": meta.start_timestamp, "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int,
                          now: int) -> list[dict]:
        """ListTransactions (A8): filters by state name, producer id and v1 duration (now - start >
        duration); empty filters match all, unknown state names match nothing; Dead is never listed."""
        state_names = list(states)
        wanted_states, _unknown = split_state_filters(state_names)
        wanted_pids = set(producer_ids)
        rows = []
        for meta in self.transactions.values():
            if meta.state is S.DEAD:
                continue
            if wanted_pids and meta.producer_id not in wanted_pids:
                continue
            if state_names and meta.state not in wanted_states:
                continue
            if duration_ms >= 0 and now - meta.start_timestamp <= duration_ms:
                continue
            rows.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                         "transaction_state": STATE_NAMES[meta.state]})
        return rows

    # ========================================================================== timers

    def next_deadline(self) -> int | None:
        """When `fire_timers` has work next (None before `on_loaded`)."""
        deadlines = [d for d in (self._abort_deadline, self._expire_deadline) if d is not None]
        return min(deadlines) if deadlines else None

    def fire_timers(self, now: int) -> TxnResult:
        """Abort timed-out txns and tombstone expired ids, each on its own interval (A8)."""
        result = TxnResult()
        if self._abort_deadline is not None and now >= self._abort_deadline:
            self._abort_deadline = now + self.config.abort_timed_out_transaction_cleanup_interval_ms
            self._abort_timed_out(now, result)
        if self._expire_deadline is not None and now >= self._expire_deadline:
            self._expire_deadline = now + self.config.remove_expired_transaction_cleanup_interval_ms
            self._expire_ids(now, result)
        return result

    def _abort_timed_out(self, now: int, result: TxnResult) -> None:
        """An Ongoing txn past start + timeout is fenced (epoch+1) and aborted."""
        for meta in self.transactions.values():
            if meta.state is S.ONGOING and meta.pending is None and meta.start_timestamp + meta.timeout_ms < now:
                log.info("transactional id %s: transaction timed out, aborting", meta.transactional_id)
                self._fence_and_abort(meta, now, result)

    def _expire_ids(self, now: int, result: TxnResult) -> None:
        """Empty or Complete* ids idle longer than transactional.id.expiration.ms get a tombstone."""
        horizon = now - self.config.transactional_id_expiration_ms
        for meta in self.transactions.values():
            if meta.state in EXPIRABLE_STATES and meta.pending is None and meta.last_update_timestamp <= horizon:
                meta.pending = meta.transit(S.DEAD, now)
                result.records.append((encode_key(meta.transactional_id), None))
