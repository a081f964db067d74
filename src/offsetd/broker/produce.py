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
from .broker import Broker
from .cluster_view import leader_hint, node_endpoints

log = logging.getLogger("offsetd.broker")


_REFUSED = (InvalidBatch, ProduceError, StorageError, NotLeader)


def _append(broker: Broker, topic: str, index: int, records: bytes | None, now_ms: int,
            legacy: bool = False) -> Any:
    """Append one partition's records (`legacy`: a v0/v1 message set of Produce v0-2, up-converted
    to a v2 batch first); the result is that partition's response entry, or a coroutine of it
    when the log acknowledges later (cluster mode: after PostgreSQL's COMMIT)."""
    entry: dict[str, Any] = {"index": index, "error_code": Error.NONE, "base_offset": -1}
    partition_log = broker.topics.partition(topic, index)
    if partition_log is None:
        entry["error_code"] = Error.UNKNOWN_TOPIC_OR_PARTITION
        return entry
    if broker.topics.get(topic).internal:  # type: ignore[union-attr]
        entry.update(error_code=Error.INVALID_TOPIC_EXCEPTION,
                     error_message=f"Cannot append to internal topic {topic}")
        return entry
    try:
        if not records:
            raise InvalidBatch(Error.CORRUPT_MESSAGE, "Produce request carried no record batch")
        if legacy:
            records = up_convert(records)
        headers = validate_batches(records, partition_log.config.max_message_bytes)
        result = partition_log.append(records, now_ms, validated=headers)
    except _REFUSED as exc:
        return _refused(broker, entry, partition_log, topic, index, exc)
    if isawaitable(result):  # started now, so a request's partitions are stored concurrently
        return asyncio.ensure_future(_appended_later(broker, entry, partition_log, topic, index, result))
    entry.update(base_offset=result.base_offset, log_start_offset=result.log_start_offset)
    broker.on_append(topic, index)
    return entry


def _refused(broker: Broker, entry: dict[str, Any], partition_log: Any, topic: str, index: int,
             exc: Exception) -> dict[str, Any]:
    """The entry of a refused append. StorageError: KAFKA_STORAGE_ERROR (retriable), nothing was
    written; NotLeader: the client goes to the leader named in `current_leader` (KIP-951)."""
    log.log(logging.DEBUG if isinstance(exc, (StorageError, NotLeader)) else logging.INFO,
            "produce to %s-%d refused: %s", topic, index, exc)
    entry.update(error_code=exc.error_code, error_message=str(exc),  # type: ignore[attr-defined]
                 log_start_offset=partition_log.log_start_offset)
    if isinstance(exc, NotLeader):
        entry["current_leader"] = leader_hint(broker.cluster, broker.topics.get(topic), index)
    return entry


async def _appended_later(broker: Broker, entry: dict[str, Any], partition_log: Any, topic: str, index: int,
                          pending: Any) -> dict[str, Any]:
    try:
        result = await pending
    except _REFUSED as exc:
        return _refused(broker, entry, partition_log, topic, index, exc)
    entry.update(base_offset=result.base_offset, log_start_offset=result.log_start_offset)
    broker.on_append(topic, index)
    return entry


async def _all_appended(broker: Broker, body: dict[str, Any]) -> dict[str, Any]:
    for topic in body["responses"]:
        topic["partition_responses"] = [await e if isawaitable(e) else e for e in topic["partition_responses"]]
    return _with_endpoints(broker, body)


def _with_endpoints(broker: Broker, body: dict[str, Any]) -> dict[str, Any]:
    """v10+: where the leaders named by NOT_LEADER_OR_FOLLOWER entries listen (KIP-951)."""
    named = {e["current_leader"]["leader_id"] for t in body["responses"] for e in t["partition_responses"]
             if "current_leader" in e}
    if named:
        body["node_endpoints"] = node_endpoints(broker.cluster, named)
    return body


def handle_produce(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any] | None:
    """Append every partition's batches; acks=0 gets no response at all (Kafka's rule)."""
    responses = []
    if getattr(req, "transactional_id", None) is not None:  # v3+
        error = {"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                 "error_message": "Transactions are not supported by this broker"}
        responses = [{"name": t.name, "partition_responses": [{"index": p.index, "base_offset": -1, **error}
                                                              for p in t.partition_data]}
                     for t in req.topic_data]
    else:
        for topic in req.topic_data:
            responses.append({"name": topic.name, "partition_responses": [
                _append(broker, topic.name, p.index, p.records, now_ms, version < 3) for p in topic.partition_data]})
    body = {"responses": responses}
    later = any(isawaitable(e) for t in responses for e in t["partition_responses"])
    if req.acks == 0:
        if later:  # nobody waits for the answer, but the appends must still run
            asyncio.ensure_future(_all_appended(broker, body))
        return None
    return _all_appended(broker, body) if later else _with_endpoints(broker, body)


def handle_init_producer_id(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any]:
    """A new idempotent producer id at epoch 0; transactional ids are not served."""
    if req.transactional_id is not None:
        return {"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": Error.NONE, "producer_id": broker.producer_ids.allocate(), "producer_epoch": 0}
