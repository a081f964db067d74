"""ListOffsets: the log start, the log end, the record with the largest timestamp, or the first
record at or after a timestamp (from the time index, then the one batch it lands on, decompressed
whatever its codec, so answers are record-exact as Kafka's).

Isolation (v2+, A9): under read_committed the bound is the last stable offset: LATEST answers it,
and a timestamp lookup whose record lies at or beyond it answers -1/-1, as one beyond the log
end would.

Leader epochs (v4+, KIP-320): a `current_leader_epoch` other than -1 is checked against the
leader's (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, broker.serving_partition). The answer's
`leader_epoch` is, as Kafka's: the leader's epoch for LATEST, the epoch holding the log start for
EARLIEST (-1 when the history does not reach back to it), the epoch that wrote the record found
otherwise (storage/leader_epoch_cache.py).

Cluster mode: a record only PostgreSQL holds (storage/cold_range.py) is read from there first; the
answer waits for it (librdkafka's offsetsForTimes does not retry OFFSET_NOT_AVAILABLE), and says
OFFSET_NOT_AVAILABLE only if PostgreSQL did not give it after a few reads."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from ..protocol.errors import Error
from ..records.batch import InvalidBatch
from ..storage.cold_range import NotLoaded
from ..security.authorization import Op, Res, access
from .broker import NO_LEADER_EPOCH, Broker
from .list_offsets_v0 import handle_list_offsets_v0
from .request_context import current_context

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
READ_COMMITTED = 1
COLD_READS = 3  # reads from PostgreSQL a ListOffsets waits for before OFFSET_NOT_AVAILABLE


def denied_topics(broker: Broker, req: Any) -> set[str]:
    """The requested topics without DESCRIBE (reference security.md §4: 29 per partition, offset and
    timestamp -1, before existence); empty when authorization is off."""
    acc = access(broker, current_context())
    return set() if acc is None else acc.denied(Op.DESCRIBE, Res.TOPIC, {t.name for t in req.topics})


def handle_list_offsets(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Offsets by timestamp: -1 latest, -2 earliest, -3 max timestamp, else the time index; the
    answer later when a record must be read from PostgreSQL first (module docstring)."""
    if version == 0:  # an array of up to max_num_offsets offsets per partition
        return handle_list_offsets_v0(broker, req, now_ms, denied_topics(broker, req))
    denied = denied_topics(broker, req)
    loads: list[Awaitable[None]] = []
    body = _answer(broker, req, denied, loads)
    return _after_loads(broker, req, denied, loads) if loads else body


async def _after_loads(broker: Broker, req: Any, denied: set[str], loads: list[Awaitable[None]]) -> dict[str, Any]:
    for _ in range(COLD_READS):
        await asyncio.gather(*loads, return_exceptions=True)
        loads = []
        body = _answer(broker, req, denied, loads)
        if not loads:
            break
    return body


def _answer(broker: Broker, req: Any, denied: set[str], loads: list[Awaitable[None]]) -> dict[str, Any]:
    """The answer as the logs stand; a read from PostgreSQL a partition started goes to `loads`."""
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED  # v1 has none: uncommitted
    topics = []
    for topic_req in req.topics:
        partitions = []
        for p in topic_req.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": Error.NONE,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if denied and topic_req.name in denied:
                plog, error = None, Error.TOPIC_AUTHORIZATION_FAILED
            else:
                plog, error = broker.serving_partition(topic_req.name, p.partition_index,
                                                       getattr(p, "current_leader_epoch", NO_LEADER_EPOCH))
            if error:
                entry["error_code"] = error
            elif p.timestamp == LATEST:
                entry["offset"] = plog.last_stable_offset if committed else plog.log_end_offset
                entry["leader_epoch"] = plog.leader_epoch
            elif p.timestamp == EARLIEST:
                entry["offset"] = plog.log_start_offset
                entry["leader_epoch"] = plog.epochs.epoch_for_offset(plog.log_start_offset)
            elif p.timestamp < 0 and p.timestamp != MAX_TIMESTAMP:  # -4 and below: not served
                entry["error_code"] = Error.INVALID_REQUEST
            else:
                try:
                    if p.timestamp == MAX_TIMESTAMP:
                        found = plog.max_timestamp()
                    else:
                        found = plog.offset_for_timestamp(p.timestamp)
                except NotLoaded as exc:  # cluster mode: the append is being read from PostgreSQL
                    if exc.loading is not None:
                        loads.append(exc.loading)
                    entry["error_code"] = Error.OFFSET_NOT_AVAILABLE
                    found = None
                except InvalidBatch as exc:  # a stored batch that cannot be decoded (Kafka: CORRUPT_MESSAGE)
                    entry["error_code"] = exc.error_code
                    found = None
                except OSError as exc:  # as Fetch: a read the device (or the open-file limit) refused
                    plog.log_dir.failed(exc, f"read of {topic_req.name}-{p.partition_index}", undone=False)
                    entry["error_code"] = Error.KAFKA_STORAGE_ERROR
                    found = None
                if found is not None and found[0] >= 0 and not (committed and found[0] >= plog.last_stable_offset):
                    entry["offset"], entry["timestamp"] = found
                    entry["leader_epoch"] = plog.epochs.epoch_for_offset(found[0])
            partitions.append(entry)
        topics.append({"name": topic_req.name, "partitions": partitions})
    return {"topics": topics}
