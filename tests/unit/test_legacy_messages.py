"""Message formats v0/v1 (records/legacy_messages.py) and the Produce v0-2 / Fetch v0-3 schemas.

Byte vectors are written by hand from the published layouts (Kafka's message-set format and
the ProduceRequest/FetchRequest JSON schemas' field versions); kafka-python's record classes,
which nobody here wrote, are the independent reader and writer of the other side.
"""

from __future__ import annotations

import struct

import cramjam
import lz4.frame
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from offsetd.broker.fetch_down_convert import as_v3_request, convert_response, message_format
from offsetd.protocol.codec import decode_body, request_class
from offsetd.protocol.encoder import encode_response
from offsetd.records.batch import InvalidBatch, build_batch, decode_records, parse_header, validate_batches
from offsetd.records.legacy_messages import (
    UNSUPPORTED_COMPRESSION_TYPE,
    _message,
    batch_records,
    build_message_set,
    down_convert,
    fit_to_size,
    flatten,
    parse_message_set,
    up_convert,
    xxh32,
)

T = "000174"  # the string "t"
NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
TS = 1_700_000_000_000  # 0x0000018bcfe56800

# magic 0, key "k", value "v": offset, size 16, crc, magic 0, attributes 0, key, value
MAGIC0 = ("0000000000000007" + "00000010" + "1fecd70a" + "00" + "00" + "00000001" + "6b" + "00000001" + "76")
# magic 1, null key, value "v1", CreateTime TS: size 24, crc, magic 1, attributes 0, timestamp, key -1, value
MAGIC1 = ("0000000000000000" + "00000018" + "6a5500fb" + "01" + "00" + "0000018bcfe56800" + "ffffffff"
          + "00000002" + "7631")


def _v2(data: bytes) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of v2 batches, read by kafka-python."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert isinstance(batch, DefaultRecordBatch)
        out += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    return out


def _legacy(data: bytes) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
    """(offset, key, value, timestamp) of a v0/v1 message set, read by kafka-python."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    return out


def _kp_message_set(magic: int, codec: int, rows: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    """A message set as kafka-python's old producers write it."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(rows):
        builder.append(i, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


ROWS = [(b"k0", b"v0" * 40, TS), (None, b"v1" * 40, TS + 10), (b"k2", None, TS + 5), (b"", b"", TS + 30)]


# ------------------------------------------------------------------------------ hand vectors


def test_magic0_message_by_hand():
    (m,) = parse_message_set(bytes.fromhex(MAGIC0))
    assert (m.offset, m.magic, m.attributes, m.timestamp, m.key, m.value) == (7, 0, 0, -1, b"k", b"v")
    batch = up_convert(bytes.fromhex(MAGIC0))
    (h,) = validate_batches(batch, 1 << 20)
    assert (h.compression, h.timestamp_type, h.base_timestamp, h.max_timestamp, h.producer_id) == (0, 0, -1, -1, -1)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(batch)] == [(0, b"k", b"v", -1)]


def test_magic1_message_by_hand_and_built_the_same():
    (m,) = parse_message_set(bytes.fromhex(MAGIC1))
    assert (m.magic, m.timestamp, m.key, m.value) == (1, TS, None, b"v1")
    assert build_message_set([(0, None, b"v1", TS)], magic=1).hex() == MAGIC1
    assert build_message_set([(7, b"k", b"v", TS)], magic=0).hex() == MAGIC0  # no timestamp in v0
    assert _v2(up_convert(bytes.fromhex(MAGIC1))) == [(0, None, b"v1", TS)]


@pytest.mark.parametrize("vector", [MAGIC0, MAGIC1])
def test_a_bad_crc_is_corrupt_message(vector):
    data = bytearray.fromhex(vector)
    data[-1] ^= 1
    with pytest.raises(InvalidBatch) as err:
        up_convert(bytes(data))
    assert err.value.error_code == 2 and "CRC" in str(err.value)


def test_a_bad_crc_inside_a_compressed_wrapper_is_corrupt_message():
    inner = bytearray(build_message_set([(0, b"k", b"v", TS), (1, b"k", b"w", TS)], magic=1))
    inner[-1] ^= 1
    wrapper = _message(1, 1, GZIP, TS, None, bytes(cramjam.gzip.compress(bytes(inner))))
    with pytest.raises(InvalidBatch) as err:
        up_convert(wrapper)
    assert err.value.error_code == 2


