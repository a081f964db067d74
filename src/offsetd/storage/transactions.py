"""Transaction bookkeeping of one partition log: the aborted-transaction index of every segment,
the transaction snapshot written at rolls, and the recovery scan that rebuilds both on open.

* `.txnindex` entries (storage/txn_index.py) are kept in memory per segment base; an ABORT
  marker that ends an open transaction appends one entry to the file of the segment holding the
  marker, fsynced at once (aborts are rare).
* `offsetd-txn-snapshot.json` is the producer state as of a roll's offset, written at each roll
  once any producer used transactions. It is not removed when loaded: after an unclean shutdown
  the state is rebuilt from it plus a scan of every batch from its offset, so an open
  transaction that began in a segment below the recovery point is not forgotten. (A clean close
  writes the full producer snapshot, which is preferred.)
* Recovery re-derives the `.txnindex` entries of the segments it verifies (past the recovery
  point), since their markers may not have been durable.

Synchronous file I/O, called by the local partition log only (storage/partition_log.py and the
log_loader.py, log_append.py it delegates to).
"""

from __future__ import annotations

import json
import logging
import os
from bisect import bisect_right
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from offsetd.records.batch import (
    CORRUPT_MESSAGE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    batch_crc_ok,
    iter_batches,
    validate_batches,
)
from offsetd.records.control import parse_marker
from offsetd.storage.durable_file import fsync_dir, write_durably
from offsetd.storage.producer_state import AbortedTxn, ProducerStateManager
from offsetd.storage.txn_index import append_entry, index_path, read_index, write_index

if TYPE_CHECKING:
    from offsetd.storage.segment import Segment

__all__ = ["TXN_SNAPSHOT_FILE", "PartitionTransactions", "MarkerReader", "validate_log_batches",
           "read_txn_snapshot", "write_txn_snapshot", "remove_txn_snapshot", "uses_transactions", "scan_segment",
           "scan_all", "rederive_txn_index", "ProducerRecovery"]

log = logging.getLogger("offsetd.storage")

TXN_SNAPSHOT_FILE = "offsetd-txn-snapshot.json"


def validate_log_batches(mv: memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """validate_batches for the log's own writers (coordinators, marker writer): control batches
    are accepted too (a client's Produce may not carry them), after a CRC and marker check."""
    headers: list[BatchHeader] = []
    covered = 0
    for pos, h in iter_batches(mv):
        size = h.batch_length + LOG_OVERHEAD
        if h.is_control:
            if h.magic != 2 or not batch_crc_ok(mv, pos, h):
                raise InvalidBatch(CORRUPT_MESSAGE, f"control batch at byte {pos} failed its magic/CRC check")
            parse_marker(mv, pos)
            headers.append(h)
        else:
            headers.extend(validate_batches(mv[pos : pos + size], max_batch_bytes))
        covered = pos + size
    if covered != len(mv) or not headers:
        validate_batches(mv[covered:], max_batch_bytes)  # raises the precise error
    return headers


class MarkerReader:
    """Reads the marker of each control batch while a segment is scanned in order from byte 0
    (recover_segment's on_batch callback passes headers only)."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._fd = -1
        self._pos = 0

    def reset(self, log_path: Path) -> None:
        """Start on the segment file `log_path`, at byte 0."""
        self.close()
        self._path = log_path
        self._pos = 0

    def __call__(self, h: BatchHeader) -> tuple[int, int] | None:
        """(control type, coordinator epoch) of `h` when it is a marker; must see every batch."""
        pos = self._pos
        self._pos += h.batch_length + LOG_OVERHEAD
        if not h.is_control or h.producer_id < 0:
            return None
        if self._fd < 0:
            assert self._path is not None, "MarkerReader.reset was not called"
            self._fd = os.open(self._path, os.O_RDONLY)
        return _marker_or_none(os.pread(self._fd, h.batch_length + LOG_OVERHEAD, pos), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _marker_or_none(buf: bytes, pos: int) -> tuple[int, int] | None:
    """The marker at `pos`, None (logged) when it is malformed: it then ends no transaction."""
    try:
        return parse_marker(buf, pos)
    except InvalidBatch as exc:
        log.warning("ignoring a malformed transaction marker: %s", exc.message)
        return None


def scan_segment(seg: "Segment", apply: Callable[[BatchHeader, tuple[int, int] | None], None], start: int) -> None:
    """Call apply(header, marker) for every batch of a sealed segment from offset `start` on."""
    for pos, h in seg.iter_headers():
        if h.base_offset < start:
            continue
        marker = None
        if h.is_control and h.producer_id >= 0:
            marker = _marker_or_none(seg.pread(h.batch_length + LOG_OVERHEAD, pos), 0)
        apply(h, marker)


def scan_all(segments: list["Segment"], now_ms: int) -> tuple[ProducerStateManager, dict[int, list[AbortedTxn]]]:
    """Producer state and the aborted transactions per segment from every batch of the log (the
    slow recovery path, when the transaction snapshot is past what survived a crash)."""
    state = ProducerStateManager()
    aborts: dict[int, list[AbortedTxn]] = {}
    for seg in segments:
        def apply(h: BatchHeader, marker: tuple[int, int] | None, base: int = seg.base_offset) -> None:
            aborted = state.update(h, h.base_offset, now_ms, marker)
            if aborted is not None:
                aborts.setdefault(base, []).append(aborted)
        scan_segment(seg, apply, -1)
    return state, aborts


def rederive_txn_index(pdir: Path, bases: list[int], scan_start: int, derived: dict[int, list[AbortedTxn]]) -> None:
    """Rewrite the `.txnindex` of segments whose batches from `scan_start` on were scanned: the
    entries of markers below scan_start are kept, the scan's replace the rest."""
    changed = False
    for base in bases:
        path = index_path(pdir, base)
        stored = read_index(path)
        entries = [e for e in stored or () if e.last_offset < scan_start] + derived.get(base, [])
        if entries != (stored or []):
            write_index(path, entries)
            changed = True
    if changed:
        fsync_dir(pdir)


def uses_transactions(producers: ProducerStateManager) -> bool:
    """True once some producer has transaction state worth a snapshot at rolls."""
    return any(e.txn_first_offset >= 0 or e.coordinator_epoch >= 0 for e in producers.producers.values())


def read_txn_snapshot(pdir: Path) -> tuple[int, ProducerStateManager] | None:
    """(offset, state as of that offset) from the transaction snapshot; None when absent/unreadable."""
    path = pdir / TXN_SNAPSHOT_FILE
    try:
        data = json.loads(path.read_bytes())
        if data.get("version") != 1:
            raise ValueError(f"unknown version {data.get('version')}")
        state = ProducerStateManager()
        state.load_snapshot(data["producers"])
        return int(data["offset"]), state
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OSError) as exc:
        log.warning("ignoring unreadable transaction snapshot %s: %s", path, exc)
        return None


