"""Produce and InitProducerId: batches are validated (header + CRC) and appended as they are."""

from __future__ import annotations

import asyncio
import logging
from inspect import isawaitable
from typing import Any

from ..protocol.errors import Error
from ..records.batch import InvalidBatch, validate_batches
from ..records.legacy_messages import up_convert
from ..storage.log_dir import NotLeader, StorageError
from ..storage.producer_state import ProduceError
from ..security.authorization import Op, Res, access
from .broker import Broker
from .cluster_view import leader_hint, node_endpoints
from .request_context import current_context

log = logging.getLogger("offsetd.broker")


_REFUSED = (InvalidBatch, ProduceError, StorageError, NotLeader)


class _Appends:
    """One Produce request's appends: the response entries, the ones still being stored (cluster
    mode: until PostgreSQL's COMMIT) and the leaders named in NOT_LEADER_OR_FOLLOWER entries,
    collected as they happen so that a response needs no second pass over its partitions."""

    __slots__ = ("broker", "now_ms", "pending", "led_elsewhere", "transactional_id", "version")

    def __init__(self, broker: Broker, now_ms: int, transactional_id: str | None, version: int) -> None:
        self.broker = broker
        self.now_ms = now_ms
        self.pending = False
        self.led_elsewhere: set[int] = set()
        self.transactional_id = transactional_id
        self.version = version

    def append(self, topic: str, index: int, records: bytes | None, legacy: bool) -> Any:
        """Append one partition's records (`legacy`: a v0/v1 message set of Produce v0-2,
        up-converted to a v2 batch first); the partition's response entry, or a future of it
        when the log acknowledges later (started now: a request's partitions are stored
        concurrently)."""
        broker = self.broker
        entry: dict[str, Any] = {"index": index, "error_code": Error.NONE, "base_offset": -1}
        partition_log = broker.topics.partition(topic, index)
        if partition_log is None:
            entry["error_code"] = Error.UNKNOWN_TOPIC_OR_PARTITION
            return entry
        if broker.topics.get(topic).internal:  # type: ignore[union-attr]
            entry.update(error_code=Error.INVALID_TOPIC_EXCEPTION,
                         error_message=f"Cannot append to internal topic {topic}")
            return entry
        if broker.open_log(partition_log) != Error.NONE:  # its first use, and its directory unreadable
            entry["error_code"] = Error.KAFKA_STORAGE_ERROR
            return entry
        try:
            if not records:
                raise InvalidBatch(Error.CORRUPT_MESSAGE, "Produce request carried no record batch")
            if legacy:
                records = up_convert(records)
            headers = validate_batches(records, partition_log.config.max_message_bytes)
            verdict = self._verify(partition_log, topic, index, headers[0]) if headers[0].is_transactional else 0
            prior = broker.verifying.get(partition_log)
            if isawaitable(verdict) or prior is not None:  # cluster mode: the coordinator is another broker
                # Decided once verified, and after the appends to the partition waiting before it
                # (a connection's Produces may be handled while earlier ones wait: never reordered).
                self.pending = True
                decided = broker.verifying[partition_log] = asyncio.get_running_loop().create_future()
                return asyncio.ensure_future(self._append_verified(verdict, prior, decided, entry, partition_log,
                                                                   topic, index, records, headers))
            self._check(verdict, topic, index, headers[0])
            result = partition_log.append(records, self.now_ms, validated=headers)
        except _REFUSED as exc:
            return self._refused(entry, partition_log, topic, index, exc)
        if isawaitable(result):
            self.pending = True
            return asyncio.ensure_future(self._appended_later(entry, partition_log, topic, index, result))
        return self._appended(entry, topic, index, result)

    def _verify(self, partition_log: Any, topic: str, index: int, header: Any) -> Any:
        """The first transactional batch of a transaction on a partition must belong to a
        transaction that added the partition (reference A4); later ones are not asked again.
        The coordinator's error code, or an awaitable of it."""
        verifier = self.broker.txn_verifier
        if verifier is None or self.transactional_id is None:
            return Error.NONE
        if partition_log.ongoing_transaction(header.producer_id) is not None:
            return Error.NONE
        return verifier(self.transactional_id, header.producer_id, header.producer_epoch, topic, index)

    def _check(self, error: int, topic: str, index: int, header: Any) -> None:
        if error == Error.TRANSACTION_ABORTABLE and self.version < 11:
            error = Error.INVALID_TXN_STATE  # older producers know only this one
        if error:
            raise ProduceError(error, f"{topic}-{index} is not part of the open transaction of "
                                      f"{self.transactional_id!r} (producer {header.producer_id})")

    async def _append_verified(self, verdict: Any, prior: "asyncio.Future[None] | None",
                               decided: "asyncio.Future[None]", entry: dict[str, Any], partition_log: Any,
                               topic: str, index: int, records: bytes, headers: list[Any]) -> dict[str, Any]:
        try:
            try:
                if prior is not None:
                    await asyncio.shield(prior)
                self._check(await verdict if isawaitable(verdict) else verdict, topic, index, headers[0])
                result = partition_log.append(records, self.now_ms, validated=headers)
            finally:
                if not decided.done():
                    decided.set_result(None)
                if self.broker.verifying.get(partition_log) is decided:
                    del self.broker.verifying[partition_log]
            if isawaitable(result):
                result = await result
        except _REFUSED as exc:
            return self._refused(entry, partition_log, topic, index, exc)
        return self._appended(entry, topic, index, result)

    def _appended(self, entry: dict[str, Any], topic: str, index: int, result: Any) -> dict[str, Any]:
        entry.update(base_offset=result.base_offset, log_start_offset=result.log_start_offset)
        self.broker.on_append(topic, index)
        return entry

    async def _appended_later(self, entry: dict[str, Any], partition_log: Any, topic: str, index: int,
                              pending: Any) -> dict[str, Any]:
        try:
            result = await pending
        except _REFUSED as exc:
            return self._refused(entry, partition_log, topic, index, exc)
        return self._appended(entry, topic, index, result)

    def _refused(self, entry: dict[str, Any], partition_log: Any, topic: str, index: int,
                 exc: Exception) -> dict[str, Any]:
        """The entry of a refused append. StorageError: KAFKA_STORAGE_ERROR (retriable), nothing
        was written; NotLeader: the client goes to the leader named in `current_leader` (KIP-951)."""
        log.log(logging.DEBUG if isinstance(exc, (StorageError, NotLeader)) else logging.INFO,
                "produce to %s-%d refused: %s", topic, index, exc)
        entry.update(error_code=exc.error_code, error_message=str(exc),  # type: ignore[attr-defined]
                     log_start_offset=partition_log.log_start_offset)
        if isinstance(exc, NotLeader):
            hint = entry["current_leader"] = leader_hint(self.broker.cluster, self.broker.topics.get(topic), index)
            self.led_elsewhere.add(hint["leader_id"])
        return entry

    def finish(self, body: dict[str, Any]) -> dict[str, Any]:
        """v10+: where the leaders named by NOT_LEADER_OR_FOLLOWER entries listen (KIP-951)."""
        if self.led_elsewhere:
            body["node_endpoints"] = node_endpoints(self.broker.cluster, self.led_elsewhere)
        return body

    async def all_stored(self, body: dict[str, Any]) -> dict[str, Any]:
        for topic in body["responses"]:
            topic["partition_responses"] = [await e if isawaitable(e) else e for e in topic["partition_responses"]]
        return self.finish(body)


