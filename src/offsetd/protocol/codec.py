"""Wire codec compiled from kio's generated schemas.

Decoding uses kio's native reader (fast). kio raises on an unknown tagged field, which KIP-482 says
must be skipped, so a pure-Python reader compiled from the same schema is the fallback.

Encoding does not build kio dataclasses: handlers return plain dicts keyed by kio's field names and
a writer compiled per (api, version) from the field metadata writes them straight into a
bytearray. A field missing from the dict takes the schema default (Kafka's semantics for an unset
field), so one handler serves every version: version differences live in the schema, not in
branches.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from functools import lru_cache
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from .legacy_schemas import schema_class as legacy_schema_class
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

Writer = Callable[[bytearray, Any], None]
Reader = Callable[[memoryview, int], tuple[Any, int]]

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U16, _U32, _F64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d")
_ZERO_UUID = bytes(16)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


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


# ------------------------------------------------------------------------- primitive writers


def _to_int(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH).total_seconds() * 1000)
    return int(value)


def _fixed(st: struct.Struct) -> Writer:
    pack = st.pack

    def write(buf: bytearray, value: Any) -> None:
        buf += pack(value if type(value) is int else _to_int(value))

    return write


def _write_bool(buf: bytearray, value: Any) -> None:
    buf.append(1 if value else 0)


def _write_uuid(buf: bytearray, value: Any) -> None:
    if value is None:
        buf += _ZERO_UUID
    elif isinstance(value, uuid.UUID):
        buf += value.bytes
    else:
        buf += bytes(value)


def _bytes_writer(flexible: bool, nullable: bool, is_string: bool) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                value = "" if is_string else b""
            else:
                if flexible:
                    buf.append(0)
                else:
                    buf += _I16.pack(-1) if is_string else _I32.pack(-1)
                return
        data = value.encode("utf-8") if isinstance(value, str) else value
        if flexible:
            write_uvarint(buf, len(data) + 1)
        elif is_string:
            buf += _I16.pack(len(data))
        else:
            buf += _I32.pack(len(data))
        buf += data

    return write


class _FrameBuffer(bytearray):
    """The response being encoded, plus the deferred chunks of it: (position, chunk) of each
    records value that is not bytes (storage's FileRecords: its bytes go out by sendfile)."""

    __slots__ = ("deferred",)


class SplitFrame:
    """An encoded response whose record bytes are sent from elsewhere: `parts` alternate the
    encoded bytes and the deferred chunks (sized objects, e.g. storage.FileRecords) in wire
    order; `size` is the whole frame's length, size prefix included."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        """Release what the deferred chunks hold (a response that will not be sent)."""
        for part in self.parts:
            if not isinstance(part, bytes):
                part.close()


def _records_writer(plain: Writer, flexible: bool) -> Writer:
    """A records field: bytes as `plain` writes them; any other sized value (FileRecords) gets
    its length prefix here and is recorded as a deferred chunk of the frame (_FrameBuffer)."""

    def write(buf: bytearray, value: Any) -> None:
        if value is None or isinstance(value, (bytes, bytearray, memoryview)):
            plain(buf, value)
            return
        if flexible:
            write_uvarint(buf, len(value) + 1)
        else:
            buf += _I32.pack(len(value))
        buf.deferred.append((len(buf), value))  # type: ignore[attr-defined]

    return write


_FIXED_WRITERS: dict[str, Writer] = {
    "int8": _fixed(_I8),
    "int16": _fixed(_I16),
    "int32": _fixed(_I32),
    "int64": _fixed(_I64),
    "uint16": _fixed(_U16),
    "uint32": _fixed(_U32),
    "float64": lambda buf, v: buf.__iadd__(_F64.pack(v)),
    "bool": _write_bool,
    "uuid": _write_uuid,
    "error_code": _fixed(_I16),
    "timedelta_i32": _fixed(_I32),
    "timedelta_i64": _fixed(_I64),
    "datetime_i64": lambda buf, v: buf.__iadd__(_I64.pack(-1 if v is None else _to_int(v))),
}

# The zero value Kafka's generated code gives a field with no declared default.
_ZERO: dict[str, Any] = {
    "string": "", "bytes": b"", "records": b"", "bool": False, "uuid": None, "float64": 0.0,
}


def _plain_default(f: dataclasses.Field) -> Any:
    """The default of a schema field as a plain value (ints for enums and durations)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        cls = classify_field(f)
        if cls.is_array:
            return () if not is_optional(f) else None
        if isinstance(cls, EntityField):
            return None
        return None if is_optional(f) else _ZERO.get(f.metadata.get("kafka_type", ""), 0)
    if dataclasses.is_dataclass(value):
        return {g.name: _plain_value(getattr(value, g.name)) for g in dataclasses.fields(value)}
    return _plain_value(value)


def _plain_value(value: Any) -> Any:
    if isinstance(value, (datetime.timedelta, datetime.datetime)):
        return _to_int(value)
    if hasattr(value, "value") and isinstance(getattr(value, "value"), int):
        return value.value
    if isinstance(value, tuple):
        return tuple(_plain_value(v) for v in value)
    return value


# ---------------------------------------------------------------------------- entity writers


_PACKERS = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64, "uint16": _U16, "uint32": _U32,
            "error_code": _I16, "timedelta_i32": _I32, "timedelta_i64": _I64}


