"""Response (and peer request) encoding: a writer compiled per kio schema class writes a plain
dict straight into a bytearray, and encode_response frames it.

Handlers return plain dicts keyed by kio's field names, never kio dataclasses. A field missing from
the dict takes the schema default (Kafka's semantics for an unset field), so one handler serves
every version: version differences live in the schema, not in branches. A records value that is
not bytes (storage's FileRecords) is left out of the bytes and sent by the connection (SplitFrame).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from functools import lru_cache
from typing import Any, Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .codec import response_class
from .primitives import EPOCH, FLOAT64, INT8, INT16, INT32, INT64, UINT16, UINT32, ZERO_UUID, write_uvarint

__all__ = ["Writer", "EncodedArray", "SplitFrame", "entity_writer", "encode_response"]

Writer = Callable[[bytearray, Any], None]


# ------------------------------------------------------------------------- primitive writers


def _to_int(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - EPOCH).total_seconds() * 1000)
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
        buf += ZERO_UUID
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
                    buf += INT16.pack(-1) if is_string else INT32.pack(-1)
                return
        data = value.encode("utf-8") if isinstance(value, str) else value
        if flexible:
            write_uvarint(buf, len(data) + 1)
        elif is_string:
            buf += INT16.pack(len(data))
        else:
            buf += INT32.pack(len(data))
        buf += data

    return write


class EncodedArray(tuple):
    """An array of entities already in wire form: bytes parts, one after another (the count
    prefix first), in place of a list of dicts (protocol/metadata_partitions.py,
    protocol/listed_groups.py). A part of DEFER_FROM bytes or more is not copied into the frame
    but sent from where it lies, as a deferred chunk (SplitFrame): a 30 MB ListGroups answer
    made in slices is neither joined nor copied before the socket takes it."""


DEFER_FROM = 1 << 16


class _FrameBuffer(bytearray):
    """The response being encoded, plus the deferred chunks of it: (position, chunk) of each
    records value that is not bytes (storage's FileRecords: its bytes go out by sendfile) and of
    each large part of an EncodedArray (bytes, written to the transport as they are)."""

    __slots__ = ("deferred",)


class SplitFrame:
    """An encoded response whose record bytes are sent from elsewhere: `parts` alternate the
    encoded bytes and the deferred chunks (sized objects, e.g. storage.FileRecords, or bytes of
    an EncodedArray) in wire order; `size` is the whole frame's length, size prefix included."""

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
            buf += INT32.pack(len(value))
        buf.deferred.append((len(buf), value))  # type: ignore[attr-defined]

    return write


_FIXED_WRITERS: dict[str, Writer] = {
    "int8": _fixed(INT8),
    "int16": _fixed(INT16),
    "int32": _fixed(INT32),
    "int64": _fixed(INT64),
    "uint16": _fixed(UINT16),
    "uint32": _fixed(UINT32),
    "float64": lambda buf, v: buf.__iadd__(FLOAT64.pack(v)),
    "bool": _write_bool,
    "uuid": _write_uuid,
    "error_code": _fixed(INT16),
    "timedelta_i32": _fixed(INT32),
    "timedelta_i64": _fixed(INT64),
    "datetime_i64": lambda buf, v: buf.__iadd__(INT64.pack(-1 if v is None else _to_int(v))),
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


_PACKERS = {"int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64, "uint16": UINT16, "uint32": UINT32,
            "error_code": INT16, "timedelta_i32": INT32, "timedelta_i64": INT64}


@lru_cache(maxsize=None)
def entity_writer(cls: type) -> Writer:
    """Compile a writer for a kio entity class; it writes a dict (missing keys take defaults).

    The writer is generated as straight-line Python source, one statement group per field, so a
    response costs a few bytecodes per field rather than a call per field (hot responses such as
    OffsetCommit, Fetch and Produce go through here)."""
    flexible: bool = cls.__flexible__
    env: dict[str, Any] = {"_to_int": _to_int, "write_uvarint": write_uvarint, "INT32": INT32,
                           "bytearray": bytearray, "EncodedArray": EncodedArray, "DEFER_FROM": DEFER_FROM}
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
            null = "buf.append(0)" if flexible else "buf += INT32.pack(-1)"
            size = "write_uvarint(buf, len(x) + 1)" if flexible else "buf += INT32.pack(len(x))"
            lines += ["    if x is None:", f"        {null}", "    elif x.__class__ is EncodedArray:",
                      "        for part in x:", "            if len(part) < DEFER_FROM:", "                buf += part",
                      "            else:", "                buf.deferred.append((len(buf), part))", "    else:",
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
                buf += INT32.pack(-1 if nullable else 0)
            return
        if flexible:
            write_uvarint(buf, len(items) + 1)
        else:
            buf += INT32.pack(len(items))
        for item in items:
            element(buf, item)

    return write_array



# ---------------------------------------------------------------------------- response framing


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes | SplitFrame:
    """Frame a response: size prefix, response header (v1 for flexible bodies except ApiVersions), body.

    A SplitFrame when a records value is not bytes (a zero-copy Fetch: see SplitFrame) or an
    EncodedArray has a large part."""
    cls = response_class(api_key, version)
    buf = _FrameBuffer(b"\0\0\0\0")
    buf.deferred = deferred = []
    buf += INT32.pack(correlation_id)
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
