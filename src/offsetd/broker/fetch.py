"""Fetch: stored batch bytes are returned as they are; nothing is decoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.errors import Error
from ..storage.partition_log import OffsetOutOfRange, PartitionLog
from .broker import Broker

READ_COMMITTED = 1


@dataclass(slots=True)
class FetchRead:
    """One pass over a Fetch request: the response body, the bytes it holds, the partitions read."""

    body: dict[str, Any]
    total_bytes: int
    partitions: list[tuple[str, int]]


def read_fetch(broker: Broker, req: Any, version: int) -> FetchRead:
    """Read every requested partition within the request's byte limits (first batch always whole)."""
    budget = req.max_bytes
    total = 0
    read_keys: list[tuple[str, int]] = []
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    by_id = version >= 13
    if getattr(req, "session_id", 0) != 0:
        return FetchRead({"error_code": Error.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": ()}, 0, [])
    responses = []
    for topic_req in req.topics:
        topic = broker.topics.by_id(topic_req.topic_id) if by_id else broker.topics.get(topic_req.topic)
        name = topic.name if topic is not None else None
        partitions = []
        for p in topic_req.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition, "error_code": Error.NONE,
                                     "high_watermark": -1, "records": b"",
                                     "aborted_transactions": () if committed else None}
            plog: PartitionLog | None = broker.topics.partition(name, p.partition) if name else None
            if plog is None:
                entry["error_code"] = (Error.UNKNOWN_TOPIC_ID if by_id and topic is None
                                       else Error.UNKNOWN_TOPIC_OR_PARTITION)
            elif plog.log_dir.offline:
                entry["error_code"] = Error.KAFKA_STORAGE_ERROR
            else:
                end = plog.log_end_offset
                entry.update(high_watermark=end, last_stable_offset=end, log_start_offset=plog.log_start_offset)
                read_keys.append((name, p.partition))  # type: ignore[arg-type]
                limit = min(p.partition_max_bytes, budget)
                try:
                    data = plog.read(p.fetch_offset, limit, min_one_batch=total == 0) if limit > 0 or total == 0 else b""
                except OffsetOutOfRange:
                    entry["error_code"] = Error.OFFSET_OUT_OF_RANGE
                except OSError as exc:  # the device failed under a read: its directory goes offline
                    plog.log_dir.failed(exc, f"read of {name}-{p.partition}", undone=False)
                    entry["error_code"] = Error.KAFKA_STORAGE_ERROR
                else:
                    entry["records"] = data
                    total += len(data)
                    budget -= len(data)
            partitions.append(entry)
        key = "topic_id" if by_id else "topic"
        responses.append({key: topic_req.topic_id if by_id else topic_req.topic, "partitions": partitions})
    return FetchRead({"error_code": Error.NONE, "session_id": 0, "responses": responses}, total, read_keys)
