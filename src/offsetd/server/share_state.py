"""The share coordinator on one node: `__share_group_state` partitions, each with its sans-IO
shard (share/shard.py), written durably and replayed, and loaded at start-up (reference
share-groups.md §5). The partition leaders' side (server/share_fetch_api.py) calls it as Kafka's
leaders call the persister: initialize, read and write a share-partition's state, each answered
once the records are durable (fsync before the answer, like commits)."""

from __future__ import annotations

import asyncio
import base64
import logging
from inspect import isawaitable
from typing import Any, Callable

from ..broker.broker import Broker
from ..config import BrokerConfig
from ..records.batch import build_batch, decode_records, iter_batches
from ..records.offsets import partition_for
from ..records.share_state_records import StateBatch
from ..share.shard import Record, ShareCoordinatorShard, SharePartitionKey, SharePartitionState

log = logging.getLogger("offsetd.share")

SHARE_STATE_TOPIC = "__share_group_state"
LOAD_CHUNK_BYTES = 5 * 1024 * 1024


def share_state_partition(sp: SharePartitionKey, num_partitions: int) -> int:
    """Kafka's `__share_group_state` partition of a share-partition: the Java string hash of
    "group:topicId:partition" (topic id in URL-safe base64 without padding), as for groups."""
    group_id, topic_id, partition = sp
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return partition_for(f"{group_id}:{encoded}:{partition}", num_partitions)


class ShareStateRuntime:
    """One shard and its partition log: writes go out one batch at a time, durable, then replayed."""

    def __init__(self, shard: ShareCoordinatorShard, plog: Any, fsync: bool, clock: Callable[[], int]) -> None:
        self.shard = shard
        self.plog = plog
        self.fsync = fsync
        self.clock = clock
        self._writing = asyncio.Lock()

    def load(self) -> int:
        """Replay the partition from its start; the records replayed."""
        offset, end, count = self.plog.log_start_offset, self.plog.log_end_offset, 0
        while offset < end:
            chunk = self.plog.read(offset, LOAD_CHUNK_BYTES)
            if not chunk:
                break
            for pos, header in iter_batches(chunk):
                for record in decode_records(chunk[pos:pos + header.size]):
                    if record.key is not None:
                        self.shard.replay(record.key, record.value)
                        count += 1
                offset = header.base_offset + header.last_offset_delta + 1
        return count

    async def apply(self, records: list[Record]) -> None:
        """Append `records` as one batch, durable, then replay them."""
        if not records:
            return
        async with self._writing:
            now = self.clock()
            appended = self.plog.append(build_batch([(k, v, now, []) for k, v in records]), now, sync=self.fsync)
            if isawaitable(appended):
                await appended
            for key, value in records:
                self.shard.replay(key, value)


class ShareStatePersister:
    """The share coordinator of this broker (single node: it leads every `__share_group_state`
    partition), created with its topic on first use."""

    def __init__(self, broker: Broker, config: BrokerConfig, clock: Callable[[], int], *,
                 num_partitions: int = 50, snapshot_update_records: int = 500) -> None:
        self.broker = broker
        self.clock = clock
        self.fsync = config.get("offsets.topic.fsync.enable")
        self.num_partitions = num_partitions
        self.snapshot_update_records = snapshot_update_records
        self.runtimes: list[ShareStateRuntime] = []

    def open_existing(self) -> None:
        """At start-up: load `__share_group_state` if an earlier run created it."""
        topic = self.broker.topics.get(SHARE_STATE_TOPIC)
        if topic is not None and not self.runtimes:
            self._add_runtimes(topic)
            records = sum(runtime.load() for runtime in self.runtimes)
            log.info("loaded %s: %d records", SHARE_STATE_TOPIC, records)

    def _add_runtimes(self, topic: Any) -> None:
        for index, plog in enumerate(topic.partitions):
            shard = ShareCoordinatorShard(index, self.snapshot_update_records)
            self.runtimes.append(ShareStateRuntime(shard, plog, self.fsync, self.clock))

    def _runtime(self, sp: SharePartitionKey) -> ShareStateRuntime:
        if not self.runtimes:
            # Kafka's topic configs: delete, never by time (DeleteRecords prunes it; not done here yet)
            topic = self.broker.topics.create(SHARE_STATE_TOPIC, self.num_partitions,
                                              {"cleanup.policy": "delete", "retention.ms": "-1"},
                                              self.clock(), internal=True)
            self._add_runtimes(topic)
        return self.runtimes[share_state_partition(sp, len(self.runtimes))]

    async def initialize(self, sp: SharePartitionKey, state_epoch: int, start_offset: int) -> int:
        runtime = self._runtime(sp)
        error, records = runtime.shard.initialize(sp, state_epoch, start_offset, self.clock())
        await runtime.apply(records)
        return error

    async def read(self, sp: SharePartitionKey, leader_epoch: int) -> tuple[int, SharePartitionState | None]:
        runtime = self._runtime(sp)
        error, state, records = runtime.shard.read(sp, leader_epoch)
        await runtime.apply(records)
        return error, state

    async def delete(self, sp: SharePartitionKey) -> int:
        """DeleteShareGroupState: a tombstone, so the next read finds the share-partition new."""
        if not self.runtimes:
            return 0
        runtime = self._runtime(sp)
        error, records = runtime.shard.delete(sp)
        await runtime.apply(records)
        return error

    def states_of(self, group_id: str) -> dict[SharePartitionKey, SharePartitionState]:
        """Every share-partition of a group the coordinator holds state for."""
        return {key: state for runtime in self.runtimes for key, state in runtime.shard.states.items()
                if key[0] == group_id}

    def stored(self, sp: SharePartitionKey) -> SharePartitionState | None:
        """The state as the coordinator holds it (None: never initialized)."""
        return self._runtime(sp).shard.states.get(sp) if self.runtimes else None

    async def write(self, sp: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch], delivery_complete_count: int = -1) -> int:
        runtime = self._runtime(sp)
        error, records = runtime.shard.write(sp, state_epoch, leader_epoch, start_offset, tuple(batches),
                                             self.clock(), delivery_complete_count)
        await runtime.apply(records)
        return error

