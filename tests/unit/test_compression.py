"""records/compression.py: every codec's payload decompressed (batches built by kafka-python's own
codecs), both snappy framings, LogAppendTime, and corrupt or unknown payloads rejected."""

from __future__ import annotations

import gzip

import pytest
from compressed_batches import CODECS, kp_batch, log_append_time, recompress, snappy_variant

from offsetd.records.batch import CORRUPT_MESSAGE, BATCH_HEADER_SIZE, InvalidBatch, build_batch
from offsetd.records.compression import XERIAL_MAGIC, batch_record_timestamps, decompress

T0 = 1_700_000_000_000


@pytest.mark.parametrize("name", list(CODECS))
def test_record_timestamps_of_every_codec(name: str) -> None:
    stamps = [T0 + 10 * i for i in range(100)]
    stamps[40] = T0 - 5  # out of order inside the batch
    batch = kp_batch(CODECS[name], stamps, base_offset=1000)
    assert batch_record_timestamps(batch) == [(1000 + i, ts) for i, ts in enumerate(stamps)]


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_decompress_gives_the_uncompressed_records_section(name: str) -> None:
    stamps = [T0 + i for i in range(50)]
    plain = kp_batch(0, stamps)
    packed = kp_batch(CODECS[name], stamps)
    assert packed[BATCH_HEADER_SIZE:] != plain[BATCH_HEADER_SIZE:]
    assert decompress(CODECS[name], packed[BATCH_HEADER_SIZE:]) == plain[BATCH_HEADER_SIZE:]


def test_java_clients_xerial_snappy_framing() -> None:
    # kafka-python writes the same Xerial framing as Java clients
    assert kp_batch(2, [T0, T0 + 1, T0 + 2])[BATCH_HEADER_SIZE:].startswith(XERIAL_MAGIC)


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_snappy_raw_block_and_multi_block_xerial(framing: str) -> None:
    stamps = [T0 + 7 * i for i in range(60)]
    batch = snappy_variant(stamps, framing, block=50)  # many 50-byte Xerial blocks
    assert batch[BATCH_HEADER_SIZE:].startswith(XERIAL_MAGIC) == (framing == "xerial")
    assert batch_record_timestamps(batch) == list(enumerate(stamps))


@pytest.mark.parametrize("name", list(CODECS))
def test_log_append_time_stamps_every_record_with_the_batch_time(name: str) -> None:
    batch = log_append_time(kp_batch(CODECS[name], [T0, T0 + 1, T0 + 2]), T0 + 999)
    assert batch_record_timestamps(batch) == [(0, T0 + 999), (1, T0 + 999), (2, T0 + 999)]


def test_matches_the_uncompressed_builder() -> None:
    batch = build_batch([(b"k", b"v" * 300, T0 + 3, []), (None, None, T0, [("h", b"x")])], base_offset=7)
    assert batch_record_timestamps(batch) == [(7, T0 + 3), (8, T0)]


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_corrupt_payload_is_corrupt_message(name: str) -> None:
    good = kp_batch(CODECS[name], [T0 + i for i in range(20)])
    payload = bytearray(good[BATCH_HEADER_SIZE:])
    if name == "snappy":  # Xerial: declare a block longer than the data
        payload[16:20] = b"\x7f\xff\xff\xff"
    else:
        payload = payload[: len(payload) // 2]
    with pytest.raises(InvalidBatch) as err:
        batch_record_timestamps(recompress(good, CODECS[name], bytes(payload)))
    assert err.value.error_code == CORRUPT_MESSAGE


def test_garbage_and_unknown_codec_are_corrupt_message() -> None:
    plain = kp_batch(0, [T0])
    for codec, payload in ((1, b"not gzip at all"), (2, b"\xff\xff\xff\xff\xff"), (3, b"xx"), (4, b"yy"),
                           (5, gzip.compress(plain[BATCH_HEADER_SIZE:]))):
        with pytest.raises(InvalidBatch) as err:
            batch_record_timestamps(recompress(plain, codec, payload))
        assert err.value.error_code == CORRUPT_MESSAGE, codec


def test_decompressed_records_that_overrun_are_corrupt_message() -> None:
    plain = kp_batch(0, [T0, T0 + 1])
    truncated = gzip.compress(plain[BATCH_HEADER_SIZE:-3])
    with pytest.raises(InvalidBatch):
        batch_record_timestamps(recompress(plain, 1, truncated))
