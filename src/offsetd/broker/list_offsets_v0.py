"""ListOffsets v0: up to max_num_offsets offsets per partition, newest first (Kafka 3.9's v0).

Kafka answers v0 from a table of segment starts: one row per segment (its base offset, but not
below the log start offset, with the segment file's last-modified time) plus, when the active
segment holds data, a last row (log end offset, now). The row a request starts from is the last
one for -1 (latest), the first for -2 (earliest), else the last row whose time is at or before the
timestamp; the answer is that row's offset and those of the rows before it, newest first, at most
max_num_offsets of them. So latest with max 1 is [LEO], earliest is [log start], and a timestamp
before every segment's time is []. A consumer's answer never exceeds the high watermark, which is
the log end offset on this single broker.
"""

from __future__ import annotations

from typing import AbstractSet, Any

from ..protocol.errors import Error
from .broker import Broker

LATEST, EARLIEST = -1, -2


def offsets_before(plog: Any, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
    """The v0 offsets array for one partition log (descending)."""
    rows: list[tuple[int, int]] = []
    segments = plog.segments
    for seg in segments:
        rows.append((max(seg.base_offset, plog.log_start_offset), seg.last_modified_ms()))
    if segments and segments[-1].size > 0:
        rows.append((plog.log_end_offset, now_ms))
    if timestamp == LATEST:
        start = len(rows) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(rows) - 1
        while start >= 0 and rows[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num_offsets, start + 1))
    return [rows[start - j][0] for j in range(count)]  # rows ascend, so this descends


def handle_list_offsets_v0(broker: Broker, req: Any, now_ms: int, denied: AbstractSet[str] = frozenset()) -> dict[str, Any]:
    """The v0 response: per partition an error code and old_style_offsets (`denied`: topics
    without DESCRIBE, answered 29)."""
    topics = []
    for topic_req in req.topics:
        partitions = []
        for p in topic_req.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": Error.NONE,
                                     "old_style_offsets": ()}
            plog, error = (None, Error.TOPIC_AUTHORIZATION_FAILED) if topic_req.name in denied else \
                broker.serving_partition(topic_req.name, p.partition_index)
            if error:
                entry["error_code"] = error
            else:
                entry["old_style_offsets"] = offsets_before(plog, p.timestamp, p.max_num_offsets, now_ms)
            partitions.append(entry)
        topics.append({"name": topic_req.name, "partitions": partitions})
    return {"topics": topics}
