"""What Metadata and FindCoordinator say about the cluster: its brokers and who leads what.

The embedded engine is one broker leading everything (LocalView); cluster mode gives the broker
a view backed by its membership (server/cluster_runtime.py). Handlers ask only this interface.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..config import BrokerConfig

NO_LEADER = (-1, -1)


class ClusterView(Protocol):
    """Brokers and partition leaders as clients should see them."""

    controller_id: int

    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker."""
        ...

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        """(node id, leader epoch) of the partition's live leader, or NO_LEADER."""
        ...

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where clients reach a live broker, or None."""
        ...


class LocalView:
    """One broker, leading every partition (leader epoch -1: there are no elections)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.controller_id = config.get("node.id")

    def brokers(self) -> list[tuple[int, str, int]]:
        advertised = self.config.advertised_listener
        return [(self.controller_id, advertised.host, advertised.port)]

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        return self.controller_id, -1

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        advertised = self.config.advertised_listener
        return (advertised.host, advertised.port) if node_id == self.controller_id else None
