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
from offsetd.records.batch import InvalidBatch, build_batch
from offsetd.records.offsets import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value

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


def test_compiled_scan_rejects_a_batch_whose_records_run_past_it():
    batch = bytearray(build_batch([(b"k" * 10, b"v", 0, [])]))
    batch[61 + 4] = 0x7E  # key length 63 (after length, attributes, timestamp and offset deltas) > what is left; the CRC is fixed up below
    from crc32c import crc32c
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidBatch, match="run past its end"):
        scan.scan_key_values(bytes(batch), lambda k, v: None)
