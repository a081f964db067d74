"""Offsets expiration against the real broker process (issue 4 "Tests"; reference §2, KIP-211,
KIP-496), with `offsets.retention.minutes=1` and a one-second `offsets.retention.check.interval.ms`.

The one-minute scenarios run side by side on ONE module-scoped broker so the suite waits for the
retention once. The `timeline` fixture sets every scenario up, in this order:

  d  a consumer group joins and commits (it is emptied last, >= 5 s later);
  a  a consumer group commits once, then only polls (KAFKA-4682);
  e  a standalone consumer whose group has `offsets.retention.minutes=-1` (per-group retention);
  b  a standalone consumer commits (the "canary": it is the last commit that must expire);
  c  a consumer group subscribed to topics A and B commits both, then re-subscribes to A only;
  d  the members of d close: the group is Empty from now on.

All their groups live on the same `__consumer_offsets` partition (§4.3), so they share one sweep:
when b's offset is seen gone, a sweep that came at least a retention after the commits of a and e
(both earlier than b's) has run on that partition. From then on the live members are polled and
every group is sampled (AdminClient offsets + ListGroups) a few times a second; each test waits
for its own condition through `Timeline.run_until` and then checks the recorded samples, with the
broker's and the test's clocks being the same wall clock: nothing expires before `retention`
after its reference instant (commit, or the group becoming Empty), and it expires within a few
sweeps after it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

import pytest
from confluent_kafka import (OFFSET_INVALID, Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from broker_process import BrokerProcess, wait_for
from clients import create_topic
from group_helpers import (GROUP_BROKER, Member, decode_subscription_topics, member_conf, partition_for,
                           poll_all, poll_until, raw_describe_groups, raw_offset_commit, raw_offset_fetch,
                           unique)

RETENTION_S = 60.0
SWEEP_S = 1.0
EXPIRY_BROKER = {**GROUP_BROKER, "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"}
# How late after its expiry instant an offset may still be seen: the sweep interval, the write and
# replay, one sampling round, and scheduling noise on a loaded machine.
LATE_S = 5.0
# d stays Stable this long after its commit before its members leave, so that "retention after
# the commit" and "retention after the group emptied" are clearly different instants.
D_STABLE_FOR_S = 10.0

TP = tuple[str, int]


def group_on(partition: int, prefix: str) -> str:
    """A fresh group id whose `__consumer_offsets` partition is `partition` (§4.3)."""
    return wait_for(lambda: (lambda g: g if partition_for(g) == partition else None)(unique(prefix)),
                    timeout=5, interval=0, message=f"a group id on partition {partition}")


def commit(consumer: Consumer, offsets: dict[TP, int]) -> tuple[float, float]:
    """A synchronous commit; returns the wall-clock instants just before and just after it."""
    before = time.time()
    result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                             asynchronous=False)
    after = time.time()
    assert all(tp.error is None for tp in result), result
    return before, after


def committed(consumer: Consumer, tps: list[TP]) -> dict[TP, int]:
    return {(tp.topic, tp.partition): tp.offset
            for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=15)}


# ------------------------------------------------------------------------------------------
# the shared timeline


@dataclass
class Watch:
    """One thing to sample: `group`'s committed offsets for `expected`'s partitions."""

    group: str
    expected: dict[TP, int]


@dataclass
class Sample:
    started: float                    # wall clock just before the first request of the round
    ended: float                      # ... and just after the last
    offsets: dict[str, dict[TP, int]]  # watch name -> what OffsetFetch returned
    listed: dict[str, str]            # listed group id -> state, listed just after the offsets
    # ... and listed just before them. One sample is several requests, and a sweep may fall between
    # them; with the log's atomic sweep (offsets and their group's tombstone in one batch), offsets
    # present imply the group listed before, and offsets absent imply it unlisted after.
    listed_before: dict[str, str]


@dataclass
class Timeline:
    broker: BrokerProcess
    admin: AdminClient
    watches: dict[str, Watch] = field(default_factory=dict)
    members: dict[str, list[Member]] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)

    def live_members(self) -> list[Member]:
        return [m for ms in self.members.values() for m in ms if not m.closed]

    def list_groups(self) -> dict[str, str]:
        listing = self.admin.list_consumer_groups(request_timeout=10).result(15)
        assert not listing.errors, listing.errors
        return {g.group_id: g.state for g in listing.valid}

    def sample(self) -> Sample:
        started = time.time()
        listed_before = self.list_groups()
        offsets = {}
        for name, watch in self.watches.items():
            request = ConsumerGroupTopicPartitions(watch.group, [TopicPartition(t, p) for t, p in watch.expected])
            result = self.admin.list_consumer_group_offsets([request], request_timeout=10)[watch.group].result(15)
            offsets[name] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}
        sample = Sample(started, time.time(), offsets, self.list_groups(), listed_before)
        self.samples.append(sample)
        return sample

    def status(self, name: str, sample: Sample) -> str:
        """"present" (exactly the committed offsets), "absent" (none), else "partial"."""
        seen = sample.offsets[name]
        if seen == self.watches[name].expected:
            return "present"
        if all(offset == OFFSET_INVALID for offset in seen.values()):
            return "absent"
        return "partial"

    def first(self, name: str, status: str) -> Sample | None:
        return next((s for s in self.samples if self.status(name, s) == status), None)

    def run_until(self, condition: Callable[[], bool], timeout: float, message: str) -> None:
        """Keep every live member polling and sample every watch until `condition()` holds."""
        deadline = time.monotonic() + timeout
        while True:
            poll_all(self.live_members(), 0.05)
            self.sample()
            if condition():
                return
            if time.monotonic() > deadline:
                last = self.samples[-1]
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message}; last sample: "
                                     f"{ {n: self.status(n, last) for n in self.watches} }")

    def until_gone(self, name: str) -> Sample:
        """Wait until watch `name` is seen absent (at most retention + LATE_S after its mark)."""
        self.run_until(lambda: self.first(name, "absent") is not None,
                       timeout=max(self.marks[name] + RETENTION_S + LATE_S + 10 - time.time(), 1),
                       message=f"{name}'s offsets to expire")
        return self.first(name, "absent")  # type: ignore[return-value]

    def check_expired_on_time(self, name: str, since: float, since_after: float) -> Sample:
        """`name`'s offsets were present in every sample taken before `since` + retention, and are
        gone no later than `since_after` + retention + LATE_S. Returns the first absent sample."""
        gone = self.until_gone(name)
        early = [s for s in self.samples if s.ended < since + RETENTION_S and self.status(name, s) != "present"]
        assert not early, f"{name}: gone {since + RETENTION_S - early[0].ended:.2f}s before its retention"
        assert any(self.status(name, s) == "present" and s.started > since + RETENTION_S - 3 for s in self.samples), \
            f"{name}: not sampled in the seconds before its expiry"
        assert gone.ended >= since + RETENTION_S
        assert gone.started <= since_after + RETENTION_S + LATE_S, \
            f"{name}: still there {gone.started - since_after - RETENTION_S:.2f}s after its retention"
        return gone


@pytest.fixture(scope="module")
def timeline(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("expiration") / "data", EXPIRY_BROKER).start()
    tl = Timeline(broker, AdminClient({"bootstrap.servers": broker.bootstrap}))
    bootstrap = broker.bootstrap
    try:
        _set_up(tl, bootstrap)
        yield tl
    finally:
        for m in tl.live_members():
            m.close()
        if broker.alive():
            broker.stop()


def _set_up(tl: Timeline, bootstrap: str) -> None:
    partition = partition_for(unique("anchor"))
    ga, gb, gc, gd, ge = (group_on(partition, p) for p in ("g-stable", "g-simple", "g-unsub", "g-empty", "g-never"))
    tl.topics = {name: unique(f"exp-{name}") for name in ("a", "b", "c-A", "c-B", "d", "e")}
    for name, topic in tl.topics.items():
        create_topic(bootstrap, topic, partitions=2 if name.startswith("c-") else 1)
    ta, tb, tA, tB, td, te = (tl.topics[n] for n in ("a", "b", "c-A", "c-B", "d", "e"))

    # d: a consumer group, Stable, commits now; it is emptied at the end of the set-up
    d = Member(bootstrap, gd, [td], "d0")
    tl.members["d"] = [d]
    poll_until([d], lambda: d.assignment() == {(td, 0)}, timeout=20, message="d assigned")
    d_committed, _ = commit(d.consumer, {(td, 0): 40})
    tl.watches["d"] = Watch(gd, {(td, 0): 40})

    # a: KAFKA-4682 - commits once, then only polls
    a = Member(bootstrap, ga, [ta], "a0")
    tl.members["a"] = [a]
    poll_until([a, d], lambda: a.assignment() == {(ta, 0)}, timeout=20, message="a assigned")
    tl.marks["a"], _ = commit(a.consumer, {(ta, 0): 10})
    tl.watches["a"] = Watch(ga, {(ta, 0): 10})

    # e: per-group retention -1 (never), then a standalone commit
    alter = ConfigResource(ConfigResource.Type.GROUP, ge, incremental_configs=[
        ConfigEntry("offsets.retention.minutes", "-1", incremental_operation=AlterConfigOpType.SET)])
    for future in tl.admin.incremental_alter_configs([alter]).values():
        future.result(15)
    standalone_e = Consumer(member_conf(bootstrap, ge))
    try:
        tl.marks["e"], _ = commit(standalone_e, {(te, 0): 50})
    finally:
        standalone_e.close()
    tl.watches["e"] = Watch(ge, {(te, 0): 50})

    # b: a standalone consumer's commit; every commit above is older
    standalone_b = Consumer(member_conf(bootstrap, gb))
    try:
        tl.marks["b"], tl.marks["b-after"] = commit(standalone_b, {(tb, 0): 20})
    finally:
        standalone_b.close()
    tl.watches["b"] = Watch(gb, {(tb, 0): 20})

    # c: two members subscribed to A and B commit everything they own, then subscribe to A only
    c = [Member(bootstrap, gc, [tA, tB], f"c{i}") for i in range(2)]
    tl.members["c"] = c
    everything = {(tA, 0), (tA, 1), (tB, 0), (tB, 1)}
    poll_until(c + [a, d], lambda: c[0].assignment() | c[1].assignment() == everything
               and len(c[0].assignment()) == len(c[1].assignment()) == 2, timeout=30,
               message="c balanced over A and B")
    c_offsets = {(tA, 0): 30, (tA, 1): 31, (tB, 0): 32, (tB, 1): 33}
    windows = [commit(m.consumer, {tp: c_offsets[tp] for tp in m.assignment()}) for m in c]
    tl.marks["cB"], tl.marks["cB-after"] = windows[0][0], windows[-1][1]
    tl.watches["cA"] = Watch(gc, {tp: o for tp, o in c_offsets.items() if tp[0] == tA})
    tl.watches["cB"] = Watch(gc, {tp: o for tp, o in c_offsets.items() if tp[0] == tB})
    for m in c:
        m.consumer.subscribe([tA], on_assign=m._on("assign"), on_revoke=m._on("revoke"), on_lost=m._on("lost"))

    def only_a_subscribed() -> bool:
        [described] = raw_describe_groups(bootstrap, [gc])
        return (described.group_state == "Stable" and len(described.members) == 2
                and all(decode_subscription_topics(m.member_metadata) == [tA] for m in described.members)
                and c[0].assignment() | c[1].assignment() == {(tA, 0), (tA, 1)})

    poll_until(c + [a, d], only_a_subscribed, timeout=30, message="c re-subscribed to A only")

    # d: stays Stable a while after its commit (so commit+retention != emptied+retention), then empties
    poll_until([a, d] + c, lambda: time.time() >= d_committed + D_STABLE_FOR_S, timeout=D_STABLE_FOR_S + 1,
               message="d's Stable period")
    tl.marks["d-commit"] = d_committed
    tl.marks["d"] = time.time()
    d.close()
    tl.marks["d-after"] = time.time()
    wait_for(lambda: tl.sample().listed.get(gd) == ConsumerGroupState.EMPTY, timeout=10, message="d Empty")
    tl.sample()


# ------------------------------------------------------------------------------------------
# the scenarios


def test_stable_group_keeps_offsets_past_retention(timeline: Timeline) -> None:
    """KAFKA-4682 / KIP-211 (§2 "Stable consumer, subscribed topic: no expiry"): a group that
    committed once and then only polls keeps its offset through sweeps that came well after the
    retention (b, committed later on the same offsets partition, expired meanwhile), and a few more
    sweeps; the group never rebalanced (one assignment), so it was Stable the whole time."""
    tl = timeline
    b_gone = tl.until_gone("b")
    tl.run_until(lambda: time.time() >= max(b_gone.ended, tl.marks["a"] + RETENTION_S) + 3 * SWEEP_S,
                 timeout=10, message="three more sweeps")
    assert time.time() - tl.marks["a"] > RETENTION_S + 3 * SWEEP_S
    assert all(tl.status("a", s) == "present" for s in tl.samples), "a Stable group lost its offsets"
    [a] = tl.members["a"]
    topic = tl.topics["a"]
    assert committed(a.consumer, [(topic, 0)]) == {(topic, 0): 10}
    assert a.events == [("assign", frozenset({(topic, 0)}))], a.events
    assert tl.samples[-1].listed[tl.watches["a"].group] == ConsumerGroupState.STABLE
    assert not a.errors, a.errors


def test_standalone_offsets_vanish_after_retention(timeline: Timeline) -> None:
    """§2 simple group: the offset expires retention after its commit (not before), the group goes
    with it: committed() answers OFFSET_INVALID (-1001) and ListGroups no longer lists it."""
    tl = timeline
    gone = tl.check_expired_on_time("b", tl.marks["b"], tl.marks["b-after"])
    group = tl.watches["b"].group
    assert group not in gone.listed and group not in tl.samples[-1].listed
    assert all(group in s.listed_before for s in tl.samples if tl.status("b", s) == "present")
    consumer = Consumer(member_conf(tl.broker.bootstrap, group))
    try:
        assert committed(consumer, [(tl.topics["b"], 0)]) == {(tl.topics["b"], 0): OFFSET_INVALID}
    finally:
        consumer.close()


def test_unsubscribed_topic_offsets_vanish_while_the_rest_stay(timeline: Timeline) -> None:
    """KIP-496 (§2 "Stable consumer: unsubscribed topics by commit time"): after the members
    re-subscribed to A only, B's offsets expire retention after their commit while the group stays
    Stable; A's offsets (same commit time) stay."""
    tl = timeline
    tl.check_expired_on_time("cB", tl.marks["cB"], tl.marks["cB-after"])
    tl.run_until(lambda: True, timeout=1, message="one more sample")
    assert all(tl.status("cA", s) == "present" for s in tl.samples), "A's offsets were lost"
    group = tl.watches["cA"].group
    assert tl.samples[-1].listed[group] == ConsumerGroupState.STABLE
    member = tl.members["c"][0]
    everything = list(tl.watches["cA"].expected) + list(tl.watches["cB"].expected)
    assert committed(member.consumer, everything) == {
        **tl.watches["cA"].expected, **{tp: OFFSET_INVALID for tp in tl.watches["cB"].expected}}


