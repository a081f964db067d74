"""A partition log known by name only, opened on first use, so a broker with 100,000 partitions
serves as soon as it has read its catalogue, not after reading every partition's directory.

An UnopenedLog carries what Metadata and the request checks ask before touching data (topic,
partition, directory, config, log directory, the leader epoch it will lead at, and the offsets
of a log known to hold no segment, all 0); the first access to anything else opens the log from
disk (PartitionLog.open, recovering it when the broker did not shut down cleanly) and the object
becomes that PartitionLog, in place, so every holder of it sees the opened log. Until then closing, flushing and retention have nothing to do: the files are
as the last run left them. `preload` is the background opener's step (server/log_opening.py).

Pure synchronous file I/O; no asyncio, no clock reads (the time of the start is passed in).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from offsetd.storage.durable_file import fsync_dir
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import LogDirectory
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.segment import LOG_SUFFIX

__all__ = ["UnopenedLog"]

# What exists on an UnopenedLog before it opens; anything else read opens it.
_OWN = ("topic", "partition", "config", "log_dir", "leader_epoch", "_closed", "_root", "_now_ms",
        "_clean", "_sync_parent", "_durable", "_history", "checked_empty")


class UnopenedLog(PartitionLog):
    """A PartitionLog whose directory has not been read yet (see the module docstring)."""

    opened = False

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: int,
                 log_dir: LogDirectory, *, clean: bool, leader_epoch: int, empty: bool = False,
                 sync_parent: bool = True, durable: bool = True) -> None:
        """`directory` is the log directory (`log.dirs`); `clean`: the files are as a clean
        shutdown (or a creation) left them, so opening verifies nothing; `leader_epoch`: what
        Metadata announces, and the least the opened log leads at; `empty`: the directory was
        just made (CreateTopics); `sync_parent`: fsync the log directory when opening makes the
        partition's (False for a copy whose log of record is elsewhere: cluster mode); `durable`:
        PartitionLog.open's (False for such a copy too)."""
        # PartitionLog.__init__ is not called: it wants the segments this object has not read.
        self._root = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.log_dir = log_dir
        self.leader_epoch = leader_epoch
        self._closed = False
        self._now_ms = now_ms
        self._clean = clean
        self._sync_parent = sync_parent
        self._durable = durable
        self._history: tuple[list[tuple[int, int]], int] | None = None  # set_epoch_history's, until opened
        self.checked_empty = empty  # no segment (preload looked): nothing to recover or retain, offsets 0

    @property  # type: ignore[override]
    def dir(self) -> Path:
        """The partition directory (a Path made when asked: 100,000 of them cost a second)."""
        return self._root / f"{self.topic}-{self.partition}"

    def __getattr__(self, name: str) -> Any:
        """Called only for what this object lacks: the log's state, read now."""
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        self.open_now()
        return getattr(self, name)

    def _empty_or_opened(self, name: str) -> int:
        """0 for a log known to hold no segment (its offsets, as opening it would make them: the
        lag views ask every partition, and must not make 100,000 empty logs' files), else the
        opened log's `name`."""
        if self.checked_empty:
            return 0
        self.open_now()
        return int(getattr(self, name))

    @property  # type: ignore[override]
    def log_start_offset(self) -> int:
        """0 when known empty, else the opened log's."""
        return self._empty_or_opened("log_start_offset")

    @property  # type: ignore[override]
    def log_end_offset(self) -> int:
        """0 when known empty, else the opened log's."""
        return self._empty_or_opened("log_end_offset")

    @property
    def last_stable_offset(self) -> int:
        """0 when known empty, else the opened log's."""
        return self._empty_or_opened("last_stable_offset")

    @property
    def needs_recovery(self) -> bool:
        """True while the files may hold a crash's torn tail that no one has verified (the start
        after a crash): a clean-shutdown marker must not be written over them."""
        return not self._clean and not self.checked_empty

    def open_now(self) -> None:
        """Read the directory (PartitionLog.open) and become that PartitionLog; a failure is the
        log directory's StorageError (storage/log_dir.py), the object stays unopened."""
        if self._closed:
            raise ValueError(f"log {self.topic}-{self.partition} is closed")
        try:
            loaded = PartitionLog.open(self._root, self.topic, self.partition, self.config, self._now_ms,
                                       self.log_dir, clean=self._clean, sync_parent=self._sync_parent,
                                       durable=self._durable)
        except OSError as exc:
            raise self.log_dir.failed(exc, f"open of {self.topic}-{self.partition}") from exc
        announced, history = self.leader_epoch, self._history
        state = self.__dict__
        state.clear()
        state.update(loaded.__dict__)
        self.__class__ = PartitionLog  # type: ignore[assignment]
        if history is not None:
            self.set_epoch_history(*history)
        else:
            self.lead_next_epoch(at_least=announced)

    def preload(self) -> None:
        """The background opener's step: open the log if its directory holds segments (their
        retention and recovery are due); an empty one stays unopened until it is used."""
        try:
            names = os.listdir(f"{self._root}/{self.topic}-{self.partition}")
        except FileNotFoundError:
            names = []
        if any(n.endswith(LOG_SUFFIX) for n in names):
            self.open_now()
        else:
            self.checked_empty = True

    def set_epoch_history(self, entries: list[tuple[int, int]], leader_epoch: int) -> None:
        """Cluster mode's history of a log known to hold nothing is kept until the log opens (a
        claimed partition with nothing in it opens no file); any other log opens now."""
        if not self.checked_empty:
            self.open_now()
            self.set_epoch_history(entries, leader_epoch)  # PartitionLog's, now that it is one
            return
        self._history = (list(entries), leader_epoch)
        self.leader_epoch = leader_epoch

    @property
    def next_leader_epoch(self) -> int:
        """Nothing was appended: the next start leads at the same epoch."""
        return self.leader_epoch

    def close(self) -> None:
        """Nothing to flush or save: the files are as they were found."""
        self._closed = True

    def flush(self) -> None:
        """Nothing unsynced."""

    def apply_retention(self, now_ms: int) -> int:
        """Nothing until opened (the background opener opens every log that holds segments)."""
        return 0

    def delete(self) -> None:
        """Remove the partition directory (DeleteTopics, or a creation undone)."""
        self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)
        fsync_dir(self._root)
