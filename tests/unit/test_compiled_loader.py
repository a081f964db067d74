"""The loader's compiled modules (setup.py, mypyc): the build really compiled them, the compiled
code is current, and it behaves exactly like the same source run by the interpreter."""

from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path
from types import ModuleType

import pytest

import offsetd.coordinator.offsets_table as offsets_table
import offsetd.records.scan as scan
from offsetd.records.batch import TRANSACTIONAL_MASK, InvalidBatch, build_batch
from offsetd.records.log_walker import iter_log_records
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import OffsetCommitKey, encode_key, encode_value

COMPILED = [scan, offsets_table]


def _source(module: ModuleType) -> Path:
    return Path(module.__file__).with_name(module.__name__.rsplit(".", 1)[1] + ".py")


def _interpreted(module: ModuleType) -> ModuleType:
    """The same source file loaded as plain Python under another name."""
    spec = importlib.util.spec_from_file_location(module.__name__ + "_interpreted", _source(module))
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


@pytest.mark.parametrize("module", COMPILED, ids=lambda m: m.__name__)
def test_module_is_compiled_and_current(module: ModuleType):
    if os.environ.get("OFFSETD_PURE_PYTHON"):
        assert module.__file__.endswith(".py")
        return
    assert module.__file__.endswith(".so"), f"{module.__name__} is not compiled: run `make test` (setup.py)"
    # An editable install keeps the .so beside the .py and Python prefers the .so: a stale one
    # would silently run old code.
    assert Path(module.__file__).stat().st_mtime >= _source(module).stat().st_mtime, \
        f"{module.__name__}: the .py is newer than its compiled .so; reinstall (make test rebuilds)"


def _log(rng: random.Random) -> bytes:
    """Batches of commits, tombstones, a key v0, and a record with headers."""
    out = b""
    offset = 0
    for b in range(20):
        records = []
        for _ in range(rng.randint(1, 30)):
            key = encode_key(OffsetCommitKey(f"g{rng.randint(0, 4)}", f"t{rng.randint(0, 3)}", rng.randint(0, 9)))
            if rng.random() < 0.2:
                key = b"\x00\x00" + key[2:]
            value = None if rng.random() < 0.25 else encode_value(
                OffsetCommitValue(rng.randint(0, 10**12), -1, "m" * rng.randint(0, 300), 1000 + b, -1))
            records.append((key, value, [("h", b"v")] if rng.random() < 0.05 else []))
        batch = build_batch([(k, v, 1000 + b, h) for k, v, h in records], base_offset=offset)
        offset += len(records)
        out += batch
    return out


def _collect(scan_module: ModuleType, table_module: ModuleType, log: bytes) -> tuple:
    other: list = []
    groups: list = []
    table = table_module.OffsetsTable(lambda k, v: other.append((k, v)), groups.append)
    seen = scan_module.scan_key_values(log, table.replay)
    return seen, table.by_group, other, groups


def test_compiled_and_interpreted_agree():
    rng = random.Random(7)
    log = _log(rng) + encode_key(OffsetCommitKey("torn", "t", 0))  # a torn tail, then
    compiled = _collect(scan, offsets_table, log)
    interpreted = _collect(_interpreted(scan), _interpreted(offsets_table), log)
    assert compiled == interpreted
    (count, consumed), by_group, _, groups = compiled
    assert count > 100 and consumed < len(log) and by_group and groups


def _columns(scan_module: ModuleType, log: bytes, max_records: int) -> list:
    """scan_columns over the whole log, resuming where it stops, `max_records` at a time."""
    out: list = []
    keys: dict = {}
    pos = 0
    while True:
        ids: list = []
        values: list = []
        runs: list = []
        pos = scan_module.scan_columns(log, pos, max_records, keys, ids, values, runs)
        if not ids:
            return out + [pos, keys]
        out.append((ids, values, runs))


@pytest.mark.parametrize("max_records", [1, 25, 10**9])
def test_compiled_and_interpreted_column_scans_agree(max_records: int):
    log = _log(random.Random(11)) + encode_key(OffsetCommitKey("torn", "t", 0))
    compiled = _columns(scan, log, max_records)
    assert compiled == _columns(_interpreted(scan), log, max_records)
    *chunks, pos, keys = compiled
    assert pos < len(log) and len(keys) > 20
    expected = [(offset, ts, key, value) for offset, ts, key, value, _ in iter_log_records(log)]
    numbered = list(keys)
    got = []
    for ids, values, runs in chunks:
        stamps = [(first + i, ts)
                  for first, count, ts in zip(runs[::3], runs[1::3], runs[2::3]) for i in range(count)]
        got += [(offset, ts, numbered[k], v) for (offset, ts), k, v in zip(stamps, ids, values, strict=True)]
    assert got == expected
    assert sum(len(runs) for _, _, runs in chunks) // 3 == 20  # one run per batch (timestamp delta 0)


def test_column_scan_stops_at_a_transactional_batch_and_encodes_timestamp_deltas_as_runs():
    key = encode_key(OffsetCommitKey("g", "t", 0))
    deltas = build_batch([(key, b"v", 100, []), (key, b"v", 100, []), (key, b"v", 103, []), (key, None, 103, [])],
                         base_offset=5)
    txn = build_batch([(key, b"w", 1, [])], base_offset=9, producer_id=3, producer_epoch=0,
                      attributes=TRANSACTIONAL_MASK)
    ids: list = []
    values: list = []
    runs: list = []
    assert scan.scan_columns(deltas + txn, 0, 10**9, {}, ids, values, runs) == len(deltas)
    assert ids == [0, 0, 0, 0] and values == [b"v", b"v", b"v", None]
    assert runs == [5, 2, 100, 7, 2, 103]


def test_compiled_scan_rejects_a_batch_whose_records_run_past_it():
    batch = bytearray(build_batch([(b"k" * 10, b"v", 0, [])]))
    batch[61 + 4] = 0x7E  # key length 63 (after length, attributes, timestamp and offset deltas) > what is left; the CRC is fixed up below
    from crc32c import crc32c
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidBatch, match="run past its end"):
        scan.scan_key_values(bytes(batch), lambda k, v: None)