@lru_cache(maxsize=None)
def entity_writer(cls: type) -> Writer:
    """Compile a writer for a kio entity class; it writes a dict (missing keys take defaults).

    The writer is generated as straight-line Python source, one statement group per field, so a
    response costs a few bytecodes per field rather than a call per field (hot responses such as
    OffsetCommit, Fetch and Produce go through here)."""
    flexible: bool = cls.__flexible__
    env: dict[str, Any] = {"_to_int": _to_int, "write_uvarint": write_uvarint, "_I32": _I32,
                           "bytearray": bytearray}
    lines = ["def write(buf, value):", "    get = value.get"]
    tagged: list[tuple[int, str, Writer]] = []
    for i, f in enumerate(dataclasses.fields(cls)):
        tag = get_field_tag(f)
        if tag is not None:
            tagged.append((int(tag), f.name, _field_writer(f, flexible, tagged=True)))
            continue
        env[f"d{i}"] = _plain_default(f)
        lines.append(f"    x = get({f.name!r}, d{i})")
        kind = f.metadata.get("kafka_type")
        cls_info = classify_field(f)
        if not cls_info.is_array and kind in _PACKERS:
            env[f"p{i}"] = _PACKERS[kind].pack
            lines.append(f"    buf += p{i}(x if x.__class__ is int else _to_int(x))")
        elif not cls_info.is_array and kind == "bool":
            lines.append("    buf.append(1 if x else 0)")
        elif cls_info.is_array and isinstance(cls_info, EntityTupleField):
            env[f"w{i}"] = entity_writer(cls_info.type_)
            null = "buf.append(0)" if flexible else "buf += _I32.pack(-1)"
            size = "write_uvarint(buf, len(x) + 1)" if flexible else "buf += _I32.pack(len(x))"
            lines += ["    if x is None:", f"        {null}", "    else:",
                      f"        {size}", "        for item in x:", f"            w{i}(buf, item)"]
        else:  # strings, bytes, records, uuids, primitive arrays, nullable structs: a helper call
            env[f"f{i}"] = _field_writer(f, flexible, tagged=False)
            lines.append(f"    f{i}(buf, x)")
    if flexible:
        tagged.sort()
        env["tagged"] = tagged
        if tagged:
            lines += ["    present = [(t, n, w) for t, n, w in tagged if get(n) is not None]",
                      "    write_uvarint(buf, len(present))",
                      "    for t, n, w in present:",
                      "        body = bytearray()",
                      "        w(body, get(n))",
                      "        write_uvarint(buf, t)",
                      "        write_uvarint(buf, len(body))",
                      "        buf += body"]
        else:
            lines.append("    buf.append(0)")
    exec(compile("\n".join(lines), f"<writer {cls.__module__}.{cls.__name__}>", "exec"), env)
    return env["write"]


