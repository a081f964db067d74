"""Fuzzing the magic-v2 batch parsers (records/batch.py) and the offsets-log record walkers
(records/scan.py, records/log_walker.py iter_log_records): valid batches parse back to what was
built; damaged ones are refused with the documented error (InvalidBatch with a Kafka error code,
RecordDecodeError), and a flipped bit under the CRC is always refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_strategies import bit_flips, mutations, record_tuples
from fuzz_targets import (
    check_batches,
    check_offsets_log_scan,
    check_one_batch_records,
    fix_crc,
    no_hang,
)
from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    CORRUPT_MESSAGE,
    CRC_START,
    InvalidBatch,
    build_batch,
    decode_records,
    validate_batches,
)
from offsetd.records.compression import batch_record_timestamps
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.log_walker import iter_log_records
from offsetd.records.scan import scan_columns, scan_key_values

FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
records_lists = st.lists(record_tuples, min_size=1, max_size=5)


@st.composite
def blobs(draw: st.DrawFn) -> tuple[list[list[tuple]], bytes]:
    """(records per batch, concatenated valid batches with consecutive offsets)."""
    batches = draw(st.lists(records_lists, min_size=1, max_size=3))
    out = []
    nxt = draw(st.integers(0, 2**40))
    for recs in batches:
        out.append(build_batch(recs, base_offset=nxt))
        nxt += len(recs)
    return batches, b"".join(out)


@FAST
@given(blobs())
def test_built_batches_validate_and_decode_to_their_records(sample: tuple[list[list[tuple]], bytes]) -> None:
    """Built batches validate; every decoder gives back their keys, values, headers, timestamps, offsets."""
    batches, blob = sample
    headers = validate_batches(blob, 1 << 20)
    assert [h.records_count for h in headers] == [len(b) for b in batches]
    assert check_batches(blob) == "valid"
    pos = 0
    flat = []
    for h, recs in zip(headers, batches):
        one = blob[pos : pos + h.size]
        decoded = decode_records(one)
        assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
            (k, v, ts, list(hs)) for k, v, ts, hs in recs]
        assert [r.offset for r in decoded] == list(range(h.base_offset, h.base_offset + len(recs)))
        assert batch_record_timestamps(one) == [(r.offset, r.timestamp) for r in decoded]
        flat += [(r.offset, r.timestamp, r.key, r.value) for r in decoded]
        pos += h.size
    walked = list(iter_log_records(blob, verify=True))
    assert [(o, ts, k, v) for o, ts, k, v, _pid in walked] == flat


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blobs(), st.data())
def test_a_bit_flip_under_the_crc_is_always_refused(sample: tuple[list[list[tuple]], bytes], data: st.DataObject) -> None:
    """Up to 3 flipped bits under a batch's CRC (or in it) are refused by every verifying parser."""
    _batches, blob = sample
    first_size = struct.unpack_from(">i", blob, 8)[0] + 12
    region = blob[17:first_size]  # CRC field + everything it covers, first batch
    flipped_region = data.draw(bit_flips(region))
    damaged = blob[:17] + flipped_region + blob[first_size:]
    with no_hang():
        try:
            validate_batches(damaged, 1 << 20)
        except InvalidBatch as exc:
            assert exc.error_code == CORRUPT_MESSAGE
            assert "CRC" in exc.message
        else:
            raise AssertionError("a bit flip under the CRC was accepted")
        try:
            scan_key_values(damaged, lambda k, v: None)
        except InvalidBatch as exc:
            assert exc.error_code == CORRUPT_MESSAGE
        else:
            raise AssertionError("scan_key_values accepted a corrupt batch")
        try:
            list(iter_log_records(damaged, verify=True))
        except RecordDecodeError:
            pass
        else:
            raise AssertionError("iter_log_records(verify=True) accepted a corrupt batch")


@FAST
@given(blobs(), st.data())
def test_mutated_batches_give_headers_or_invalid_batch(sample: tuple[list[list[tuple]], bytes], data: st.DataObject) -> None:
    """Mutated batches: only documented errors from every parser; a strict prefix never validates."""
    _batches, blob = sample
    mutated = data.draw(mutations(blob))
    with no_hang():
        outcome = check_batches(mutated)
        check_one_batch_records(mutated)
        check_offsets_log_scan(mutated)
    boundaries = {0}
    pos = 0
    while pos < len(blob):
        pos += struct.unpack_from(">i", blob, pos + 8)[0] + 12
        boundaries.add(pos)
    if len(mutated) < len(blob) and blob.startswith(mutated) and len(mutated) not in boundaries - {0}:
        assert outcome == "rejected", f"{len(mutated)}-byte prefix of a {len(blob)}-byte blob validated"


