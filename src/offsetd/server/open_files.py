"""The process's open-file budget, shared out at start-up: the soft RLIMIT_NOFILE is raised to
the hard limit, half of it (or `log.max.open.files`) goes to the segment and index file pool
(storage/file_pool.py), a quarter to zero-copy Fetch sends (storage/file_records.py), and the rest
stays for connections, the cleaner and everything else. Logged once."""

from __future__ import annotations

import logging

from ..config import BrokerConfig
from ..storage.file_pool import SHARED, default_capacity, raise_open_file_limit
from ..storage.file_records import FileRecords, descriptor_budget

__all__ = ["size_open_files"]

log = logging.getLogger("offsetd.server")


def size_open_files(config: BrokerConfig) -> int:
    """Raise the open-file limit and size the file pool and the zero-copy budget from it; the
    pool's capacity."""
    limit = raise_open_file_limit()
    configured = config.get("log.max.open.files")
    capacity = configured if configured is not None else default_capacity(limit)
    SHARED.resize(capacity)
    FileRecords.budget = descriptor_budget(limit)
    log.info("open files: limit %d; up to %d segment and index files open at once (log.max.open.files%s), "
             "%d held by zero-copy fetches, the rest for connections", limit, capacity,
             "" if configured is not None else ", default: half the limit", FileRecords.budget)
    if capacity + FileRecords.budget > limit:
        log.warning("log.max.open.files=%d with %d for zero-copy fetches passes the open-file limit %d: "
                    "connections may be refused with EMFILE; raise `ulimit -n` or lower log.max.open.files",
                    capacity, FileRecords.budget, limit)
    return capacity
