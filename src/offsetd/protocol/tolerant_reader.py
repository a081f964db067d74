"""The tolerant request reader: a pure-Python reader compiled from a kio schema class that skips
unknown tagged fields, which KIP-482 says must be skipped and kio's native reader refuses."""

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

from .primitives import (
    EPOCH, FLOAT64, INT8, INT16, INT32, INT64, UINT16, UINT32, ZERO_UUID, DecodeError, read_uvarint,
)

__all__ = ["Reader", "tolerant_reader"]

Reader = Callable[[memoryview, int], tuple[Any, int]]


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
                (size,) = INT16.unpack_from(data, pos)
                pos += 2
            else:
                _need(data, pos, 4)
                (size,) = INT32.unpack_from(data, pos)
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
            "int8": _fixed_reader(INT8),
            "int16": _fixed_reader(INT16),
            "int32": _fixed_reader(INT32),
            "int64": _fixed_reader(INT64),
            "uint16": _fixed_reader(UINT16),
            "uint32": _fixed_reader(UINT32),
            "float64": _fixed_reader(FLOAT64),
            "bool": _fixed_reader(INT8, bool),
            "error_code": _fixed_reader(INT16, ErrorCode),
            "timedelta_i32": _fixed_reader(INT32, lambda v: datetime.timedelta(milliseconds=v)),
            "timedelta_i64": _fixed_reader(INT64, lambda v: datetime.timedelta(milliseconds=v)),
            "datetime_i64": _fixed_reader(
                INT64, lambda v: None if v < 0 else EPOCH + datetime.timedelta(milliseconds=v)
            ),
        }
        if kafka_type == "uuid":

            def inner(data: memoryview, pos: int) -> tuple[Any, int]:
                _need(data, pos, 16)
                raw = bytes(data[pos : pos + 16])
                return (None if raw == ZERO_UUID else uuid.UUID(bytes=raw)), pos + 16

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
            (n,) = INT32.unpack_from(data, pos)
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
