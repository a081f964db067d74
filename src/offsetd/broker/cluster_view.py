"""What Metadata and FindCoordinator say about the cluster: its brokers and who leads what.

The embedded engine is one broker leading everything (LocalView); cluster mode gives the broker
a view backed by its membership (server/cluster_runtime.py). Handlers ask only this interface.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from ..config import BrokerConfig
from .request_context import request_listener

NO_LEADER = (-1, -1)
HANDOFF_WAIT_S = 1.0  # how long FindCoordinator waits for a partition changing hands to have a leader

T = TypeVar("T")

class ClusterView(Protocol):
    """Brokers and partition leaders as clients should see them."""

    controller_id: int

    def brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker on `listener` (None: the request's)."""
        ...

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        """(node id, leader epoch) of the partition's live leader, or NO_LEADER."""
        ...

    def leaders(self, topic: Any) -> list[tuple[int, int]]:
        """leader(topic, p) of every partition p of the topic, in order (Metadata asks for all)."""
        ...

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """Where clients of `listener` (None: the request's) reach a live broker, or None."""
        ...


class LocalView:
    """One broker, leading every partition at the epoch its log opened at (storage/partition_log.py
    `lead_next_epoch`: one more than the newest epoch that wrote to it)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.controller_id = config.get("node.id")

    def _advertised(self, listener: str | None) -> tuple[str, int]:
        name = request_listener(listener)
        try:
            advertised = self.config.advertised_for(name) if name else self.config.advertised_listener
        except KeyError:
            advertised = self.config.advertised_listener
        return advertised.host, advertised.port

    def brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        return [(self.controller_id, *self._advertised(listener))]

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        partitions = topic.partitions if topic is not None else ()
        return self.controller_id, partitions[partition].leader_epoch if 0 <= partition < len(partitions) else -1

    def leaders(self, topic: Any) -> list[tuple[int, int]]:
        node = self.controller_id
        return [(node, p.leader_epoch) for p in topic.partitions]

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        return self._advertised(listener) if node_id == self.controller_id else None


def leader_hint(view: ClusterView, topic: Any, partition: int) -> dict[str, int]:
    """KIP-951's `current_leader` of a NOT_LEADER_OR_FOLLOWER answer (Produce v10+, Fetch v12+):
    clients go straight to the new leader instead of refreshing all metadata first."""
    node, epoch = view.leader(topic, partition)
    return {"leader_id": node, "leader_epoch": epoch}


def node_endpoints(view: ClusterView, nodes: set[int]) -> list[dict[str, Any]]:
    """KIP-951's `node_endpoints`: where the leaders named in `current_leader` fields listen."""
    endpoints = []
    for node in sorted(n for n in nodes if n >= 0):
        where = view.endpoint(node)
        if where is not None:
            endpoints.append({"node_id": node, "host": where[0], "port": where[1], "rack": None})
    return endpoints


def once_led(view: ClusterView, answer: Callable[[], T], unled: Callable[[T], bool]) -> "T | asyncio.Future[T]":
    """`answer()`, at once unless it names no coordinator for some key and the view can change
    (cluster mode: a partition between its release and the next claim). Then the answer waits
    for the view to change, at most HANDOFF_WAIT_S: clients told COORDINATOR_NOT_AVAILABLE ask
    again only 0.5-1 s later (librdkafka), longer than a graceful handoff takes."""
    body = answer()
    changed: Callable[[float], Awaitable[None]] | None = getattr(view, "changed", None)
    if changed is None or not unled(body):
        return body

    async def later() -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDOFF_WAIT_S
        current = body
        while unled(current) and (left := deadline - loop.time()) > 0:
            await changed(left)
            current = answer()
        return current
    return asyncio.ensure_future(later())
