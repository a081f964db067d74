"""The lag console's history against any Kafka cluster (`offsetd console --bootstrap-server`): the
group's commits read back from `__consumer_offsets` through the protocol (offsets_log.read_cluster,
as `--describe --health` reads them), and each partition's log end at past instants from
ListOffsets by timestamp - the same HistoryPlan as the broker's own console (metrics/history.py).

A plain Kafka cluster answers one ListOffsets per instant (batched over the group's partitions),
and its answers carry the found record's timestamp: those are the record timestamps the time-lag
series uses (the record at an offset is dated by the first instant whose answer lies past it, so
time lag is exact to within one step of the chart's time axis), rather than one fetch per record.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_right
from typing import Any

from ..lag.history import CommitHistory, TopicPartition
from ..metrics.history import build_history
from ..records.offsets import GroupMetadataKey, OffsetCommitKey
from .cluster import Cluster
from .model import TP
from .offsets_log import read_cluster


def commit_history(entries: Any) -> CommitHistory:
    """A group's commits from its offsets-log entries (tombstones forget, as a coordinator would)."""
    history = CommitHistory()
    for entry in entries:
        key = entry.key
        if type(key) is OffsetCommitKey:
            if entry.value is None:
                history.delete(key.topic, key.partition)
            else:
                stamp = entry.value.commit_timestamp
                history.commit(key.topic, key.partition, entry.value.offset, stamp if stamp >= 0 else entry.timestamp)
        elif type(key) is GroupMetadataKey and entry.value is None:
            history.delete_group()
    return history


class AdminHistory:
    """`history(group, since_ms, points)` for MetricsHttpServer, over a Cluster (blocking clients on
    a worker thread, one history at a time)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lock = asyncio.Lock()

    async def history(self, group: str, since_ms: int, points: int) -> dict[str, Any]:
        async with self._lock:
            commits = await asyncio.to_thread(
                lambda: commit_history(read_cluster(self.cluster.client_config, group, self.cluster.timeout_s * 3)))
            bounds = await asyncio.to_thread(self.cluster.log_bounds, [TP(*tp) for tp in commits.partitions])
            dated: dict[TopicPartition, list[tuple[int, int]]] = {}  # tp -> [(offset found, its record's ts)]

            async def offsets_for_times(topic: str, partition: int, times: list[int]) -> list[int | None]:
                answers = await asyncio.to_thread(self._by_times, TP(topic, partition), times)
                dated[(topic, partition)] = sorted((o, ts) for o, ts in answers if o is not None and ts is not None)
                return [o for o, _ in answers]

            async def timestamps(topic: str, partition: int, offsets: list[int]) -> list[int | None]:
                known = dated.get((topic, partition), [])
                found = [o for o, _ in known]
                out: list[int | None] = []
                for offset in offsets:
                    i = bisect_right(found, offset) - 1  # the latest answer at or before the offset
                    out.append(known[i][1] if i >= 0 and found[i] == offset else
                               (known[i + 1][1] if i + 1 < len(known) else None))
                return out

            return await build_history(group, commits, {tuple(tp): b for tp, b in bounds.items()}, offsets_for_times,
                                       timestamps, since_ms, int(time.time() * 1000), points)

    def _by_times(self, tp: TP, times: list[int]) -> list[tuple[int | None, int | None]]:
        """(first offset with a timestamp >= t, that record's timestamp) per instant (None: none)."""
        out: list[tuple[int | None, int | None]] = []
        for t in times:
            found = self.cluster.list_offsets_by_time([tp], t).get(tp)
            out.append(found if found is not None else (None, None))
        return out
