"""Transaction APIs on the wire (reference Part A): route each transactional id to its
`__transaction_state` shard, check the shard's state, shape responses per version.

FindCoordinator(TRANSACTION), InitProducerId with a transactional id, AddPartitionsToTxn (v0-3 client
form; v4+ batched and verify-only), AddOffsetsToTxn, EndTxn, WriteTxnMarkers, DescribeTransactions,
ListTransactions and DescribeProducers. `__transaction_state` is created the first time a client
asks for a transaction coordinator (Kafka's rule), compacted and uncompressed.
"""

from __future__ import annotations

import asyncio
import logging
from inspect import isawaitable
from typing import Any, Awaitable, Callable

from ..broker.broker import Broker
from ..broker.cluster_view import once_led
from ..broker.produce import handle_init_producer_id
from ..config import BrokerConfig
from ..protocol.api_versions import ApiKey
from ..protocol.errors import Error
from ..records.offsets import OFFSETS_TOPIC, partition_for
from ..security.authorization import Access, Op, Res, access
from ..transaction.config import TransactionConfig
from ..transaction.metadata import STATE_BY_NAME
from ..transaction.result import TxnResult
from ..transaction.shard import TransactionCoordinatorShard
from .coordinator_runtime import new_token
from .futures import then
from .group_api import GroupApi, RequestContext, reply_when_durable, write_failure
from .group_commit import GroupCommit
from .transaction_markers import MarkerWriter
from .transaction_runtime import TxnShardRuntime, state_error