def _field_writer(f: dataclasses.Field, flexible: bool, tagged: bool) -> Writer:
    cls = classify_field(f)
    nullable = False if tagged else is_optional(f)
    kafka_type = f.metadata.get("kafka_type")
    inner: Writer
    if isinstance(cls, (EntityField, EntityTupleField)):
        inner = entity_writer(cls.type_)
        if isinstance(cls, EntityField) and nullable:  # KIP-893 nullable struct: int8 marker
            struct_writer = inner

            def inner(buf: bytearray, v: Any) -> None:
                if v is None:
                    buf.append(0xFF)
                else:
                    buf.append(1)
                    struct_writer(buf, v)

    elif kafka_type == "records":
        inner = _records_writer(_bytes_writer(flexible, nullable and not cls.is_array, False), flexible)
    elif kafka_type in ("string", "bytes"):
        inner = _bytes_writer(flexible, nullable and not cls.is_array, kafka_type == "string")
    else:
        inner = _FIXED_WRITERS[kafka_type]
    if not cls.is_array:
        return inner
    element = inner

    def write_array(buf: bytearray, items: Any) -> None:
        if items is None:
            if flexible:
                buf.append(0)
            else:
                buf += _I32.pack(-1 if nullable else 0)
            return
        if flexible:
            write_uvarint(buf, len(items) + 1)
        else:
            buf += _I32.pack(len(items))
        for item in items:
            element(buf, item)

    return write_array


# ---------------------------------------------------------------------- tolerant fallback reader


@lru_cache(maxsize=None)
def tolerant_reader(cls: type) -> Reader:
    """Compile a pure-Python reader that skips unknown tagged fields; returns kio dataclasses."""
    flexible: bool = cls.__flexible__
    plan: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    is_header = cls.__name__ == "RequestHeader"
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        reader = _field_reader(f, flexible and not (is_header and f.name == "client_id"), tag is not None)
        if tag is not None:
            tagged[int(tag)] = (f.name, reader)
        else:
            plan.append((f.name, reader))

    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, field_reader in plan:
            values[name], pos = field_reader(data, pos)
        if flexible:
            count, pos = read_uvarint(data, pos)
            for _ in range(count):
                tag, pos = read_uvarint(data, pos)
                size, pos = read_uvarint(data, pos)
                if tag in tagged:
                    name, field_reader = tagged[tag]
                    values[name], _ = field_reader(data[: pos + size], pos)
                pos += size
        if pos > len(data):
            raise DecodeError(f"truncated {cls.__name__}")
        return cls(**values), pos

    return read


def _need(data: memoryview, pos: int, size: int) -> None:
    if size < 0 or pos + size > len(data):
        raise DecodeError("field runs past the end of the frame")


def _fixed_reader(st: struct.Struct, convert: Callable[[int], Any] | None = None) -> Reader:
    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        _need(data, pos, st.size)
        (value,) = st.unpack_from(data, pos)
        return (convert(value) if convert else value), pos + st.size

    return read


