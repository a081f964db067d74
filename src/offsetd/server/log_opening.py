"""The background opener: after the broker listens, every partition found at start-up that holds
segments is opened (storage/unopened_log.py), a few milliseconds' worth per turn of the event
loop, so its retention runs and a crashed run's logs are verified without a request waiting for
all of them. A request for a partition not reached yet opens it itself."""

from __future__ import annotations

import asyncio
import logging
import time

from ..broker.topics import TopicRegistry
from ..storage.log_dir import StorageError

log = logging.getLogger("offsetd.server")

SLICE_S = 0.005  # the longest the opener holds the event loop at a time


async def open_in_background(topics: TopicRegistry) -> None:
    """Open the unopened logs that hold segments, yielding to requests between slices."""
    started = time.monotonic()
    pending = topics.unopened_logs()
    opened = failed = 0
    turn = time.monotonic()
    for plog in pending:
        if plog.opened or plog.closed:  # a request opened it, or its topic was deleted
            continue
        try:
            plog.preload()
        except (StorageError, OSError, ValueError) as exc:  # its requests answer KAFKA_STORAGE_ERROR
            failed += 1
            log.error("opening %s-%d failed: %s", plog.topic, plog.partition, exc)
        opened += plog.opened
        if time.monotonic() - turn >= SLICE_S:
            await asyncio.sleep(0)
            turn = time.monotonic()
    log.info("background open: %d of %d partition(s) held segments and were opened in %.1f s%s", opened,
             len(pending), time.monotonic() - started, f"; {failed} failed" if failed else "")
