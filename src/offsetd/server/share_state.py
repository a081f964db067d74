"""The share coordinator of this broker: `__share_group_state` partitions, each with its sans-IO
shard (share/shard.py), written durably and replayed (reference share-groups.md §5). On one node
it leads every partition, creates the topic on first use and loads it at start-up; in cluster
mode it serves the partitions this broker owns, loaded when ownership arrives and forgotten when
it goes (server/cluster_runtime.py), exactly as the transaction coordinator's shards. Callers
(server/share_persister.py, server/share_state_api.py) get Kafka's coordinator errors for a
partition it does not serve: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, or
COORDINATOR_NOT_AVAILABLE before the topic exists."""

from __future__ import annotations

import asyncio
import base64
import logging
from inspect import isawaitable
from typing import Any, Callable

from ..broker.broker import Broker
from ..config import BrokerConfig
from ..protocol.errors import Error
from ..records.batch import build_coordinator_batch, decode_records, iter_batches
from ..records.offsets import partition_for
from ..records.share_state_records import StateBatch
from ..share.shard import Record, ShareCoordinatorShard, SharePartitionKey, SharePartitionState
from .coordinator_runtime import ShardState, durable_append
from .group_commit import GroupCommit

log = logging.getLogger("offsetd.share")

SHARE_STATE_TOPIC = "__share_group_state"
LOAD_CHUNK_BYTES = 5 * 1024 * 1024
# Kafka's topic configs: delete, never by time (DeleteRecords prunes it; not done here yet)
SHARE_STATE_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1", "compression.type": "producer"}


def share_state_key(sp: SharePartitionKey) -> str:
    """Kafka's coordinator key of a share-partition, "group:topicId:partition" (topic id in
    URL-safe base64 without padding): FindCoordinator key type 2 and the partition hash."""
    group_id, topic_id, partition = sp
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"{group_id}:{encoded}:{partition}"


def share_state_partition(sp: SharePartitionKey, num_partitions: int) -> int:
    """The `__share_group_state` partition of a share-partition: the Java string hash of its key,
    as for groups."""
    return partition_for(share_state_key(sp), num_partitions)


