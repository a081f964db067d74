"""Transaction markers: the control batches that end a transaction on a data partition (A9).

A marker is a magic-v2 batch with attributes 0x30 (transactional | control), uncompressed, the
producer's id and epoch, baseSequence -1 and exactly one record whose

    key   = int16 version (0) | int16 type (0 ABORT, 1 COMMIT)
    value = int16 version (0) | int32 coordinatorEpoch

Pure: no I/O.
"""

from __future__ import annotations

import struct

from offsetd.records.batch import (
    CONTROL_MASK,
    CORRUPT_MESSAGE,
    TRANSACTIONAL_MASK,
    InvalidBatch,
    build_batch,
    decode_records,
    parse_header,
)

__all__ = ["CONTROL_ABORT", "CONTROL_COMMIT", "MARKER_ATTRIBUTES", "build_marker_batch", "parse_marker"]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK
_CONTROL_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def build_marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """One COMMIT or ABORT marker batch at base offset 0 (the log assigns the real offset)."""
    key = _KEY.pack(_CONTROL_VERSION, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _VALUE.pack(_CONTROL_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, timestamp_ms, ())],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        attributes=MARKER_ATTRIBUTES,
    )


def parse_marker(batch: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(control type, coordinator epoch) of the marker batch at `pos`.

    Raises InvalidBatch(CORRUPT_MESSAGE) when the batch is not a control batch, holds other than
    one record, or its key/value do not have the version-0 layout. Unknown control types are
    returned as they are (readers skip them).
    """
    header = parse_header(batch, pos)
    if not header.is_control:
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch at offset {header.base_offset} is not a control batch")
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    records = decode_records(mv[pos : pos + header.size])
    if len(records) != 1:
        raise InvalidBatch(CORRUPT_MESSAGE, f"control batch holds {len(records)} records, not 1")
    key, value = records[0].key, records[0].value
    if key is None or len(key) != _KEY.size:
        raise InvalidBatch(CORRUPT_MESSAGE, "control record key is not int16 version + int16 type")
    version, control_type = _KEY.unpack(key)
    if version != _CONTROL_VERSION:
        raise InvalidBatch(CORRUPT_MESSAGE, f"control record key version {version} is not 0")
    # The value may carry trailing bytes in later versions; version 0 is exactly 6 bytes.
    if value is None or len(value) != _VALUE.size:
        raise InvalidBatch(CORRUPT_MESSAGE, "control record value is not int16 version + int32 epoch")
    value_version, coordinator_epoch = _VALUE.unpack(value)
    if value_version != _CONTROL_VERSION:
        raise InvalidBatch(CORRUPT_MESSAGE, f"control record value version {value_version} is not 0")
    return control_type, coordinator_epoch
