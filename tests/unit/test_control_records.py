"""Transaction marker batches (records/control.py): exact bytes, round trips, malformed markers.

The expected bytes are derived by hand from the marker layout (reference A9) and the magic-v2
batch layout; kafka-python's reader is an independent check that clients see a control record.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch

from offsetd.records.batch import CORRUPT_MESSAGE, InvalidBatch, build_batch, parse_header
from offsetd.records.control import CONTROL_ABORT, CONTROL_COMMIT, build_marker_batch, parse_marker


def _hand_built_marker(pid: int, epoch: int, control_type: int, coordinator_epoch: int, ts: int) -> bytes:
    """The marker batch spelled out field by field."""
    record = (
        b"\x00"  # record attributes
        + b"\x00"  # timestampDelta varint 0
        + b"\x00"  # offsetDelta varint 0
        + b"\x08" + struct.pack(">hh", 0, control_type)  # key length 4 (zigzag 8): version, type
        + b"\x0c" + struct.pack(">hi", 0, coordinator_epoch)  # value length 6 (zigzag 12)
        + b"\x00"  # no headers
    )
    assert len(record) == 16
    body = b"\x20" + record  # record length 16 -> zigzag varint 32
    crc_part = (
        struct.pack(">h", 0x30)  # attributes: transactional | control
        + struct.pack(">i", 0)  # lastOffsetDelta
        + struct.pack(">qq", ts, ts)  # base / max timestamp
        + struct.pack(">qhi", pid, epoch, -1)  # producer id, epoch, base sequence -1
        + struct.pack(">i", 1)  # one record
        + body
    )
    batch_length = 4 + 1 + 4 + len(crc_part)  # leader epoch + magic + crc + the rest
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc32c(crc_part)) + crc_part


@pytest.mark.parametrize("commit,control_type", [(True, CONTROL_COMMIT), (False, CONTROL_ABORT)])
def test_marker_bytes_match_the_hand_derived_layout(commit: bool, control_type: int) -> None:
    built = build_marker_batch(4001, 7, commit, 3, 1_700_000_000_123)
    assert built == _hand_built_marker(4001, 7, control_type, 3, 1_700_000_000_123)
    assert len(built) == 61 + 17
    header = parse_header(built)
    assert (header.attributes, header.base_sequence, header.records_count) == (0x30, -1, 1)
    assert header.is_control and header.is_transactional


def test_kafka_python_reads_a_control_record() -> None:
    batch = DefaultRecordBatch(build_marker_batch(9, 2, False, 11, 5))
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert (record.version, record.type, record.abort) == (0, CONTROL_ABORT, True)
    assert record.value == struct.pack(">hi", 0, 11)


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 1, 2**31 - 1])
def test_round_trip(commit: bool, coordinator_epoch: int) -> None:
    built = build_marker_batch(2**40, 32767, commit, coordinator_epoch, 0)
    expected_type = CONTROL_COMMIT if commit else CONTROL_ABORT
    assert parse_marker(built) == (expected_type, coordinator_epoch)
    # at a position inside a larger buffer, and from a memoryview
    buf = b"\xff" * 13 + built + b"\xee" * 5
    assert parse_marker(buf, 13) == (expected_type, coordinator_epoch)
    assert parse_marker(memoryview(buf), 13) == (expected_type, coordinator_epoch)


def test_unknown_control_type_is_returned_not_rejected() -> None:
    batch = build_batch([(struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 1), 0, ())], attributes=0x30)
    assert parse_marker(batch) == (5, 1)


def _control(key: bytes | None, value: bytes | None) -> bytes:
    return build_batch([(key, value, 0, ())], producer_id=1, producer_epoch=0, attributes=0x30)


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x01", 0, ())]), id="not-control"),
        pytest.param(_control(struct.pack(">hh", 1, 0), struct.pack(">hi", 0, 1)), id="key-version-1"),
        pytest.param(_control(b"\x00\x00\x00", struct.pack(">hi", 0, 1)), id="short-key"),
        pytest.param(_control(None, struct.pack(">hi", 0, 1)), id="null-key"),
        pytest.param(_control(struct.pack(">hh", 0, 1), struct.pack(">hi", 1, 1)), id="value-version-1"),
        pytest.param(_control(struct.pack(">hh", 0, 1), b"\x00\x00\x00"), id="short-value"),
        pytest.param(_control(struct.pack(">hh", 0, 1), None), id="null-value"),
        pytest.param(
            build_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), 0, ())] * 2, attributes=0x30),
            id="two-records",
        ),
        pytest.param(build_marker_batch(1, 0, True, 1, 0)[:70], id="truncated"),
        pytest.param(build_marker_batch(1, 0, True, 1, 0)[:40], id="truncated-header"),
    ],
)
def test_malformed_markers_are_corrupt_message(batch: bytes) -> None:
    with pytest.raises(InvalidBatch) as info:
        parse_marker(batch)
    assert info.value.error_code == CORRUPT_MESSAGE
