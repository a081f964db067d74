"""The soak's workload, all in one asyncio loop (plus two client-library threads): idle client
connections that ask ApiVersions now and then, classic group members that join, commit
synchronously each second, heartbeat and leave after a random lifetime, a probe timing a small
request to every broker, and an idempotent producer and a consumer group moving records."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer

from wire import Connection, assigned_partitions, assignment

# Errors after which a member joins again (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
# UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) or looks for its coordinator again (COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR): a group's normal life, counted but not failures.
REJOIN_ERRORS = {27, 22, 25, 82}
REFIND_ERRORS = {14, 15, 16}
MEMBER_ID_REQUIRED = 79


@dataclass
class LoadConfig:
    """The shape of the workload."""
    bootstrap: list[str]
    connections: int = 1000
    groups: int = 200
    members_per_group: int = 2
    topic: str = "soak-commits"
    partitions: int = 8
    data_topic: str = "soak-data"
    produce_per_s: int = 500
    lifetime_s: tuple[float, float] = (20.0, 120.0)
    session_ms: int = 10000
    seed: int = 1


@dataclass
class Interval:
    """What the clients saw since the last sample."""
    commit_ms: list[float] = field(default_factory=list)
    probe_ms: list[float] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


class Stats:
    """Counters and latencies of the current interval; `take()` hands them over and starts anew."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interval = Interval()

    def latency(self, kind: str, ms: float) -> None:
        with self._lock:
            (self._interval.commit_ms if kind == "commit" else self._interval.probe_ms).append(ms)

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._interval.counts[key] += n

    def take(self) -> Interval:
        with self._lock:
            taken, self._interval = self._interval, Interval()
        return taken