def _is_transactional(records: bytes | None) -> bool:
    """The first batch's transactional bit (v2 batches: magic at byte 16, attributes at 21-22)."""
    return bool(records) and len(records) > 22 and records[16] == 2 and bool(records[22] & 0x10)  # type: ignore[arg-type,index]


def _denied(broker: Broker, req: Any) -> dict[str, int] | None:
    """Per topic, the authorization error of its partitions (reference security.md §4 Produce):
    a transactional request without WRITE on its transactional id fails everywhere with 53; else
    each topic without WRITE gets 29, before it is known to exist. None: all allowed."""
    acc = access(broker, current_context())
    if acc is None:
        return None
    txn_id = getattr(req, "transactional_id", None)
    if any(_is_transactional(p.records) for t in req.topic_data for p in t.partition_data) and (
            txn_id is None or not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)):
        return {t.name: Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in req.topic_data}
    return {name: Error.TOPIC_AUTHORIZATION_FAILED for name in acc.denied(Op.WRITE, Res.TOPIC,
                                                                          {t.name for t in req.topic_data})}


def handle_produce(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Append every partition's batches; acks=0 gets no response at all (Kafka's rule)."""
    appends = _Appends(broker, now_ms, getattr(req, "transactional_id", None), version)  # v3+
    legacy = version < 3
    denied = _denied(broker, req)
    if denied:
        responses = [{"name": topic.name, "partition_responses": [
            {"index": p.index, "error_code": denied[topic.name], "base_offset": -1} if topic.name in denied
            else appends.append(topic.name, p.index, p.records, legacy) for p in topic.partition_data]}
            for topic in req.topic_data]
    else:
        responses = [{"name": topic.name, "partition_responses": [
            appends.append(topic.name, p.index, p.records, legacy) for p in topic.partition_data]}
            for topic in req.topic_data]
    body = {"responses": responses}
    if req.acks == 0:
        if appends.pending:  # nobody waits for the answer, but the appends must still run
            asyncio.ensure_future(appends.all_stored(body))
        return None
    return appends.all_stored(body) if appends.pending else appends.finish(body)


def handle_init_producer_id(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any]:
    """A new idempotent producer id at epoch 0 (transactional ids: server/transaction_api.py)."""
    return {"error_code": Error.NONE, "producer_id": broker.producer_ids.allocate(), "producer_epoch": 0}
