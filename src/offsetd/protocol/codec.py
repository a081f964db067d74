"""Request decoding over kio's generated schemas: the schema class of each (api key, version),
and decode_body, which runs kio's native reader (fast) behind an array-count guard and falls
back to the tolerant reader (tolerant_reader.py) on an unknown tagged field.

Responses are written by encoder.py; the wire primitives are in primitives.py.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .legacy_schemas import schema_class as legacy_schema_class
from .primitives import INT16, INT32, DecodeError, read_uvarint
from .tolerant_reader import Reader, tolerant_reader

__all__ = ["request_class", "response_class", "decode_body"]


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
    fixed = INT16 if kind == "string" else INT32
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
            (count,) = INT32.unpack_from(d, p)
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
    env: dict[str, Any] = {"_uv": read_uvarint, "_i16": INT16.unpack_from, "_i32": INT32.unpack_from,
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
