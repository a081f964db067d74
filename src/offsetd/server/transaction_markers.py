"""Writes a transaction's COMMIT / ABORT markers to every partition it touched (reference A7).

A partition this broker leads gets its marker appended here: a data partition through its log (and,
with fsyncs on, counted written once a copy is durable in the coordinators' journal), a
`__consumer_offsets` partition through its group coordinator shard (which must replay the marker to
apply or drop the pending offsets). A partition another broker leads (cluster mode) gets a
WriteTxnMarkers v1 request sent to that broker. A marker job retries until every partition holds
its marker — Kafka's coordinator does the same — unless the partition was deleted or this broker
stopped coordinating the transaction (the next coordinator loads Prepare* and sends them again).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from inspect import isawaitable
from typing import Any, Awaitable, Callable

from ..broker.broker import Broker
from ..coordinator.write_errors import CoordinatorWriteError
from ..protocol.errors import Error
from ..records.batch import InvalidBatch, parse_header
from ..records.control import build_marker_batch
from ..records.offsets import OFFSETS_TOPIC
from ..storage.log_append import AppendResult
from ..storage.log_dir import KAFKA_STORAGE_ERROR, NotLeader, StorageError
from ..storage.partition_log import PartitionLog
from ..storage.producer_state import ProduceError
from ..transaction.result import MarkerJob
from .coordinator_runtime import ShardRuntime, ShardState
from .futures import then
from .group_commit import GroupCommit
from .peer_client import PeerClient

log = logging.getLogger("offsetd.transactions")

RETRY_BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # then every second, as long as it takes

# A group coordinator's "not here / not now" codes, reported by WriteTxnMarkers as
# NOT_LEADER_OR_FOLLOWER (reference A7); the marker is retried.
_COORDINATOR_MOVED = {Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE, Error.NOT_COORDINATOR}

# A marker is done with its partition: written, or the partition is gone.
_WRITTEN = frozenset({Error.NONE, Error.UNKNOWN_TOPIC_OR_PARTITION})


class MarkerWriter:
    """Appends markers to the partitions this broker leads and forwards the rest."""

    def __init__(self, broker: Broker, group_runtimes: list[ShardRuntime], clock: Callable[[], int],
                 durable: GroupCommit | None = None) -> None:
        """`durable`: the local engine's group commit, which makes each data partition's marker
        durable before the job counts it written (None: fsyncs off, or cluster mode, where an
        append is durable once PostgreSQL has it)."""
        self.broker = broker
        self.group_runtimes = group_runtimes
        self.clock = clock
        self.durable = durable
        self.remote: PeerClient | None = None  # cluster mode: requests to the other brokers

    def remote_request(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> Awaitable[Any]:
        """A request to another broker of the cluster (decoded response)."""
        assert self.remote is not None
        return self.remote.request(node, api_key, version, body)

    async def write_local(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          topic: str, partition: int) -> int:
        """Append one marker to a partition led here; its error code (NONE when written)."""
        code = self.write_local_now(producer_id, producer_epoch, commit, coordinator_epoch, topic, partition)
        return code if isinstance(code, int) else await code

    def write_local_now(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        topic: str, partition: int) -> int | Awaitable[int]:
        """write_local without a coroutine where the log answers at once (a data partition of the
        local engine with fsyncs off): the error code now, else an awaitable of it."""
        if topic == OFFSETS_TOPIC and partition < len(self.group_runtimes):
            runtime = self.group_runtimes[partition]
            if runtime.state is not ShardState.ACTIVE:
                return Error.NOT_LEADER_OR_FOLLOWER
            return then(runtime.write_marker(producer_id, producer_epoch, commit, coordinator_epoch),
                        _written_code, _offsets_marker_error)
        plog = self.broker.topics.partition(topic, partition)
        if plog is None:
            return Error.UNKNOWN_TOPIC_OR_PARTITION
        if not plog.leader:
            return Error.NOT_LEADER_OR_FOLLOWER
        now = self.clock()
        marker = build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
        try:
            appended = plog.append(marker, now, [parse_header(marker)])  # our own batch: not checked again
        except (ProduceError, StorageError, NotLeader, InvalidBatch) as exc:
            return self._refused(producer_id, topic, partition, exc)
        if isawaitable(appended):  # cluster mode: the log answers after PostgreSQL's COMMIT
            return self._appended_later(appended, producer_id, topic, partition)
        self.broker.on_append(topic, partition)  # read_committed fetchers wait for the LSO to move
        if self.durable is None:
            return Error.NONE
        return _persisted(self.durable, plog, marker, appended)

    async def _appended_later(self, appended: Awaitable[Any], producer_id: int, topic: str, partition: int) -> int:
        try:
            await appended
        except (ProduceError, StorageError, NotLeader, InvalidBatch) as exc:
            return self._refused(producer_id, topic, partition, exc)
        self.broker.on_append(topic, partition)
        return Error.NONE

    @staticmethod
    def _refused(producer_id: int, topic: str, partition: int, exc: Exception) -> int:
        log.info("marker for producer %d on %s-%d refused: %s", producer_id, topic, partition, exc)
        return exc.error_code  # type: ignore[attr-defined]

    def run(self, job: MarkerJob, still_coordinator: Callable[[], bool]) -> Awaitable[None] | None:
        """Write every marker of `job`: None when each went in at once (data partitions of the
        local engine with fsyncs off), else an awaitable that completes when all are written (or
        their partitions are gone), or when this broker stopped coordinating the transaction. Where
        the only wait is for futures (a local marker made durable), it is a future completed
        by their callbacks, without a task; a marker to retry or to send to another broker takes
        the coroutine (_rest)."""
        first = {(topic, partition): self._write(job, topic, partition) for topic, partition in job.partitions}
        waits = [code for code in first.values() if not isinstance(code, int)]
        if not any(isinstance(code, int) and code not in _WRITTEN for code in first.values()):
            if not waits:
                return None
            if all(asyncio.isfuture(code) for code in waits):
                return self._when_written(job, still_coordinator, first, waits)
        return self._rest(job, still_coordinator, first)

    def _when_written(self, job: MarkerJob, still_coordinator: Callable[[], bool],
                      first: dict[tuple[str, int], int | Awaitable[int]], waits: list[Any]) -> "asyncio.Future[None]":
        """A future that completes when every future of `waits` has given a written code; when one
        did not, the rest goes on in _rest (its retries), whose end completes the future."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        left = [len(waits)]

        def settled(_: Any) -> None:
            left[0] -= 1
            if left[0] or done.done():
                return
            if any(code.cancelled() for code in waits):  # the loop is shutting down
                done.cancel()
                return
            if all(code.exception() is None and code.result() in _WRITTEN for code in waits):
                done.set_result(None)
                return
            retried = asyncio.ensure_future(self._rest(job, still_coordinator, first))
            retried.add_done_callback(lambda task: _chain(task, done))

        for code in waits:
            code.add_done_callback(settled)
        return done

    async def _rest(self, job: MarkerJob, still_coordinator: Callable[[], bool],
                    first: dict[tuple[str, int], int | Awaitable[int]]) -> None:
        """run() once a marker must be waited for: await the first round's, then retry the
        failed ones with a back-off as long as this broker coordinates the transaction."""
        codes = {tp: code if isinstance(code, int) else await code for tp, code in first.items()}
        for attempt in itertools.count():
            pending = [tp for tp, code in codes.items() if code not in _WRITTEN]
            if attempt == 5:
                for topic, partition in pending:
                    log.warning("marker for %s (producer %d) on %s-%d still failing with error %d; retrying",
                                job.transactional_id, job.producer_id, topic, partition, codes[(topic, partition)])
            if not pending or not still_coordinator():
                return
            await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
            results = await asyncio.gather(*(self._write_async(job, topic, partition) for topic, partition in pending))
            codes = dict(zip(pending, results))

    async def _write_async(self, job: MarkerJob, topic: str, partition: int) -> int:
        code = self._write(job, topic, partition)
        return code if isinstance(code, int) else await code

    def _write(self, job: MarkerJob, topic: str, partition: int) -> int | Awaitable[int]:
        plog = self.broker.topics.partition(topic, partition)
        if plog is not None and not plog.leader and self.remote is not None:
            return self._write_remote(job, topic, partition)
        return self.write_local_now(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch,
                                    topic, partition)

    async def _write_remote(self, job: MarkerJob, topic: str, partition: int) -> int:
        """WriteTxnMarkers v1 to the broker that leads the partition (cluster mode)."""
        assert self.remote is not None
        node, _ = self.broker.cluster.leader(self.broker.topics.get(topic), partition)
        if node < 0:
            return Error.NOT_LEADER_OR_FOLLOWER
        body = {"markers": [{"producer_id": job.producer_id, "producer_epoch": job.producer_epoch,
                             "transaction_result": job.commit, "coordinator_epoch": job.coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
        try:
            errors = await self.remote.write_txn_markers(node, body)
        # EOFError: asyncio's IncompleteReadError, the peer closed the connection before it
        # answered (it was killed or restarted since the connection was opened)
        except (OSError, EOFError, asyncio.TimeoutError, ConnectionError) as exc:
            log.debug("WriteTxnMarkers to node %d failed: %s", node, exc)
            return Error.NETWORK_EXCEPTION
        error = errors.get((topic, partition), Error.UNKNOWN_SERVER_ERROR)
        if error == Error.UNKNOWN_TOPIC_OR_PARTITION:
            # Our catalogue still has the partition: the peer does not know it yet (it has just
            # started and not read the catalogue), so the marker is not dropped as if deleted.
            return Error.NOT_LEADER_OR_FOLLOWER
        return error


def _persisted(durable: GroupCommit, plog: PartitionLog, marker: bytes,
               appended: AppendResult) -> "asyncio.Future[int]":
    """NONE once the marker `plog` appended is durable (GroupCommit.persist), so the transaction's
    Complete* and the id's next record reach `__transaction_state` only after it: a power loss
    must not keep them and lose the marker (its transaction would stay open, every read_committed
    reader of the partition held at its start). A failed fsync takes the log directory offline:
    KAFKA_STORAGE_ERROR, and the job retries."""
    written = plog.read(appended.base_offset, len(marker))  # as the log wrote it: its offset and epoch
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def settle(error: BaseException | None) -> None:
        if not done.done():
            done.set_result(Error.NONE if error is None else KAFKA_STORAGE_ERROR)
    durable.persist(plog, written, settle)
    return done


def _written_code(_: object) -> int:
    return Error.NONE


def _offsets_marker_error(exc: BaseException) -> int | None:
    """The error code of a marker a group coordinator shard could not write (None: the
    exception passes through)."""
    if isinstance(exc, CoordinatorWriteError):
        return Error.NOT_LEADER_OR_FOLLOWER if exc.error_code in _COORDINATOR_MOVED else exc.error_code
    return None


def _chain(task: "asyncio.Future[None]", done: "asyncio.Future[None]") -> None:
    """Complete `done` as `task` completed."""
    if done.done():
        return
    if task.cancelled():
        done.cancel()
    elif task.exception() is not None:
        done.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        done.set_result(None)
