"""The broker's own look at consumer lag: offsets from its coordinator shards, log ends and record
timestamps from its logs (stub)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..lag.model import LagSnapshot


class BrokerLagSource:
    """LagSource over this broker's shards and logs."""

    def __init__(self, runtimes: Sequence[Any], logs: Any, clock: Callable[[], int]) -> None:
        self.runtimes = runtimes
        self.logs = logs
        self.clock = clock

    async def snapshot(self) -> LagSnapshot:
        return LagSnapshot(taken_at_ms=self.clock())
