"""The crash-safe swap of a run of sealed segments for the log cleaner's cleaned ones.

The new files are written and fsynced first as `<base>.log.cleaned` (+ `.index.cleaned`,
`.timeindex.cleaned`, and `.txnindex.cleaned` when the run has aborted transactions). Then:

1. the manifest `offsetd-cleaner-swap` (old and new base offsets; written tmp + fsync + rename)
   is the commit point;
2. every `.cleaned` file is renamed to `.swap`;
3. while every new `.log` is still a `.swap`, the old segments' files are deleted;
4. every `.swap` is renamed to its final name, the `.log` first (so "every new .log is a .swap"
   proves step 4 has not begun);
5. the manifest is removed.

The directory is fsynced between steps. On open, `recover_interrupted_swap` finishes a swap whose
manifest exists (the swap is the truth once it does) and deletes `.cleaned` / `.swap` files no
manifest names (an uncommitted cleaning), so a crash at any point leaves either all old or all
new segments. Plain synchronous file I/O on one partition directory.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from offsetd.storage.durable_file import fsync_dir as _fsync_dir
from offsetd.storage.durable_file import write_durably as _write_durably
from offsetd.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, Segment
from offsetd.storage.txn_index import TXNINDEX_SUFFIX

log = logging.getLogger("offsetd.storage")

SWAP_MANIFEST_FILE = "offsetd-cleaner-swap"
CLEANED_SUFFIX = ".cleaned"  # a cleaned segment file not yet committed
SWAP_SUFFIX = ".swap"  # a committed cleaned segment file whose old counterpart may still exist
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)  # the files a cleaned segment must have
_SWAP_SUFFIXES = SEGMENT_SUFFIXES + (TXNINDEX_SUFFIX,)  # a new segment may have no .txnindex


def _swap_step(label: str) -> None:
    """Called after every file operation of a segment swap; tests replace it to inject crashes."""


def _name(pdir: Path, base: int, suffix: str) -> Path:
    return pdir / f"{base:020d}{suffix}"


def missing_cleaned_file(pdir: Path, new_bases: list[int]) -> str | None:
    """The name of the first cleaned segment file that should be there and is not, else None."""
    for base in new_bases:
        for suffix in SEGMENT_SUFFIXES:
            path = _name(pdir, base, suffix + CLEANED_SUFFIX)
            if not path.exists():
                return path.name
    return None


def check_replacement(pdir: Path, segments: list[Segment], old: list[Segment], new_bases: list[int]) -> int:
    """Index in `segments` of the run `old` a cleaning may replace by segments based at
    `new_bases` (PartitionLog.replace_segments' rules); ValueError when it may not."""
    n = len(old)
    i = next((k for k, s in enumerate(segments) if s is old[0]), None) if n else None
    if i is None or i + n >= len(segments) or any(
        a is not b for a, b in zip(segments[i : i + n], old)
    ):
        raise ValueError("replace_segments: not a run of this log's sealed segments")
    next_base = segments[i + n].base_offset
    if (
        not new_bases
        or new_bases[0] != old[0].base_offset
        or any(a >= b for a, b in zip(new_bases, new_bases[1:]))
        or new_bases[-1] >= next_base
    ):
        raise ValueError(f"replace_segments: bad new base offsets {new_bases[:5]}...")
    missing = missing_cleaned_file(pdir, list(new_bases))
    if missing:
        raise ValueError(f"replace_segments: {missing} is missing")
    return i


def commit_swap(pdir: Path, old_bases: list[int], new_bases: list[int]) -> None:
    """Write the manifest (the commit point), roll the swap forward and remove the manifest."""
    manifest = json.dumps({"version": 1, "old": old_bases, "new": new_bases}).encode()
    _write_durably(pdir / SWAP_MANIFEST_FILE, manifest)
    _swap_step("manifest")
    _roll_swap_forward(pdir, old_bases, new_bases)
    os.unlink(pdir / SWAP_MANIFEST_FILE)
    _fsync_dir(pdir)
    _swap_step("manifest-removed")


def _roll_swap_forward(pdir: Path, old_bases: list[int], new_bases: list[int]) -> None:
    """Steps 2-4 (after the commit point); idempotent from any intermediate state."""
    for b in new_bases:
        for suffix in _SWAP_SUFFIXES:
            src = _name(pdir, b, suffix + CLEANED_SUFFIX)
            if src.exists():
                os.replace(src, _name(pdir, b, suffix + SWAP_SUFFIX))
                _swap_step("rename-to-swap")
    _fsync_dir(pdir)
    _swap_step("fsync-dir")
    if all(_name(pdir, b, LOG_SUFFIX + SWAP_SUFFIX).exists() for b in new_bases):
        for b in old_bases:
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX):
                try:
                    os.unlink(_name(pdir, b, suffix))
                except FileNotFoundError:
                    continue
                _swap_step("delete-old")
        _fsync_dir(pdir)
        _swap_step("fsync-dir")
    for b in new_bases:
        for suffix in _SWAP_SUFFIXES:
            src = _name(pdir, b, suffix + SWAP_SUFFIX)
            if src.exists():
                os.replace(src, _name(pdir, b, suffix))
                _swap_step("rename-to-final")
    _fsync_dir(pdir)
    _swap_step("fsync-dir")


def recover_interrupted_swap(pdir: Path) -> None:
    """Finish a segment swap whose manifest exists; delete files of an uncommitted one."""
    (pdir / (SWAP_MANIFEST_FILE + ".tmp")).unlink(missing_ok=True)
    manifest = pdir / SWAP_MANIFEST_FILE
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        raw = None
    if raw is not None:
        try:
            data = json.loads(raw)
            if data.get("version") != 1:
                raise ValueError(f"unknown version {data.get('version')}")
            old = [int(b) for b in data["old"]]
            new = [int(b) for b in data["new"]]
        except (ValueError, KeyError, TypeError) as exc:
            # The manifest is fsynced before it is renamed into place: unreadable means the
            # disk lost data. Guessing could mix old and new segments, so refuse to open.
            raise ValueError(f"unreadable cleaner swap manifest {manifest}: {exc}") from exc
        log.warning("recovery of %s: completing an interrupted cleaner swap of %d segment(s) for %d",
                    pdir, len(old), len(new))
        _roll_swap_forward(pdir, old, new)
        os.unlink(manifest)
        _fsync_dir(pdir)
    leftovers = [n for n in os.listdir(pdir) if n.endswith(CLEANED_SUFFIX) or n.endswith(SWAP_SUFFIX)]
    for n in leftovers:
        log.info("recovery of %s: deleting %s of an uncommitted cleaning", pdir, n)
        os.unlink(pdir / n)
    if leftovers:
        _fsync_dir(pdir)