log = logging.getLogger("offsetd.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
# How long an operation answered CONCURRENT_TRANSACTIONS without a write waits for the id's state to
# move on (the previous transaction's markers and Complete*, usually a millisecond or two) and runs
# again, before the answer goes out: clients would otherwise sit out a retry back-off (librdkafka:
# 100 ms) after every transaction that begins right after the last one ended.
CONCURRENT_WAIT_S = 1.0
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2

# A coordinator that cannot answer a verification right now: the append is retried by the
# producer (Kafka's leaders answer NOT_ENOUGH_REPLICAS then).
VERIFY_UNAVAILABLE = {code: Error.NOT_ENOUGH_REPLICAS for code in (
    Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE, Error.NOT_COORDINATOR)}

Body = dict[str, Any]
Reply = Body | Awaitable[Body]
TopicPartition = tuple[str, int]


def transaction_config(config: BrokerConfig) -> TransactionConfig:
    """The transaction coordinator's settings from the broker's Kafka keys."""
    return TransactionConfig.from_properties({name: config.get(name) for name in TransactionConfig.PROPERTY_NAMES})


def state_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """`__transaction_state`: compacted, uncompressed (reference A9), preallocated like the offsets log."""
    return {"cleanup.policy": "compact", "compression.type": "uncompressed", "preallocate": "true",
            "segment.bytes": str(config.get("transaction.state.log.segment.bytes"))}


def _fenced_code(code: int, version: int, first_new: int) -> int:
    """PRODUCER_FENCED (90) is INVALID_PRODUCER_EPOCH (47) for versions below `first_new` (A2)."""
    return Error.INVALID_PRODUCER_EPOCH if code == Error.PRODUCER_FENCED and version < first_new else code


class TransactionApi:
    """The transaction coordinator half of the broker."""

    def __init__(self, broker: Broker, config: BrokerConfig, group_api: GroupApi, clock: Callable[[], int],
                 markers: MarkerWriter, *, local: bool = True, group_commit: GroupCommit | None = None) -> None:
        self.broker = broker
        self.config = config
        self.group_api = group_api
        self.clock = clock
        self.markers = markers
        self.local = local  # single node: this broker creates and leads __transaction_state itself
        self.group_commit = group_commit  # the shards' fsyncs off the event loop (None: in plog.append)
        self.txn_config = transaction_config(config)
        self.runtimes: list[TxnShardRuntime] = []
        self.create_state_topic: Callable[[], None] = self._create_locally
        self.verify_partitions = config.get("transaction.partition.verification.enable")

    # ---------------------------------------------------------------- the state log

    def add_runtimes(self, topic: Any, *, owned: bool) -> None:
        """One shard runtime per `__transaction_state` partition (cluster mode: unowned at first)."""
        fsync = self.config.get("offsets.topic.fsync.enable")
        for index, plog in enumerate(topic.partitions):
            shard = TransactionCoordinatorShard(index, self.txn_config, self.broker.producer_ids.allocate)
            self.runtimes.append(TxnShardRuntime(shard, plog, fsync=fsync, clock=self.clock, owned=owned,
                                                 markers=self.markers.run, group_commit=self.group_commit))

    def open_existing(self) -> None:
        """Single node at start-up: serve `__transaction_state` if an earlier run created it."""
        topic = self.broker.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and not self.runtimes:
            self.add_runtimes(topic, owned=True)

    async def load_all(self) -> None:
        for runtime in list(self.runtimes):
            await runtime.load()

    def _create_locally(self) -> None:
        topic = self.broker.topics.create(TRANSACTION_STATE_TOPIC, self.txn_config.transaction_state_log_num_partitions,
                                          state_topic_configs(self.config), self.clock(), internal=True)
        self.add_runtimes(topic, owned=True)
        asyncio.ensure_future(self.load_all())

    def runtime_for(self, transactional_id: str) -> TxnShardRuntime | None:
        """The shard of a transactional id; None while `__transaction_state` does not exist."""
        if not self.runtimes:
            return None
        return self.runtimes[partition_for(transactional_id, len(self.runtimes))]

    def stop(self) -> None:
        for runtime in self.runtimes:
            runtime.stop()

    def _submit(self, runtime: TxnShardRuntime, transactional_id: str,
                operation: Callable[[Any], TxnResult]) -> "asyncio.Future[Any]":
        """Run operation(token) on the shard; a future of its response. A CONCURRENT_TRANSACTIONS
        answer that writes nothing is held and the operation run again each time the id's state
        moves on, for up to CONCURRENT_WAIT_S (what the client's retry would do, without its
        back-off)."""
        token = new_token()
        result = operation(token)
        if result.records or not _concurrent(result):
            runtime.submit(result)
            return token
        return asyncio.ensure_future(self._when_settled(runtime, transactional_id, operation, result))

    async def _when_settled(self, runtime: TxnShardRuntime, transactional_id: str,
                            operation: Callable[[Any], TxnResult], result: TxnResult) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONCURRENT_WAIT_S
        generation = runtime.generation
        # run again at once: the write it waited for may have been replayed before this task ran
        while runtime.generation == generation and not state_error(runtime):
            result = operation(new_token())
            if result.records or not _concurrent(result) or loop.time() >= deadline:
                break
            await runtime.changed(transactional_id, deadline - loop.time())
        runtime.submit(result)
        return await result.completions[0][0]

    # ------------------------------------------------------------------ FindCoordinator

    def find_coordinator(self, ctx: RequestContext, req: Any) -> Reply:
        """Key type TRANSACTION: the leader of the id's `__transaction_state` partition (A8); the
        other key types go to the group coordinator's lookup. Key type SHARE is for brokers: only
        from v6, and with CLUSTER_ACTION (else every key is refused, as Kafka's request fails)."""
        acc = access(self.broker, ctx)
        if getattr(req, "key_type", KEY_TYPE_GROUP) == KEY_TYPE_SHARE:
            if ctx.version < 6:
                return self._refuse_all(ctx, req, Error.INVALID_REQUEST, "Share coordinator keys need FindCoordinator v6")
            if acc is not None and not acc.cluster(Op.CLUSTER_ACTION):
                return self._refuse_all(ctx, req, Error.CLUSTER_AUTHORIZATION_FAILED, None)
            return self._find(ctx, req)
        if acc is not None:
            return self._find_authorized(acc, ctx, req)
        return self._find(ctx, req)

    def _find_authorized(self, acc: Access, ctx: RequestContext, req: Any) -> Reply:
        """DESCRIBE on the group (key type 0, else 30) or the transactional id (type 1, else 53),
        per key from v4, at top level before (reference security.md §4)."""
        key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
        rtype, error = FIND_COORDINATOR_CHECKS.get(key_type, (None, Error.NONE))
        if rtype is None:
            return self._find(ctx, req)

        def refused(key: str) -> Body:
            return {"key": key, "error_code": error, "node_id": -1, "host": "", "port": -1,
                    "error_message": None}

        if ctx.version < 4:
            return refused(req.key) if not acc.allows(Op.DESCRIBE, rtype, req.key) else self._find(ctx, req)
        denied = acc.denied(Op.DESCRIBE, rtype, req.coordinator_keys)
        if not denied:
            return self._find(ctx, req)
        allowed = [k for k in req.coordinator_keys if k not in denied]
        answer = self._find(ctx, _Keys(key_type, allowed)) if allowed else {"coordinators": []}
        return _then(answer, lambda body: {"coordinators": [
            next((e for e in body["coordinators"] if e["key"] == k), None) or refused(k) for k in req.coordinator_keys]})

    @staticmethod
    def _refuse_all(ctx: RequestContext, req: Any, error: int, message: str | None) -> Reply:
        """Every key of the request answered `error`."""
        def refused(key: str) -> Body:
            return {"key": key, "error_code": error, "node_id": -1, "host": "", "port": -1, "error_message": message}

        if ctx.version < 4:
            return refused(req.key)
        return {"coordinators": [refused(k) for k in req.coordinator_keys]}

    def _find(self, ctx: RequestContext, req: Any) -> Reply:
        if getattr(req, "key_type", KEY_TYPE_GROUP) != KEY_TYPE_TRANSACTION:
            return self.group_api.find_coordinator(ctx, req)
        if not self.runtimes:
            self.create_state_topic()
        view = self.broker.cluster
        topic = self.broker.topics.get(TRANSACTION_STATE_TOPIC)

        def entry(key: str) -> Body:
            if not key:
                return {"key": key, "error_code": Error.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                        "error_message": "A transactional id must not be empty"}
            node = view.leader(topic, partition_for(key, len(self.runtimes)))[0] if self.runtimes else -1
            endpoint = view.endpoint(node) if node >= 0 else None
            if endpoint is None:
                return {"key": key, "error_code": Error.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "",
                        "port": -1, "error_message": "The coordinator is not available."}
            return {"key": key, "error_code": Error.NONE, "node_id": node, "host": endpoint[0],
                    "port": endpoint[1], "error_message": None}

        if ctx.version >= 4:
            return once_led(view, lambda: {"coordinators": [entry(k) for k in req.coordinator_keys]},
                            lambda body: any(e["error_code"] == Error.COORDINATOR_NOT_AVAILABLE for e in body["coordinators"]))
        return once_led(view, lambda: entry(req.key), lambda body: body["error_code"] == Error.COORDINATOR_NOT_AVAILABLE)

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, ctx: RequestContext, req: Any) -> Reply:
        """Without a transactional id: a fresh idempotent producer id (A2 rule 1). Authorization
        (§4): WRITE on the transactional id (53), else IDEMPOTENT_WRITE on the cluster or WRITE on
        some topic (authorize_by_type; 31)."""
        version = ctx.version

        def failure(code: int) -> Body:
            return {"error_code": _fenced_code(code, version, 4), "producer_id": -1, "producer_epoch": -1}

        acc = access(self.broker, ctx)
        if acc is not None:
            if req.transactional_id is not None:
                if not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id):
                    return failure(Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif not (acc.cluster(Op.IDEMPOTENT_WRITE) or acc.by_type(Op.WRITE, Res.TOPIC)):
                return failure(Error.CLUSTER_AUTHORIZATION_FAILED)
        if req.transactional_id is None:
            return handle_init_producer_id(self.broker, req, ctx.version, self.clock())

        if not req.transactional_id:
            return failure(Error.INVALID_REQUEST)
        runtime = self.runtime_for(req.transactional_id)
        error = state_error(runtime)
        if error:
            if runtime is None:
                self.create_state_topic()
            return failure(error)
        timeout = _ms(req.transaction_timeout)
        pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
        token = self._submit(runtime, req.transactional_id, lambda token: runtime.shard.init_producer_id(  # type: ignore
            token, req.transactional_id, timeout, pid, epoch, version, self.clock()))
        return reply_when_durable(token, failure, lambda body: {**body, "error_code": _fenced_code(body["error_code"], version, 4)})

    # ---------------------------------------------------------------- AddPartitionsToTxn

    def add_partitions_to_txn(self, ctx: RequestContext, req: Any) -> Reply:
        if ctx.version >= 4:
            return self._add_partitions_batched(ctx, req)
        version = ctx.version
        wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]

        def shape(errors: dict[TopicPartition, int]) -> Body:
            return {"results_by_topic_v3_and_below": _partition_results(wanted, errors)}

        refused = _add_partitions_denied(access(self.broker, ctx), req.v3_and_below_transactional_id, wanted)
        if refused:
            return shape(refused)
        pending = self._add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                       req.v3_and_below_producer_epoch, wanted, version)
        return _then(pending, lambda errors: shape({tp: _fenced_code(code, version, 2) for tp, code in errors.items()}))

    def _add_partitions_batched(self, ctx: RequestContext, req: Any) -> Reply:
        """v4+ (the leaders' form): several transactions; VerifyOnly writes nothing (A3)."""
        results: list[Any] = []
        acc = access(self.broker, ctx)
        for txn in req.transactions:
            wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
            # verify-only asks come from the leaders, for a Produce already authorized
            refused = None if txn.verify_only else _add_partitions_denied(acc, txn.transactional_id, wanted)
            if refused:
                results.append(refused)
            elif txn.verify_only:
                results.append(self._verify(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted))
            else:
                results.append(self._add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                                    wanted, ctx.version))

        def shape(all_errors: list[dict[TopicPartition, int]]) -> Body:
            return {"error_code": Error.NONE, "results_by_transaction": [
                {"transactional_id": txn.transactional_id,
                 "topic_results": _partition_results([(t.name, p) for t in txn.topics for p in t.partitions], errors)}
                for txn, errors in zip(req.transactions, all_errors)]}

        if not any(asyncio.isfuture(r) for r in results):
            return shape(results)

        async def wait() -> Body:
            return shape([await r if asyncio.isfuture(r) else r for r in results])
        return wait()

    def _verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                wanted: list[TopicPartition]) -> dict[TopicPartition, int]:
        runtime = self.runtime_for(transactional_id)
        error = state_error(runtime)
        if error:
            return {tp: error for tp in wanted}
        return runtime.shard.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)  # type: ignore

    def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        wanted: list[TopicPartition], version: int) -> Any:
        """Per-partition errors now (a dict), or a future of them once the Ongoing record is durable.
        Partitions that do not exist fail the whole request: the rest get OPERATION_NOT_ATTEMPTED (A3)."""
        unknown = {tp for tp in wanted if self.broker.topics.partition(*tp) is None}
        if unknown:
            return {tp: Error.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else Error.OPERATION_NOT_ATTEMPTED
                    for tp in wanted}
        if not transactional_id:
            return {tp: Error.INVALID_REQUEST for tp in wanted}
        runtime = self.runtime_for(transactional_id)
        error = state_error(runtime)
        if error:
            return {tp: error for tp in wanted}
        token = self._submit(runtime, transactional_id, lambda token: runtime.shard.add_partitions(  # type: ignore
            token, transactional_id, producer_id, producer_epoch, wanted, version, self.clock()))
        return then(token, lambda errors: errors,
                    lambda exc: write_failure(exc, lambda code: {tp: code for tp in wanted}))

    # ----------------------------------------------------------------- AddOffsetsToTxn

    def add_offsets_to_txn(self, ctx: RequestContext, req: Any) -> Reply:
        """Adds the group's `__consumer_offsets` partition to the transaction (A3), once WRITE on
        the transactional id (53) and READ on the group (30) are allowed (§4)."""
        acc = access(self.broker, ctx)
        if acc is not None:
            if not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id or ""):
                return {"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            if not acc.allows(Op.READ, Res.GROUP, req.group_id or ""):
                return {"error_code": Error.GROUP_AUTHORIZATION_FAILED}
        offsets = (OFFSETS_TOPIC, partition_for(req.group_id, len(self.group_api.runtimes) or
                                                self.config.get("offsets.topic.num.partitions")))
        pending = self._add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [offsets],
                                       ctx.version)
        return _then(pending, lambda errors: {
            "error_code": _fenced_code(errors.get(offsets, Error.NONE), ctx.version, 2)})

    # -------------------------------------------------------------------------- EndTxn

    def end_txn(self, ctx: RequestContext, req: Any) -> Reply:
        version = ctx.version

        def failure(code: int) -> Body:
            return {"error_code": _fenced_code(code, version, 2), "producer_id": -1, "producer_epoch": -1}

        acc = access(self.broker, ctx)
        if acc is not None and not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id or ""):
            return failure(Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not req.transactional_id:
            return failure(Error.INVALID_REQUEST)
        runtime = self.runtime_for(req.transactional_id)
        error = state_error(runtime)
        if error:
            return failure(error)
        token = self._submit(runtime, req.transactional_id, lambda token: runtime.shard.end_txn(  # type: ignore
            token, req.transactional_id, req.producer_id, req.producer_epoch, req.committed, version, self.clock()))
        return reply_when_durable(token, failure, lambda body: {**body, "error_code": _fenced_code(body["error_code"], version, 2)})

    # ----------------------------------------------------------------- WriteTxnMarkers

    def write_txn_markers(self, ctx: RequestContext, req: Any) -> Reply:
        """Append each marker to the partitions named (the admin abort path, and other
        coordinators in cluster mode); per partition an error code (A7). Needs CLUSTER_ACTION on
        the cluster, else 31 on every partition (§4)."""
        acc = access(self.broker, ctx)
        if acc is not None and not acc.cluster(Op.CLUSTER_ACTION):
            return {"markers": [{"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": Error.CLUSTER_AUTHORIZATION_FAILED}
                                                for p in t.partition_indexes]} for t in m.topics]} for m in req.markers]}

        async def write() -> Body:
            markers = []
            for marker in req.markers:
                wanted = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
                codes = await asyncio.gather(*(self.markers.write_local(
                    marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch,
                    topic, partition) for topic, partition in wanted))
                by_topic: dict[str, list[Body]] = {}
                for (topic, partition), code in zip(wanted, codes):
                    by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
                markers.append({"producer_id": marker.producer_id, "topics": [
                    {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
            return {"markers": markers}
        return write()

    # ------------------------------------------------------- Describe / List / Producers

    def describe_transactions(self, ctx: RequestContext, req: Any) -> Body:
        """Without DESCRIBE on an id: 53 in its entry; topics without DESCRIBE are left out (§4)."""
        states = []
        acc = access(self.broker, ctx)
        for transactional_id in req.transactional_ids:
            if acc is not None and not acc.allows(Op.DESCRIBE, Res.TRANSACTIONAL_ID, transactional_id):
                states.append({"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                               "transactional_id": transactional_id, "transaction_state": "",
                               "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []})
                continue
            runtime = self.runtime_for(transactional_id) if transactional_id else None
            error = state_error(runtime) if transactional_id else Error.INVALID_REQUEST
            if error == Error.COORDINATOR_NOT_AVAILABLE:  # no __transaction_state: nobody has this id
                error = Error.TRANSACTIONAL_ID_NOT_FOUND
            described = {} if error else runtime.shard.describe(transactional_id)  # type: ignore[union-attr]
            states.append({"error_code": error or described["error_code"], "transactional_id": transactional_id,
                           "transaction_state": described.get("transaction_state", ""),
                           "transaction_timeout": described.get("transaction_timeout_ms", 0),
                           "transaction_start_time": described.get("transaction_start_time_ms", -1),
                           "producer_id": described.get("producer_id", -1),
                           "producer_epoch": described.get("producer_epoch", -1),
                           "topics": [t for t in described.get("topics", []) if acc is None
                                      or acc.allows(Op.DESCRIBE, Res.TOPIC, t["topic"])]})
        return {"transaction_states": states}

    def list_transactions(self, ctx: RequestContext, req: Any) -> Body:
        """Every transaction this broker coordinates, filtered (A8); Dead ones never."""
        states = list(req.state_filters)
        error = Error.NONE
        listed: list[Body] = []
        for runtime in self.runtimes:
            code = state_error(runtime)
            if code == Error.COORDINATOR_LOAD_IN_PROGRESS:
                error = code
            if not code:
                listed.extend(runtime.shard.list_transactions(states, list(req.producer_id_filters),
                                                              getattr(req, "duration_filter", -1), self.clock()))
        acc = access(self.broker, ctx)
        if acc is not None:  # ids the principal may not DESCRIBE are left out silently (§4)
            listed = [t for t in listed if acc.allows(Op.DESCRIBE, Res.TRANSACTIONAL_ID, t["transactional_id"])]
        return {"error_code": error, "unknown_state_filters": [s for s in states if s not in STATE_BY_NAME],
                "transaction_states": [] if error else listed}

    def describe_producers(self, ctx: RequestContext, req: Any) -> Body:
        """Each partition's producers with their open transaction, if any (hanging-transaction tools)."""
        topics = []
        acc = access(self.broker, ctx)
        for topic in req.topics:
            partitions = []
            for index in topic.partition_indexes:
                if acc is not None and not acc.allows(Op.READ, Res.TOPIC, topic.name):  # 29, before existence
                    plog, error = None, Error.TOPIC_AUTHORIZATION_FAILED
                else:
                    plog, error = self.broker.serving_partition(topic.name, index)
                partitions.append({"partition_index": index, "error_code": error, "error_message": None,
                                   "active_producers": [] if error else plog.producers()})
            topics.append({"name": topic.name, "partitions": partitions})
        return {"topics": topics}

    # --------------------------------------------------------------------- verification

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> int | Awaitable[int]:
        """Is (topic, partition) part of the producer's open transaction? Asked before a
        partition's first transactional batch (A4) and before a TxnOffsetCommit; a coordinator on
        another broker (cluster mode) is asked with AddPartitionsToTxn v4 VerifyOnly."""
        if not self.verify_partitions:
            return Error.NONE
        runtime = self.runtime_for(transactional_id)
        if runtime is not None and not runtime.plog.leader and self.markers.remote is not None:
            return self._verify_remote(transactional_id, producer_id, producer_epoch, topic, partition)
        error = state_error(runtime)
        if error:
            return VERIFY_UNAVAILABLE.get(error, error)
        code = self._verify_now(runtime, transactional_id, producer_id, producer_epoch, topic, partition)  # type: ignore
        if code == Error.CONCURRENT_TRANSACTIONS:  # another write of the id in flight (AddOffsetsToTxn...)
            return self._verify_when_settled(runtime, transactional_id, producer_id, producer_epoch,  # type: ignore
                                             topic, partition)
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

    async def _verify_remote(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                             partition: int) -> int:
        node = self.broker.cluster.leader(self.broker.topics.get(TRANSACTION_STATE_TOPIC),
                                          partition_for(transactional_id, len(self.runtimes)))[0]
        if node < 0:
            return Error.NOT_ENOUGH_REPLICAS
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": True,
                                  "topics": [{"name": topic, "partitions": [partition]}]}]}
        try:
            response = await self.markers.remote_request(node, ApiKey.ADD_PARTITIONS_TO_TXN, 4, body)
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


def _concurrent(result: TxnResult) -> bool:
    """Does the operation's answer say CONCURRENT_TRANSACTIONS (for any partition)?"""
    response = result.completions[0][1]
    if not isinstance(response, dict):
        return False
    codes = [response["error_code"]] if "error_code" in response else list(response.values())
    return Error.CONCURRENT_TRANSACTIONS in codes


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


# FindCoordinator key type -> the resource DESCRIBE is checked on and the error when denied
FIND_COORDINATOR_CHECKS: dict[int, tuple[Any, int]] = {
    KEY_TYPE_GROUP: (Res.GROUP, Error.GROUP_AUTHORIZATION_FAILED),
    KEY_TYPE_TRANSACTION: (Res.TRANSACTIONAL_ID, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
}


class _Keys:
    """A FindCoordinator v4+ request narrowed to the keys that passed authorization."""

    def __init__(self, key_type: int, keys: list[str]) -> None:
        self.key_type = key_type
        self.coordinator_keys = keys


def _add_partitions_denied(acc: Access | None, transactional_id: str | None,
                           wanted: list[TopicPartition]) -> dict[TopicPartition, int] | None:
    """AddPartitionsToTxn authorization (§4): no WRITE on the transactional id: 53 everywhere;
    topics without WRITE: 29, the other partitions OPERATION_NOT_ATTEMPTED. None: allowed."""
    if acc is None:
        return None
    if not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id or ""):
        return dict.fromkeys(wanted, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = acc.denied(Op.WRITE, Res.TOPIC, {topic for topic, _ in wanted})
    if not denied:
        return None
    return {tp: Error.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else Error.OPERATION_NOT_ATTEMPTED for tp in wanted}


def _then(pending: Any, shape: Callable[[Any], Body]) -> Reply:
    """shape(value) now, or a future of it when `pending` is a future."""
    if asyncio.isfuture(pending):
        return then(pending, shape)
    return shape(pending)


def _partition_results(wanted: list[TopicPartition], errors: dict[TopicPartition, int]) -> list[Body]:
    by_topic: dict[str, list[Body]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": errors.get((topic, partition), Error.NONE)})
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]
