"""Hypothesis strategies for the fuzz properties: valid kio requests of any served schema (small
arrays and strings, so examples stay fast), record batches and `__consumer_offsets` records, and
mutations (truncation, bit flips, garbage) of valid encodings."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}
_text = st.text(max_size=8)
_binary = st.binary(max_size=24)


def _primitive(kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return st.integers(lo, hi)
    if kind == "string":
        return _text
    if kind in ("bytes", "records"):
        return _binary
    if kind == "bool":
        return st.booleans()
    if kind == "uuid":  # the all-zero UUID is the wire's null
        return st.integers(1, 2**128 - 1).map(lambda i: uuid.UUID(int=i))
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind in ("timedelta_i32", "timedelta_i64"):  # whole milliseconds survive the round trip
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kind == "datetime_i64":
        return st.integers(0, 2**41).map(
            lambda ms: datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(milliseconds=ms))
    if kind == "error_code":
        from kio.schema.errors import ErrorCode

        return st.sampled_from(list(ErrorCode))
    raise AssertionError(f"no strategy for kafka_type {kind!r}")


def _field(f: dataclasses.Field) -> st.SearchStrategy[Any]:
    cls = classify_field(f)
    if isinstance(cls, (EntityField, EntityTupleField)):
        inner = entities(cls.type_)
    else:
        inner = _primitive(f.metadata["kafka_type"])
    if cls.is_array:
        inner = st.lists(inner, max_size=3).map(tuple)
    if is_optional(f):
        inner = st.none() | inner
    return inner


@lru_cache(maxsize=None)
def entities(cls: type) -> st.SearchStrategy[Any]:
    """Any valid instance of a kio entity class (tagged fields included)."""
    return st.builds(cls, **{f.name: _field(f) for f in dataclasses.fields(cls)})


# ----------------------------------------------------------------------------- mutations


@st.composite
def truncations(draw: st.DrawFn, data: bytes) -> bytes:
    """A strict prefix of `data`."""
    return data[: draw(st.integers(0, len(data) - 1))]


@st.composite
def bit_flips(draw: st.DrawFn, data: bytes, max_flips: int = 3) -> bytes:
    """`data` with 1..max_flips bits flipped (at distinct positions)."""
    out = bytearray(data)
    bits = draw(st.lists(st.integers(0, len(data) * 8 - 1), min_size=1, max_size=max_flips, unique=True))
    for bit in bits:
        out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """A truncation, bit flips, overwritten bytes or appended garbage of `data` (or a mix)."""
    out = bytearray(data)
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "append", "mix"]))
    if kind in ("flip", "mix") and out:
        out = bytearray(draw(bit_flips(bytes(out))))
    if kind in ("overwrite", "mix") and out:
        at = draw(st.integers(0, len(out) - 1))
        chunk = draw(st.binary(min_size=1, max_size=8))
        out[at : at + len(chunk)] = chunk
    if kind in ("truncate", "mix") and out:
        out = out[: draw(st.integers(0, len(out) - 1))]
    if kind in ("append", "mix"):
        out += draw(st.binary(min_size=1, max_size=32))
    return bytes(out)


# ----------------------------------------------------------------------------- records

record_tuples = st.tuples(
    st.none() | st.binary(max_size=16),
    st.none() | st.binary(max_size=48),
    st.integers(0, 2**41),
    st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=2),
)
"""(key, value, timestamp, headers) as build_batch takes them."""


# ----------------------------------------------------------------------------- offsets log

_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_short_text = st.text(max_size=12)

offset_commit_keys = st.builds(OffsetCommitKey, _short_text, _short_text, _int32)
group_metadata_keys = st.builds(GroupMetadataKey, _short_text)
offset_commit_values = st.builds(OffsetCommitValue, _int64, _int32, _short_text, _int64, _int64)
members = st.builds(
    MemberMetadata, _short_text, st.none() | _short_text, _short_text, _short_text,
    _int32.filter(lambda t: t != -1), _int32, st.binary(max_size=16), st.binary(max_size=16),
)
group_metadata_values = st.builds(
    GroupMetadataValue, _short_text, _int32, st.none() | _short_text, st.none() | _short_text, _int64,
    st.lists(members, max_size=3).map(tuple),
)


def offset_commit_as_decoded(v: OffsetCommitValue, version: int) -> OffsetCommitValue:
    """What decoding an OffsetCommit value written at `version` gives back (fields it lacks drop)."""
    epoch = v.leader_epoch if version in (3, 4) else -1
    expire = v.expire_timestamp if version == 1 else -1
    return OffsetCommitValue(v.offset, epoch, v.metadata, v.commit_timestamp, expire)


def group_metadata_as_decoded(v: GroupMetadataValue, version: int) -> GroupMetadataValue:
    """What decoding a GroupMetadata value written at `version` gives back."""
    ms = tuple(
        MemberMetadata(
            m.member_id, m.group_instance_id if version >= 3 else None, m.client_id, m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout, m.session_timeout,
            m.subscription, m.assignment,
        )
        for m in v.members
    )
    return GroupMetadataValue(v.protocol_type, v.generation, v.protocol, v.leader,
                              v.current_state_timestamp if version >= 2 else -1, ms)
