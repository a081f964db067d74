"""Kafka's clean-shutdown marker: `.kafka_cleanshutdown` in a log directory says every log in it
was flushed and closed (indexes and producer snapshots included), so the next start opens them
without verifying a batch (storage/log_loader.py). It is written last at shutdown and removed once
the logs are loaded, before anything is appended, so a crash never leaves one behind that lies."""

from __future__ import annotations

import os
from pathlib import Path

from offsetd.storage.durable_file import fsync_dir, write_durably

__all__ = ["CLEAN_SHUTDOWN_FILE", "was_clean_shutdown", "mark_clean_shutdown", "clear_clean_shutdown"]

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def was_clean_shutdown(log_dir: Path) -> bool:
    """True when the last run of `log_dir` ended with a clean shutdown."""
    return (log_dir / CLEAN_SHUTDOWN_FILE).exists()


def mark_clean_shutdown(log_dir: Path) -> None:
    """Say, durably, that every log of `log_dir` was closed cleanly."""
    write_durably(log_dir / CLEAN_SHUTDOWN_FILE, "")


def clear_clean_shutdown(log_dir: Path) -> None:
    """Remove the marker durably (the logs are open and about to change)."""
    try:
        os.unlink(log_dir / CLEAN_SHUTDOWN_FILE)
    except FileNotFoundError:
        return
    fsync_dir(log_dir)
