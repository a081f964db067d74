"""A broker's membership in the cluster: the shell that runs cluster/ownership.py against
PostgreSQL (storage/postgres_store.py).

Two loops. The heartbeat renews the lease every interval, on its own, so nothing the other loop
waits for can make a healthy broker's lease lapse. The ownership loop, after each heartbeat and at
once when a peer NOTIFYs a change, reads the live brokers and every partition's owner, asks
`ownership.plan` what to do, and does it: claims (each bumps the partition's epoch; the server
then brings its copy up to date and loads it; claims run concurrently, `__consumer_offsets`
partitions first), releases (drained first, so nothing is in flight, then given up without waiting
for a lease to expire), and losses. It also keeps the view Metadata and FindCoordinator answer
from: who is alive, who leads what, at which epoch; FindCoordinator can wait for it to change
(`view_changed`) while a partition changes hands.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from ..storage.postgres_store import BrokerRow, Claim, PostgresStore, StoreUnavailable, TopicRow
from .ownership import Lease, PartitionRow, Plan, Preferences, plan

log = logging.getLogger("offsetd.cluster")

Key = tuple[uuid.UUID, int]

RETRY_MS = 100  # the next renewal after one PostgreSQL did not answer
HANDOFF_WAIT_MS = 2000  # a stopping broker follows its released partitions' new owners this long at most
HANDOFF_LINGER_MS = 250  # then answers a little longer: librdkafka retries 100-200 ms apart
# Claim statements in flight at once (each of CLAIM_BATCH partitions): a broker taking over a dead
# one's 33,000 partitions is bound by these round trips.
CLAIMS_IN_FLIGHT = 4
CLAIM_BATCH = 1000  # partitions claimed (or released) per statement
# Claimed partitions loaded at once: opening an empty copy takes ~0.5 ms on the event loop, so a
# slice holds it ~50 ms and the lease renewals go out between slices.
LOAD_SLICE = 100
PLAN_SLICE = 10_000  # partitions planned per turn of the event loop


class OwnerCallbacks(Protocol):
    """What the server does when ownership changes (server/cluster_runtime.py)."""

    def topics_changed(self, topics: list[TopicRow]) -> None: ...
    def group_configs_changed(self, configs: dict[str, dict[str, str]]) -> None: ...
    async def gained(self, key: Key, claim: Claim) -> bool: ...
    async def releasing(self, key: Key) -> None: ...
    def lost(self, key: Key) -> None: ...
    def urgent(self, key: Key) -> bool: ...


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads a partition, as Metadata reports it."""

    node_id: int
    epoch: int


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class ClusterMember:
    """This broker's lease, its partitions and its view of the cluster."""

    def __init__(self, store: PostgresStore, node_id: int, host: str, port: int, *, ttl_ms: int,
                 heartbeat_ms: int, callbacks: OwnerCallbacks,
                 clock: Callable[[], float] = monotonic_ms,
                 endpoints: dict[str, tuple[str, int]] | None = None) -> None:
        self.store = store
        self.node_id = node_id
        self.host, self.port = host, port
        self.endpoints = dict(endpoints or {})  # listener name -> advertised (host, port)
        self.ttl_ms = ttl_ms
        # At least three renewals per lease: with one every 2 s (the default) and a 3 s lease, an
        # event loop busy for a second (a start-up's loads) let PostgreSQL judge the lease expired,
        # and peers then answered Metadata without this broker and claimed its new partitions.
        self.heartbeat_ms = min(heartbeat_ms, ttl_ms // 3)
        if self.heartbeat_ms < heartbeat_ms:
            log.info("renewing the lease every %d ms, a third of broker.session.timeout.ms=%d, not every "
                     "broker.heartbeat.interval.ms=%d", self.heartbeat_ms, ttl_ms, heartbeat_ms)
        self.callbacks = callbacks
        self.clock = clock
        self.incarnation = uuid.uuid4()
        self.lease = Lease(ttl_ms, margin_ms=self.heartbeat_ms)
        self.owned: dict[Key, int] = {}  # partition -> epoch this process leads at
        self._brokers: list[BrokerRow] = []
        self._live_ids: frozenset[int] = frozenset()
        self.leaders: dict[Key, Leader] = {}
        # The shared state as the last look left it, kept current by reading only what changed.
        self._rows: dict[Key, PartitionRow] = {}
        self._horizon = 0  # `since` for the next look's snapshot
        self._full_wanted = True  # the next look reads every partition (the first, after a new LISTEN)
        self._planned: tuple[tuple[int, ...], bool] | None = None  # (live brokers, serving) of the last plan
        self._preferences = Preferences()
        self.view_version = 0  # bumped whenever a leader, the live brokers or what this broker holds changes
        self._wake = asyncio.Event()
        self._view = asyncio.Event()  # set (and replaced) whenever brokers or leaders change
        self._ticking = asyncio.Lock()  # one round at a time: each acts on what the last one did
        self._dirty = {"topics", "group_configs"}  # shared catalogues to read again at the next tick
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: Any = None
        self._stopping = False
        self._looked: Callable[[], Awaitable[None]] | None = None  # start()'s hook, run at the first look

    # ------------------------------------------------------------------ lifecycle

    async def start(self, looked: Callable[[], Awaitable[None]] | None = None) -> None:
        """Register (taking this node id over from an earlier process) and make the first look;
        `looked` runs once the live brokers are known, before the first claims."""
        self._looked = looked
        sent = self.clock()
        await self.store.register(self.node_id, self.incarnation, self.host, self.port, self.ttl_ms,
                                  self.endpoints)
        self.lease.renewed(sent)
        self._listener = await self.store.listen(self._notified)
        await self.store.notify("ownership")  # peers see the new broker (and hand partitions over) at once
        await self.tick()
        self._tasks = [asyncio.create_task(self._heartbeats()), asyncio.create_task(self._run())]

    async def stop(self) -> None:
        """Graceful (controlled shutdown): stop serving and drain every partition, leave the live
        brokers (so no peer still prefers this one), then set the partitions free; each release
        NOTIFYs, and the peers claim at once instead of waiting for the lease to expire. Then
        follow the claims until each partition has its new owner (the server still answers
        meanwhile, naming them), and linger a moment for clients retrying here."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        held = list(self.owned.items())
        try:
            if self.serving():  # else PostgreSQL is out of reach: the lease expires on its own
                await asyncio.gather(*(self.callbacks.releasing(key) for key, _ in held))
                for key, _ in held:
                    self._lose(key)
                await self.store.unregister(self.node_id, self.incarnation)
                for i in range(0, len(held), CLAIM_BATCH):
                    await self.store.release(held[i:i + CLAIM_BATCH], self.node_id)
                await self._follow_successors([key for key, _ in held])
                if held:  # clients retrying here (told COORDINATOR_LOAD_IN_PROGRESS) are told the new owner
                    await asyncio.sleep(HANDOFF_LINGER_MS / 1000)
            else:
                await self.store.unregister(self.node_id, self.incarnation)
        except Exception as exc:  # PostgreSQL gone: the lease simply expires
            log.warning("leaving the cluster: %s", exc)
        self.lease.expire()
        if self._listener is not None:
            await self._listener.close()

    async def _follow_successors(self, released: list[Key]) -> None:
        """After a graceful release, keep the view current until a peer leads every released
        partition (at most HANDOFF_WAIT_MS): clients still connected to this broker then learn
        the new owners from its Metadata and FindCoordinator instead of "not available"."""
        deadline = self.clock() + HANDOFF_WAIT_MS
        while released and self.clock() < deadline:
            await self._look()
            released = [key for key in released if key not in self.leaders]
            if released:
                self._wake.clear()
                try:  # a claim NOTIFYs; look again then (or soon: the NOTIFY may come before the commit)
                    await asyncio.wait_for(self._wake.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass

    async def view_changed(self, timeout_s: float) -> None:
        """Return once the live brokers or leaders may have changed, or after `timeout_s`."""
        try:
            await asyncio.wait_for(self._view.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def _view_updated(self) -> None:
        """Wake whoever waits in view_changed (FindCoordinator of a partition changing hands)."""
        self.view_version += 1
        self._view.set()
        self._view = asyncio.Event()

    def serving(self) -> bool:
        """True while the lease is valid by this broker's own clock (cheap: hot paths call it)."""
        return self.lease.valid(self.clock())

    def _notified(self, payload: str) -> None:
        if payload in ("topics", "group_configs"):
            self._dirty.add(payload)
        self._wake.set()

    async def _heartbeats(self) -> None:
        """Renew the lease every heartbeat interval, on its own: claims, loads and drains of the
        ownership loop never delay a renewal (a late renewal would let peers claim from a healthy
        broker). While PostgreSQL does not answer, it tries again every RETRY_MS, so a broker is
        back at most that long after a primary is (a promoted standby, a restart)."""
        delay_ms = self.heartbeat_ms
        while not self._stopping:
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(self.heartbeat_ms, RETRY_MS)
            try:
                await self.renew()
                await self._keep_listening()
                delay_ms = self.heartbeat_ms
            except StoreUnavailable:
                pass  # the store tells the log why, once a second
            except Exception as exc:
                log.warning("lease renewal failed: %s", exc)
            self._give_up_if_expired()
            self._wake.set()  # and look at ownership again

    async def _keep_listening(self) -> None:
        """LISTEN again on a new connection after PostgreSQL restarted (or the old one broke);
        whatever was NOTIFYed meanwhile is caught up by reading the catalogue again."""
        if self._listener is not None and not self._listener.is_closed():
            return
        self._listener = await self.store.listen(self._notified)
        self._dirty.update(("topics", "group_configs"))
        self._full_wanted = True
        log.info("listening for cluster changes again")

    async def renew(self) -> None:
        sent = self.clock()
        if await self.store.renew(self.node_id, self.incarnation, self.ttl_ms):
            self.lease.renewed(sent)
        elif not self._stopping:
            log.error("node.id %d was taken over by another process: this broker stops leading anything; "
                      "give every broker its own node.id", self.node_id)
            self._stopping = True
            self.lease.expire()

    async def _run(self) -> None:
        """The ownership loop: a look at the shared state after each heartbeat and each NOTIFY."""
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.tick()
            except StoreUnavailable:
                self._planned = None  # the round stopped halfway: the next decides on every partition
            except Exception as exc:
                self._planned = None
                log.warning("looking at partition ownership failed: %s", exc)
            self._give_up_if_expired()

    def _give_up_if_expired(self) -> None:
        if self.owned and not self.serving():
            log.error("lease expired (no renewal within %d ms): giving up %d partitions", self.ttl_ms,
                      len(self.owned))
            for key in list(self.owned):
                self._lose(key)

    # ----------------------------------------------------------------------- tick

    async def tick(self) -> None:
        """Look, act (one round of the module docstring)."""
        async with self._ticking:
            await self._tick()

    async def _tick(self) -> None:
        if "topics" in self._dirty:
            self._dirty.discard("topics")
            topics = await self.store.topics()
            self.callbacks.topics_changed(topics)
            self._forget_deleted({t.topic_id for t in topics})
        if "group_configs" in self._dirty:
            self._dirty.discard("group_configs")
            self.callbacks.group_configs_changed(await self.store.group_configs())
        complete, changed = await self._look()
        if self._looked is not None:
            looked, self._looked = self._looked, None
            await looked()
        live = tuple(b.node_id for b in self.brokers)
        serving = self.serving()
        # Only the changed partitions need a decision, unless the live brokers (so every
        # partition's preferred owner) or our own lease changed since the last plan.
        complete = complete or self._planned != (live, serving)
        self._planned = (live, serving)
        decided = await self._plan(live, serving, list(self._rows.values()) if complete else changed, complete)
        if decided.lost:
            log.info("%d partition(s) led elsewhere now (or their topics are gone): %s", len(decided.lost),
                     _some(decided.lost))
        for key in decided.lost:
            self._lose(key)
        if decided.release:
            log.info("handing %d partition(s) over to their preferred brokers: %s", len(decided.release),
                     _some(decided.release))
            await self._release(decided.release)
        if decided.disown:
            log.info("setting %d partition(s) free (recorded as ours, not held): %s", len(decided.disown),
                     _some([key for key, _ in decided.disown]))
            await self.store.release(decided.disown, self.node_id)
        claimed = await self._claim_all(decided.claim)
        if claimed < len(decided.claim):  # some were taken by others, or our lease lapsed: decide again
            self._planned = None
        if decided.release or decided.disown:
            await self.store.notify("ownership")

    async def _claim_all(self, keys: list[Key]) -> int:
        """Claim and load `keys`, CLAIM_BATCH per statement, CLAIMS_IN_FLIGHT statements at once;
        how many were taken. Coordinator partitions first: groups wait on them, and their copies
        are caught up without competing with data partitions'."""
        urgent = [key for key in keys if self.callbacks.urgent(key)]
        rest = [key for key in keys if not self.callbacks.urgent(key)]
        claimed = 0
        in_flight = asyncio.Semaphore(CLAIMS_IN_FLIGHT)

        async def claim(batch: list[Key]) -> int:
            async with in_flight:
                return await self._claim(batch)
        for group in (urgent, rest):
            # Every batch finishes before the round ends, even when one fails: a round that ended
            # with claims still in flight let the next round claim (and load) them a second time.
            done = await asyncio.gather(*(claim(group[i:i + CLAIM_BATCH]) for i in range(0, len(group), CLAIM_BATCH)),
                                        return_exceptions=True)
            failure = next((result for result in done if isinstance(result, BaseException)), None)
            if failure is not None:
                raise failure
            claimed += sum(done)  # type: ignore[arg-type]
        return claimed

    async def _plan(self, live: tuple[int, ...], serving: bool, rows: list[PartitionRow], complete: bool) -> Plan:
        """ownership.plan over `rows` in slices, a turn of the event loop between them (a plan over
        100,000 partitions holds the loop for a second when the live brokers change)."""
        if len(rows) <= PLAN_SLICE or not serving:
            return plan(self.node_id, live, rows, self.owned, serving, complete=complete,
                        preferences=self._preferences)
        decided = Plan()
        for i in range(0, len(rows), PLAN_SLICE):
            part = plan(self.node_id, live, rows[i:i + PLAN_SLICE], self.owned, serving, complete=False,
                        preferences=self._preferences)
            decided.claim.extend(part.claim)
            decided.release.extend(part.release)
            decided.lost.extend(part.lost)
            decided.disown.extend(part.disown)
            await asyncio.sleep(0)
        if complete:  # what we hold of a partition no longer in the view: its topic was deleted
            lost = set(decided.lost)
            decided.lost.extend(key for key in self.owned if key not in self._rows and key not in lost)
        return decided

    def _forget_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """Drop the partitions of topics the catalogue no longer has (their rows are gone, which a
        look at changed rows cannot see; new topics' rows are changed rows)."""
        gone = [key for key in self._rows if key[0] not in topic_ids]
        if gone:
            for key in gone:
                del self._rows[key]
                self.leaders.pop(key, None)
            self.view_version += 1
            self._preferences.forget(gone)
            self._planned = None  # a complete plan: what we led of them is lost

    async def _look(self) -> tuple[bool, list[PartitionRow]]:
        """Read the live brokers and the partitions changed since the last look (all of them the
        first time and after a new LISTEN connection: a NOTIFY may have been missed);
        update the view. (whether every partition was read, the rows read)."""
        since = None if self._full_wanted else self._horizon
        self._full_wanted = False
        live_before = self._live_ids
        brokers, rows, horizon = await self.store.snapshot(since)
        self.brokers = brokers
        read = [PartitionRow((topic_id, index), owner, epoch) for topic_id, index, owner, epoch in rows]
        if since is None:
            gone = self._rows.keys() - {row.key for row in read}
            self._preferences.forget(gone)
            self._rows = {row.key: row for row in read}
            self.leaders = {row.key: Leader(row.owner, row.epoch) for row in read if row.owner is not None}
        else:
            for row in read:
                self._rows[row.key] = row
                if row.owner is None:
                    self.leaders.pop(row.key, None)
                else:
                    self.leaders[row.key] = Leader(row.owner, row.epoch)
        self._horizon = horizon
        if read or since is None or self._live_ids != live_before:
            self._view_updated()
        return since is None, read

    async def _claim(self, keys: list[Key]) -> int:
        """Claim `keys` in one statement, then load those taken, concurrently (a partition that
        cannot be loaded is handed back rather than sat on); how many were taken."""
        claims = await self.store.claim(keys, self.node_id, self.incarnation)
        for key, claim in claims.items():
            self.owned[key] = claim.epoch
            self.leaders[key] = Leader(self.node_id, claim.epoch)
        if not claims:
            return 0
        log.info("claimed %d partition(s): %s", len(claims), _some(list(claims)))
        self._view_updated()
        taken = list(claims.items())
        loaded: list[bool] = []
        for i in range(0, len(taken), LOAD_SLICE):  # a turn of the event loop between slices
            loaded += await asyncio.gather(*(self._gain(key, claim) for key, claim in taken[i:i + LOAD_SLICE]))
        failed = [key for (key, _), ok in zip(taken, loaded) if not ok]
        if failed:
            await self._release(failed)
        return len(claims)

    async def _gain(self, key: Key, claim: Claim) -> bool:
        """Load a claimed partition. PostgreSQL not answering (a timeout while thousands load at
        once, a restart) is tried again while the partition is still ours at this epoch (a load
        resumes where it stopped); any other failure hands the partition back."""
        delay_ms = RETRY_MS
        while True:
            try:
                return await self.callbacks.gained(key, claim)
            except StoreUnavailable as exc:
                if self.owned.get(key) != claim.epoch or not self.serving():
                    log.warning("loading partition %s/%d after claiming it: %s", *key, exc)
                    return False
            except Exception:
                log.exception("loading partition %s/%d after claiming it failed", *key)
                return False
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(2 * delay_ms, self.heartbeat_ms)

    async def _release(self, keys: list[Key]) -> None:
        """Drain and give up `keys` (graceful: peers claim them at once, no lease wait)."""
        held = [(key, self.owned[key]) for key in keys if key in self.owned]
        if not held:
            return
        await asyncio.gather(*(self.callbacks.releasing(key) for key, _ in held))
        for key, _ in held:
            self._lose(key)
            self.leaders.pop(key, None)
        try:
            for i in range(0, len(held), CLAIM_BATCH):
                await self.store.release(held[i:i + CLAIM_BATCH], self.node_id)
        except Exception as exc:  # the lease will expire instead
            log.warning("releasing %d partition(s): %s", len(held), exc)

    def _lose(self, key: Key) -> None:
        self.view_version += 1
        if self.owned.pop(key, None) is not None:
            self.callbacks.lost(key)

    def refresh_topics(self) -> None:
        """Read the catalogue (and every partition's ownership) again at the next tick."""
        self._dirty.add("topics")

    def fenced(self, key: Key) -> None:
        """An append found another owner, had an unknown outcome, or the lease lapsed under it:
        forget the partition and look again soon (it is claimed again if it is still ours)."""
        if key in self.owned:  # (a lapsed lease gives every partition up at once, logged once)
            log.info("partition %s/%d given up (fenced, an uncertain append, or a lapsed lease)", *key)
            self._lose(key)
        self._planned = None  # its row may be unchanged (still ours): decide on every partition again
        self._wake.set()

    # ------------------------------------------------------------------------ view

    @property
    def brokers(self) -> list[BrokerRow]:
        """The live brokers, from the last look."""
        return self._brokers

    @brokers.setter
    def brokers(self, brokers: list[BrokerRow]) -> None:
        self._brokers = brokers
        live = frozenset(b.node_id for b in brokers)  # leader() asks per partition
        if live != self._live_ids:
            self._live_ids = live
            self.view_version += 1

    def leader(self, key: Key) -> Leader | None:
        """The partition's leader if it is a live broker (never one whose lease expired)."""
        leader = self.leaders.get(key)
        if leader is None:
            return None
        if leader.node_id == self.node_id:
            return leader if key in self.owned and self.serving() else None
        return leader if leader.node_id in self._live_ids else None

    def endpoint(self, node_id: int) -> BrokerRow | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)


def _some(keys: list[Key], shown: int = 5) -> str:
    """A log line's worth of partition keys."""
    text = ", ".join(f"{t}/{p}" for t, p in keys[:shown])
    return text + (f" and {len(keys) - shown} more" if len(keys) > shown else "")
