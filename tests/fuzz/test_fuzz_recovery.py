"""Fuzzing segment recovery (storage/segment_recovery.py via storage/partition_log.py
PartitionLog.open): a segment of valid batches, then truncated, bit-flipped or extended with
garbage, opens without raising, keeps exactly the longest intact prefix of the batches written,
and opening it again changes nothing."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_targets import check_recovery, make_segment_batches, no_hang, scratch_dir

RECOVERY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
batch_sizes = st.lists(st.integers(1, 6), min_size=1, max_size=6)


def _recover(batches: list[bytes], damaged: bytes) -> tuple[int, int]:
    """check_recovery in a fresh scratch directory, removed afterwards."""
    root = Path(scratch_dir())
    try:
        with no_hang():
            return check_recovery(root, batches, damaged)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@RECOVERY
@given(batch_sizes, st.data())
def test_truncated_segment_keeps_the_whole_batches_before_the_cut(sizes: list[int], data: st.DataObject) -> None:
    """A segment cut at any byte keeps every batch that ends at or before the cut, no more."""
    batches = make_segment_batches(sizes)
    blob = b"".join(batches)
    cut = data.draw(st.integers(0, len(blob)))
    size, end = _recover(batches, blob[:cut])
    whole = 0
    offsets = 0
    for b, n in zip(batches, sizes):
        if whole + len(b) > cut:
            break
        whole += len(b)
        offsets += n
    assert (size, end) == (whole, offsets)


@RECOVERY
@given(batch_sizes, st.data())
def test_bit_flips_cut_the_log_at_the_first_damaged_batch(sizes: list[int], data: st.DataObject) -> None:
    """Up to 3 flipped bits anywhere: recovery keeps exactly the batches before the first damaged one."""
    batches = make_segment_batches(sizes)
    blob = bytearray(b"".join(batches))
    for bit in data.draw(st.lists(st.integers(0, len(blob) * 8 - 1), min_size=1, max_size=3, unique=True)):
        blob[bit // 8] ^= 1 << (bit % 8)
    _recover(batches, bytes(blob))


@RECOVERY
@given(batch_sizes, st.data())
def test_a_flip_under_the_crc_drops_that_batch_and_everything_after(sizes: list[int], data: st.DataObject) -> None:
    """One flipped bit in batch i's CRC-covered bytes (or its CRC): exactly batches 0..i-1 stay."""
    batches = make_segment_batches(sizes)
    i = data.draw(st.integers(0, len(batches) - 1))
    start = sum(len(b) for b in batches[:i])
    bit = data.draw(st.integers((start + 17) * 8, (start + len(batches[i])) * 8 - 1))
    blob = bytearray(b"".join(batches))
    blob[bit // 8] ^= 1 << (bit % 8)
    assert _recover(batches, bytes(blob)) == (start, sum(sizes[:i]))


@RECOVERY
@given(batch_sizes, st.one_of(st.binary(min_size=1, max_size=200), st.integers(1, 300).map(bytes)))
def test_garbage_or_zeros_after_the_last_batch_are_cut_off(sizes: list[int], garbage: bytes) -> None:
    """Random bytes or preallocated zeros after the last batch: every batch stays, the tail goes."""
    batches = make_segment_batches(sizes)
    blob = b"".join(batches)
    assert _recover(batches, blob + garbage) == (len(blob), sum(sizes))


@RECOVERY
@given(batch_sizes, st.data())
def test_mixed_damage_never_raises_and_is_idempotent(sizes: list[int], data: st.DataObject) -> None:
    """Truncation + overwrite + garbage: open never raises, keeps the intact prefix, reopens unchanged."""
    batches = make_segment_batches(sizes)
    blob = bytearray(b"".join(batches))
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    if blob and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(blob) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=12))
        blob[at : at + len(chunk)] = chunk
    blob += data.draw(st.binary(max_size=80))
    _recover(batches, bytes(blob))


def test_a_lowered_or_raised_base_offset_is_judged_by_offset_order() -> None:
    """A changed baseOffset (outside the CRC) cuts the log where offsets stop ascending, as in Kafka."""
    batches = make_segment_batches([2, 3, 1])
    blob = bytearray(b"".join(batches))
    lowered = bytearray(blob)
    struct.pack_into(">q", lowered, len(batches[0]), 1)
    assert _recover(batches, bytes(lowered)) == (len(batches[0]), 2)
    raised = bytearray(blob)
    struct.pack_into(">q", raised, 0, 100)
    assert _recover(batches, bytes(raised)) == (len(batches[0]), 102)
