"""The framing and field primitives of coordinator records, shared by every record codec of
`__consumer_offsets` (offsets.py and the value modules beside it, and the record types still to come).

Framing (reference §4.2): a key is an int16 key version (which names the record type) + the key
struct; a value is an int16 value version + the value struct, or null (a tombstone). Fields:
string = int16 length + UTF-8 (-1 = null), bytes = int32 length + data (-1 = null), array = int32
count. Flexible versions use "compact" lengths, an unsigned varint of length + 1 (0 = null), and
end every struct with a tagged-field section: unsigned-varint count, then (uvarint tag, uvarint
size, size bytes) per field. All integers are big-endian.
"""

from __future__ import annotations

import struct
import uuid

from offsetd.records.varint import encode_uvarint

__all__ = [
    "INT16",
    "INT32",
    "INT64",
    "RecordDecodeError",
    "write_string",
    "write_bytes",
    "write_compact_string",
    "write_compact_bytes",
    "NO_TAGGED_FIELDS",
    "read_varint_bits",
    "read_uvarint",
    "read_length",
    "read_string",
    "read_required_string",
    "read_required_bytes",
    "skip_tagged_fields",
    "as_bytes",
    "check_end",
    "StructReader",
]

# The fixed-width integers of the schemas; INT16 is also every key's and value's version.
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class RecordDecodeError(ValueError):
    """A `__consumer_offsets` key, value or batch is truncated, garbage or of an unknown version."""


# ---------------------------------------------------------------------------------------------
# Writers: each returns the field's bytes
# ---------------------------------------------------------------------------------------------


def write_string(s: str | None) -> bytes:
    """Non-flexible string: int16 length + UTF-8 bytes; null -> length -1."""
    if s is None:
        return b"\xff\xff"
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} UTF-8 bytes does not fit an int16 length")
    return INT16.pack(len(b)) + b


def write_bytes(b: bytes | None) -> bytes:
    """Non-flexible bytes: int32 length + data; null -> length -1."""
    if b is None:
        return b"\xff\xff\xff\xff"
    return INT32.pack(len(b)) + bytes(b)


def write_compact_string(s: str | None) -> bytes:
    """Compact string: uvarint(length + 1) + UTF-8 bytes; null -> 0."""
    if s is None:
        return b"\x00"
    b = s.encode("utf-8")
    return encode_uvarint(len(b) + 1) + b


def write_compact_bytes(b: bytes | None) -> bytes:
    """Compact bytes: uvarint(length + 1) + data; null -> 0."""
    if b is None:
        return b"\x00"
    return encode_uvarint(len(b) + 1) + bytes(b)


NO_TAGGED_FIELDS = b"\x00"  # empty tagged-field section: count 0


# ---------------------------------------------------------------------------------------------
# Readers: each takes (buf, pos) and returns (value, new pos); they raise
# RecordDecodeError, IndexError or struct.error, which the record decoders turn into
# RecordDecodeError.
# ---------------------------------------------------------------------------------------------


