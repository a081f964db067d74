"""The wire's primitive types shared by the request readers and the response writers: fixed-width
integers, unsigned varints and tagged-field sections, and the error every decoder raises."""

from __future__ import annotations

import datetime
import struct

__all__ = ["DecodeError", "INT8", "INT16", "INT32", "INT64", "UINT16", "UINT32", "FLOAT64", "ZERO_UUID", "EPOCH",
           "write_uvarint", "read_uvarint", "skip_tagged_fields"]

INT8, INT16, INT32, INT64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
UINT16, UINT32, FLOAT64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d")
ZERO_UUID = bytes(16)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class DecodeError(ValueError):
    """A frame whose body does not match its schema (truncated, bad lengths, bad UTF-8)."""


# ----------------------------------------------------------------------------------- varints


def write_uvarint(buf: bytearray, value: int) -> None:
    """Unsigned LEB128 varint (Kafka's UNSIGNED_VARINT)."""
    while value > 0x7F:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def read_uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    """Return (value, new position); at most 5 bytes as Kafka allows for 32-bit varints."""
    result = shift = 0
    for _ in range(5):
        if pos >= len(data):
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise DecodeError("varint longer than 5 bytes")


def skip_tagged_fields(data: memoryview, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/bytes) and return the new position."""
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise DecodeError("truncated tagged field")
    return pos