class Soak:
    """Runs the workload until `stop` is set; every failure is counted, none ends the run."""

    def __init__(self, config: LoadConfig, stats: Stats) -> None:
        self.config, self.stats = config, stats
        self.rng = random.Random(config.seed)
        self.stopping = asyncio.Event()
        self.offsets: Counter = Counter()

    async def run(self, seconds: float) -> None:
        """Run every part of the workload for `seconds`."""
        threads = [threading.Thread(target=self._produce, daemon=True), threading.Thread(target=self._consume, daemon=True)]
        for thread in threads:
            thread.start()
        tasks = [asyncio.create_task(self._idle(i)) for i in range(self.config.connections)]
        tasks += [asyncio.create_task(self._member(f"soak-{g}", m)) for g in range(self.config.groups)
                  for m in range(self.config.members_per_group)]
        tasks += [asyncio.create_task(self._probe(address)) for address in self.config.bootstrap]
        try:
            await asyncio.sleep(seconds)
        finally:
            self.stopping.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for thread in threads:
                thread.join(30)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _idle(self, index: int) -> None:
        """One client connection that asks ApiVersions every 5-15 s (a client between polls)."""
        address = self.config.bootstrap[index % len(self.config.bootstrap)]
        await self._pause(self.rng.uniform(0, 5))
        while not self.stopping.is_set():
            try:
                conn = await Connection.open(address)
            except OSError:
                self.stats.count("connect-error")
                await self._pause(1)
                continue
            try:
                while not self.stopping.is_set():
                    if await conn.api_versions() != 0:
                        self.stats.count("api-versions-error")
                    self.stats.count("idle-request")
                    await self._pause(self.rng.uniform(5, 15))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                self.stats.count("connection-lost")
            finally:
                conn.close()

    async def _probe(self, address: str) -> None:
        """ApiVersions to one broker every 250 ms on its own connection: how long any request waits."""
        while not self.stopping.is_set():
            try:
                conn = await Connection.open(address)
                while not self.stopping.is_set():
                    start = time.perf_counter()
                    await conn.api_versions()
                    self.stats.latency("probe", (time.perf_counter() - start) * 1000)
                    await self._pause(0.25)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                self.stats.count("probe-lost")
                await self._pause(1)

    async def _coordinator(self, group: str) -> Connection:
        """A connection to `group`'s coordinator, found through a random bootstrap broker."""
        while True:
            conn = await Connection.open(self.rng.choice(self.config.bootstrap))
            try:
                error, address = await conn.find_coordinator(group)
            finally:
                conn.close()
            if error == 0:
                return await Connection.open(address)
            self.stats.count(f"find-coordinator-error-{error}")
            await self._pause(0.5)

    async def _member(self, group: str, index: int) -> None:
        """A member's life, again and again: join, sync, commit and heartbeat each second, leave."""
        c = self.config
        await self._pause(self.rng.uniform(0, 10) + index * 2)
        while not self.stopping.is_set():
            try:
                conn = await self._coordinator(group)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                self.stats.count("connection-lost")
                await self._pause(1)
                continue
            try:
                await self._membership(conn, group, time.monotonic() + self.rng.uniform(*c.lifetime_s))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                self.stats.count("connection-lost")
            finally:
                conn.close()
            await self._pause(self.rng.uniform(1, 5))

    async def _membership(self, conn: Connection, group: str, leave_at: float) -> None:
        """One membership on the coordinator's connection, until `leave_at` or a coordinator move."""
        c = self.config
        member_id = ""
        while not self.stopping.is_set():
            joined = await conn.join_group(group, member_id, c.topic, c.session_ms)
            if joined.error == MEMBER_ID_REQUIRED:
                member_id = joined.member_id
                continue
            if joined.error in REFIND_ERRORS:
                self.stats.count(f"join-error-{joined.error}")
                return
            if joined.error != 0:
                self.stats.count(f"join-error-{joined.error}")
                member_id = "" if joined.error == 25 else member_id
                await self._pause(0.5)
                continue
            self.stats.count("join")
            member_id = joined.member_id
            plan: dict[str, bytes] = {}
            if joined.leader == member_id:
                members = sorted(joined.members)
                plan = {m: assignment(c.topic, [p for p in range(c.partitions) if p % len(members) == i])
                        for i, m in enumerate(members)}
            error, mine = await conn.sync_group(group, joined.generation, member_id, plan)
            if error != 0:
                self.stats.count(f"sync-error-{error}")
                if error in REFIND_ERRORS:
                    return
                continue
            if not await self._stable(conn, group, joined.generation, member_id, assigned_partitions(mine), leave_at):
                continue
            await conn.leave_group(group, member_id)
            self.stats.count("leave")
            return

    async def _stable(self, conn: Connection, group: str, generation: int, member_id: str,
                      partitions: list[int], leave_at: float) -> bool:
        """Commit and heartbeat each second until `leave_at` (True) or a rebalance (False)."""
        while not self.stopping.is_set() and time.monotonic() < leave_at:
            if partitions:
                offsets = {}
                for p in partitions:
                    self.offsets[group, p] += 1
                    offsets[p] = self.offsets[group, p]
                start = time.perf_counter()
                errors = await conn.offset_commit(group, generation, member_id, self.config.topic, offsets)
                if all(e == 0 for e in errors):
                    self.stats.latency("commit", (time.perf_counter() - start) * 1000)
                    self.stats.count("commit")
                else:
                    self.stats.count(f"commit-error-{max(errors)}")
                    return False
            error = await conn.heartbeat(group, generation, member_id)
            if error != 0:
                self.stats.count(f"heartbeat-error-{error}")
                return False
            await self._pause(1.0)
        return True

    def _produce(self) -> None:
        """An idempotent producer at `produce_per_s` records/s in 10 bursts a second."""
        producer = Producer({"bootstrap.servers": ",".join(self.config.bootstrap), "enable.idempotence": True,
                             "linger.ms": 5, "log_level": 0})

        def delivered(err: object, _msg: object) -> None:
            self.stats.count("produce-error" if err else "produced")

        burst = max(1, self.config.produce_per_s // 10)
        n, next_burst = 0, time.monotonic()
        while not self.stopping.is_set():
            for _ in range(burst):
                n += 1
                producer.produce(self.config.data_topic, value=b"x" * 100, key=str(n).encode(), on_delivery=delivered)
            next_burst += 0.1
            while (left := next_burst - time.monotonic()) > 0:
                producer.poll(left)  # returns early when it served a delivery report
        producer.flush(30)

    def _consume(self) -> None:
        """A consumer group member reading the data topic, auto-committing, blocked in `poll`."""
        consumer = Consumer({"bootstrap.servers": ",".join(self.config.bootstrap), "group.id": "soak-reader",
                             "auto.offset.reset": "earliest", "log_level": 0})
        consumer.subscribe([self.config.data_topic])
        try:
            while not self.stopping.is_set():
                msgs = consumer.consume(500, 0.5)
                good = sum(1 for m in msgs if not m.error())
                if good:
                    self.stats.count("consumed", good)
        finally:
            consumer.close()