class ShareStateRuntime:
    """One shard and its partition log: writes go out one batch at a time, durable, then replayed.
    `state` and `generation` as the other coordinators' runtimes: a write finishing after an
    unload is not replayed (the next owner loads it from the log)."""

    def __init__(self, shard: ShareCoordinatorShard, plog: Any, fsync: bool, clock: Callable[[], int],
                 owned: bool = True, group_commit: GroupCommit | None = None) -> None:
        self.shard = shard
        self.plog = plog
        self.fsync = fsync
        self.group_commit = group_commit  # the fsyncs off the loop, with the other coordinators
        self.clock = clock
        self.state = ShardState.ACTIVE if owned else ShardState.UNLOADED
        self.generation = 0
        self._writing = asyncio.Lock()

    def _replay_chunk(self, offset: int) -> tuple[int, int]:
        """Replay the records of one chunk from `offset`: (next offset, records replayed); the
        offset unchanged at the end of the log."""
        chunk = self.plog.read(offset, LOAD_CHUNK_BYTES)
        count = 0
        for pos, header in iter_batches(chunk or b""):
            if not header.is_control:
                for record in decode_records(chunk[pos:pos + header.size]):
                    if record.key is not None:
                        self.shard.replay(record.key, record.value)
                        count += 1
            offset = header.base_offset + header.last_offset_delta + 1
        return offset, count

    def load_now(self) -> int:
        """Replay the partition from its start at once (single node, at start-up); the records replayed."""
        offset, end, count = self.plog.log_start_offset, self.plog.log_end_offset, 0
        while offset < end:
            before = offset
            offset, replayed = self._replay_chunk(offset)
            count += replayed
            if offset == before:
                break
        return count

    async def load(self) -> None:
        """Cluster mode, on ownership: forget, replay the partition chunk by chunk (yielding to the
        loop), then serve; stopped by an unload meanwhile."""
        if not self.plog.leader:
            self.state = ShardState.UNLOADED
            return
        self.state = ShardState.LOADING
        generation = self.generation
        self.shard.states.clear()
        offset, end, count = self.plog.log_start_offset, self.plog.log_end_offset, 0
        try:
            while offset < end:
                before = offset
                offset, replayed = self._replay_chunk(offset)
                count += replayed
                await asyncio.sleep(0)
                if generation != self.generation:
                    return
                if offset == before:
                    break
        except Exception as exc:
            if generation == self.generation:
                self.state = ShardState.FAILED
                log.error("%s-%d: load failed near offset %d: %s", SHARE_STATE_TOPIC, self.shard.partition, offset, exc)
            return
        self.state = ShardState.ACTIVE
        log.info("%s-%d loaded: %d records", SHARE_STATE_TOPIC, self.shard.partition, count)

    def unload(self) -> None:
        """Another broker coordinates this partition now: forget its state."""
        self.generation += 1
        self.state = ShardState.UNLOADED
        self.shard.states.clear()

    def stop(self) -> None:
        """Nothing runs on a timer here (the group and transaction runtimes' interface)."""

    def serving_error(self) -> int:
        """Loading -> COORDINATOR_LOAD_IN_PROGRESS; failed, unowned or fenced -> NOT_COORDINATOR."""
        if self.state is ShardState.LOADING:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        if self.state is not ShardState.ACTIVE or not self.plog.leader:
            return Error.NOT_COORDINATOR
        return Error.NONE

    async def apply(self, records: list[Record]) -> int:
        """Append `records` as one batch, durable, then replay them; an error code (the write
        failed, or the partition moved meanwhile: NOT_COORDINATOR)."""
        if not records:
            return Error.NONE
        async with self._writing:
            generation = self.generation
            now = self.clock()
            try:
                appended = durable_append(self.plog, build_coordinator_batch(records, now), now,
                                          self.fsync, self.group_commit)
                if isawaitable(appended):
                    await appended
            except Exception as exc:
                if generation != self.generation or not self.plog.leader:
                    return Error.NOT_COORDINATOR
                log.warning("%s-%d: write failed: %s", SHARE_STATE_TOPIC, self.shard.partition, exc)
                return Error.UNKNOWN_SERVER_ERROR
            if generation != self.generation:
                return Error.NOT_COORDINATOR  # durable, but the next owner replays it, not us
            for key, value in records:
                self.shard.replay(key, value)
            return Error.NONE


