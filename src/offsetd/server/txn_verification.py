"""Transaction verification (KIP-890, reference A4/A5): before a partition's first transactional
batch, and before a TxnOffsetCommit, the transaction coordinator is asked whether the partition is
part of the producer's open transaction; in cluster mode a coordinator on another broker is asked
with AddPartitionsToTxn v4 VerifyOnly.

The verdict also orders durability: a partition added by a record answered before its fsync
(TxnShardRuntime's answer_when_written) is verified only once that record is durable, so no
transactional batch or offset reaches a log ahead of the coordinator's record of it.
"""

from __future__ import annotations

import asyncio
from inspect import isawaitable
from typing import Any, Awaitable, Callable, Protocol

from ..protocol.api_versions import ApiKey
from ..protocol.errors import Error
from .transaction_runtime import CONCURRENT_WAIT_S, TxnShardRuntime, state_error

# A coordinator that cannot answer a verification right now: the append is retried by the
# producer (Kafka's leaders answer NOT_ENOUGH_REPLICAS then).
VERIFY_UNAVAILABLE = {code: Error.NOT_ENOUGH_REPLICAS for code in (
    Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE, Error.NOT_COORDINATOR)}


class TransactionSide(Protocol):
    """What verification reads of the transaction coordinator (server/transaction_api.py)."""

    verify_partitions: bool
    markers: Any  # the MarkerWriter: its peer client asks other brokers
    runtime_for: Callable[[str], TxnShardRuntime | None]
    coordinator_node: Callable[[str], int]


class PartitionVerifier:
    """Answers "is this partition in the producer's open transaction?" for the produce path
    (`Broker.txn_verifier`) and for TxnOffsetCommit (`GroupApi.txn_verifier`)."""

    def __init__(self, api: TransactionSide) -> None:
        self.api = api

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> int | Awaitable[int]:
        """Is (topic, partition) part of the producer's open transaction? Asked before a
        partition's first transactional batch (A4) and before a TxnOffsetCommit; a coordinator on
        another broker (cluster mode) is asked with AddPartitionsToTxn v4 VerifyOnly."""
        if not self.api.verify_partitions:
            return Error.NONE
        runtime = self.api.runtime_for(transactional_id)
        if runtime is not None and not runtime.plog.leader and self.api.markers.remote is not None:
            return self._verify_remote(transactional_id, producer_id, producer_epoch, topic, partition)
        error = state_error(runtime)
        if error:
            return VERIFY_UNAVAILABLE.get(error, error)
        code = self._verify_now(runtime, transactional_id, producer_id, producer_epoch, topic, partition)  # type: ignore
        if code == Error.CONCURRENT_TRANSACTIONS:  # another write of the id in flight (AddOffsetsToTxn...)
            return self._verify_when_settled(runtime, transactional_id, producer_id, producer_epoch,  # type: ignore
                                             topic, partition)
        synced = runtime.unsynced(transactional_id) if code == Error.NONE else None  # type: ignore[union-attr]
        if synced is not None:  # added by a record answered before its fsync: appended once it is durable
            return self._verify_when_synced(synced, transactional_id, producer_id, producer_epoch, topic, partition)
        return code

    @staticmethod
    def _verify_now(runtime: TxnShardRuntime, transactional_id: str, producer_id: int, producer_epoch: int,
                    topic: str, partition: int) -> int:
        return runtime.shard.verify_partitions(transactional_id, producer_id, producer_epoch,
                                               [(topic, partition)]).get((topic, partition), Error.NONE)

    async def _verify_when_settled(self, runtime: TxnShardRuntime, transactional_id: str, producer_id: int,
                                   producer_epoch: int, topic: str, partition: int) -> int:
        """verify() once the id's write in flight is replayed (as _when_settled does for operations)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONCURRENT_WAIT_S
        while True:  # checked before each wait: the write may have been replayed before this ran
            error = state_error(runtime)
            if error:
                return VERIFY_UNAVAILABLE.get(error, error)
            code = self._verify_now(runtime, transactional_id, producer_id, producer_epoch, topic, partition)
            if code != Error.CONCURRENT_TRANSACTIONS or loop.time() >= deadline:
                return code
            await runtime.changed(transactional_id, deadline - loop.time())

    async def _verify_when_synced(self, synced: "asyncio.Future[None]", transactional_id: str, producer_id: int,
                                  producer_epoch: int, topic: str, partition: int) -> int:
        """verify() again once the record that added the partition is durable (or its write failed
        and the shard is rebuilt from the log, which then decides)."""
        await asyncio.shield(synced)
        verdict = self.verify(transactional_id, producer_id, producer_epoch, topic, partition)
        return await verdict if isawaitable(verdict) else verdict  # type: ignore[misc,return-value]

    async def _verify_remote(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                             partition: int) -> int:
        node = self.api.coordinator_node(transactional_id)
        if node < 0:
            return Error.NOT_ENOUGH_REPLICAS
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": True,
                                  "topics": [{"name": topic, "partitions": [partition]}]}]}
        try:
            response = await self.api.markers.remote_request(node, ApiKey.ADD_PARTITIONS_TO_TXN, 4, body)
        # EOFError: asyncio's IncompleteReadError, the peer closed the connection before it answered
        # (killed or restarted since it was opened); it failed the client's request with an internal error
        except (OSError, EOFError, asyncio.TimeoutError):
            return Error.NOT_ENOUGH_REPLICAS
        if response.error_code:
            return VERIFY_UNAVAILABLE.get(int(response.error_code), int(response.error_code))
        codes = [int(p.partition_error_code) for txn in response.results_by_transaction
                 for t in txn.topic_results for p in t.results_by_partition]
        code = codes[0] if codes else Error.UNKNOWN_SERVER_ERROR
        return VERIFY_UNAVAILABLE.get(code, code)

    def verify_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                       partition: int) -> int | Awaitable[int]:
        """verify() for TxnOffsetCommit, whose clients (v0-3) know INVALID_TXN_STATE, not
        TRANSACTION_ABORTABLE (A5), and COORDINATOR_NOT_AVAILABLE rather than NOT_ENOUGH_REPLICAS."""
        verdict = self.verify(transactional_id, producer_id, producer_epoch, topic, partition)
        if isawaitable(verdict):
            async def mapped() -> int:
                return _for_offsets(await verdict)  # type: ignore[misc]
            return mapped()
        return _for_offsets(verdict)  # type: ignore[arg-type]


def _for_offsets(error: int) -> int:
    return {Error.TRANSACTION_ABORTABLE: Error.INVALID_TXN_STATE,
            Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE}.get(error, error)
