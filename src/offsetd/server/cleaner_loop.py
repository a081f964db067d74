"""The log cleaner's loop (log.cleaner.enable): every log.cleaner.backoff.ms, compact each cleanable
compacted log, `__consumer_offsets` first. The heavy part runs on the cleaner thread; selecting and
swapping segments run on the event loop, and for an offsets partition only between two coordinator
writes (ShardRuntime.exclusive). The cleaning itself is storage/cleaner.py's."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..broker.broker import Broker
from ..config import BrokerConfig
from ..records.offsets import OFFSETS_TOPIC
from ..storage.cleaner import LogCleaner
from .coordinator_runtime import ShardRuntime

log = logging.getLogger("offsetd.server")


class CleanerLoop:
    """The broker's log cleaner task and its thread."""

    def __init__(self, broker: Broker, runtimes: list[ShardRuntime], config: BrokerConfig,
                 clock: Callable[[], int]) -> None:
        self.broker = broker
        self.runtimes = runtimes  # __consumer_offsets partition -> its shard runtime
        self.config = config
        self.clock = clock
        self._cleaner_executor: ThreadPoolExecutor | None = None

    async def run(self) -> None:
        """Clean every log.cleaner.backoff.ms until cancelled."""
        cleaner = LogCleaner()
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.get("log.cleaner.backoff.ms") / 1000)
            topics = sorted(self.broker.topics, key=lambda t: t.name != OFFSETS_TOPIC)
            for topic in topics:
                # A topic's partitions share its cleanup.policy: at 100,000 partitions of deleted
                # ones, asking each partition held the event loop for a tenth of a second a pass.
                if not topic.partitions or not topic.partitions[0].config.compacts:
                    continue
                for index, plog in enumerate(list(topic.partitions)):
                    if plog.closed or not plog.opened or not plog.leader:
                        continue  # cluster mode: only the leader cleans (and PostgreSQL follows it)
                    owner = self.runtimes[index] if topic.name == OFFSETS_TOPIC else None
                    try:
                        job = await self._exclusively(owner, lambda: cleaner.select(plog, self.clock()))
                        if job is None:
                            continue
                        try:
                            plan = await loop.run_in_executor(self._cleaner_pool(), cleaner.prepare, job)
                        except BaseException:
                            cleaner.abort(job)
                            raise
                        if await self._exclusively(owner, lambda: cleaner.commit(plog, plan)):
                            log.info("cleaned %s-%d: %s", topic.name, index, plan.stats)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("log cleaner failed on %s-%d", topic.name, index)

    @staticmethod
    async def _exclusively(owner: ShardRuntime | None, fn: Callable[[], Any]) -> Any:
        return fn() if owner is None else await owner.exclusive(fn)

    def _cleaner_pool(self) -> ThreadPoolExecutor:
        # A thread, not a worker process: a child process would outlive a kill -9 of the broker.
        # prepare() holds the GIL in slices, so the event loop still gets its turns.
        if self._cleaner_executor is None:
            self._cleaner_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cleaner")
        return self._cleaner_executor

    def stop(self) -> None:
        """Let the cleaner thread finish (a pending prepare is cancelled)."""
        if self._cleaner_executor is not None:
            self._cleaner_executor.shutdown(wait=True, cancel_futures=True)