@pytest.mark.parametrize("inner_magic,inner_codec", [(0, NONE), (1, GZIP)])
def test_a_wrapper_of_another_magic_or_nested_compression_is_invalid_record(inner_magic, inner_codec):
    """Kafka's validator: an inner message's magic must be its wrapper's, and it may not be compressed."""
    inner = _message(0, inner_magic, inner_codec, TS, None, bytes.fromhex(MAGIC1) if inner_codec else b"v")
    wrapper = _message(0, 1, GZIP, TS, None, bytes(cramjam.gzip.compress(inner)))
    with pytest.raises(InvalidBatch) as err:
        up_convert(wrapper)
    assert err.value.error_code == 87


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_truncated_message_set_is_corrupt_message(cut):
    with pytest.raises(InvalidBatch) as err:
        up_convert(bytes.fromhex(MAGIC1)[:-cut])
    assert err.value.error_code == 2
    assert parse_message_set(bytes.fromhex(MAGIC0 + MAGIC1)[:-cut], partial_tail=True)[0].value == b"v"


def test_zstd_in_message_format_v1_is_unsupported_compression_type():
    wrapper = _message(0, 1, ZSTD, TS, None, bytes(cramjam.zstd.compress(bytes.fromhex(MAGIC1))))
    with pytest.raises(InvalidBatch) as err:
        up_convert(wrapper)
    assert err.value.error_code == UNSUPPORTED_COMPRESSION_TYPE == 76


def test_a_v2_batch_on_an_old_produce_version_passes_unchanged():
    batch = build_batch([(b"k", b"v", TS, ())])
    assert up_convert(batch) is batch


# ------------------------------------------------------------------------------ up-conversion


@pytest.mark.parametrize("magic,codec", [(0, NONE), (0, GZIP), (0, SNAPPY), (1, NONE), (1, GZIP), (1, SNAPPY),
                                         (1, LZ4)])
def test_up_convert_kafka_python_message_sets(magic, codec):
    """One v2 batch with the same codec, keys, null values and timestamps (magic 0: -1)."""
    batch = up_convert(_kp_message_set(magic, codec, ROWS))
    (h,) = validate_batches(batch, 1 << 20)
    assert h.compression == codec and h.records_count == len(ROWS) and h.timestamp_type == 0
    expected = [(i, k, v, ts if magic else -1) for i, (k, v, ts) in enumerate(ROWS)]
    assert _v2(batch) == expected
    assert h.max_timestamp == (TS + 30 if magic else -1)


