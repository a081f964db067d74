"""Fuzz targets shared by the bounded Hypothesis properties (tests/fuzz/test_*.py) and the longer
coverage-guided run (tests/fuzz/run.py).

Each `check_*` function takes arbitrary bytes, feeds them to one decoder family the broker uses and
asserts the family's contract: a result, or the family's own documented error, never another
exception type. They return a short tag of what happened so tests can assert on it.

Builders: deterministic valid inputs (requests of every served (api_key, version) with every array
holding one element, record batches, offsets-log keys and values) that seed mutation.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import io
import os
import struct
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kio.serial import entity_writer as kio_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from offsetd.protocol.api_versions import SUPPORTED, is_supported
from offsetd.protocol.codec import decode_body, request_class
from offsetd.protocol.primitives import DecodeError
from offsetd.protocol.header import RequestHeader, parse_header, peek_ids
from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_NONE,
    CORRUPT_MESSAGE,
    CRC_START,
    INVALID_RECORD,
    LOG_OVERHEAD,
    MESSAGE_TOO_LARGE,
    MIN_BATCH_LENGTH,
    InvalidBatch,
    build_batch,
    decode_records,
    iter_batches,
    parse_header as parse_batch_header,
    validate_batches,
)
from offsetd.records.compression import batch_record_timestamps
from offsetd.records.consumer_protocol import parse_subscription_topics
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.group_metadata_value import decode_group_metadata_value
from offsetd.records.log_walker import iter_log_records
from offsetd.records.offset_commit_value import decode_offset_commit_value
from offsetd.records.offsets import decode_key
from offsetd.records.scan import scan_columns, scan_key_values

PAIRS: list[tuple[int, int]] = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]
"""Every (api_key, version) the broker serves."""

BATCH_ERROR_CODES = frozenset({CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD})
HANG_SECONDS = 30.0


@contextmanager
def no_hang(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Abort the process with every thread's traceback if the block runs longer than `seconds`
    (a watchdog thread, so it also fires inside native code that never returns to Python)."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


# ------------------------------------------------------------------------------ requests


def _sample_field(f: dataclasses.Field, flexible: bool) -> Any:
    """A non-default value for one kio field; arrays get one element, optionals a value."""
    cls = classify_field(f)
    kind = f.metadata.get("kafka_type")
    if isinstance(cls, (EntityField, EntityTupleField)):
        value: Any = sample_entity(cls.type_)
    elif kind == "string":
        value = "fz"
    elif kind in ("bytes", "records"):
        value = b"\x01\x02\x03"
    elif kind == "bool":
        value = True
    elif kind == "uuid":
        value = uuid.UUID(int=0x1234)
    elif kind == "float64":
        value = 1.5
    elif kind in ("timedelta_i32", "timedelta_i64"):
        value = datetime.timedelta(milliseconds=1500)
    elif kind == "datetime_i64":
        value = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    elif kind == "error_code":
        from kio.schema.errors import ErrorCode

        value = ErrorCode.none
    else:  # integers
        value = 7
    return (value,) if cls.is_array else value


def sample_entity(cls: type) -> Any:
    """A kio entity with every field set (tagged ones too) and one element in every array."""
    return cls(**{f.name: _sample_field(f, cls.__flexible__) for f in dataclasses.fields(cls)})


def encode_entity(cls: type, value: Any) -> bytes:
    """kio's own writer (independent of the project's codec) for a request body."""
    buf = io.BytesIO()
    kio_writer(cls)(buf, value)
    return buf.getvalue()


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1,
                  client_id: str | None = "fuzz") -> bytes:
    """A request frame (without the 4-byte size prefix): header v1, or v2 for flexible bodies."""
    cls = request_class(api_key, version)
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        head += b"\xff\xff"
    else:
        raw = client_id.encode()
        head += struct.pack(">h", len(raw)) + raw
    if cls.__flexible__:
        head += b"\x00"
    return head + body


def sample_frames() -> list[tuple[int, int, bytes, Any]]:
    """(api_key, version, frame, request) for every served pair: one all-defaults request and one
    with every field and array filled."""
    out = []
    for key, version in PAIRS:
        cls = request_class(key, version)
        for req in (cls(**{f.name: _default(f) for f in dataclasses.fields(cls)}), sample_entity(cls)):
            out.append((key, version, request_frame(key, version, encode_entity(cls, req)), req))
    return out


def _default(f: dataclasses.Field) -> Any:
    """The field's schema default, or the type's zero value (kio entities need every field)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    cls = classify_field(f)
    if cls.is_array:
        return None if is_optional(f) else ()
    if isinstance(cls, EntityField):
        return None if is_optional(f) else sample_entity(cls.type_)
    if is_optional(f):
        return None
    kind = f.metadata.get("kafka_type")
    return {"string": "", "bytes": b"", "records": b"", "bool": False, "uuid": None,
            "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0)}.get(kind, 0)


def decode_request(frame: bytes, api_key: int | None = None, version: int | None = None
                   ) -> tuple[RequestHeader, Any] | None:
    """Decode a frame as the broker's dispatch does (peek ids, header, body); None when the
    decoders reject it with DecodeError or the (api_key, version) is not served. Any other
    exception escapes. `api_key`/`version` override the ids in the frame (to pin a schema)."""
    view = memoryview(frame)
    try:
        key, ver, _corr = peek_ids(view)
    except DecodeError:
        return None
    if api_key is not None and version is not None:
        key, ver = api_key, version
    if not is_supported(key, ver):
        return None
    cls = request_class(key, ver)
    try:
        header = parse_header(view, cls.__flexible__)
        body = decode_body(cls, view, header.body_offset)
    except DecodeError:
        return None
    return header, body


def check_request(data: bytes) -> str:
    """Property: any bytes as a request frame decode to a request or raise DecodeError only.
    Also: the header fields agree with peek_ids."""
    result = decode_request(data)
    if result is None:
        return "rejected"
    header, body = result
    assert (header.api_key, header.api_version) == struct.unpack_from(">hh", data, 0)
    assert header.body_offset <= len(data)
    assert body is not None
    return "decoded"


def check_request_body(api_key: int, version: int, body: bytes) -> str:
    """Property: any body bytes behind a valid header of a served schema decode or raise DecodeError."""
    return check_request(request_frame(api_key, version, body))


# ------------------------------------------------------------------------------ record batches


def sample_records(n: int, seed: int = 0) -> list[tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]]:
    """n records with keys, values, null keys/values and headers mixed."""
    out = []
    for i in range(n):
        key = None if (i + seed) % 4 == 3 else f"k{i + seed}".encode()
        value = None if (i + seed) % 5 == 4 else bytes([i % 251]) * ((i * 7 + seed) % 40)
        headers = [(f"h{i}", b"v" if i % 2 else None)] if (i + seed) % 3 == 0 else []
        out.append((key, value, 1_700_000_000_000 + i * 10, headers))
    return out


