"""Magic-v2 batch header parsing, validation, patching, building and decoding.

kafka-python's DefaultRecordBatchBuilder / DefaultRecordBatch serve as an independent
implementation to cross-check bytes, CRCs and compressed batches.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    InvalidBatch,
    build_batch,
    build_coordinator_batch,
    decode_records,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_leader_epoch,
    validate_batches,
)
from offsetd.records.compression import batch_record_timestamps
from offsetd.records.varint import VarintError, decode_varint, encode_varint, size_of_varint

RECORDS = [
    (b"key-0", b"value-0", 1_700_000_000_000, [("h1", b"x"), ("h2", None)]),
    (None, b"value-1", 1_700_000_000_005, []),
    (b"key-2", None, 1_699_999_999_990, [("trace", b"\x00\x01")]),
]


def kp_batch(
    records=RECORDS,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Build a batch with kafka-python."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 22,
    )
    for i, (k, v, ts, hdrs) in enumerate(records):
        b.append(i, timestamp=ts, key=k, value=v, headers=list(hdrs))
    return bytes(b.build())


def recrc(buf: bytearray) -> bytearray:
    """Recompute the CRC of a single batch after editing CRC-covered header fields."""
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


# ------------------------------------------------------------------ varints


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert len(enc) == size_of_varint(value)
    assert decode_varint(b"\xff" + enc + b"\x00", 1) == (value, 1 + len(enc))


def test_varint_known_encodings() -> None:
    # zig-zag: 0→0, -1→1, 1→2, -64→127, 64→128 (two bytes)
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"


def test_varint_truncated_and_overlong() -> None:
    with pytest.raises(VarintError):
        decode_varint(b"\x80", 0)
    with pytest.raises(VarintError):
        decode_varint(b"\xff" * 11, 0)


# ------------------------------------------------------------------ header parse / build


def test_build_batch_is_byte_identical_to_kafka_python() -> None:
    ours = build_batch(RECORDS, partition_leader_epoch=0)  # kafka-python writes epoch 0
    assert ours == kp_batch()


def test_build_batch_idempotent_fields_match_kafka_python() -> None:
    ours = build_batch(
        RECORDS, producer_id=4242, producer_epoch=3, base_sequence=17, partition_leader_epoch=0
    )
    assert ours == kp_batch(producer_id=4242, producer_epoch=3, base_sequence=17)


@pytest.mark.parametrize("producer_id, producer_epoch, attributes", [(-1, -1, 0), (4242, 3, TRANSACTIONAL_MASK)])
def test_coordinator_batches_are_build_batch_s_bytes(producer_id: int, producer_epoch: int, attributes: int) -> None:
    """The commit path's lean builder writes exactly what build_batch writes for its records (one
    timestamp, no headers, tombstones, a value of two-byte varint length), plain or transactional."""
    records = [(b"k1", b"v1", True), (b"key2", None, True), (b"k" * 200, b"v" * 20_000, False)]
    ours = build_coordinator_batch(records, 1_700_000_000_000, producer_id, producer_epoch, attributes)
    assert ours == build_batch([(k, v, 1_700_000_000_000, []) for k, v, _ in records], producer_id=producer_id,
                               producer_epoch=producer_epoch, attributes=attributes)
    assert [(r.key, r.value) for r in decode_records(ours)] == [(k, v) for k, v, _ in records]
    with pytest.raises(ValueError):
        build_coordinator_batch([], 0)


def test_parse_header_of_kafka_python_batch() -> None:
    raw = kp_batch(producer_id=7, producer_epoch=2, base_sequence=100)
    h = parse_header(raw)
    kb = DefaultRecordBatch(raw)
    assert h.base_offset == 0
    assert h.size == len(raw) == kb.size_in_bytes
    assert h.magic == 2
    assert h.crc == kb.crc
    assert h.attributes == 0 and h.compression == 0 and h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control
    assert h.last_offset_delta == 2 and h.last_offset == 2 and h.next_offset == 3
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_005
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 100)
    assert h.last_sequence == 102
    assert h.records_count == 3


def test_parse_header_too_short() -> None:
    with pytest.raises(InvalidBatch) as exc:
        parse_header(b"\x00" * 60)
    assert exc.value.error_code == CORRUPT_MESSAGE


def test_kafka_python_reads_our_batch() -> None:
    raw = build_batch(RECORDS, base_offset=1000)
    kb = DefaultRecordBatch(raw)
    assert kb.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb]
    assert got == [
        (1000, 1_700_000_000_000, b"key-0", b"value-0", [("h1", b"x"), ("h2", None)]),
        (1001, 1_700_000_000_005, None, b"value-1", []),
        (1002, 1_699_999_999_990, b"key-2", None, [("trace", b"\x00\x01")]),
    ]


def test_decode_records_of_kafka_python_batch() -> None:
    raw = bytearray(kp_batch())
    patch_base_offset(raw, 0, 500)
    recs = decode_records(bytes(raw))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (500, 1_700_000_000_000, b"key-0", b"value-0", [("h1", b"x"), ("h2", None)]),
        (501, 1_700_000_000_005, None, b"value-1", []),
        (502, 1_699_999_999_990, b"key-2", None, [("trace", b"\x00\x01")]),
    ]


def test_record_timestamps_matches_decode_records() -> None:
    recs = [(None if i % 3 else b"k" * i, b"v" * (i * 37 % 300), 1_000 + (i * 7919) % 5000 - 2500, [("h", b"x")] * (i % 2))
            for i in range(200)]
    raw = bytearray(build_batch(recs))
    patch_base_offset(raw, 0, 10_000)
    full = [(r.offset, r.timestamp) for r in decode_records(bytes(raw))]
    assert batch_record_timestamps(bytes(raw)) == full
    assert full[0] == (10_000, recs[0][2]) and len(full) == 200


def test_decode_log_append_time_uses_max_timestamp() -> None:
    raw = bytearray(build_batch(RECORDS, attributes=TIMESTAMP_TYPE_MASK))
    # Broker-side LogAppendTime: maxTimestamp is the append time (CRC-covered, so re-CRC).
    struct.pack_into(">q", raw, 35, 1_800_000_000_000)
    recrc(raw)
    assert validate_batches(bytes(raw), 1 << 20)[0].timestamp_type == 1
    assert {r.timestamp for r in decode_records(bytes(raw))} == {1_800_000_000_000}


def test_decode_rejects_malformed_records() -> None:
    raw = bytearray(build_batch([(b"k", b"v", 1, [])]))
    raw[61] = 0x7E  # record length varint now 63: overruns the batch
    with pytest.raises(InvalidBatch) as exc:
        decode_records(bytes(raw))
    assert exc.value.error_code == CORRUPT_MESSAGE


def test_build_batch_refuses_compression_and_empty() -> None:
    with pytest.raises(ValueError):
        build_batch(RECORDS, attributes=1)
    with pytest.raises(ValueError):
        build_batch([])


def test_transactional_flag() -> None:
    raw = build_batch(RECORDS, producer_id=1, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL_MASK)
    h = validate_batches(raw, 1 << 20)[0]
    assert h.is_transactional and not h.is_control


# ------------------------------------------------------------------ compressed batches


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_validate_as_opaque(codec: int) -> None:
    recs = [(None, b"x" * 100, 1000 + i, []) for i in range(50)]
    raw = kp_batch(recs, compression=codec)
    (h,) = validate_batches(raw, 1 << 20)
    assert h.compression == codec
    assert h.records_count == 50 and h.last_offset_delta == 49
    assert h.max_timestamp == 1049
    assert h.size == len(raw)
    with pytest.raises(ValueError):
        decode_records(raw)
    # kafka-python still reads it after we patch the base offset (CRC unaffected)
    buf = bytearray(raw)
    patch_base_offset(buf, 0, 7_000)
    assert [r.offset for r in DefaultRecordBatch(bytes(buf))][:2] == [7_000, 7_001]


# ------------------------------------------------------------------ validation


def test_validate_multiple_batches() -> None:
    gz = kp_batch([(None, b"z" * 500, 10, []), (None, b"z" * 500, 11, []), (None, b"z" * 500, 12, [])], compression=1)
    blob = build_batch(RECORDS) + gz + build_batch([(b"a", b"b", 5, [])])
    hs = validate_batches(blob, 1 << 20)
    assert [h.records_count for h in hs] == [3, 3, 1]
    assert [h.compression for h in hs] == [0, 1, 0]
    assert sum(h.size for h in hs) == len(blob)
    # memoryview input works too
    assert len(validate_batches(memoryview(blob), 1 << 20)) == 3


def test_crc_mismatch_is_corrupt_message() -> None:
    raw = bytearray(build_batch(RECORDS))
    raw[-1] ^= 0x01
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(bytes(raw), 1 << 20)
    assert exc.value.error_code == CORRUPT_MESSAGE
    assert "CRC" in str(exc.value)


def test_crc_mismatch_in_second_batch() -> None:
    second = bytearray(build_batch(RECORDS))
    second[30] ^= 0xFF  # baseTimestamp byte: covered by the CRC
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(build_batch(RECORDS) + bytes(second), 1 << 20)
    assert exc.value.error_code == CORRUPT_MESSAGE


def test_patching_offset_and_epoch_keeps_crc_valid() -> None:
    raw = bytearray(build_batch(RECORDS))
    patch_base_offset(raw, 0, 123_456_789_012)
    patch_leader_epoch(raw, 0, 9)
    (h,) = validate_batches(raw, 1 << 20)
    assert h.base_offset == 123_456_789_012
    assert h.partition_leader_epoch == 9


def test_oversize_batch_is_message_too_large() -> None:
    raw = build_batch([(None, b"x" * 2000, 1, [])])
    assert validate_batches(raw, len(raw))  # exactly at the limit is fine
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(raw, len(raw) - 1)
    assert exc.value.error_code == MESSAGE_TOO_LARGE


def test_truncated_batch_is_corrupt() -> None:
    raw = build_batch(RECORDS)
    for cut in (10, 60, len(raw) - 1):
        with pytest.raises(InvalidBatch) as exc:
            validate_batches(raw[:cut], 1 << 20)
        assert exc.value.error_code == CORRUPT_MESSAGE


def test_bad_magic_and_length_are_corrupt() -> None:
    raw = bytearray(build_batch(RECORDS))
    raw[16] = 1
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(bytes(raw), 1 << 20)
    assert exc.value.error_code == CORRUPT_MESSAGE
    raw = bytearray(build_batch(RECORDS))
    struct.pack_into(">i", raw, 8, 10)
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(bytes(raw), 1 << 20)
    assert exc.value.error_code == CORRUPT_MESSAGE


def test_record_count_rules_are_invalid_record() -> None:
    raw = recrc(bytearray(build_batch(RECORDS)))
    struct.pack_into(">i", raw, 57, 0)  # recordsCount 0
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(bytes(recrc(raw)), 1 << 20)
    assert exc.value.error_code == INVALID_RECORD
    raw = bytearray(build_batch(RECORDS))
    struct.pack_into(">i", raw, 23, 5)  # lastOffsetDelta 5 with 3 records
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(bytes(recrc(raw)), 1 << 20)
    assert exc.value.error_code == INVALID_RECORD


def test_empty_blob_is_invalid_record() -> None:
    with pytest.raises(InvalidBatch) as exc:
        validate_batches(b"", 1 << 20)
    assert exc.value.error_code == INVALID_RECORD


# ------------------------------------------------------------------ iteration


def test_iter_batches_stops_at_torn_tail() -> None:
    a = build_batch(RECORDS, base_offset=0)
    b = build_batch(RECORDS, base_offset=3)
    blob = a + b
    assert [(p, h.base_offset) for p, h in iter_batches(blob)] == [(0, 0), (len(a), 3)]
    assert [h.base_offset for _, h in iter_batches(blob[:-1])] == [0]
    assert [h.base_offset for _, h in iter_batches(blob[: len(a) + BATCH_HEADER_SIZE - 1])] == [0]
    assert list(iter_batches(blob, len(a))) and list(iter_batches(b"")) == []


def test_iter_batches_verify_stops_at_bad_crc() -> None:
    a = build_batch(RECORDS, base_offset=0)
    b = bytearray(build_batch(RECORDS, base_offset=3))
    b[-2] ^= 0x10
    blob = a + bytes(b)
    assert len(list(iter_batches(blob))) == 2
    assert [h.base_offset for _, h in iter_batches(blob, verify=True)] == [0]


def test_last_sequence_wraps_at_int32_max() -> None:
    raw = build_batch(RECORDS, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    h = parse_header(raw)
    assert h.last_sequence == 0  # 2^31-2, 2^31-1, 0


def test_client_control_batch_is_invalid_record():
    """Kafka refuses control records from producers (INVALID_RECORD, 87)."""
    from offsetd.records.batch import CONTROL_MASK, InvalidBatch, build_batch, validate_batches

    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 1, [])], attributes=CONTROL_MASK)
    with pytest.raises(InvalidBatch) as info:
        validate_batches(control, 1 << 20)
    assert info.value.error_code == 87 and "control" in str(info.value)


def test_scan_key_values_matches_decode_records_and_skips_txn_and_control():
    """The loader's flat scan sees exactly what the general decoder sees, in order."""
    from offsetd.records.batch import (
        CONTROL_MASK, TRANSACTIONAL_MASK, build_batch, decode_records,
    )
    from offsetd.records.scan import scan_key_values

    records = [(b"k" * (i % 70), None if i % 5 == 0 else b"v" * (i * 3), 1000 + i,
                [("h", b"x")] if i % 7 == 0 else []) for i in range(200)]
    plain = build_batch(records) + build_batch([(None, b"only-value", 5, [])], base_offset=200)
    txn = build_batch([(b"t", b"txn", 1, [])], base_offset=201, producer_id=9, producer_epoch=0,
                      base_sequence=0, attributes=TRANSACTIONAL_MASK)
    control = build_batch([(b"\0\0\0\0", b"\0\0\0\0\0\0", 1, [])], base_offset=202, producer_id=9,
                          producer_epoch=0, attributes=CONTROL_MASK | TRANSACTIONAL_MASK)
    seen: list = []
    count, consumed = scan_key_values(plain + txn + control, lambda k, v: seen.append((k, v)))
    expected = [(r.key, r.value) for r in decode_records(plain[: len(plain) - len(build_batch([(None, b"only-value", 5, [])]))])]
    assert seen == expected + [(None, b"only-value")]
    assert count == 201 and consumed == len(plain + txn + control)


def test_scan_key_values_rejects_corruption_and_stops_at_torn_tail():
    from offsetd.records.batch import InvalidBatch, build_batch
    from offsetd.records.scan import scan_key_values

    batch = build_batch([(b"key", b"value", 1, [])])
    corrupt = bytearray(batch)
    corrupt[-2] ^= 0xFF
    with pytest.raises(InvalidBatch, match="CRC"):
        scan_key_values(bytes(corrupt), lambda k, v: None)
    count, consumed = scan_key_values(batch + batch[:30], lambda k, v: None)
    assert (count, consumed) == (1, len(batch))