@FAST
@given(st.lists(record_tuples, min_size=1, max_size=4), st.data())
def test_corrupt_records_behind_a_valid_crc_are_invalid_batch(records: list[tuple], data: st.DataObject) -> None:
    """Damaged records behind a recomputed CRC: records or InvalidBatch(CORRUPT_MESSAGE), nothing else."""
    batch = build_batch(records)
    body = data.draw(mutations(batch[BATCH_HEADER_SIZE:])) if len(batch) > BATCH_HEADER_SIZE else b""
    damaged = bytearray(batch[:BATCH_HEADER_SIZE] + body)
    struct.pack_into(">i", damaged, 8, len(damaged) - 12)
    damaged = fix_crc(damaged)
    with no_hang():
        check_batches(bytes(damaged))
        check_one_batch_records(bytes(damaged))
        check_offsets_log_scan(bytes(damaged))


@FAST
@given(st.binary(max_size=160))
def test_random_bytes_give_documented_errors_only(data: bytes) -> None:
    """Random bytes, raw or framed as a CRC-valid batch: each parser raises only its documented error."""
    with no_hang():
        check_batches(data)
        check_one_batch_records(data)
        check_offsets_log_scan(data)
        if len(data) >= BATCH_HEADER_SIZE:
            framed = bytearray(data)
            struct.pack_into(">qiib", framed, 0, 0, len(framed) - 12, -1, 2)
            framed = fix_crc(framed)
            check_batches(framed)
            check_one_batch_records(framed)
            check_offsets_log_scan(framed)


def test_every_strict_prefix_of_a_batch_is_refused_and_every_crc_bit_flip_detected() -> None:
    """No strict prefix of a batch validates; every single-bit flip from the CRC on is CORRUPT_MESSAGE."""
    batch = build_batch([(b"k", b"v" * 20, 5, [("h", b"x")]), (None, None, 9, []), (b"", b"", 7, [("", None)])])
    with no_hang():
        for n in range(len(batch)):
            try:
                validate_batches(batch[:n], 1 << 20)
            except InvalidBatch as exc:
                assert exc.error_code in (CORRUPT_MESSAGE, 87)  # 87: INVALID_RECORD (empty blob)
            else:
                raise AssertionError(f"{n}-byte prefix validated")
        for bit in range(17 * 8, len(batch) * 8):
            damaged = bytearray(batch)
            damaged[bit // 8] ^= 1 << (bit % 8)
            try:
                validate_batches(bytes(damaged), 1 << 20)
            except InvalidBatch as exc:
                assert exc.error_code == CORRUPT_MESSAGE, bit
            else:
                raise AssertionError(f"flip of bit {bit} accepted")
    assert CRC_START == 21


def test_a_negative_records_count_is_refused_not_read_as_an_empty_batch() -> None:
    """A negative recordsCount is refused (found by `make fuzz`); recordsCount 0 stays an empty batch."""
    for count in (-1, -(2**31), 0):
        header = bytearray(build_batch([(None, b"v", 0, [])])[:BATCH_HEADER_SIZE])
        struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12)
        struct.pack_into(">i", header, 57, count)
        batch = fix_crc(header)
        if count == 0:
            assert decode_records(batch) == [] and batch_record_timestamps(batch) == []
            assert list(iter_log_records(batch, verify=True)) == []
            continue
        for fn in (decode_records, batch_record_timestamps):
            try:
                fn(batch)
            except InvalidBatch as exc:
                assert exc.error_code == CORRUPT_MESSAGE
            else:
                raise AssertionError(f"{fn.__name__} read recordsCount {count} as an empty batch")
        try:
            list(iter_log_records(batch, verify=True))
        except RecordDecodeError as exc:
            assert "recordsCount" in str(exc)
        else:
            raise AssertionError(f"iter_log_records read recordsCount {count} as an empty batch")


@pytest.mark.parametrize("records_area, count", [
    (bytes.fromhex("00000000010102"), 1),  # a record's header section cut short by the batch's end
    (bytes.fromhex("0200000080808080808080808002"), 1),  # a key length of 2**63 or more
    (b"", -1),  # a negative recordsCount
])
def test_the_offsets_log_scanners_refuse_malformed_records_as_invalid_batch(records_area: bytes, count: int) -> None:
    """Found by `make fuzz`: records/scan.py (compiled) let VarintError / ValueError escape and read a
    negative count as an empty batch; both scanners now raise InvalidBatch(CORRUPT_MESSAGE)."""
    header = bytearray(build_batch([(None, b"v", 0, [])])[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(records_area))
    struct.pack_into(">i", header, 57, count)
    batch = fix_crc(bytes(header) + records_area)
    with pytest.raises(InvalidBatch) as scanned:
        scan_key_values(batch, lambda key, value: None)
    assert scanned.value.error_code == CORRUPT_MESSAGE
    with pytest.raises(InvalidBatch) as columns:
        scan_columns(batch, 0, 1 << 30, {}, [], [], [])
    assert columns.value.error_code == CORRUPT_MESSAGE