def check_batches(data: bytes) -> str:
    """Property for a Produce `records` blob / stored bytes: validate_batches returns consistent
    headers or raises InvalidBatch with one of its error codes; iter_batches never raises and
    agrees with validate_batches; parse_header raises only InvalidBatch(CORRUPT_MESSAGE)."""
    try:
        headers = validate_batches(data, 1 << 20)
    except InvalidBatch as exc:
        assert exc.error_code in BATCH_ERROR_CODES, exc.error_code
        headers = None
    walked = list(iter_batches(data, verify=True))
    pos = 0
    for p, h in walked:
        assert p == pos and h.batch_length >= MIN_BATCH_LENGTH and p + h.size <= len(data)
        pos = p + h.size
    if headers is not None:
        assert sum(h.size for h in headers) == len(data)
        assert [h for _p, h in walked] == headers
        for h in headers:
            assert h.magic == 2 and h.records_count > 0 and h.last_offset_delta == h.records_count - 1
    try:
        parse_batch_header(data, 0)
    except InvalidBatch as exc:
        assert exc.error_code == CORRUPT_MESSAGE and len(data) < BATCH_HEADER_SIZE
    return "valid" if headers is not None else "rejected"


def check_one_batch_records(data: bytes) -> str:
    """Property: decode_records / batch_record_timestamps give records or InvalidBatch(CORRUPT_MESSAGE)
    (ValueError only for a compressed batch, as documented); when both succeed they agree."""
    outcomes = []
    records = stamps = None
    for fn in (decode_records, batch_record_timestamps):
        try:
            result = fn(data)
        except InvalidBatch as exc:
            assert exc.error_code == CORRUPT_MESSAGE
            outcomes.append("invalid")
            continue
        except ValueError as exc:
            assert type(exc) is ValueError and "compressed" in str(exc), repr(exc)
            assert parse_batch_header(data).compression != COMPRESSION_NONE
            outcomes.append("compressed")
            continue
        if fn is decode_records:
            records = result
        else:
            stamps = result
        outcomes.append("ok")
    if records is not None:
        h = parse_batch_header(data)
        assert len(records) == h.records_count  # a negative count is refused, never read as 0
        if stamps is not None:
            assert stamps == [(r.offset, r.timestamp) for r in records]
    return "/".join(outcomes)


def check_offsets_log_scan(data: bytes) -> str:
    """Property: the offsets-log walkers raise only their documented errors: scan_key_values and
    scan_columns InvalidBatch, iter_log_records RecordDecodeError (verify on and off)."""
    outcome = []
    try:
        seen, consumed = scan_key_values(data, lambda k, v: None)
        assert 0 <= consumed <= len(data) and seen >= 0
        outcome.append("scan")
    except InvalidBatch as exc:
        assert exc.error_code == CORRUPT_MESSAGE
    try:
        ids: list[int] = []
        values: list[bytes | None] = []
        runs: list[int] = []
        end = scan_columns(data, 0, 1 << 30, {}, ids, values, runs)
        assert 0 <= end <= len(data) and len(ids) == len(values)
        outcome.append("columns")
    except InvalidBatch as exc:
        assert exc.error_code == CORRUPT_MESSAGE
    for verify in (False, True):
        try:
            gen = iter_log_records(data, verify=verify)
            while True:
                next(gen)
        except StopIteration as stop:
            assert 0 <= stop.value <= len(data)
            outcome.append(f"log{int(verify)}")
        except RecordDecodeError:
            pass
    return "/".join(outcome)


