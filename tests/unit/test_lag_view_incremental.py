"""The broker's incremental look at lag (metrics/lag_view.py) against a full recomputation: after
random commits, appends, record deletions, offset deletions, expirations, group deletions, topic
deletion, in-flight commits, unreadable record timestamps, member changes and share-partition
moves, the kept look's rows and its /metrics text equal those of a fresh source that keeps nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator_helpers import Harness, form_group, stabilize
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.coordinator.share_group_ops import ShareGroupHeartbeatRequest
from offsetd.lag.compute import LogBounds
from offsetd.lag.model import LagSnapshot
from offsetd.metrics import lag_exporter
from offsetd.metrics.lag_view import BrokerLagSource
from offsetd.metrics.snapshot import EARLIEST_EXPIRY, Snapshot, run, state_counts, take_snapshot
from offsetd.records.consumer_protocol import encode_consumer_assignment
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import encode_key, encode_value

TOPICS = ("t0", "t1", "t-sub")  # t-sub: what coordinator_helpers' consumer members subscribe to
TOPIC_IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(TOPICS)}
GROUPS = [f"g{i}" for i in range(8)]


class FakeLogs:
    """The parts of broker/log_ends.LogEnds a look reads: bounds that the test moves, and record
    timestamps that are a fixed function of the record (cached once read, as LogEnds does), some
    of them unreadable for a while."""

    def __init__(self) -> None:
        self.ranges: dict[tuple[str, int], list[int]] = {(t, p): [0, 50] for t in TOPICS for p in range(3)}
        self.deleted: set[str] = set()
        self.unreadable: set[tuple[str, int, int]] = set()
        self.cache: dict[tuple[str, int, int], int] = {}
        by_id = {topic_id: SimpleNamespace(name=name) for name, topic_id in TOPIC_IDS.items()}
        self.topics = SimpleNamespace(cluster_id="c1", by_id=by_id.get)

    async def refresh(self) -> None:
        pass

    def bounds(self, topic: str, partition: int) -> LogBounds | None:
        found = self.ranges.get((topic, partition))
        return None if found is None or topic in self.deleted else LogBounds(*found)

    def cached_timestamp(self, topic: str, partition: int, offset: int) -> int | None:
        return self.cache.get((topic, partition, offset))

    async def timestamps(self, topic: str, partition: int, offsets: list[int]) -> list[int | None]:
        out: list[int | None] = []
        for offset in offsets:
            key = (topic, partition, offset)
            stamp = self.cache.get(key)
            if stamp is None:
                stamp = None if key in self.unreadable else (-1 if offset % 17 == 0 else 900_000 + offset * 1000)
            if stamp is not None:
                self.cache[key] = stamp
            out.append(stamp)
        return out

    def ends(self) -> list[Any]:
        return []


def look(source: BrokerLagSource) -> LagSnapshot:
    async def take() -> LagSnapshot:
        return await source.snapshot()
    return asyncio.run(take())


def rows(snapshot: LagSnapshot) -> list[Any]:
    """The snapshot's groups without their revision (a promise between looks, not a value)."""
    return [dataclasses.replace(g, revision=None) for g in snapshot.groups]


def page(snapshot: LagSnapshot) -> bytes:
    out: list[bytes] = []
    run(lag_exporter.render_lag(snapshot, out))
    return b"".join(out)