def read_varint_bits(d: bytes, p: int, max_bytes: int) -> tuple[int, int]:
    """The raw (unsigned) value of a LEB128 varint of at most max_bytes bytes at p."""
    result = 0
    for shift in range(0, 7 * max_bytes, 7):
        b = d[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
    raise RecordDecodeError(f"varint longer than {max_bytes} bytes")


def read_uvarint(d: bytes, p: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (an int32 in flexible versions)."""
    return read_varint_bits(d, p, 5)


def read_length(d: bytes, p: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A length or count: compact (unsigned varint of n + 1) in flexible versions, else the fixed
    int16/int32 `fixed`; -1 means null."""
    if flexible:
        n, p = read_uvarint(d, p)
        return n - 1, p
    return fixed.unpack_from(d, p)[0], p + fixed.size


def read_string(d: bytes, p: int, flexible: bool) -> tuple[str | None, int]:
    """String (int16 length or compact); returns None for null."""
    n, p = read_length(d, p, flexible, INT16)
    if n < 0:
        if n == -1:
            return None, p
        raise RecordDecodeError(f"invalid string length {n}")
    e = p + n
    if e > len(d):
        raise RecordDecodeError(f"string of {n} bytes overruns the buffer")
    return d[p:e].decode("utf-8"), e


def read_required_string(d: bytes, p: int, flexible: bool, name: str) -> tuple[str, int]:
    """Non-nullable string; null is an error."""
    s, p = read_string(d, p, flexible)
    if s is None:
        raise RecordDecodeError(f"non-nullable field {name} was serialized as null")
    return s, p


def read_required_bytes(d: bytes, p: int, flexible: bool, name: str) -> tuple[bytes, int]:
    """Non-nullable bytes (int32 length or compact)."""
    n, p = read_length(d, p, flexible, INT32)
    if n < 0:
        raise RecordDecodeError(f"non-nullable field {name} has length {n}")
    e = p + n
    if e > len(d):
        raise RecordDecodeError(f"field {name} of {n} bytes overruns the buffer")
    return d[p:e], e


def skip_tagged_fields(d: bytes, p: int) -> int:
    """Skip a tagged-field section (none of these schemas defines a tag, so all are unknown)."""
    count, p = read_uvarint(d, p)
    for _ in range(count):
        _tag, p = read_uvarint(d, p)
        size, p = read_uvarint(d, p)
        p += size
        if p > len(d):
            raise RecordDecodeError("tagged field overruns the buffer")
    return p


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """The argument as `bytes` (slicing bytes is the cheapest way to cut small fields)."""
    return data if type(data) is bytes else bytes(data)


def check_end(d: bytes, p: int, what: str) -> None:
    """Raise if bytes remain after a fully decoded struct."""
    if p != len(d):
        raise RecordDecodeError(f"{what}: {len(d) - p} trailing bytes")


class StructReader:
    """Cursor over a flexible coordinator struct; every read raises RecordDecodeError when out of bytes."""

    __slots__ = ("d", "p")

    def __init__(self, d: bytes, p: int = 0) -> None:
        self.d = d
        self.p = p

    def _take(self, n: int) -> bytes:
        """The next n bytes."""
        e = self.p + n
        if n < 0 or e > len(self.d):
            raise RecordDecodeError(f"field of {n} bytes overruns the buffer at byte {self.p}")
        out = self.d[self.p:e]
        self.p = e
        return out

    def fixed(self, s: struct.Struct) -> int:
        """A big-endian fixed-size integer."""
        return s.unpack(self._take(s.size))[0]

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes."""
        result = 0
        for shift in range(0, 35, 7):
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
        raise RecordDecodeError("varint longer than 5 bytes")

    def cstr(self) -> str | None:
        """A compact nullable string."""
        n = self.uvarint() - 1
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"invalid UTF-8: {exc}") from exc

    def cstr_nn(self, name: str) -> str:
        """A compact string that must not be null."""
        s = self.cstr()
        if s is None:
            raise RecordDecodeError(f"non-nullable field {name} was serialized as null")
        return s

    def cbytes_nn(self, name: str) -> bytes:
        """Compact bytes that must not be null."""
        n = self.uvarint() - 1
        if n < 0:
            raise RecordDecodeError(f"non-nullable field {name} was serialized as null")
        return self._take(n)

    def count(self, name: str) -> int:
        """A compact array's element count (null is an error)."""
        n = self.uvarint() - 1
        if n < 0:
            raise RecordDecodeError(f"non-nullable array {name} was serialized as null")
        if n > len(self.d) - self.p:  # every element takes at least one byte
            raise RecordDecodeError(f"array {name} of {n} elements overruns the buffer")
        return n

    def uuid(self) -> uuid.UUID:
        """A 16-byte uuid."""
        return uuid.UUID(bytes=self._take(16))

    def tags(self) -> dict[int, bytes]:
        """A tagged-field section as {tag: raw bytes}; callers pick the tags they know."""
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def end(self, what: str) -> None:
        """Raise unless every byte was read."""
        if self.p != len(self.d):
            raise RecordDecodeError(f"{what}: {len(self.d) - self.p} trailing bytes")
