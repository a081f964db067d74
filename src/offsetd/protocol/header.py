"""Request framing: the request header, parsed by hand (it is on every request's path)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .primitives import DecodeError, skip_tagged_fields

_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Header v1/v2 fields; `body_offset` is where the request body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def peek_ids(frame: memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes; DecodeError if shorter."""
    if len(frame) < 8:
        raise DecodeError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    return api_key, api_version, correlation_id


def parse_header(frame: memoryview, flexible: bool) -> RequestHeader:
    """Parse header v1 (non-flexible) or v2 (flexible: adds tagged fields); client_id is always
    a legacy nullable string, as Kafka special-cases it."""
    if len(frame) < _HEAD.size:
        raise DecodeError("truncated request header")
    api_key, api_version, correlation_id, size = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id = None
    if size >= 0:
        if pos + size > len(frame):
            raise DecodeError("client_id runs past the end of the frame")
        try:
            client_id = bytes(frame[pos : pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("client_id is not valid UTF-8") from None
        pos += size
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)