def fix_crc(batch: bytearray | bytes, pos: int = 0) -> bytes:
    """Recompute the CRC-32C of the batch at `pos` (to fuzz record parsing behind a valid CRC)."""
    from crc32c import crc32c

    out = bytearray(batch)
    (length,) = struct.unpack_from(">i", out, pos + 8)
    end = pos + LOG_OVERHEAD + length
    if length >= MIN_BATCH_LENGTH and end <= len(out):
        struct.pack_into(">I", out, pos + 17, crc32c(bytes(out[pos + CRC_START : end])))
    return bytes(out)


# ------------------------------------------------------------------------------ offsets-log codecs


def check_offsets_codecs(data: bytes) -> str:
    """Property: decode_key / decode_offset_commit_value / decode_group_metadata_value return a
    value or raise RecordDecodeError; parse_subscription_topics never raises."""
    outcome = []
    for fn in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            fn(data)
            outcome.append("ok")
        except RecordDecodeError:
            outcome.append("err")
    topics = parse_subscription_topics(data)
    assert topics is None or all(type(t) is str for t in topics)
    return "/".join(outcome)


# ------------------------------------------------------------------------------ segment recovery


def make_segment_batches(sizes: list[int], base: int = 0) -> list[bytes]:
    """Valid batches of the given record counts with consecutive offsets from `base`."""
    out = []
    nxt = base
    for i, n in enumerate(sizes):
        out.append(build_batch(sample_records(n, seed=i), base_offset=nxt))
        nxt += n
    return out


def expected_recovery(batches: list[bytes], damaged: bytes, touched: set[int], base: int = 0) -> tuple[int, int]:
    """(kept bytes, log end offset) a correct recovery keeps: the longest prefix of the written
    batches that lie wholly in the file, whose verified bytes (batchLength, magic, CRC and the CRC-
    covered part) were not touched, and whose base offsets (not CRC-covered, as in Kafka) still
    ascend. A flipped partitionLeaderEpoch is not damage recovery can see."""
    pos = 0
    nxt = base
    for b in batches:
        end = pos + len(b)
        if end > len(damaged):
            break
        if any(pos + 8 <= t < pos + 12 or pos + 16 <= t < end for t in touched):
            break
        (b_base,) = struct.unpack_from(">q", damaged, pos)
        (last_delta,) = struct.unpack_from(">i", damaged, pos + 23)
        if b_base < nxt or b_base + last_delta - base > 2**31 - 1:
            break
        nxt = b_base + last_delta + 1
        pos = end
    return pos, nxt


def scratch_dir() -> str:
    """A fresh directory for one recovery example (tmpfs when there is one: recovery fsyncs)."""
    parent = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="offsetd-fuzz-", dir=parent)


def check_recovery(root: Path, batches: list[bytes], damaged: bytes) -> tuple[int, int]:
    """Write `damaged` (the concatenated `batches`, then truncated, bit-flipped or extended) as the
    only segment of t-0 under `root`, open it twice and assert that open never raises, keeps
    exactly expected_recovery(), and that a second open changes nothing."""
    from offsetd.storage.log_config import LogConfig
    from offsetd.storage.partition_log import PartitionLog

    original = b"".join(batches)
    touched = {i for i in range(min(len(original), len(damaged))) if original[i] != damaged[i]}
    pdir = root / "t-0"
    pdir.mkdir(parents=True)
    seg = pdir / "00000000000000000000.log"
    seg.write_bytes(damaged)
    want_size, want_end = expected_recovery(batches, damaged, touched)
    config = LogConfig(index_interval_bytes=64)
    first = PartitionLog.open(root, "t", 0, config, 1_700_000_000_000)
    kept = damaged[:want_size]
    try:
        assert (first.size_bytes, first.log_end_offset) == (want_size, want_end), (
            first.size_bytes, first.log_end_offset, want_size, want_end)
        assert first.log_start_offset == 0
        segment = first.active_segment
        assert segment.pread(want_size + 1, 0) == kept
        pos = 0
        for p, h in iter_batches(kept):  # the rebuilt offset index finds every kept batch
            assert p == pos and segment.find_batch(h.base_offset) == p
            pos = p + h.size
        assert pos == want_size
    finally:
        first.close()
    on_disk = seg.read_bytes()
    assert on_disk == kept
    second = PartitionLog.open(root, "t", 0, config, 1_700_000_000_000)
    try:
        assert (second.size_bytes, second.log_end_offset) == (want_size, want_end)
    finally:
        second.close()
    assert seg.read_bytes() == on_disk
    return want_size, want_end