def test_up_convert_magic0_lz4_with_kafkas_broken_header_checksum():
    """Magic 0 lz4 frames hash the frame's magic bytes into the header checksum (KAFKA-3160):
    both ways round."""
    rows = [(i, b"k%d" % i, b"v%d" % i, -1) for i in range(3)]
    data = build_message_set(rows, magic=0, codec=LZ4)
    (wrapper,) = parse_message_set(data)
    frame = wrapper.value
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF != (xxh32(frame[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):  # a strict lz4 reader refuses it
        lz4.frame.decompress(frame)
    assert _v2(up_convert(data)) == [(o, k, v, -1) for o, k, v, _ in rows]


def test_several_wrappers_and_plain_messages_become_one_batch():
    data = (build_message_set([(0, b"a", b"1", TS), (1, b"b", b"2", TS + 1)], 1, GZIP)
            + build_message_set([(0, b"c", None, TS + 2)], 1)
            + build_message_set([(0, None, b"4", TS + 3)], 1, SNAPPY))
    batch = up_convert(data)
    assert parse_header(batch).compression == SNAPPY  # the last compressed message's codec, as Kafka
    assert _v2(batch) == [(0, b"a", b"1", TS), (1, b"b", b"2", TS + 1), (2, b"c", None, TS + 2), (3, None, b"4", TS + 3)]


def test_a_log_append_time_wrapper_gives_its_timestamp_to_inner_messages():
    inner = build_message_set([(0, b"a", b"1", 5), (1, b"b", b"2", 6)], 1)
    wrapper = _message(1, 1, GZIP | 0x08, TS, None, bytes(cramjam.gzip.compress(inner)))
    assert [(m.timestamp, off) for m, off in flatten(parse_message_set(wrapper))] == [(TS, 0), (TS, 1)]


# ---------------------------------------------------------------------------- down-conversion


def _kp_v2(base_offset: int, codec: int, rows: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(rows):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[("h", b"x")])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_convert_read_by_kafka_python(magic, codec):
    """Offsets, keys, null values and (v1) timestamps survive; headers have nowhere to go."""
    stored = _kp_v2(10, codec, ROWS[:2]) + _kp_v2(12, codec, ROWS[2:])
    if magic == 0 and codec == LZ4:
        converted, _ = down_convert(stored, magic, 10)
        wrappers = parse_message_set(converted)
        assert wrappers[0].codec == LZ4
        got = [(o, m.key, m.value) for m, o in flatten(wrappers)]
        assert got == [(10 + i, k, v) for i, (k, v, _) in enumerate(ROWS)]
        return  # kafka-python reads magic-0 lz4 only with the xxhash package
    converted, first = down_convert(stored, magic, 10)
    expected = [(10 + i, k, v, ts if magic else None) for i, (k, v, ts) in enumerate(ROWS)]
    assert _legacy(converted) == expected
    assert {m.magic for m in parse_message_set(converted)} == {magic}
    # kafka-python leaves a batch uncompressed when compression would not make it smaller
    first_codec = parse_header(stored).compression
    second_codec = parse_header(stored[len(_kp_v2(10, codec, ROWS[:2])):]).compression
    assert first_codec == codec
    wrappers = [first_codec] if first_codec else [NONE, NONE]
    wrappers += [second_codec] if second_codec else [NONE, NONE]
    assert [m.codec for m in parse_message_set(converted)] == wrappers


def test_compressed_wrappers_carry_relative_inner_offsets_in_v1_and_absolute_in_v0():
    stored = _kp_v2(100, GZIP, ROWS)
    for magic, inner_offsets in ((1, [0, 1, 2, 3]), (0, [100, 101, 102, 103])):
        converted, _ = down_convert(stored, magic, 100)
        (wrapper,) = parse_message_set(converted)
        assert wrapper.offset == 103 and wrapper.key is None
        inner = parse_message_set(bytes(cramjam.gzip.decompress(wrapper.value)))
        assert [m.offset for m in inner] == inner_offsets
        if magic:
            assert wrapper.timestamp == TS + 30  # the largest inner timestamp
        assert [o for _, o in flatten([wrapper])] == [100, 101, 102, 103]


def test_uncompressed_records_below_the_fetch_offset_are_dropped_compressed_ones_kept():
    assert [r[0] for r in _legacy(down_convert(_kp_v2(10, NONE, ROWS), 1, 12)[0])] == [12, 13]
    assert [r[0] for r in _legacy(down_convert(_kp_v2(10, GZIP, ROWS), 1, 12)[0])] == [10, 11, 12, 13]


def test_control_batches_are_dropped_and_zstd_is_refused():
    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00" * 6, TS, ())], base_offset=4, attributes=0x30))
    data = bytes(control) + build_batch([(b"k", b"v", TS, ())], base_offset=5)
    assert _legacy(down_convert(data, 1, 4)[0]) == [(5, b"k", b"v", TS)]
    with pytest.raises(InvalidBatch) as err:
        down_convert(_kp_v2(0, ZSTD, ROWS), 1, 0)
    assert err.value.error_code == 76


def test_a_partial_trailing_batch_is_ignored():
    data = _kp_v2(0, NONE, ROWS)
    assert _legacy(down_convert(data + data[:30], 1, 0)[0]) == [(i, k, v, ts) for i, (k, v, ts) in enumerate(ROWS)]


def test_fit_to_size_cuts_or_pads_with_an_overflow_entry():
    # 2 messages of 12 + 24 bytes (crc 4, magic, attributes, timestamp 8, key 4+1, value 4+1)
    converted = build_message_set([(0, b"k", b"v", TS), (1, b"k", b"w", TS)], 1)
    assert len(converted) == 72
    assert fit_to_size(converted, 50, 36) == converted[:50]  # cut mid-message
    assert fit_to_size(converted, 10, 36) == converted[:36]  # at least the first converted batch
    padded = fit_to_size(converted, 100, 36)
    # offset -1 and a length past the end (max(remaining + 1, 61)), cut to the 28 bytes left
    assert padded[:72] == converted and padded[72:] == bytes.fromhex("ffffffffffffffff" + "0000003d") + bytes(16)
    assert _legacy(padded) == [(0, b"k", b"v", TS), (1, b"k", b"w", TS)]
    assert fit_to_size(b"", 100, 0) == b""


def test_round_trip_up_then_down():
    for magic in (0, 1):
        for codec in (NONE, GZIP, SNAPPY, LZ4):
            rows = [(i, b"k%d" % i if i % 2 else None, None if i % 3 == 2 else b"v" * i, TS + i) for i in range(7)]
            stored = bytearray(up_convert(build_message_set(rows, magic, codec)))
            struct.pack_into(">q", stored, 0, 50)
            back = [(o, m.key, m.value, m.timestamp) for m, o in
                    flatten(parse_message_set(down_convert(bytes(stored), magic, 50)[0]))]
            assert back == [(50 + i, k, v, ts if magic else -1) for i, k, v, ts in rows], (magic, codec)


def test_batch_records_of_every_codec():
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        assert [(r.offset, r.key, r.value, r.timestamp) for r in batch_records(_kp_v2(3, codec, ROWS))] == \
            [(3 + i, k, v, ts) for i, (k, v, ts) in enumerate(ROWS)]


def test_xxh32_vectors():
    assert xxh32(b"") == 0x02CC5D05  # the reference implementation's empty-input value
    for data in (b"a" * 3, b"x" * 100, bytes(range(40))):  # lz4's own header checksums
        frame = lz4.frame.compress(data, content_checksum=False, store_size=True)
        assert frame[4] & 0x08 and frame[14] == (xxh32(frame[4:14]) >> 8) & 0xFF
    assert xxh32(bytes(range(40))) != xxh32(bytes(range(1, 41)))


# ------------------------------------------------------------------------------------ schemas


def _req(api_key: int, version: int, hex_body: str):
    return decode_body(request_class(api_key, version), memoryview(bytes.fromhex(hex_body)), 0)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_request_v0_to_v2_by_hand(version):
    # acks int16, timeout_ms int32, [topic_data: name, [partition_data: index int32, records nullable bytes]]
    req = _req(0, version, "ffff" + "00001388" + "00000001" + T + "00000002"
               + "00000003" + "00000002" + "abcd" + "00000004" + "ffffffff")
    assert (req.acks, req.timeout.total_seconds()) == (-1, 5)
    (topic,) = req.topic_data
    assert topic.name == "t" and [(p.index, p.records) for p in topic.partition_data] == [(3, b"\xab\xcd"), (4, None)]


def test_produce_responses_v0_to_v2_by_hand():
    body = {"responses": [{"name": "t", "partition_responses": [
        {"index": 3, "error_code": 0, "base_offset": 9, "log_start_offset": 0}]}]}
    partition = "00000001" + T + "00000001" + "00000003" + "0000" + "0000000000000009"
    assert encode_response(0, 0, 7, body)[8:].hex() == partition
    assert encode_response(0, 1, 7, body)[8:].hex() == partition + "00000000"  # throttle_time_ms
    assert encode_response(0, 2, 7, body)[8:].hex() == partition + "ffffffffffffffff" + "00000000"  # log_append_time


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_request_v0_to_v3_by_hand(version):
    # replica_id, max_wait_ms, min_bytes, [v3: max_bytes], [topics: topic, [partitions: partition,
    # fetch_offset int64, partition_max_bytes]]
    req = _req(1, version, "ffffffff" + "000001f4" + "00000001" + ("00100000" if version == 3 else "")
               + "00000001" + T + "00000001" + "00000002" + "0000000000000011" + "00008000")
    assert (req.replica_id, req.max_wait.total_seconds(), req.min_bytes) == (-1, 0.5, 1)
    (topic,) = req.topics
    assert [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in topic.partitions] == [(2, 17, 32768)]
    current = as_v3_request(req, version)
    assert current.max_bytes == (0x100000 if version == 3 else 2**31 - 1) and current.topics == req.topics
    assert message_format(version) == (0 if version < 2 else 1)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_response_v0_to_v3_down_converted(version):
    """The response the Fetch path encodes (stored v2 bytes) rewritten for the old version:
    [v1+: throttle_time_ms], [responses: topic, [partitions: partition_index, error_code,
    high_watermark, records]]."""
    stored = build_batch([(b"k", b"v", TS, ())], base_offset=17)
    body = {"error_code": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 2, "error_code": 0, "high_watermark": 18, "last_stable_offset": 18, "records": stored}]}]}
    frame = encode_response(1, version, 7, body)
    req = _req(1, version, "ffffffff" + "000001f4" + "00000001" + ("00100000" if version == 3 else "")
               + "00000001" + T + "00000001" + "00000002" + "0000000000000011" + "00008000")
    out = convert_response(frame, req, version)
    magic = message_format(version)
    message = build_message_set([(17, b"k", b"v", TS)], magic)
    records = fit_to_size(message, len(stored), len(message))
    assert len(records) == len(stored) > len(message)  # padded to the stored size, as Kafka
    expected = (("00000000" if version else "") + "00000001" + T + "00000001" + "00000002" + "0000"
                + "0000000000000012" + struct.pack(">i", len(records)).hex() + records.hex())
    assert out[4:8] == frame[4:8] and out[8:].hex() == expected
    assert struct.unpack(">i", out[:4])[0] == len(out) - 4