def _field_reader(f: dataclasses.Field, flexible: bool, tagged: bool) -> Reader:
    from kio.schema.errors import ErrorCode

    cls = classify_field(f)
    kafka_type = f.metadata.get("kafka_type")
    inner: Reader
    if isinstance(cls, (EntityField, EntityTupleField)):
        inner = tolerant_reader(cls.type_)
        if isinstance(cls, EntityField) and is_optional(f) and not tagged:
            struct_reader = inner

            def inner(data: memoryview, pos: int) -> tuple[Any, int]:
                _need(data, pos, 1)
                if data[pos] == 0xFF:
                    return None, pos + 1
                return struct_reader(data, pos + 1)

    elif kafka_type in ("string", "bytes", "records"):
        is_string = kafka_type == "string"

        def inner(data: memoryview, pos: int) -> tuple[Any, int]:
            if flexible:
                size, pos = read_uvarint(data, pos)
                size -= 1
            elif is_string:
                _need(data, pos, 2)
                (size,) = _I16.unpack_from(data, pos)
                pos += 2
            else:
                _need(data, pos, 4)
                (size,) = _I32.unpack_from(data, pos)
                pos += 4
            if size < 0:
                return None, pos
            _need(data, pos, size)
            raw = bytes(data[pos : pos + size])
            try:
                return (raw.decode("utf-8") if is_string else raw), pos + size
            except UnicodeDecodeError:
                raise DecodeError("invalid UTF-8 in a string field") from None

    else:
        table: dict[str, Reader] = {
            "int8": _fixed_reader(_I8),
            "int16": _fixed_reader(_I16),
            "int32": _fixed_reader(_I32),
            "int64": _fixed_reader(_I64),
            "uint16": _fixed_reader(_U16),
            "uint32": _fixed_reader(_U32),
            "float64": _fixed_reader(_F64),
            "bool": _fixed_reader(_I8, bool),
            "error_code": _fixed_reader(_I16, ErrorCode),
            "timedelta_i32": _fixed_reader(_I32, lambda v: datetime.timedelta(milliseconds=v)),
            "timedelta_i64": _fixed_reader(_I64, lambda v: datetime.timedelta(milliseconds=v)),
            "datetime_i64": _fixed_reader(
                _I64, lambda v: None if v < 0 else _EPOCH + datetime.timedelta(milliseconds=v)
            ),
        }
        if kafka_type == "uuid":

            def inner(data: memoryview, pos: int) -> tuple[Any, int]:
                _need(data, pos, 16)
                raw = bytes(data[pos : pos + 16])
                return (None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)), pos + 16

        else:
            inner = table[kafka_type]
    if not cls.is_array:
        return inner
    element = inner

    def read_array(data: memoryview, pos: int) -> tuple[Any, int]:
        if flexible:
            n, pos = read_uvarint(data, pos)
            n -= 1
        else:
            _need(data, pos, 4)
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
        if n < 0:
            return None, pos
        if n > len(data) - pos:  # every element takes at least one byte
            raise DecodeError("array length exceeds the frame")
        items = []
        for _ in range(n):
            item, pos = element(data, pos)
            items.append(item)
        return tuple(items), pos

    return read_array


# ------------------------------------------------------------------------- array count guard
#
# kio's native reader sizes an array from its wire count before it reads any element, so a count
# far beyond the frame (a 5-byte compact count of 2**32 - 2, or an int32 count of 2**31 - 1 on a
# smaller machine) makes it allocate count * 8 bytes, and when that fails the Rust allocator aborts
# the whole process: one malformed frame would kill the broker. Before the native reader runs, a
# walker compiled per request schema follows the same fields and rejects any array count larger
# than the bytes left (every element takes at least one byte), as Kafka's readers do. It decodes
# nothing (fixed-size fields are one addition, strings one length read), and schemas without
# arrays skip it.

_FIXED_SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
                "uint64": 8, "float64": 8, "bool": 1, "uuid": 16, "error_code": 2, "timedelta_i32": 4,
                "timedelta_i64": 8, "datetime_i64": 8}


class _UnknownTag(Exception):
    """The walk reached an unknown tagged field: the native reader stops there too (KeyError)
    and the tolerant reader, which checks its array counts itself, takes over."""


def _holds_array(f: dataclasses.Field) -> bool:
    """True when a field is an array or a struct with an array somewhere inside."""
    info = classify_field(f)
    return info.is_array or (isinstance(info, EntityField) and _has_array(info.type_))


@lru_cache(maxsize=None)
def _has_array(cls: type) -> bool:
    """True when an entity (or anything nested in it, tagged fields included) has an array."""
    return any(_holds_array(f) for f in dataclasses.fields(cls))


def _too_many(count: int, left: int) -> DecodeError:
    return DecodeError(f"array count {count} exceeds the {left} bytes left in the frame")


def _scalar_skipper(kind: str, flexible: bool) -> Callable[[memoryview, int], int]:
    """Position after one non-entity value of a tagged field or a tagged array's element."""
    if kind in _FIXED_SIZES:
        size = _FIXED_SIZES[kind]
        return lambda d, p: p + size
    if flexible:

        def skip_compact(d: memoryview, p: int) -> int:
            n, p = read_uvarint(d, p)
            return p + max(n - 1, 0)

        return skip_compact
    fixed = _I16 if kind == "string" else _I32
    return lambda d, p: p + fixed.size + max(fixed.unpack_from(d, p)[0], 0)


