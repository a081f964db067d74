"""The broker's built-in lag alerts (`lag.alert.*`): evaluate the rules on the broker's own look
at lag every interval and notify (stub)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from ..config import BrokerConfig
from ..lag.model import LagSource


class LagAlerts:
    """Periodic evaluation of the configured lag alert rules; a prometheus_client Collector."""

    def __init__(self, config: BrokerConfig, source: LagSource, clock: Callable[[], int]) -> None:
        self.config = config
        self.source = source
        self.clock = clock

    @classmethod
    def from_config(cls, config: BrokerConfig, source: LagSource, clock: Callable[[], int]) -> "LagAlerts | None":
        """None when no rule is configured."""
        return None

    async def run(self) -> None:
        """Evaluate forever (cancelled at shutdown)."""

    def collect(self) -> Iterator[Any]:
        return iter(())
