"""Cluster mode's wiring: the shared topic catalogue, the view Metadata answers from, producer ids,
and what the server does when this broker gains or loses a partition.

The membership loop (cluster/member.py) decides ownership; this module carries it out:
* gained: bring the partition's local copy up to PostgreSQL's end, lead it at the claim's epoch,
  and for a `__consumer_offsets`, `__transaction_state` or `__share_group_state` partition load its
  coordinator shard (COORDINATOR_LOAD_IN_PROGRESS from the claim on, while the copy catches up and
  loads; member session timers restart at load, as Kafka's do);
* releasing / lost: stop leading at once (requests get NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR),
  unload the shard (queued work fails with NOT_COORDINATOR), for a data partition tell the share
  groups' leader side (its windows are read again by the next leader), and for a release wait for
  the append in flight so the next owner's load sees it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Callable

from ..broker.request_context import request_listener
from ..broker.group_configs import GroupConfigs
from ..broker.topic_config import log_config
from ..broker.topics import Topic, TopicError, TopicRegistry
from ..cluster.member import ClusterMember, Key
from ..config import BrokerConfig
from ..records.offsets import OFFSETS_TOPIC
from ..storage.postgres_log import PostgresPartitionLog
from ..storage.postgres_store import Claim, PostgresStore, TopicRow
from ..storage.unopened_log import UnopenedLog
from .coordinator_runtime import ShardRuntime, ShardState
from .share_state import SHARE_STATE_TOPIC, ShareStateRuntime
from .transaction_api import TRANSACTION_STATE_TOPIC
from .transaction_runtime import TxnShardRuntime

log = logging.getLogger("offsetd.cluster")

PRODUCER_ID_BLOCK = 1000  # the sequence's increment (storage/postgres_store.py)


class ClusterTopicRegistry(TopicRegistry):
    """The topic catalogue kept in PostgreSQL: changes are stored there first (the answer waits
    for it), and every broker follows it (`sync`, on NOTIFY). Partition logs are
    PostgresPartitionLogs over a local copy in `log.dirs`."""

    marks_clean_shutdown = False  # the local copies are loaded by sync(), never as a clean shutdown

    def __init__(self, config: BrokerConfig, store: PostgresStore, serving: Callable[[], bool]) -> None:
        self.store = store
        self.serving = serving
        self.node_id: int = config.get("node.id")
        self.on_fenced: Callable[[PostgresPartitionLog], None] = lambda plog: None
        self.on_deleted: Callable[[Topic], None] = lambda topic: None
        # Appends only PostgreSQL held were read for a Fetch (storage/cold_range.py): wake its long poll.
        self.on_cold_loaded: Callable[[str, int], None] = lambda topic, partition: None
        super().__init__(config, 0)

    def _load(self, now_ms: int) -> str:
        """Nothing from topics.json: topics arrive from PostgreSQL (`sync`), the cluster id too."""
        return ""

    def _open(self, topic: Topic, index: int, now_ms: int) -> PostgresPartitionLog:
        """A partition's PostgreSQL log over a local copy opened on first use: only the brokers
        that lead it (claim it, then read or append) make its directory and hold its files."""
        copy = UnopenedLog(self.root, topic.name, index, log_config(topic.configs, self.config), now_ms, self.log_dir,
                           clean=False, leader_epoch=0, sync_parent=False, durable=False)
        # Internal topics' readers (the coordinators' loads) read all of the log from the copy.
        plog = PostgresPartitionLog(copy, self.store, topic.topic_id, self.node_id, self.serving,
                                    tail_only=not (topic.internal or topic.name.startswith("__")))
        plog.on_fenced = lambda p: self.on_fenced(p)
        plog.on_cold_loaded = lambda: self.on_cold_loaded(topic.name, index)
        return plog

    def sync(self, rows: list[TopicRow], now_ms: int) -> None:
        """Follow the catalogue: open new topics and partitions, drop deleted topics' copies."""
        wanted = {row.topic_id: row for row in rows}
        for topic in list(self._by_id.values()):
            if topic.topic_id not in wanted:
                self._forget(topic)
                self.on_deleted(topic)
        for row in rows:
            topic = self._by_id.get(row.topic_id)
            if topic is None:
                stale = self._by_name.get(row.name)
                if stale is not None:  # re-created under the same name
                    self._forget(stale)
                    self.on_deleted(stale)
                topic = Topic(row.name, row.topic_id, dict(row.configs), internal=row.internal)
                self._add(topic)
            if len(topic.partitions) < row.partitions:
                self.version += 1
            while len(topic.partitions) < row.partitions:
                topic.partitions.append(self._open(topic, len(topic.partitions), now_ms))

    def _forget(self, topic: Topic) -> None:
        self.version += 1
        self._by_name.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)
        for plog in topic.partitions:
            plog.lose_leadership()
            plog.delete()

    def _save(self) -> None:
        """Nothing: the catalogue lives in PostgreSQL."""

    def log_for(self, key: Key) -> PostgresPartitionLog | None:
        topic = self._by_id.get(key[0])
        if topic is None or not 0 <= key[1] < len(topic.partitions):
            return None
        return topic.partitions[key[1]]  # type: ignore[return-value]

    def create(self, name: str, num_partitions: int, configs: dict[str, str], now_ms: int,  # type: ignore[override]
               *, internal: bool = False, validate_only: bool = False) -> Any:
        self.check_new(name, num_partitions)
        topic = Topic(name, uuid.uuid4(), dict(configs), internal=internal)
        if validate_only:
            return topic
        return self._create(topic, num_partitions, now_ms)

    async def _create(self, topic: Topic, num_partitions: int, now_ms: int) -> Topic:
        row = TopicRow(topic.name, topic.topic_id, num_partitions, topic.configs, topic.internal)
        if not await self.store.create_topic(row):
            raise TopicError(36, f"Topic '{topic.name}' already exists.")
        self.sync_one(row, now_ms)
        log.info("created topic %s with %d partitions", topic.name, num_partitions)
        return self._by_id[topic.topic_id]

    def sync_one(self, row: TopicRow, now_ms: int) -> None:
        """Apply one stored catalogue row now (the NOTIFY that follows finds nothing new)."""
        self.sync([*(TopicRow(t.name, t.topic_id, len(t.partitions), t.configs, t.internal)
                     for t in self._by_id.values() if t.topic_id != row.topic_id), row], now_ms)

    def add_partitions(self, name: str, count: int, now_ms: int, *, validate_only: bool = False) -> Any:
        topic = self.check_growth(name, count)
        if validate_only:
            return None
        return self._grow(topic, count, now_ms)

    async def _grow(self, topic: Topic, count: int, now_ms: int) -> None:
        current = len(topic.partitions)
        if not await self.store.add_partitions(topic.topic_id, current, count):
            raise TopicError(37, f"Topic {topic.name} changed meanwhile; try again.")
        self.sync_one(TopicRow(topic.name, topic.topic_id, count, topic.configs, topic.internal), now_ms)

    def delete(self, topic: Topic) -> Any:
        return self._delete(topic)

    async def _delete(self, topic: Topic) -> None:
        if not await self.store.delete_topic(topic.topic_id):
            raise TopicError(3, f"The topic '{topic.name}' does not exist.")
        if self._by_id.get(topic.topic_id) is topic:
            self._forget(topic)
        log.info("deleted topic %s", topic.name)


