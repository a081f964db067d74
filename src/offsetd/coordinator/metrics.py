"""Coordinator meters as plain counters (sans-IO); an exporter reads them at scrape time.

Names follow Kafka's group-coordinator-metrics sensors (reference §2 "Metrics")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CoordinatorCounters:
    """Monotonic counts of one shard; rates are derived by the scraper."""

    offset_commits: int = 0          # offset-commit-count: records written by OffsetCommit
    offset_expirations: int = 0      # offset-expiration-count: offsets removed by the retention sweep
    offset_deletions: int = 0        # offset-deletion-count: tombstones written by OffsetDelete
    completed_rebalances: int = 0    # group-completed-rebalance-count