def write_txn_snapshot(pdir: Path, offset: int, producers: ProducerStateManager) -> None:
    """Persist the producer state as of `offset` (a roll) when transactions are in use."""
    path = pdir / TXN_SNAPSHOT_FILE
    if not uses_transactions(producers) and not path.exists():
        return
    write_durably(path, json.dumps({"version": 1, "offset": offset, "producers": producers.to_snapshot()}))


def remove_txn_snapshot(pdir: Path) -> None:
    """Forget the transaction snapshot (the log was emptied)."""
    (pdir / TXN_SNAPSHOT_FILE).unlink(missing_ok=True)


class PartitionTransactions:
    """The aborted transactions of a partition, per segment, mirrored in `.txnindex` files."""

    def __init__(self, directory: Path, entries: dict[int, list[AbortedTxn]] | None = None) -> None:
        self.dir = directory
        self._entries: dict[int, list[AbortedTxn]] = entries or {}

    @classmethod
    def load(cls, directory: Path, bases: Iterable[int]) -> "PartitionTransactions":
        """Read the `.txnindex` files of the segments starting at `bases`."""
        entries = {}
        for b in bases:
            found = read_index(index_path(directory, b))
            if found:
                entries[b] = found
        return cls(directory, entries)

    def entries(self, base: int) -> list[AbortedTxn]:
        """The entries of the segment starting at `base` (a copy)."""
        return list(self._entries.get(base, ()))

    def all_entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order."""
        return [e for b in sorted(self._entries) for e in self._entries[b]]

    def record(self, aborts: list[AbortedTxn], bases: list[int]) -> None:
        """Append the transactions ended by ABORT markers (in the segments holding the markers)."""
        for a in aborts:
            base = bases[max(bisect_right(bases, a.last_offset) - 1, 0)]
            append_entry(index_path(self.dir, base), a)
            self._entries.setdefault(base, []).append(a)

    def rewrite(self, base: int, entries: list[AbortedTxn]) -> None:
        """Replace a segment's entries (recovery and cleaning)."""
        if entries:
            self._entries[base] = list(entries)
        else:
            self._entries.pop(base, None)
        write_index(index_path(self.dir, base), entries)

    def drop(self, base: int) -> None:
        """The segment starting at `base` was deleted: its index goes too."""
        self._entries.pop(base, None)
        index_path(self.dir, base).unlink(missing_ok=True)

    def clear(self) -> None:
        """Every segment was deleted."""
        for base in list(self._entries):
            self.drop(base)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int, bases: list[int]) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction overlapping
        [fetch_offset, upper_bound) (A9). Starts at the segment holding fetch_offset (earlier
        markers are below it) and stops after a segment with an entry whose stored LSO passed
        the upper bound: no transaction open at the bound can be aborted later than that."""
        out = []
        for base in bases[max(bisect_right(bases, fetch_offset) - 1, 0) :]:
            done = False
            for e in self._entries.get(base, ()):
                if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                    out.append((e.producer_id, e.first_offset))
                done = done or e.last_stable_offset > upper_bound
            if done:
                break
        return out

    def replace(self, old_bases: list[int], new_bases: list[int], suffix: str = "") -> dict[int, list[AbortedTxn]]:
        """Spread the entries of the segments `old_bases` over `new_bases` (a cleaner swap: the
        markers keep their offsets); writes `<base>.txnindex<suffix>` files for the new segments
        that get entries and returns their entries."""
        moved = [e for b in old_bases for e in self._entries.get(b, ())]
        out: dict[int, list[AbortedTxn]] = {}
        for e in moved:
            base = new_bases[max(bisect_right(new_bases, e.last_offset) - 1, 0)]
            out.setdefault(base, []).append(e)
        for base, entries in out.items():
            write_index(index_path(self.dir, base).with_name(index_path(self.dir, base).name + suffix), entries)
        if out:
            fsync_dir(self.dir)
        return out

    def swapped(self, old_bases: list[int], new_entries: dict[int, list[AbortedTxn]]) -> None:
        """The swap prepared by replace() was committed: adopt its entries."""
        for b in old_bases:
            self._entries.pop(b, None)
        self._entries.update(new_entries)


class ProducerRecovery:
    """Producer state rebuilt while PartitionLog.open verifies segments, from the best source:

    1. the producer snapshot of a clean close (every `.txnindex` is then complete);
    2. else the transaction snapshot of the last roll plus every batch from its offset (the
       `.txnindex` entries of the verified segments from that offset are derived again);
    3. else, when that snapshot is past what survived, a scan of every segment;
    4. else (no transaction ever reached a roll) the verified segments alone.
    """

    def __init__(self, pdir: Path, now_ms: int, snapshot: tuple[int, dict] | None, active_base: int) -> None:
        self.pdir = pdir
        self.now = now_ms
        self.scanned = ProducerStateManager()
        self.scanned_aborts: dict[int, list[AbortedTxn]] = {}
        self.clean: ProducerStateManager | None = None
        self.clean_offset = -1
        if snapshot is not None and snapshot[0] >= active_base:
            self.clean_offset = snapshot[0]
            self.clean = ProducerStateManager()
            self.clean.load_snapshot(snapshot[1])
        found = read_txn_snapshot(pdir)
        self.txn_start, self.txn_state = found if found is not None else (-1, None)
        self.txn_aborts: dict[int, list[AbortedTxn]] = {}
        self.reader = MarkerReader()
        self.current = -1  # base of the segment being verified
        self.verified: list[int] = []

    def sealed(self, seg: "Segment", next_base: int) -> None:
        """A durable segment below the recovery point (its `.txnindex` too): only the
        transaction snapshot's state is brought forward through it."""
        state = self.txn_state
        if state is not None and next_base > self.txn_start:
            scan_segment(seg, lambda h, m: state.update(h, h.base_offset, self.now, m), self.txn_start)

    def begin(self, log_path: Path, base: int) -> None:
        """The next segment to be verified (recover_segment calls on_batch for its batches)."""
        self.reader.reset(log_path)
        self.current = base
        self.verified.append(base)

    def on_batch(self, h: BatchHeader) -> None:
        """One valid batch of the segment being verified, in order."""
        marker = self.reader(h)
        aborted = self.scanned.update(h, h.base_offset, self.now, marker)
        if aborted is not None:
            self.scanned_aborts.setdefault(self.current, []).append(aborted)
        if self.clean is not None and h.base_offset >= self.clean_offset:
            self.clean.update(h, h.base_offset, self.now, marker)
        if self.txn_state is not None and h.base_offset >= self.txn_start:
            aborted = self.txn_state.update(h, h.base_offset, self.now, marker)
            if aborted is not None:
                self.txn_aborts.setdefault(self.current, []).append(aborted)

    def finish(self, segments: list["Segment"]) -> ProducerStateManager:
        """The producer state to use, the `.txnindex` files of the verified segments rewritten."""
        self.reader.close()
        end = segments[-1].next_offset
        verified = [b for b in self.verified if any(s.base_offset == b for s in segments)]
        if self.clean is not None and self.clean_offset <= end:
            return self.clean
        if self.txn_state is not None and self.txn_start <= end:
            rederive_txn_index(self.pdir, verified, self.txn_start, self.txn_aborts)
            return self.txn_state
        if self.txn_state is not None:
            state, aborts = scan_all(segments, self.now)
            rederive_txn_index(self.pdir, [s.base_offset for s in segments], -1, aborts)
            return state
        if verified:
            rederive_txn_index(self.pdir, verified, verified[0], self.scanned_aborts)
        return self.scanned
