"""Zig-zag varints as used inside magic-v2 records (Kafka's varint / varlong).

Kafka encodes every variable-length integer inside a record with zig-zag encoding followed by
an unsigned base-128 varint (7 bits per byte, least significant group first, high bit = more).
Python ints are unbounded, so one pair of functions serves both varint (int32) and varlong
(int64); callers are responsible for range checks where they matter.
"""

from __future__ import annotations

__all__ = ["encode_uvarint", "encode_varint", "decode_varint", "size_of_varint", "VarintError"]


class VarintError(ValueError):
    """A varint is truncated or longer than the 10 bytes a 64-bit value can need."""


def encode_uvarint(value: int) -> bytes:
    """Encode a non-negative integer as an unsigned base-128 varint (flexible-version lengths)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed integer as a zig-zag varint (what records use for lengths and deltas)."""
    # zig-zag maps 0,-1,1,-2,... to 0,1,2,3,... so small negative numbers stay short.
    v = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    return encode_uvarint(v & 0xFFFFFFFFFFFFFFFF)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at `pos`; return (value, position after it)."""
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise VarintError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise VarintError("varint longer than 10 bytes")
    # undo zig-zag
    return (result >> 1) ^ -(result & 1), pos


def size_of_varint(value: int) -> int:
    """Number of bytes encode_varint(value) produces."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size