def _value_skipper(f: dataclasses.Field, flexible: bool) -> Callable[[memoryview, int], int]:
    """Position after one tagged field's value (tagged fields are rare: not compiled)."""
    info = classify_field(f)
    if isinstance(info, (EntityField, EntityTupleField)):
        item = _walker(info.type_, False)
    else:
        item = _scalar_skipper(f.metadata.get("kafka_type", ""), flexible)
    if not info.is_array:
        return item

    def skip_array(d: memoryview, p: int) -> int:
        if flexible:
            count, p = read_uvarint(d, p)
            count -= 1
        else:
            (count,) = _I32.unpack_from(d, p)
            p += 4
        if count > len(d) - p:
            raise _too_many(count, len(d) - p)
        for _ in range(count):
            p = item(d, p)
        return p

    return skip_array


@lru_cache(maxsize=None)
def _walker(cls: type, prefix_only: bool) -> Callable[[memoryview, int], int]:
    """Compile a walker over one entity of `cls` at `pos`; it returns the position after it and
    raises DecodeError for an array count beyond the frame (IndexError/struct.error when it runs
    off the end, _UnknownTag at an unknown tagged field). With prefix_only it stops after the last
    field holding an array and its return value is meaningless (the top level of a request)."""
    flexible: bool = cls.__flexible__
    env: dict[str, Any] = {"_uv": read_uvarint, "_i16": _I16.unpack_from, "_i32": _I32.unpack_from,
                           "_too_many": _too_many, "_UnknownTag": _UnknownTag}
    fields = [f for f in dataclasses.fields(cls) if get_field_tag(f) is None]
    tagged = {int(get_field_tag(f)): f for f in dataclasses.fields(cls) if get_field_tag(f) is not None}
    # With prefix_only (and no arrays in tagged fields) the walk ends with the last field that
    # holds an array; otherwise it covers every field and the tagged-field section.
    truncated = prefix_only and not any(_holds_array(f) for f in tagged.values())
    last = len(fields)
    if truncated:
        holders = [i for i, f in enumerate(fields) if _holds_array(f)]
        last = holders[-1] + 1 if holders else 0
    lines = ["def walk(d, p):", "    n = len(d)"]
    pending = 0

    def flush() -> None:
        nonlocal pending
        if pending:
            lines.append(f"    p += {pending}")
            pending = 0

    def skip_string(indent: str, kind: str) -> list[str]:
        if flexible:  # compact: uvarint(length + 1), 0 = null; one byte for lengths below 127
            return [f"{indent}b = d[p]", f"{indent}if b < 128:", f"{indent}    p += b or 1", f"{indent}else:",
                    f"{indent}    x, p = _uv(d, p)", f"{indent}    p += x - 1 if x else 0"]
        width, unpack = (2, "_i16") if kind == "string" else (4, "_i32")
        return [f"{indent}x = {unpack}(d, p)[0]", f"{indent}p += {width} + x if x > 0 else {width}"]

    for i, f in enumerate(fields[:last]):
        info = classify_field(f)
        kind = f.metadata.get("kafka_type")
        is_last = truncated and i == last - 1
        if not info.is_array and kind in _FIXED_SIZES:
            pending += _FIXED_SIZES[kind]
            continue
        flush()
        if not info.is_array:
            if isinstance(info, EntityField):
                env[f"w{i}"] = _walker(info.type_, is_last)
                if is_optional(f):  # KIP-893 nullable struct: int8 marker, -1 = null
                    lines += ["    if d[p] == 255:", "        p += 1", "    else:", f"        p = w{i}(d, p + 1)"]
                else:
                    lines.append(f"    p = w{i}(d, p)")
            else:
                lines += skip_string("    ", kind)
            continue
        if flexible:
            lines += ["    b = d[p]", "    if b < 128:", "        c = b - 1", "        p += 1", "    else:",
                      "        c, p = _uv(d, p)", "        c -= 1"]
        else:
            lines += ["    c = _i32(d, p)[0]", "    p += 4"]
        lines += ["    if c > n - p:", "        raise _too_many(c, n - p)"]
        if isinstance(info, EntityTupleField):
            if is_last and not _has_array(info.type_):
                continue  # nothing after it needs a position: the count check is all
            env[f"w{i}"] = _walker(info.type_, False)
            if not is_last:
                lines += ["    for _ in range(c):", f"        p = w{i}(d, p)"]
                continue
            # nothing follows the last element: it only needs its own arrays checked
            env[f"v{i}"] = _walker(info.type_, True)
            lines += ["    if c > 0:", "        for _ in range(c - 1):", f"            p = w{i}(d, p)",
                      f"        v{i}(d, p)"]
        elif kind in _FIXED_SIZES:
            lines += ["    if c > 0:", f"        p += c * {_FIXED_SIZES[kind]}"]
        else:
            lines += ["    for _ in range(c):"] + skip_string("        ", kind)
    flush()
    if flexible and not truncated:
        env["tags"] = {tag: _value_skipper(f, flexible) for tag, f in tagged.items()}
        lines += ["    if d[p] == 0:  # no tagged fields, the usual case",
                  "        return p + 1",
                  "    count, p = _uv(d, p)", "    for _ in range(count):", "        tag, p = _uv(d, p)",
                  "        _size, p = _uv(d, p)", "        skip = tags.get(tag)", "        if skip is None:",
                  "            raise _UnknownTag(tag)",
                  "        p = skip(d, p)  # the native reader reads the value and ignores the size"]
    lines.append("    return p")
    exec(compile("\n".join(lines), f"<walker {cls.__module__}.{cls.__name__}>", "exec"), env)
    return env["walk"]


