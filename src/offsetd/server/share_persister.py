"""The share coordinator as its callers see it (Kafka's persister): the partition leaders'
side (server/share_fetch_api.py) and the group coordinator's admin side
(server/share_group_offsets.py) initialize, read, write, summarize and delete a share-partition's
state here, and this module finds who holds it. On one node, and in cluster mode for a
`__share_group_state` partition this broker owns, that is the local share coordinator
(server/share_state.py); otherwise the owner, asked with the internal state APIs 83-87 over
server/peer_client.py as Kafka's leaders do. NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and a lost connection are retried against the owner of the moment
until a deadline: ownership moves when a broker joins, leaves or dies."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, TypeVar

from ..broker.broker import Broker
from ..protocol.errors import Error
from ..records.share_state_records import StateBatch
from ..share.shard import SharePartitionKey, SharePartitionState
from .peer_client import PeerClient
from .share_state import SHARE_STATE_TOPIC, ShareStatePersister

log = logging.getLogger("offsetd.share")

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, READ_SUMMARY: 1}
RETRIABLE = frozenset({Error.NOT_COORDINATOR, Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE})
RETRY_DEADLINE_S = 15.0  # at least; twice broker.session.timeout.ms when longer (a dead owner is replaced)
RETRY_BACKOFF_S = 0.1

T = TypeVar("T")
Answer = tuple[int, SharePartitionState | None]


class SharePersister:
    """Routes each share-partition's state request to the share coordinator that owns it."""

    def __init__(self, broker: Broker, coordinator: ShareStatePersister, node_id: int,
                 remote: PeerClient | None = None, deadline_s: float = RETRY_DEADLINE_S) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.node_id = node_id
        self.remote = remote  # None: one node, everything is local; set when the broker joins a cluster
        self.deadline_s = deadline_s

    def _owner(self, sp: SharePartitionKey) -> int | None:
        """The broker leading the share-partition's `__share_group_state` partition (None: none now)."""
        partition = self.coordinator.partition_of(sp)
        if partition is None:
            return None
        node, _ = self.broker.cluster.leader(self.broker.topics.get(SHARE_STATE_TOPIC), partition)
        return node if node >= 0 else None

    async def _call(self, sp: SharePartitionKey, local: Callable[[], Awaitable[T]], api_key: int,
                    body: Callable[[], dict[str, Any]], answer: Callable[[Any], T], failed: Callable[[int], T],
                    code: Callable[[T], int], deadline_s: float | None = None) -> T:
        """Ask the owner of the moment (this broker or a peer) until an answer that is not a
        coordinator error, or the deadline (`deadline_s`, else the persister's)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.deadline_s if deadline_s is None else deadline_s)
        while True:
            node = None if self.remote is None else self._owner(sp)
            if self.remote is None or node == self.node_id:
                result = await local()
            elif node is None:
                result = failed(Error.COORDINATOR_NOT_AVAILABLE)
            else:
                try:
                    response = await self.remote.request(node, api_key, VERSIONS[api_key], {
                        "group_id": sp[0], "topics": [{"topic_id": sp[1], "partitions": [{"partition": sp[2],
                                                                                           **body()}]}]})
                    result = answer(response.results[0].partitions[0])
                except (OSError, asyncio.TimeoutError, IndexError) as exc:
                    log.debug("share coordinator %d not reached for %s: %s", node, sp, exc)
                    result = failed(Error.NOT_COORDINATOR)
            if code(result) not in RETRIABLE or loop.time() >= deadline:
                return result
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def initialize(self, sp: SharePartitionKey, state_epoch: int, start_offset: int) -> int:
        return await self._call(sp, lambda: self.coordinator.initialize(sp, state_epoch, start_offset), INITIALIZE,
                                lambda: {"state_epoch": state_epoch, "start_offset": start_offset},
                                lambda p: int(p.error_code), _same, _same)

    async def read(self, sp: SharePartitionKey, leader_epoch: int) -> Answer:
        return await self._call(sp, lambda: self.coordinator.read(sp, leader_epoch), READ,
                                lambda: {"leader_epoch": leader_epoch}, _read_state, _no_state, _first)

    async def summary(self, sp: SharePartitionKey, deadline_s: float | None = None) -> Answer:
        """The state as held, nothing written (None: never initialized)."""
        return await self._call(sp, lambda: self.coordinator.summary(sp), READ_SUMMARY,
                                lambda: {"leader_epoch": -1}, _summary_state, _no_state, _first, deadline_s)

    async def write(self, sp: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch], delivery_complete_count: int = -1) -> int:
        return await self._call(
            sp, lambda: self.coordinator.write(sp, state_epoch, leader_epoch, start_offset, batches,
                                               delivery_complete_count), WRITE,
            lambda: {"state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start_offset,
                     "delivery_complete_count": delivery_complete_count,
                     "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                        "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                       for b in batches]},
            lambda p: int(p.error_code), _same, _same)

    async def delete(self, sp: SharePartitionKey) -> int:
        return await self._call(sp, lambda: self.coordinator.delete(sp), DELETE, dict,
                                lambda p: int(p.error_code), _same, _same)

    def states_of(self, group_id: str) -> dict[SharePartitionKey, SharePartitionState]:
        """The group's share-partitions this broker's share coordinator holds (all of them on one node)."""
        return self.coordinator.states_of(group_id)


def _same(value: int) -> int:
    return value


def _first(answer: Answer) -> int:
    return answer[0]


def _no_state(code: int) -> Answer:
    return code, None


def _read_state(p: Any) -> Answer:
    """A ReadShareGroupState partition result as the local coordinator's answer."""
    if p.error_code:
        return int(p.error_code), None
    batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches)
    return Error.NONE, SharePartitionState(-1, p.state_epoch, -1, p.start_offset, -1, -1, batches)


def _summary_state(p: Any) -> Answer:
    """A ReadShareGroupStateSummary partition result: None for a share-partition never initialized
    (UNKNOWN_TOPIC_OR_PARTITION, start offset -1 from the owner)."""
    if p.error_code == Error.UNKNOWN_TOPIC_OR_PARTITION:
        return Error.NONE, None
    if p.error_code:
        return int(p.error_code), None
    return Error.NONE, SharePartitionState(-1, p.state_epoch, p.leader_epoch, p.start_offset, -1, -1, (),
                                           p.delivery_complete_count)