def test_empty_group_disappears_retention_after_it_emptied(timeline: Timeline) -> None:
    """KIP-211 (§2 "Empty: all offsets together, retention after the group became Empty"): the
    offsets outlive commit + retention (the group was still Stable then), and vanish with the
    group retention after the members left; the group is never seen without its offsets."""
    tl = timeline
    assert tl.marks["d"] - tl.marks["d-commit"] >= D_STABLE_FOR_S
    gone = tl.check_expired_on_time("d", tl.marks["d"], tl.marks["d-after"])
    group = tl.watches["d"].group
    assert any(tl.status("d", s) == "present" and s.started > tl.marks["d-commit"] + RETENTION_S + LATE_S
               for s in tl.samples), "not seen present after commit + retention"
    assert group not in gone.listed and group not in tl.samples[-1].listed
    for s in tl.samples:
        if s.started > tl.marks["d-after"] + 1:
            status = tl.status("d", s)
            assert status != "partial"
            if status == "present":
                assert group in s.listed_before, "offsets outlived their group"
            else:
                assert group not in s.listed, "the group outlived its offsets"
            for listed in (s.listed_before, s.listed):
                assert listed.get(group, ConsumerGroupState.EMPTY) == ConsumerGroupState.EMPTY


def test_per_group_retention_never_survives_restart(timeline: Timeline) -> None:
    """Per-group `offsets.retention.minutes=-1` (IncrementalAlterConfigs on the GROUP resource):
    a standalone group's offsets outlive the broker-wide retention (b, committed after it, expired
    on the same partition), DescribeConfigs reports -1 as a group config, and both survive a broker
    restart: after a sweep that provably ran after the restart (a canary committed with
    OffsetCommit v2 retention_time=1 ms expired), the offsets are still there. Deleting the setting
    brings back the broker default, under which they expire at the next sweep. (Restarts the
    broker: the last test of the module.)"""
    tl = timeline
    tl.until_gone("b")
    tl.run_until(lambda: time.time() >= tl.marks["e"] + RETENTION_S + 2 * SWEEP_S, timeout=10, message="sweeps")
    assert all(tl.status("e", s) == "present" for s in tl.samples)
    group, topic = tl.watches["e"].group, tl.topics["e"]

    def describe(admin: AdminClient) -> ConfigEntry:
        [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)]).values()
        return future.result(15)["offsets.retention.minutes"]

    entry = describe(tl.admin)
    assert (entry.value, entry.source) == ("-1", ConfigSource.GROUP_CONFIG.value)

    for m in tl.live_members():
        m.close()
    tl.broker.stop()
    assert json.loads((tl.broker.data_dir / "group-configs.json").read_text())[group] == {
        "offsets.retention.minutes": "-1"}
    tl.broker.start()
    bootstrap = tl.broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = describe(admin)
    assert (entry.value, entry.source) == ("-1", ConfigSource.GROUP_CONFIG.value)

    canary = group_on(partition_for(group), "g-canary")
    wait_for(lambda: raw_offset_commit(bootstrap, canary, topic, {0: (5, None, -1)}, version=2,
                                      retention_ms=1) == {0: 0}, timeout=15, message="canary commit")
    wait_for(lambda: raw_offset_fetch(bootstrap, canary, topic, [0])[0][0] == -1, timeout=10,
             message="the canary's offset to expire (a sweep after the restart)")
    assert raw_offset_fetch(bootstrap, group, topic, [0])[0][0] == 50
    consumer = Consumer(member_conf(bootstrap, group))
    try:
        assert committed(consumer, [(topic, 0)]) == {(topic, 0): 50}
    finally:
        consumer.close()
    listing = admin.list_consumer_groups(request_timeout=10).result(15)
    assert group in {g.group_id for g in listing.valid}

    # DELETE the group's setting: the broker-wide minute applies again, and the offsets (by now
    # well over a minute old) go at the next sweep, with their group
    unset = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("offsets.retention.minutes", None, incremental_operation=AlterConfigOpType.DELETE)])
    for future in admin.incremental_alter_configs([unset]).values():
        future.result(15)
    entry = describe(admin)
    assert (entry.value, entry.source) == ("1", ConfigSource.STATIC_BROKER_CONFIG.value)
    wait_for(lambda: raw_offset_fetch(bootstrap, group, topic, [0])[0][0] == -1, timeout=10,
             message="the offsets to expire under the broker default")
