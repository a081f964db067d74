"""What the metrics and the JSON API show: a read of the coordinator shards taken at request time.

Reading 100k groups (each group's expiry time means decoding its offsets) takes a good fraction of
a second, so the reads are written as *cooperative generators*: they yield (None) whenever they
have used up a time slice, and the caller decides what a yield means. The HTTP server awaits
`asyncio.sleep(0)` there, letting the broker serve Kafka requests between slices; synchronous
callers (tests, tools) just run the generator to the end. Only plain reads of the shard: nothing
here changes coordinator state.

Shards are duck-typed (`ShardRuntime` of `server/`; this package does not import `server/`):
`.shard` (GroupCoordinatorShard), `.state.value` ("loading" / "active" / "failed"),
`.load_time_ms`, `.records_loaded`. Groups and offsets are read from active shards only: a loading
shard holds a partial replay and a failed one serves nothing.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from ..coordinator.group import GroupState
from ..coordinator.shard import GroupCoordinatorShard
from ..records.offset_commit_value import decode_offset_commit_value
from ..records.offsets import decode_key, partition_for

SLICE_SECONDS = 0.005  # longest stretch of work between two yields
GROUP_STATES = tuple(s.value for s in GroupState)  # Empty, PreparingRebalance, ..., Dead
SHARD_STATES = ("loading", "active", "failed")


class Runtime(Protocol):
    """The parts of server.coordinator_runtime.ShardRuntime read here."""

    shard: GroupCoordinatorShard
    load_time_ms: float
    records_loaded: int
    plog: Any  # its __consumer_offsets partition log; `.log_dir` is its directory's health
    group_commit: Any  # its fsyncs (server/group_commit.py; None without); `.journal` the coordinators' journal

    @property
    def state(self) -> Any: ...  # an enum whose .value is one of SHARD_STATES


class Slicer:
    """Tells a cooperative generator when its time slice is used up."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = SLICE_SECONDS if seconds is None else seconds
        self.deadline = time.perf_counter() + self.seconds

    def due(self) -> bool:
        """True (and a new slice starts) once the current slice has run out."""
        now = time.perf_counter()
        if now < self.deadline:
            return False
        self.deadline = now + self.seconds
        return True


def run(steps: Iterator[Any]) -> None:
    """Drive a cooperative generator to its end without pausing (synchronous callers)."""
    for _ in steps:
        pass


# One group as /v1/groups lists it and the per-group metric reads it:
# (group, state, protocol_type, members, offsets, earliest_expiry_ms). A plain tuple of atoms, not
# a class: the garbage collector stops tracking such tuples, so a read of 100k groups does not
# push the process towards a full (stop-the-world) collection of the coordinator's objects.
GroupRow = tuple[str, str, str, int, int, "int | None"]
GROUP, STATE, PROTOCOL_TYPE, MEMBERS, OFFSETS, EARLIEST_EXPIRY = range(6)
ROW_FIELDS = ("group", "state", "protocol_type", "members", "offsets", "earliest_expiry_ms")


def row_json(row: GroupRow) -> dict[str, Any]:
    """{group, state, protocol_type, members, offsets, earliest_expiry_ms (None: never)}."""
    return dict(zip(ROW_FIELDS, row))


@dataclass(slots=True)
class ShardRow:
    """One `__consumer_offsets` partition: its load state and its coordinator's counters."""

    partition: int
    state: str
    load_time_ms: float
    records_loaded: int
    offset_commits: int
    offset_expirations: int
    offset_deletions: int
    completed_rebalances: int
    num_offsets: int = 0
    groups: list[GroupRow] = field(default_factory=list)  # sorted by group id; empty unless active
    # groups by state, all of them, when `groups` holds only those a filter wanted (None: count `groups`)
    counts: dict[str, int] | None = None


