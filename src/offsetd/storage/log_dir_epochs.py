"""The leader epoch every partition of a log directory leads at next, so a start can answer
Metadata (which names each partition's epoch) without opening a single partition directory.

A clean shutdown writes `offsetd-leader-epochs` (one JSON file for the whole directory) before its
`.kafka_cleanshutdown` marker; the next start reads and removes both. After a crash there is no
marker and the file is not trusted: each partition's epoch comes from its own
`leader-epoch-checkpoint` (one small read, no listing, no segment), as its opening would compute
it (storage/partition_log.py `lead_next_epoch`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from offsetd.storage.durable_file import write_durably
from offsetd.storage.leader_epoch_cache import CHECKPOINT_FILE, LeaderEpochCache

__all__ = ["EPOCHS_FILE", "read_next_epochs", "write_next_epochs", "remove_next_epochs", "next_epoch_on_disk"]

log = logging.getLogger("offsetd.storage")

EPOCHS_FILE = "offsetd-leader-epochs"


def write_next_epochs(log_dir: Path, epochs: dict[str, list[int]]) -> None:
    """Durably record, per topic, the epoch each of its partitions leads at next."""
    write_durably(log_dir / EPOCHS_FILE, json.dumps({"version": 1, "topics": epochs}, separators=(",", ":")))


def read_next_epochs(log_dir: Path) -> dict[str, list[int]]:
    """What write_next_epochs recorded; empty when absent or unreadable (the caller reads each
    partition's own checkpoint then)."""
    try:
        data = json.loads((log_dir / EPOCHS_FILE).read_bytes())
        if data.get("version") != 1:
            raise ValueError(f"unknown version {data.get('version')}")
        return {str(name): [int(e) for e in epochs] for name, epochs in data["topics"].items()}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        log.warning("ignoring an unreadable %s: %s", log_dir / EPOCHS_FILE, exc)
        return {}


def remove_next_epochs(log_dir: Path) -> None:
    """Forget the record (read at start; the logs are about to change)."""
    try:
        os.unlink(log_dir / EPOCHS_FILE)
    except FileNotFoundError:
        pass


def next_epoch_on_disk(partition_dir: str) -> int:
    """The epoch a partition leads at next judged from its `leader-epoch-checkpoint` alone: one
    more than the newest epoch it names, 0 without one (an unreadable file: 0, as its opening
    would ignore it too). Plain os calls on a str path: a start after a crash asks this of every
    partition."""
    try:
        fd = os.open(f"{partition_dir}/{CHECKPOINT_FILE}", os.O_RDONLY)
    except OSError:
        return 0
    try:
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        return LeaderEpochCache.from_checkpoint(raw.decode("ascii")).latest_epoch + 1
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return 0
    finally:
        os.close(fd)
