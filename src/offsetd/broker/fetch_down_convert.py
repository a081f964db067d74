"""Fetch v0-3: the stored v2 batches down-converted to message format v0 (Fetch v0-1) or v1 (v2-3).

Kafka 3.9 stores only magic-v2 batches and down-converts for clients that asked for an old Fetch
version. Here the ordinary Fetch path runs unchanged on the request (as a v3-shaped request: v0-2
have no response limit, Kafka's Integer.MAX_VALUE) and its encoded response, whose records are
the stored bytes, is rewritten partition by partition (records/legacy_messages.py). Only old
clients pay for this; Fetch v4+ never comes here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable

from ..protocol.api_versions import ApiKey
from ..protocol.codec import request_class, response_class
from ..protocol.encoder import encode_response
from ..protocol.tolerant_reader import tolerant_reader
from ..records.batch import InvalidBatch
from ..records.legacy_messages import down_convert, fit_to_size

_NO_LIMIT = 2**31 - 1  # the response max_bytes of Fetch v0-2 (they have none)

Fetched = bytes | Awaitable[bytes | None]


def message_format(version: int) -> int:
    """The message format (magic) a Fetch version reads: v0-1 magic 0, v2-3 magic 1."""
    return 0 if version <= 1 else 1


def as_v3_request(req: Any, version: int) -> Any:
    """A Fetch v0-2 request as the v3 request the Fetch path reads (v3 itself as it is)."""
    if version >= 3:
        return req
    return request_class(ApiKey.FETCH, 3)(replica_id=req.replica_id, max_wait=req.max_wait,
                                           min_bytes=req.min_bytes, max_bytes=_NO_LIMIT, topics=req.topics)


def convert_partition(entry: dict[str, Any], magic: int, fetch_offset: int) -> dict[str, Any]:
    """One partition of the response with its records down-converted (Kafka's lazy down-conversion
    sizes: see fit_to_size); a zstd batch, which v0/v1 cannot hold, is UNSUPPORTED_COMPRESSION_TYPE."""
    data = entry.get("records") or b""
    if not data:
        return entry
    try:
        converted, first_size = down_convert(data, magic, fetch_offset)
    except InvalidBatch as exc:
        return {**entry, "error_code": exc.error_code, "records": b""}
    return {**entry, "records": fit_to_size(converted, len(data), first_size)}


def convert_response(frame: bytes, req: Any, version: int) -> bytes:
    """An encoded Fetch v0-3 response (size, correlation id, body) with every partition's records
    down-converted for `version`."""
    body_cls = response_class(ApiKey.FETCH, version)
    body, _ = tolerant_reader(body_cls)(memoryview(frame), 8)
    offsets = {(t.topic, p.partition): p.fetch_offset for t in req.topics for p in t.partitions}
    magic = message_format(version)
    plain = dataclasses.asdict(body)
    for topic in plain["responses"]:
        topic["partitions"] = [convert_partition(p, magic, offsets.get((topic["topic"], p["partition_index"]), 0))
                               for p in topic["partitions"]]
    correlation_id = int.from_bytes(frame[4:8], "big", signed=True)  # after the int32 size
    return encode_response(ApiKey.FETCH, version, correlation_id, plain)


def fetch_old_version(fetch: Callable[[Any, int, int], Fetched], req: Any, version: int,
                      correlation_id: int) -> Fetched:
    """Run the Fetch path (`fetch`, the server's) for a v0-3 request and down-convert its answer,
    now or when its long poll ends."""
    result = fetch(as_v3_request(req, version), version, correlation_id)
    if isinstance(result, (bytes, bytearray)):
        return convert_response(bytes(result), req, version)
    return _convert_later(result, req, version)


async def _convert_later(pending: Awaitable[bytes | None], req: Any, version: int) -> bytes | None:
    frame = await pending
    return None if frame is None else convert_response(frame, req, version)