class ShareStatePersister:
    """The share coordinator of this broker: one runtime per `__share_group_state` partition. On
    one node (`local`) it creates the topic on first use and leads all of it; in cluster mode the
    runtimes arrive with the topic (add_runtimes) and serve once loaded."""

    def __init__(self, broker: Broker, config: BrokerConfig, clock: Callable[[], int], *,
                 num_partitions: int = 50, snapshot_update_records: int = 500, local: bool = True,
                 group_commit: GroupCommit | None = None) -> None:
        self.broker = broker
        self.group_commit = group_commit
        self.clock = clock
        self.fsync = config.get("offsets.topic.fsync.enable")
        self.num_partitions = num_partitions
        self.snapshot_update_records = snapshot_update_records
        self.local = local
        self.runtimes: list[ShareStateRuntime] = []
        # cluster mode: asks for `__share_group_state` in the catalogue (set by the server)
        self.create_state_topic: Callable[[], None] = lambda: None

    def open_existing(self) -> None:
        """At start-up on one node: load `__share_group_state` if an earlier run created it."""
        topic = self.broker.topics.get(SHARE_STATE_TOPIC)
        if topic is not None and not self.runtimes:
            self.add_runtimes(topic, owned=True)
            records = sum(runtime.load_now() for runtime in self.runtimes)
            log.info("loaded %s: %d records", SHARE_STATE_TOPIC, records)

    def add_runtimes(self, topic: Any, *, owned: bool) -> None:
        """One runtime per partition of `topic` (cluster mode: unowned until claimed)."""
        for index, plog in enumerate(topic.partitions):
            shard = ShareCoordinatorShard(index, self.snapshot_update_records)
            self.runtimes.append(ShareStateRuntime(shard, plog, self.fsync, self.clock, owned, self.group_commit))

    def ready(self) -> bool:
        """Whether `__share_group_state` exists: on one node it is created now; in cluster mode
        it is asked for and False is answered until its partitions arrive."""
        if not self.runtimes:
            if not self.local:
                self.create_state_topic()
                return False
            topic = self.broker.topics.create(SHARE_STATE_TOPIC, self.num_partitions, SHARE_STATE_TOPIC_CONFIGS,
                                              self.clock(), internal=True)
            self.add_runtimes(topic, owned=True)
        return True

    def partition_of(self, sp: SharePartitionKey) -> int | None:
        """The `__share_group_state` partition of a share-partition (None: no topic yet)."""
        return share_state_partition(sp, len(self.runtimes)) if self.ready() else None

    def _serving(self, sp: SharePartitionKey) -> tuple[int, ShareStateRuntime | None]:
        partition = self.partition_of(sp)
        if partition is None:
            return Error.COORDINATOR_NOT_AVAILABLE, None
        runtime = self.runtimes[partition]
        error = runtime.serving_error()
        return (error, None) if error else (Error.NONE, runtime)

    async def initialize(self, sp: SharePartitionKey, state_epoch: int, start_offset: int) -> int:
        """InitializeShareGroupState: a fresh snapshot at `start_offset`."""
        error, runtime = self._serving(sp)
        if runtime is None:
            return error
        error, records = runtime.shard.initialize(sp, state_epoch, start_offset, self.clock())
        return error or await runtime.apply(records)

    async def read(self, sp: SharePartitionKey, leader_epoch: int) -> tuple[int, SharePartitionState | None]:
        """ReadShareGroupState by a (new) leader at `leader_epoch`."""
        error, runtime = self._serving(sp)
        if runtime is None:
            return error, None
        error, state, records = runtime.shard.read(sp, leader_epoch)
        if error:
            return error, None
        error = await runtime.apply(records)
        return (error, None) if error else (Error.NONE, state)

    async def summary(self, sp: SharePartitionKey) -> tuple[int, SharePartitionState | None]:
        """ReadShareGroupStateSummary: the state as held, nothing written (None: never initialized)."""
        if not self.runtimes and self.local:
            return Error.NONE, None
        error, runtime = self._serving(sp)
        return (error, None) if runtime is None else (Error.NONE, runtime.shard.states.get(sp))

    async def write(self, sp: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch], delivery_complete_count: int = -1) -> int:
        """WriteShareGroupState from the partition leader: the changed batches."""
        error, runtime = self._serving(sp)
        if runtime is None:
            return error
        error, records = runtime.shard.write(sp, state_epoch, leader_epoch, start_offset, tuple(batches),
                                             self.clock(), delivery_complete_count)
        return error or await runtime.apply(records)

    async def delete(self, sp: SharePartitionKey) -> int:
        """DeleteShareGroupState: a tombstone, so the next read finds the share-partition new."""
        if not self.runtimes and self.local:
            return Error.NONE
        error, runtime = self._serving(sp)
        if runtime is None:
            return error
        error, records = runtime.shard.delete(sp)
        return error or await runtime.apply(records)

    def states_of(self, group_id: str) -> dict[SharePartitionKey, SharePartitionState]:
        """Every share-partition of a group this broker holds state for (cluster mode: of the
        partitions it owns)."""
        return {key: state for runtime in self.runtimes if runtime.state is ShardState.ACTIVE
                for key, state in runtime.shard.states.items() if key[0] == group_id}