class Scenario:
    """A shard with offsets-only groups, a Stable classic group with assigned members and a share
    group, the fake logs, and the random changes one step may make."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.h = Harness.new()
        self.logs = FakeLogs()
        self.in_flight: list[bytes] = []
        self.share_states: dict[Any, Any] = {}
        info = form_group(self.h, "cg", [None, "static-1"])
        stabilize(self.h, info, {m: encode_consumer_assignment({"t-sub": [i], "t0": [i]})
                                 for i, m in enumerate(info.members)})
        self.members = list(info.members)
        self.info = info
        topics = TopicsImage({name: (topic_id, 3) for name, topic_id in TOPIC_IDS.items()}, 1)
        result = self.h.shard.share_group_heartbeat("t", ShareGroupHeartbeatRequest(
            "sg", str(uuid.UUID(int=99)), 0, None, ("t1",), "share-client", "/10.0.0.1"), self.h.now, topics)
        for key, value in result.records:
            self.h.shard.replay_raw(encode_key(key), None if value is None else encode_value(value))
        for p in range(3):
            self.share_states[("sg", TOPIC_IDS["t1"], p)] = SimpleNamespace(start_offset=10 * p,
                                                                            delivery_complete_count=p)
        for group in GROUPS + ["cg"]:
            self.commit(group)
        runtimes = [SimpleNamespace(shard=self.h.shard, state=SimpleNamespace(value="active"))]
        self.kept = BrokerLagSource(runtimes, self.logs, lambda: self.h.now, self.states)
        self.runtimes = runtimes

    async def states(self, group_id: str) -> dict[Any, Any]:
        return {k: v for k, v in self.share_states.items() if k[0] == group_id}

    def fresh(self) -> BrokerLagSource:
        return BrokerLagSource(self.runtimes, self.logs, lambda: self.h.now, self.states)

    def tp(self) -> tuple[str, int]:
        return self.rng.choice(TOPICS), self.rng.randrange(3)

    def commit(self, group: str | None = None) -> None:
        group = group or self.rng.choice(GROUPS + ["cg"])
        topic, partition = self.tp()
        member = {"member_id": self.info.leader, "generation": self.info.generation,
                  "instance_id": self.info.instance_ids.get(self.info.leader)} if group == "cg" else {}
        end = self.logs.ranges[(topic, partition)][1]
        self.h.commit(group, [(topic, partition, self.rng.randrange(0, end + 10), -1, "m")], **member)

    def step(self) -> None:
        rng, h, logs = self.rng, self.h, self.logs
        action = rng.randrange(14)
        if action <= 2:
            self.commit()
        elif action == 3:
            logs.ranges[self.tp()][1] += rng.randrange(1, 30)  # an append
        elif action == 4:
            bounds = logs.ranges[self.tp()]
            bounds[0] = min(bounds[1], bounds[0] + rng.randrange(1, 40))  # DeleteRecords or retention
        elif action == 5:
            topic, partition = self.tp()
            h.delete_offsets(rng.choice(GROUPS), [(topic, [partition])])
        elif action == 6:
            h.advance(rng.choice([1000, 3 * 24 * 3600 * 1000]))
            h.run(h.shard.expire_offsets(h.now, list(h.shard.groups)))
        elif action == 7:
            h.delete_groups([rng.choice(GROUPS)])
        elif action == 8:
            logs.deleted ^= {rng.choice(TOPICS)}  # a topic goes, or comes back
        elif action == 9 and h.shard.offsets:  # a commit written but not replayed yet, or its replay
            if self.in_flight and rng.random() < 0.5:
                key = self.in_flight.pop()
                stored = h.shard.offsets.get(key[4:4 + key[3]].decode(), {})
                # its replay: the value it carries (a fresh one if the stored offset went meanwhile)
                h.shard.table.replay(key, stored.get(key, encode_value(OffsetCommitValue(7, commit_timestamp=h.now))))
            else:
                key = rng.choice([k for stored in h.shard.offsets.values() for k in stored])
                h.shard.table.written(key)
                self.in_flight.append(key)
        elif action == 10:
            topic, partition = self.tp()
            logs.unreadable ^= {(topic, partition, o) for o in range(0, 200)}  # read once, a timestamp stays
        elif action == 11 and self.members:
            member = self.members.pop()
            h.leave("cg", [(member, "static-1" if member.startswith("static") else None)])
        elif action == 12:
            state = self.share_states[("sg", TOPIC_IDS["t1"], rng.randrange(3))]
            state.start_offset += rng.randrange(0, 20)
            state.delivery_complete_count = rng.randrange(0, 3)
        else:
            h.advance(rng.randrange(0, 5000))  # time lags and expiry countdowns move


@pytest.mark.parametrize("seed", range(6))
def test_kept_look_equals_a_full_recomputation(seed):
    scenario = Scenario(seed)
    saved = lag_exporter._texts, lag_exporter._texts_cluster
    seen: set[str] = set()  # what the run went through, so the comparison is not of empty looks
    try:
        for _ in range(60):
            for _ in range(scenario.rng.randrange(1, 4)):
                scenario.step()
            kept = look(scenario.kept)
            kept_page = page(kept)
            texts = lag_exporter._texts
            lag_exporter._texts = {}
            full = look(scenario.fresh())
            assert rows(kept) == rows(full)
            assert kept_page == page(full)
            lag_exporter._texts = texts  # the next page renders against the kept look's texts
            for g in kept.groups:
                seen.update(g.protocol_type or "offsets-only" for p in g.partitions if p.lag)
                seen.update("time lag" for p in g.partitions if p.time_lag_ms)
                seen.update("no time lag" for p in g.partitions if p.lag and p.time_lag_ms is None)
                seen.update("expiry" for p in g.partitions if p.expires_at_ms is not None)
        assert seen == {"share", "consumer", "offsets-only", "time lag", "no time lag", "expiry"}
    finally:
        lag_exporter._texts, lag_exporter._texts_cluster = saved


def test_an_unchanged_group_keeps_its_row_and_revision():
    """The point of keeping: a look after nothing changed hands out the same rows (same revision),
    with only the time lags moved (in place); a commit gives that one group a new revision."""
    scenario = Scenario(1)
    first = look(scenario.kept)
    revisions = {g.group: g.revision for g in first.groups}
    time_lags = {(g.group, p.topic, p.partition): p.time_lag_ms for g in first.groups for p in g.partitions if p.lag}
    scenario.h.advance(2000)
    second = look(scenario.kept)
    assert any(time_lags.values())
    for group in second.groups:
        if group.protocol_type != "share":
            assert group.revision == revisions[group.group]
        for p in group.partitions:
            if time_lags.get((group.group, p.topic, p.partition)):
                assert p.time_lag_ms == time_lags[(group.group, p.topic, p.partition)] + 2000
    scenario.h.commit("g0", [("t0", 0, 1, -1, "")])
    third = look(scenario.kept)
    changed = [g.group for g in third.groups if g.revision != {x.group: x for x in second.groups}[g.group].revision]
    assert changed == ["g0"]


def test_the_group_filter_keeps_a_look_and_the_expiry_series_to_the_groups_it_matches():
    """metrics.group.filter: the look holds the matching groups only (share groups too), and the
    coordinator's per-group expiry series is read for those only; the group counts stay whole."""
    scenario = Scenario(2)
    source = scenario.fresh()
    source.group_filter = re.compile("g[0-3]|sg")
    assert [g.group for g in look(source).groups] == ["g0", "g1", "g2", "g3", "sg"]
    runtimes = [SimpleNamespace(shard=scenario.h.shard, state=SimpleNamespace(value="active"), load_time_ms=0,
                                records_loaded=0, plog=SimpleNamespace(log_dir=SimpleNamespace(
                                    path="/data", offline=False, failed_writes=0)), group_commit=None)]
    everything, filtered = Snapshot(), Snapshot()
    run(take_snapshot(runtimes, everything))
    run(take_snapshot(runtimes, filtered, wanted=re.compile("g[0-3]").fullmatch))
    assert everything.num_groups() == filtered.num_groups()
    assert {r[0] for r in filtered.groups() if r[EARLIEST_EXPIRY] is not None} == {
        r[0] for r in everything.groups() if r[EARLIEST_EXPIRY] is not None and r[0] in ("g0", "g1", "g2", "g3")}
    assert {r[0] for r in everything.groups() if r[EARLIEST_EXPIRY] is not None} - {"g0", "g1", "g2", "g3"}


def test_state_counts_count_as_the_group_rows_do():
    """snapshot.state_counts (the filtered /metrics' NumGroups, at C speed) equals counting each
    group's group_overview, with classic, consumer and share groups on one shard."""
    scenario = Scenario(3)
    h = scenario.h
    h.run(h.shard.consumer_group_heartbeat("t", ConsumerGroupHeartbeatRequest(
        "kip848", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t0",), topic_partitions=()),
        1, h.now, TopicsImage({"t0": (TOPIC_IDS["t0"], 3)}, 1)))
    h.commit("kip848", [("t0", 1, 5, -1, "")], member_id="m1", generation=1)
    h.leave("cg", [(scenario.members[-1], "static-1" if scenario.members[-1].startswith("static") else None)])
    by_rows: dict[str, int] = {}
    for group_id in h.shard.group_ids():
        state = h.shard.group_overview(group_id)[0]
        by_rows[state] = by_rows.get(state, 0) + 1
    assert state_counts(h.shard) == by_rows
    assert set(by_rows) >= {"Empty", "Stable", "PreparingRebalance"}