@dataclass(slots=True)
class Snapshot:
    shards: list[ShardRow] = field(default_factory=list)
    seconds: float = 0.0  # how long taking it took (wall time, including pauses)
    log_dirs: dict[str, tuple[bool, int]] = field(default_factory=dict)  # path -> (offline, failed writes)
    journal: tuple[int, int, int, bool] | None = None  # rounds, appends, bytes, bypassed (None: no journal)

    def groups(self) -> Iterator[GroupRow]:
        """Every group of every active shard, in group id order (a lazy merge of sorted shards)."""
        return heapq.merge(*(s.groups for s in self.shards))

    def num_groups(self) -> dict[str, int]:
        counts = dict.fromkeys(GROUP_STATES, 0)
        for shard in self.shards:
            if shard.counts is not None:
                for state, count in shard.counts.items():
                    counts[state] = counts.get(state, 0) + count
                continue
            for row in shard.groups:
                counts[row[STATE]] = counts.get(row[STATE], 0) + 1
        return counts


def state_counts(shard: GroupCoordinatorShard) -> dict[str, int]:
    """The shard's groups by state, as group_overview names them for each of group_ids(), counted
    at C speed (a million classic groups in tens of ms): a consumer or share group's state wins
    over the classic entry beside it."""
    classic = shard.groups
    counts: Counter[Any] = Counter(map(attrgetter("state"), classic.values()))
    for kind in (shard.consumer.groups, shard.share.groups):
        for group_id, group in kind.items():
            beside = classic.get(group_id)
            if beside is not None:
                counts[beside.state] -= 1
            elif kind is shard.share.groups:
                continue  # group_ids() lists a share group only where a classic entry stands beside it
            counts[group.state()] += 1
    by_name: dict[str, int] = {}
    for state, count in counts.items():  # the kinds' enums share names (Empty, Stable, ...)
        if count:
            by_name[state.value] = by_name.get(state.value, 0) + count
    return by_name


def earliest_expiry(shard: GroupCoordinatorShard, group_id: str) -> int | None:
    """The earliest time at which one of the group's offsets expires if nothing changes, or None
    when none of them will (no offsets, subscribed, rebalancing, retention -1)."""
    return min((at for at in shard.expiry_times(group_id).values() if at is not None), default=None)


def take_snapshot(runtimes: Sequence[Runtime], out: Snapshot, slicer: Slicer | None = None,
                  wanted: Callable[[str], Any] | None = None) -> Iterator[None]:
    """Cooperative generator filling `out` from the shards; yields when a time slice is used up.
    With `wanted` (`metrics.group.filter`), only the groups it accepts have rows (their earliest
    expiry is the costly part: every offset decoded) and the shard's `counts` count them all.

    Each shard's group ids are copied first, so groups added while the read is paused are left
    for the next read and groups removed meanwhile are skipped."""
    slicer = slicer or Slicer()
    started = time.perf_counter()
    for runtime in runtimes:
        log_dir = runtime.plog.log_dir
        out.log_dirs[str(log_dir.path)] = (log_dir.offline, log_dir.failed_writes)
        journal = runtime.group_commit.journal if runtime.group_commit is not None else None
        if journal is not None:
            out.journal = (journal.rounds, journal.appends, journal.bytes, journal.bypassed)
    for runtime in runtimes:
        shard = runtime.shard
        counters = shard.counters
        row = ShardRow(partition=shard.partition, state=runtime.state.value,
                       load_time_ms=float(runtime.load_time_ms), records_loaded=runtime.records_loaded,
                       offset_commits=counters.offset_commits, offset_expirations=counters.offset_expirations,
                       offset_deletions=counters.offset_deletions,
                       completed_rebalances=counters.completed_rebalances)
        out.shards.append(row)
        if row.state != "active":
            continue
        row.num_offsets = sum(map(len, shard.offsets.values()))
        offsets = shard.offsets
        group_ids = shard.group_ids()  # ids only: (id, group) pairs would stay tracked by the GC
        if wanted is not None:
            row.counts = state_counts(shard)
            group_ids = list(filter(wanted, group_ids))
            if slicer.due():
                yield
        for group_id in group_ids:
            overview = shard.group_overview(group_id)
            if overview is None:
                continue
            stored = offsets.get(group_id)
            row.groups.append((group_id, *overview, len(stored) if stored else 0,
                               earliest_expiry(shard, group_id) if stored else None))
            if slicer.due():
                yield
        row.groups.sort()  # by group id (unique within a shard)
        if slicer.due():
            yield
    out.seconds = time.perf_counter() - started