class ClusterGroupConfigs(GroupConfigs):
    """Per-group configs kept in PostgreSQL: a change is stored there first (the answer waits for
    it), then every broker follows it (`sync`, on NOTIFY), so a group's retention is the same
    whichever broker coordinates it."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(None)
        self.store = store

    def update(self, group_id: str, changes: dict[str, str | None]) -> Any:
        return self._update(group_id, changes)

    async def _update(self, group_id: str, changes: dict[str, str | None]) -> None:
        wanted = {**self.get(group_id), **changes}
        await self.store.set_group_config(group_id, {k: v for k, v in wanted.items() if v is not None})
        self.apply(group_id, changes)

    def sync(self, configs: dict[str, dict[str, str]]) -> list[str]:
        """Follow PostgreSQL; the groups whose configs changed."""
        return self.replace_all(configs)


class PostgresView:
    """Metadata's view in cluster mode: live brokers and leaders from the membership loop."""

    def __init__(self, member: ClusterMember) -> None:
        self.member = member
        # leaders() per topic id, with the view it was made from: Metadata for 100,000 partitions
        # asks for all of them, and the view changes far less often than clients ask.
        self._leaders: dict[uuid.UUID, tuple[tuple[int, bool, int], list[tuple[int, int]]]] = {}

    @property
    def controller_id(self) -> int:
        """No controller: the lowest live id, which brokers() lists too (librdkafka's admin
        requests wait for the controller to be a broker it knows); -1, "none", when no broker is
        live in this view, so that the client asks again instead of waiting for a node it never
        learns of."""
        brokers = self.member.brokers
        return brokers[0].node_id if brokers else -1

    def brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        name = request_listener(listener)
        return [(b.node_id, *b.on(name)) for b in self.member.brokers]

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        if topic is None:
            return -1, -1
        leader = self.member.leader((topic.topic_id, partition))
        return (-1, -1) if leader is None else (leader.node_id, leader.epoch)

    def leaders(self, topic: Any) -> list[tuple[int, int]]:
        member, topic_id = self.member, topic.topic_id
        stamp = (member.view_version, member.serving(), len(topic.partitions))
        cached = self._leaders.get(topic_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        leader = member.leader
        leaders = [(-1, -1) if led is None else (led.node_id, led.epoch)
                   for led in (leader((topic_id, p)) for p in range(len(topic.partitions)))]
        self._leaders[topic_id] = (stamp, leaders)
        return leaders

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        row = self.member.endpoint(node_id)
        return None if row is None else row.on(request_listener(listener))

    @property
    def serving(self) -> bool:
        """This broker's lease holds, so its view follows PostgreSQL."""
        return self.member.serving()

    async def changed(self, timeout_s: float) -> None:
        """Return once who leads what may have changed (a claim, a release, a look at
        PostgreSQL), or after `timeout_s`."""
        await self.member.view_changed(timeout_s)


class ProducerIdBlocks:
    """Producer ids in blocks from a PostgreSQL sequence: unique across brokers and restarts.
    The next block is fetched in the background when half of the current one is used."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._next = self._end = 0
        self._spare: int | None = None
        self._fetching = False

    async def start(self) -> None:
        self._next = await self.store.producer_id_block()
        self._end = self._next + PRODUCER_ID_BLOCK
        await self._refill()

    async def _refill(self) -> None:
        self._fetching = True
        try:
            self._spare = await self.store.producer_id_block()
        finally:
            self._fetching = False

    def allocate(self) -> int:
        if self._next >= self._end:
            if self._spare is None:  # two blocks used before one round trip: never reuse an id
                raise RuntimeError("producer id block not fetched yet")
            self._next, self._end, self._spare = self._spare, self._spare + PRODUCER_ID_BLOCK, None
        if self._spare is None and not self._fetching:
            asyncio.ensure_future(self._refill())
        pid = self._next
        self._next += 1
        return pid


class ClusterRuntime:
    """The server's side of ownership changes (cluster/member.py's OwnerCallbacks)."""

    def __init__(self, topics: ClusterTopicRegistry, group_configs: ClusterGroupConfigs, runtimes: list[ShardRuntime],
                 clock: Callable[[], int], on_offsets_topic: Callable[[Topic], None],
                 on_group_config: Callable[[str], None], txn_runtimes: list[TxnShardRuntime],
                 on_txn_topic: Callable[[Topic], None], share_runtimes: list[ShareStateRuntime] | None = None,
                 on_share_topic: Callable[[Topic], None] = lambda topic: None,
                 on_data_lost: Callable[[Key], None] = lambda key: None) -> None:
        self.topics = topics
        self.group_configs = group_configs
        self.runtimes = runtimes
        self.clock = clock
        self.on_offsets_topic = on_offsets_topic
        self.on_group_config = on_group_config
        self.txn_runtimes = txn_runtimes
        self.on_txn_topic = on_txn_topic
        self.share_runtimes: list[ShareStateRuntime] = [] if share_runtimes is None else share_runtimes
        self.on_share_topic = on_share_topic
        self.on_data_lost = on_data_lost  # a data partition led elsewhere now (share groups' windows)

    def _runtime(self, key: Key) -> ShardRuntime | TxnShardRuntime | ShareStateRuntime | None:
        """The coordinator shard runtime of a `__consumer_offsets`, `__transaction_state` or
        `__share_group_state` partition."""
        topic = self.topics.by_id(key[0])
        if topic is None:
            return None
        runtimes = {OFFSETS_TOPIC: self.runtimes, TRANSACTION_STATE_TOPIC: self.txn_runtimes,
                    SHARE_STATE_TOPIC: self.share_runtimes}.get(topic.name)
        if runtimes is None or key[1] >= len(runtimes):
            return None
        return runtimes[key[1]]

    def topics_changed(self, topics: list[TopicRow]) -> None:
        self.topics.sync(topics, self.clock())
        for name, runtimes, created in ((OFFSETS_TOPIC, self.runtimes, self.on_offsets_topic),
                                        (TRANSACTION_STATE_TOPIC, self.txn_runtimes, self.on_txn_topic),
                                        (SHARE_STATE_TOPIC, self.share_runtimes, self.on_share_topic)):
            topic = self.topics.get(name)
            if topic is not None and not runtimes:
                created(topic)
                # A partition claimed before its shard existed (the broker that created the topic can
                # claim it in a round that ran before this one) is loaded now.
                for runtime in runtimes:
                    if runtime.plog.leader:
                        self._load(runtime)

    @staticmethod
    def _load(runtime: ShardRuntime | TxnShardRuntime | ShareStateRuntime) -> None:
        runtime.state = ShardState.LOADING  # COORDINATOR_LOAD_IN_PROGRESS from now until loaded
        asyncio.ensure_future(runtime.load())

    def group_configs_changed(self, configs: dict[str, dict[str, str]]) -> None:
        for group_id in self.group_configs.sync(configs):
            if self.runtimes:
                self.on_group_config(group_id)

    async def gained(self, key: Key, claim: Claim) -> bool:
        plog = self.topics.log_for(key)
        if plog is None:
            return False
        runtime = self._runtime(key)
        if runtime is not None:  # COORDINATOR_LOAD_IN_PROGRESS from the claim (peers name us at once)
            runtime.state = ShardState.LOADING
        await plog.take_leadership(claim, self.clock())
        # One line per coordinator partition; data partitions are many (cluster/member.py logs each batch).
        log.log(logging.INFO if runtime is not None else logging.DEBUG, "leading %s-%d at epoch %d (offsets %d-%d)",
                plog.topic, key[1], claim.epoch, claim.start_offset, claim.next_offset)
        if runtime is not None:
            self._load(runtime)
        return True

    async def releasing(self, key: Key) -> None:
        plog = self.topics.log_for(key)
        self.lost(key)
        if plog is not None:
            await plog.drain()  # the append in flight is stored (or fenced) before we let go

    def urgent(self, key: Key) -> bool:
        """The coordinators' partitions are claimed before data partitions."""
        return self._runtime(key) is not None

    def lost(self, key: Key) -> None:
        plog = self.topics.log_for(key)
        if plog is not None:
            plog.lose_leadership()
        runtime = self._runtime(key)
        if runtime is not None:
            runtime.unload()
        elif plog is not None:
            self.on_data_lost(key)