@lru_cache(maxsize=None)
def _array_guard(cls: type) -> Callable[[memoryview, int], int] | None:
    """The array count check to run before kio's native reader; None for schemas without arrays."""
    return _walker(cls, True) if _has_array(cls) else None


# ------------------------------------------------------------------------------ entry points


@lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    """kio's request dataclass for (api_key, version), or the legacy table's for versions kio lacks
    (legacy_schemas); raises kio's UnknownEntity/UnknownAPIKey for neither."""
    return legacy_schema_class(api_key, version, "request") or load_request_schema(api_key, version)


@lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    """kio's response dataclass for (api_key, version), or the legacy table's."""
    return legacy_schema_class(api_key, version, "response") or load_response_schema(api_key, version)


@lru_cache(maxsize=None)
def _native_reader(cls: type) -> Reader:
    return entity_reader(cls)


def decode_body(cls: type, frame: memoryview, pos: int) -> Any:
    """Decode a request body with kio, falling back to the tolerant reader on unknown tags.

    DecodeError for anything that does not match the schema; array counts beyond the frame are
    refused before kio's native reader sees them (see _walker)."""
    try:
        guard = _array_guard(cls)
        if guard is not None:
            try:
                guard(frame, pos)
            except _UnknownTag:
                pass  # the native reader stops there; the tolerant reader checks counts itself
        try:
            body, _ = _native_reader(cls)(frame, pos)
        except KeyError:  # an unknown tagged field, which KIP-482 says to skip
            body, _ = tolerant_reader(cls)(frame, pos)
        return body
    except DecodeError:
        raise
    except Exception as exc:  # kio raises assorted ValueError/IndexError/UnicodeError on garbage
        raise DecodeError(f"cannot decode {cls.__name__}: {exc}") from None


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes | SplitFrame:
    """Frame a response: size prefix, response header (v1 for flexible bodies except ApiVersions), body.

    A SplitFrame when a records value is not bytes (a zero-copy Fetch: see SplitFrame)."""
    cls = response_class(api_key, version)
    buf = _FrameBuffer(b"\0\0\0\0")
    buf.deferred = deferred = []
    buf += _I32.pack(correlation_id)
    if cls.__flexible__ and api_key != 18:  # ApiVersions always answers with header v0
        buf.append(0)
    entity_writer(cls)(buf, body)
    if deferred:
        return _split(buf, deferred)
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    return bytes(buf)


def _split(buf: bytearray, deferred: list[tuple[int, Any]]) -> SplitFrame:
    """The frame of a response with deferred chunks: its size counts them; parts in wire order."""
    size = len(buf) + sum(len(chunk) for _, chunk in deferred)
    struct.pack_into(">i", buf, 0, size - 4)
    parts: list[Any] = []
    start = 0
    with memoryview(buf) as view:
        for pos, chunk in deferred:
            if pos > start:
                parts.append(view[start:pos].tobytes())
            parts.append(chunk)
            start = pos
        if start < len(buf):
            parts.append(view[start:].tobytes())
    return SplitFrame(parts, size)