# ---------------------------------------------------------------------------------- one group

class GroupNotFound(LookupError):
    pass


class CoordinatorUnavailable(RuntimeError):
    """The group's shard is loading (COORDINATOR_LOAD_IN_PROGRESS) or failed (COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, error: str, partition: int) -> None:
        super().__init__(error)
        self.error = error
        self.partition = partition


def group_detail(runtimes: Sequence[Runtime], group_id: str) -> dict[str, Any]:
    """/v1/groups/{group}: state, members, retention and every offset with its expiry time.
    Raises GroupNotFound (unknown or Dead) or CoordinatorUnavailable."""
    runtime = runtimes[partition_for(group_id, len(runtimes))]
    shard = runtime.shard
    state = runtime.state.value
    if state != "active":
        raise CoordinatorUnavailable(
            "COORDINATOR_LOAD_IN_PROGRESS" if state == "loading" else "COORDINATOR_NOT_AVAILABLE", shard.partition)
    consumer = shard.consumer.groups.get(group_id)
    group = shard.groups.get(group_id)
    if consumer is not None:  # KIP-848: the group epoch stands for the generation, no leader
        about: dict[str, Any] = {
            "state": consumer.state().value, "protocol_type": "consumer",
            "protocol": shard.consumer.assignor_name(consumer.members), "generation": consumer.group_epoch,
            "leader": "", "members": [{"member_id": m.member_id, "client_id": m.client_id,
                                       "client_host": m.client_host, "group_instance_id": m.instance_id}
                                      for m in consumer.members.values()],
            "subscribed_topics": sorted(consumer.subscribed_topics())}
    elif group is None or group.state is GroupState.DEAD:
        raise GroupNotFound(group_id)
    else:
        subscribed = group.subscribed_topics
        about = {
            "state": group.state.value, "protocol_type": group.protocol_type or "",
            "protocol": group.protocol_name or "", "generation": group.generation, "leader": group.leader_id,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                         "group_instance_id": m.group_instance_id} for m in group.members.values()],
            "subscribed_topics": None if subscribed is None else sorted(subscribed)}
    expiry = shard.expiry_times(group_id)
    committed_at = {}
    for key, raw in shard.offsets.get(group_id, {}).items():
        k: Any = decode_key(key)
        committed_at[(k.topic, k.partition)] = decode_offset_commit_value(raw).commit_timestamp
    offsets = [
        {"topic": topic, "partition": partition, "offset": offset, "leader_epoch": epoch, "metadata": metadata,
         "commit_timestamp_ms": committed_at.get((topic, partition)),
         "expires_at_ms": expiry.get((topic, partition))}
        for topic, rows in shard.fetch_offsets(group_id, None)
        for partition, offset, epoch, metadata in rows
    ]
    return {
        "group": group_id,
        "state": about["state"],
        "protocol_type": about["protocol_type"],
        "protocol": about["protocol"],
        "generation": about["generation"],
        "leader": about["leader"],
        "coordinator_partition": shard.partition,
        "members": about["members"],
        "subscribed_topics": about["subscribed_topics"],
        "retention_ms": shard.retention_ms(group_id),
        "earliest_expiry_ms": min((o["expires_at_ms"] for o in offsets if o["expires_at_ms"] is not None),
                                  default=None),
        "offsets": offsets,
    }


def rows_json(rows: Iterable[GroupRow]) -> list[dict[str, Any]]:
    return [row_json(row) for row in rows]
