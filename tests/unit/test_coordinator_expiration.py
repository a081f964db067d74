"""Offsets expiration (reference §2, KIP-211 + KIP-496), topic deletion, per-group retention and the
bounded retention sweep, on the sans-IO GroupCoordinatorShard with a fake clock.

Everything expires through records: `expire_offsets(now, group_ids)` returns tombstones with
`replay=True`, which `sweep()` below replays exactly as the shell does once they are durable. The
expected expiry times are written down from §2 (the "Expiration condition" and "Predicate" blocks),
not computed by offsetd: an Empty group's offsets expire together, retention after the group became
Empty; a Stable consumer group keeps its subscribed topics and expires the others by commit time; a
simple group expires each offset by its own commit time; anything else expires nothing; an explicit
expire timestamp (OffsetCommit v2-v4 retention_time) wins where a condition exists; comparisons are
inclusive. A seven-day retention runs in milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Callable

import pytest

from coordinator_helpers import (
    COMPLETING, COMPLETING_CONNECT, COMPLETING_CONSUMER, DEAD, EMPTY, EMPTY_CONNECT, EMPTY_CONSUMER,
    OTHER_TOPIC, PREPARING_CONNECT, PREPARING_CONSUMER, STABLE, STABLE_CONNECT, STABLE_CONSUMER,
    STABLE_CONSUMER_UNPARSABLE, SUBSCRIBED,
    GROUP_SUBSCRIBED_TO_TOPIC, NONE,
    Harness, build_group, connect_protocols, consumer_protocols, form_group, make_config,
    replay_into_fresh_shard, stabilize, decoded,
)
from offsetd.coordinator.result import CoordinatorResult
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records.group_metadata_value import GroupMetadataValue
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value
from offsetd.server.coordinator_runtime import SWEEP_CHUNK, ShardRuntime, ShardState

MINUTE = 60_000
DAY = 24 * 60 * MINUTE
RETENTION = 10080 * MINUTE          # offsets.retention.minutes default: 7 days (§2)
CHECK_INTERVAL = 600_000            # offsets.retention.check.interval.ms default (§2)
NEVER = None                        # expiry_times' "not while the group stays as it is"
G = "g"

TP = tuple[str, int]


# ------------------------------------------------------------------------------------------
# drivers


def sweep(h: Harness, at: int | None = None, groups: list[str] | None = None) -> CoordinatorResult:
    """One retention sweep over `groups` (default: every group) at `at` (default: h.now), replayed
    like the shell does. Every record must be a tombstone, the result must ask for replay and must
    answer no request."""
    if at is not None:
        assert at >= h.now, "the fake clock never goes back"
        h.now = at
    result = h.shard.expire_offsets(h.now, list(h.shard.groups) if groups is None else groups)
    assert result.replay is True
    assert result.completions == []
    assert all(value is None for _, value in result.records), result.records
    h.run(result)
    return result


def offset_tombstones(result: CoordinatorResult, group: str = G) -> set[TP]:
    return {(k.topic, k.partition) for k, v in result.records
            if isinstance(k, OffsetCommitKey) and k.group == group and v is None}


def group_tombstones(result: CoordinatorResult) -> set[str]:
    return {k.group for k, v in result.records if isinstance(k, GroupMetadataKey) and v is None}


def committed(h: Harness, group: str = G) -> set[TP]:
    return set(h.shard.committed_partitions(group))


def listed(h: Harness) -> set[str]:
    return {group_id for group_id, _, _ in h.shard.list_groups()}


def seed(h: Harness, group: str, tp: TP, *, offset: int = 7, commit_ts: int | None = None,
         expire_ts: int = -1) -> None:
    """An OffsetCommit record as the loader replays it (§5.1), with chosen timestamps;
    expire_ts != -1 is an explicit expire timestamp (OffsetCommitValue v1, §4.5)."""
    key = OffsetCommitKey(group, tp[0], tp[1])
    value = OffsetCommitValue(offset=offset, commit_timestamp=h.now if commit_ts is None else commit_ts,
                              expire_timestamp=expire_ts)
    h.log.append((key, value))
    h.shard.replay(key, value)


def rejoin_with(h: Harness, group: str, member_id: str, topics: list[str]) -> int:
    """The single member of `group` rejoins with a new subscription and syncs: Stable again with a
    new generation (a real KIP-496 subscription change). Returns the generation."""
    tok, done, _ = h.join(group, member_id, protocols=consumer_protocols(topics))
    assert done[tok]["error_code"] == NONE, done
    generation = done[tok]["generation_id"]
    assert h.state(group) == COMPLETING
    h.sync(group, member_id, generation, {member_id: b"a"})
    assert h.state(group) == STABLE
    return generation


def check_expiry(h: Harness, group: str, expected: dict[TP, int | None], *, removed: bool) -> None:
    """The core check of every §2 row:

    * `expiry_times(group)` equals `expected` (ms, or NEVER);
    * for every finite time T, a sweep at T - 1 tombstones nothing of the group and a sweep at
      exactly T tombstones exactly the offsets due at T (inclusive `>=`), and they are gone;
    * the NEVER offsets survive a sweep a hundred retentions later;
    * the group is removed (group tombstone, no longer listed, Dead to DescribeGroups) exactly when
      its last offset expires, iff `removed`.
    """
    assert h.shard.expiry_times(group) == expected
    remaining = set(expected)
    for at in sorted({t for t in expected.values() if t is not None}):
        early = sweep(h, at - 1, [group])
        assert offset_tombstones(early, group) == set() and group_tombstones(early) == set(), \
            f"expired 1 ms before {at}: {early.records}"
        assert committed(h, group) == remaining
        due = {tp for tp, t in expected.items() if t == at}
        result = sweep(h, at, [group])
        assert offset_tombstones(result, group) == due
        remaining -= due
        assert committed(h, group) == remaining
        last = not remaining
        assert group_tombstones(result) == ({group} if removed and last else set())
    final = sweep(h, h.now + 100 * RETENTION, [group])
    assert offset_tombstones(final, group) == set()
    assert committed(h, group) == {tp for tp, t in expected.items() if t is None}
    if removed:
        assert group not in listed(h) and h.state(group) == DEAD
        assert group not in replay_into_fresh_shard(h.log).groups  # the tombstone is in the log
    else:
        assert group in listed(h) and group_tombstones(final) == set()


# ------------------------------------------------------------------------------------------
# §2 "Expiration condition (ClassicGroup.offsetExpirationCondition)", one builder per row.
# Each builds group G with offsets on SUBSCRIBED and OTHER_TOPIC and returns (expected expiry
# times, whether the group disappears once they have expired).

Row = Callable[[Harness], tuple[dict[TP, int | None], bool]]


def _empty_after_members_left(h: Harness, protocol_type: str) -> tuple[dict, bool]:
    protocols = connect_protocols() if protocol_type == "connect" else consumer_protocols([SUBSCRIBED])
    info = form_group(h, G, [None], protocol_type=protocol_type, protocols=protocols)
    stabilize(h, info)
    seed(h, G, (SUBSCRIBED, 0))
    h.advance(DAY)
    seed(h, G, (OTHER_TOPIC, 0))
    h.advance(DAY)
    h.leave(G, [(info.leader, None)])
    assert h.state(G) == EMPTY
    emptied = h.now
    # all offsets together, retention after the group emptied, whenever each was committed
    return {(SUBSCRIBED, 0): emptied + RETENTION, (OTHER_TOPIC, 0): emptied + RETENTION}, True


def row_empty_consumer(h: Harness):
    return _empty_after_members_left(h, "consumer")


def row_empty_other_protocol(h: Harness):
    return _empty_after_members_left(h, "connect")


def row_empty_state_timestamp_unknown(h: Harness):
    """An Empty group loaded from GroupMetadataValue v1 (no currentStateTimestamp): each offset
    falls back to its own commit timestamp."""
    value = GroupMetadataValue(protocol_type="consumer", generation=4, protocol=None, leader=None,
                               current_state_timestamp=-1, members=())
    h.shard.replay_raw(encode_key(GroupMetadataKey(G)), encode_value(value, version=1))
    assert h.state(G) == EMPTY
    t0 = h.now
    seed(h, G, (SUBSCRIBED, 0), commit_ts=t0)
    seed(h, G, (OTHER_TOPIC, 0), commit_ts=t0 + DAY)
    return {(SUBSCRIBED, 0): t0 + RETENTION, (OTHER_TOPIC, 0): t0 + DAY + RETENTION}, True


def row_stable_consumer(h: Harness):
    """KIP-496: the subscribed topic never expires while Stable; the unsubscribed one expires
    retention after its commit."""
    info = build_group(h, G, STABLE_CONSUMER)  # members subscribe to SUBSCRIBED
    t0 = h.now
    h.commit(G, [(SUBSCRIBED, 0, 5, -1, None)], member_id=info.leader, generation=info.generation)
    h.advance(DAY)
    seed(h, G, (OTHER_TOPIC, 0))
    return {(SUBSCRIBED, 0): NEVER, (OTHER_TOPIC, 0): t0 + DAY + RETENTION}, False


def row_simple(h: Harness):
    """Standalone consumer: each partition retention after its own last commit; the group goes
    with its last offset."""
    t0 = h.now
    errors, _, _ = h.commit(G, [(SUBSCRIBED, 0, 5, -1, None)])
    assert errors == {(SUBSCRIBED, 0): NONE}
    h.advance(3 * DAY)
    h.commit(G, [(OTHER_TOPIC, 1, 6, -1, None)])
    assert h.state(G) == EMPTY
    return {(SUBSCRIBED, 0): t0 + RETENTION, (OTHER_TOPIC, 1): t0 + 3 * DAY + RETENTION}, True


def _no_condition(situation: str) -> Row:
    def row(h: Harness):
        build_group(h, G, situation)
        seed(h, G, (SUBSCRIBED, 0), commit_ts=h.now - 30 * DAY)
        seed(h, G, (OTHER_TOPIC, 0), commit_ts=h.now - 30 * DAY)
        return {(SUBSCRIBED, 0): NEVER, (OTHER_TOPIC, 0): NEVER}, False
    return row


CONDITIONS = [
    pytest.param(row_empty_consumer, id="Empty consumer: together, retention after emptied"),
    pytest.param(row_empty_other_protocol, id="Empty other protocol: together, retention after emptied"),
    pytest.param(row_empty_state_timestamp_unknown, id="Empty, no state timestamp: by commit time"),
    pytest.param(row_stable_consumer, id="Stable consumer: subscribed never, unsubscribed by commit time"),
    pytest.param(row_simple, id="simple group: each by its own commit time"),
    pytest.param(_no_condition(PREPARING_CONSUMER), id="PreparingRebalance consumer: nothing"),
    pytest.param(_no_condition(COMPLETING_CONSUMER), id="CompletingRebalance consumer: nothing"),
    pytest.param(_no_condition(STABLE_CONNECT), id="Stable other protocol: nothing"),
    pytest.param(_no_condition(PREPARING_CONNECT), id="PreparingRebalance other protocol: nothing"),
    pytest.param(_no_condition(COMPLETING_CONNECT), id="CompletingRebalance other protocol: nothing"),
    pytest.param(_no_condition(STABLE_CONSUMER_UNPARSABLE), id="Stable consumer, unknown subscription: nothing"),
]


@pytest.mark.parametrize("row", CONDITIONS)
def test_expiration_condition(row: Row) -> None:
    """§2: every row of the expiration conditions, with the inclusive predicate checked at the
    exact boundary and 1 ms before it."""
    h = Harness.new()
    expected, removed = row(h)
    check_expiry(h, G, expected, removed=removed)


def test_seven_day_story_runs_on_a_fake_clock() -> None:
    """A realistic timeline on the default 10-minute sweep grid, 18 simulated days:

    * a Stable consumer group commits its two topics once at t0 and is never heard from again
      (KAFKA-4682): the subscribed topic survives every sweep for as long as the group is Stable;
    * at t0+2d it re-subscribes to SUBSCRIBED only: OTHER_TOPIC then expires by its *commit* time,
      at the first sweep at or after t0+7d (KIP-496), not 7 days after the re-subscription;
    * a standalone consumer committed at t0 loses its offset at the first sweep >= t0+7d and its
      group goes with it;
    * at t0+10d (off the sweep grid) the member leaves: SUBSCRIBED expires at the first sweep
      >= emptied+7d, and the group is removed by the same sweep.
    """
    started = time.perf_counter()
    h = Harness.new()
    t0 = h.now
    info = form_group(h, G, [None], protocols=consumer_protocols([SUBSCRIBED, OTHER_TOPIC]))
    stabilize(h, info)
    errors, _, _ = h.commit(G, [(SUBSCRIBED, 0, 100, -1, None), (OTHER_TOPIC, 0, 200, -1, None)],
                            member_id=info.leader, generation=info.generation)
    assert set(errors.values()) == {NONE}
    h.commit("standalone", [(OTHER_TOPIC, 3, 300, -1, None)])

    vanished: dict[tuple[str, Any], int] = {}

    def sweeps_until(end: int) -> None:
        next_sweep = t0 + ((h.now - t0) // CHECK_INTERVAL + 1) * CHECK_INTERVAL
        while next_sweep <= end:
            result = sweep(h, next_sweep)
            for k, _ in result.records:
                what = (k.group, (k.topic, k.partition)) if isinstance(k, OffsetCommitKey) else (k.group, "group")
                assert what not in vanished, f"{what} tombstoned twice"
                vanished[what] = h.now
            next_sweep += CHECK_INTERVAL
        h.now = end

    sweeps_until(t0 + 2 * DAY)
    rejoin_with(h, G, info.leader, [SUBSCRIBED])
    sweeps_until(t0 + 10 * DAY + 12_345)
    h.leave(G, [(info.leader, None)])
    emptied = h.now
    sweeps_until(t0 + 18 * DAY)

    expired_at = t0 + RETENTION  # on the sweep grid: RETENTION is a multiple of the interval
    first_sweep_after_empty = t0 + -(-(emptied + RETENTION - t0) // CHECK_INTERVAL) * CHECK_INTERVAL
    assert vanished == {
        ("standalone", (OTHER_TOPIC, 3)): expired_at,
        ("standalone", "group"): expired_at,
        (G, (OTHER_TOPIC, 0)): expired_at,
        (G, (SUBSCRIBED, 0)): first_sweep_after_empty,
        (G, "group"): first_sweep_after_empty,
    }
    assert h.shard.counters.offset_expirations == 3
    assert listed(h) == set()
    assert time.perf_counter() - started < 5.0  # 2592 sweeps of simulated time, no real waiting


# ------------------------------------------------------------------------------------------
# state changes move the retention clock


def test_empty_clock_restarts_each_time_the_group_becomes_empty() -> None:
    """§1.11 every transition stamps currentStateTimestamp: a group that emptied at t1, was
    re-joined at t1+3d and emptied again at t1+5d keeps its offsets until t1+5d+retention."""
    h = Harness.new()
    info = build_group(h, G, STABLE_CONSUMER)
    h.commit(G, [(SUBSCRIBED, 0, 1, -1, None)], member_id=info.leader, generation=info.generation)
    h.leave(G, [(m, None) for m in info.members])
    assert h.state(G) == EMPTY
    t1 = h.now
    assert h.shard.expiry_times(G) == {(SUBSCRIBED, 0): t1 + RETENTION}
    h.advance(3 * DAY)
    again = form_group(h, G, [None])
    stabilize(h, again)
    assert h.shard.expiry_times(G) == {(SUBSCRIBED, 0): NEVER}
    assert offset_tombstones(sweep(h, t1 + 4 * DAY)) == set()
    h.now = t1 + 5 * DAY
    h.leave(G, [(again.leader, None)])
    assert h.state(G) == EMPTY
    assert offset_tombstones(sweep(h, t1 + RETENTION)) == set()  # the first Empty clock is void
    check_expiry(h, G, {(SUBSCRIBED, 0): t1 + 5 * DAY + RETENTION}, removed=True)


def test_unsubscribed_topic_older_than_retention_expires_at_first_sweep_after_rebalance() -> None:
    """KIP-496: an offset committed 8 days ago on a topic the group stops subscribing to is
    expired by the first sweep after the new generation is Stable; while the rebalance is in
    progress (here CompletingRebalance) nothing expires (§2 "no condition")."""
    h = Harness.new()
    info = form_group(h, G, [None], protocols=consumer_protocols([SUBSCRIBED, OTHER_TOPIC]))
    stabilize(h, info)
    h.commit(G, [(SUBSCRIBED, 0, 1, -1, None), (OTHER_TOPIC, 0, 2, -1, None)],
             member_id=info.leader, generation=info.generation)
    h.advance(8 * DAY)
    assert offset_tombstones(sweep(h)) == set()  # both subscribed: kept however old
    tok, done, _ = h.join(G, info.leader, protocols=consumer_protocols([SUBSCRIBED]))
    assert h.state(G) == COMPLETING
    assert h.shard.expiry_times(G) == {(SUBSCRIBED, 0): NEVER, (OTHER_TOPIC, 0): NEVER}
    assert offset_tombstones(sweep(h)) == set()
    h.sync(G, info.leader, done[tok]["generation_id"], {info.leader: b"a"})
    assert h.state(G) == STABLE
    result = sweep(h)
    assert offset_tombstones(result) == {(OTHER_TOPIC, 0)}
    assert committed(h) == {(SUBSCRIBED, 0)} and h.offset(G, SUBSCRIBED, 0) == 1
    assert group_tombstones(result) == set()


def test_recommit_moves_a_simple_groups_expiry() -> None:
    """A simple group's offset expires retention after its *last* commit."""
    h = Harness.new()
    h.commit(G, [("t", 0, 1, -1, None)])
    h.advance(6 * DAY)
    h.commit(G, [("t", 0, 2, -1, None)])
    check_expiry(h, G, {("t", 0): h.now + RETENTION}, removed=True)


# ------------------------------------------------------------------------------------------
# §2 Predicate: an explicit expire timestamp wins where a condition exists, else is ignored


def _explicit_simple(h: Harness, expire: int) -> None:
    seed(h, G, (OTHER_TOPIC, 0), expire_ts=expire)


def _explicit_empty(h: Harness, expire: int) -> None:
    build_group(h, G, EMPTY_CONSUMER)
    seed(h, G, (OTHER_TOPIC, 0), expire_ts=expire)


def _explicit_situation(situation: str, topic: str) -> Callable[[Harness, int], None]:
    def build(h: Harness, expire: int) -> None:
        build_group(h, G, situation)
        seed(h, G, (topic, 0), expire_ts=expire)
    return build


EXPLICIT = [
    # (builder, topic, the explicit timestamp applies?)
    pytest.param(_explicit_simple, OTHER_TOPIC, True, id="simple group: explicit wins"),
    pytest.param(_explicit_empty, OTHER_TOPIC, True, id="Empty consumer: explicit wins over emptied+retention"),
    pytest.param(_explicit_situation(STABLE_CONSUMER, OTHER_TOPIC), OTHER_TOPIC, True,
                 id="Stable consumer, unsubscribed topic: explicit wins"),
    pytest.param(_explicit_situation(STABLE_CONSUMER, SUBSCRIBED), SUBSCRIBED, False,
                 id="Stable consumer, subscribed topic: ignored"),
    pytest.param(_explicit_situation(PREPARING_CONSUMER, OTHER_TOPIC), OTHER_TOPIC, False,
                 id="PreparingRebalance: ignored"),
    pytest.param(_explicit_situation(COMPLETING_CONSUMER, OTHER_TOPIC), OTHER_TOPIC, False,
                 id="CompletingRebalance: ignored"),
    pytest.param(_explicit_situation(STABLE_CONNECT, OTHER_TOPIC), OTHER_TOPIC, False,
                 id="Stable other protocol: ignored"),
]


@pytest.mark.parametrize("offset_from_now", [DAY, 30 * DAY], ids=["sooner than retention", "later than retention"])
@pytest.mark.parametrize("build,topic,applies", EXPLICIT)
def test_explicit_expire_timestamp(build, topic: str, applies: bool, offset_from_now: int) -> None:
    """§2 Predicate: with an explicit expireTimestamp the offset expires iff now >= it, sooner or
    later than the retention would have said; where §2 gives no condition it never expires."""
    h = Harness.new()
    expire = h.now + offset_from_now
    build(h, expire)
    group_goes = applies and h.state(G) == EMPTY
    check_expiry(h, G, {(topic, 0): expire if applies else NEVER}, removed=group_goes)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_commit_with_retention_time_stores_value_v1_and_expires_then(version: int) -> None:
    """OffsetCommit v2-v4 retention_time: expire timestamp = commit time + retention_time, written
    as OffsetCommitValue v1 (§4.5), and the sweep honours it exactly."""
    h = Harness.new()
    errors, _, result = h.commit(G, [("t", 0, 42, -1, None)], retention_ms=90 * MINUTE, version=version)
    assert errors == {("t", 0): NONE}
    [(key, value)] = decoded(result.records)
    assert value.expire_timestamp == h.now + 90 * MINUTE and value.commit_timestamp == h.now
    assert encode_value(value)[:2] == b"\x00\x01"
    check_expiry(h, G, {("t", 0): h.now + 90 * MINUTE}, removed=True)


# ------------------------------------------------------------------------------------------
# group removal


@pytest.mark.parametrize("situation,removed", [
    (EMPTY_CONSUMER, True), (EMPTY_CONNECT, True),
    (STABLE_CONSUMER, False), (PREPARING_CONSUMER, False), (COMPLETING_CONSUMER, False), (STABLE_CONNECT, False),
])
def test_group_without_offsets_removed_at_next_sweep_iff_empty(situation: str, removed: bool) -> None:
    """§2 step 1.1 + 2: a group with no committed offsets counts as "all expired" without waiting
    for any retention; it is removed (GroupMetadata tombstone) at the very next sweep iff Empty."""
    h = Harness.new()
    build_group(h, G, situation)
    result = sweep(h)  # same instant: no retention wait at all
    assert offset_tombstones(result) == set()
    assert result.records == ([(GroupMetadataKey(G), None)] if removed else [])
    assert (G in listed(h)) is not removed
    assert h.state(G) == (DEAD if removed else situation.split(" ")[0])
    assert (G in replay_into_fresh_shard(h.log).groups) is not removed


def test_offset_delete_never_deletes_the_group_but_the_next_sweep_does() -> None:
    """§1.4: OffsetDelete of an Empty group's last offsets leaves the group; the next expiration
    cycle removes it (no retention wait)."""
    h = Harness.new()
    build_group(h, G, EMPTY_CONSUMER)
    seed(h, G, ("t", 0))
    seed(h, G, ("t", 1))
    body, result = h.delete_offsets(G, [("t", [0, 1])])
    assert body["error_code"] == NONE and body["topics"] == {"t": {0: NONE, 1: NONE}}
    assert group_tombstones(result) == set() and G in listed(h) and committed(h) == set()
    assert h.shard.counters.offset_deletions == 2 and h.shard.counters.offset_expirations == 0
    assert sweep(h).records == [(GroupMetadataKey(G), None)]
    assert G not in listed(h)


def test_offset_delete_of_unsubscribed_topic_in_a_stable_group() -> None:
    """§3 row "non-empty, protocol consumer": the subscribed topic answers 86 and keeps its offset,
    the unsubscribed one is deleted; the sweep then has nothing of it left to expire."""
    h = Harness.new()
    info = build_group(h, G, STABLE_CONSUMER)
    seed(h, G, (SUBSCRIBED, 0), commit_ts=h.now - 30 * DAY)
    seed(h, G, (OTHER_TOPIC, 0))
    body, _ = h.delete_offsets(G, [(SUBSCRIBED, [0]), (OTHER_TOPIC, [0])])
    assert body == {"error_code": NONE, "topics": {SUBSCRIBED: {0: GROUP_SUBSCRIBED_TO_TOPIC},
                                                   OTHER_TOPIC: {0: NONE}}}
    assert committed(h) == {(SUBSCRIBED, 0)}
    assert sweep(h, h.now + 100 * RETENTION).records == []
    assert h.state(G) == STABLE and info.leader in h.member_ids(G)


def test_delete_groups_leaves_nothing_for_the_sweep() -> None:
    """§1.5: DeleteGroups of an Empty group writes its offset tombstones, then the group tombstone;
    afterwards no sweep writes anything for it."""
    h = Harness.new()
    build_group(h, G, EMPTY_CONSUMER)
    seed(h, G, ("t", 0))
    seed(h, G, ("u", 2))
    errors, result = h.delete_groups([G])
    assert errors == {G: NONE}
    assert result.records[-1] == (GroupMetadataKey(G), None)
    assert {(k.topic, k.partition) for k, v in result.records[:-1]} == {("t", 0), ("u", 2)}
    assert G not in listed(h)
    assert sweep(h, h.now + 2 * RETENTION).records == []


# ------------------------------------------------------------------------------------------
# topic deletion


def test_topic_deletion_tombstones_every_groups_offsets_of_that_topic() -> None:
    """§2 "Topic or partition deletion": tombstones for every group's offsets on the deleted
    partitions at once, whatever the group's state or subscription, with no retention wait; other
    topics are untouched. A simple group left with nothing goes at the next sweep."""
    h = Harness.new()
    stable = build_group(h, "stable", STABLE_CONSUMER)
    assert stable.members
    build_group(h, "empty", EMPTY_CONSUMER)
    for group in ("stable", "empty", "simple"):
        for p in range(3):
            seed(h, group, (SUBSCRIBED, p))
    seed(h, "stable", (OTHER_TOPIC, 0))
    seed(h, "empty", (OTHER_TOPIC, 1))

    partial = h.shard.on_partitions_deleted(SUBSCRIBED, [1])
    assert partial.replay is True and partial.completions == []
    assert {(k.group, k.partition) for k, _ in partial.records} == {("stable", 1), ("empty", 1), ("simple", 1)}
    assert all(v is None and k.topic == SUBSCRIBED for k, v in partial.records)
    assert committed(h, "simple") == {(SUBSCRIBED, p) for p in range(3)}  # records, not mutation
    h.run(partial)
    assert committed(h, "simple") == {(SUBSCRIBED, 0), (SUBSCRIBED, 2)}

    result = h.shard.on_partitions_deleted(SUBSCRIBED, range(3))
    assert {(k.group, k.topic, k.partition) for k, _ in result.records} == {
        (g, SUBSCRIBED, p) for g in ("stable", "empty", "simple") for p in (0, 2)}
    h.run(result)
    assert committed(h, "stable") == {(OTHER_TOPIC, 0)}
    assert committed(h, "empty") == {(OTHER_TOPIC, 1)}
    assert committed(h, "simple") == set()
    assert h.state("stable") == STABLE
    assert h.shard.on_partitions_deleted("no-such-topic", range(5)).records == []
    assert sweep(h).records == [(GroupMetadataKey("simple"), None)]
    assert listed(h) == {"stable", "empty"}


# ------------------------------------------------------------------------------------------
# per-group retention (offsets.retention.minutes on a GROUP config resource)


def _base_simple(h: Harness) -> tuple[TP, int, bool]:
    h.commit(G, [("t", 0, 1, -1, None)])
    return ("t", 0), h.now, True


def _base_empty(h: Harness) -> tuple[TP, int, bool]:
    info = build_group(h, G, STABLE_CONSUMER)
    h.commit(G, [(SUBSCRIBED, 0, 1, -1, None)], member_id=info.leader, generation=info.generation)
    h.advance(DAY)
    h.leave(G, [(m, None) for m in info.members])
    return (SUBSCRIBED, 0), h.now, True


def _base_stable_unsubscribed(h: Harness) -> tuple[TP, int, bool]:
    build_group(h, G, STABLE_CONSUMER)
    seed(h, G, (OTHER_TOPIC, 0))
    return (OTHER_TOPIC, 0), h.now, False


@pytest.mark.parametrize("override", [30 * DAY, 1 * DAY, 1 * MINUTE, -1],
                         ids=["longer", "shorter", "one minute", "-1 never"])
@pytest.mark.parametrize("base", [_base_simple, _base_empty, _base_stable_unsubscribed],
                         ids=["simple", "Empty", "Stable unsubscribed"])
def test_per_group_retention(base, override: int) -> None:
    """A group's own retention replaces offsets.retention.minutes for that group only: its offsets
    expire at base + override (-1: never); a neighbour keeps the broker default."""
    h = Harness.new()
    h.shard.group_retention_ms[G] = override
    h.commit("neighbour", [("t", 0, 1, -1, None)])
    neighbour_committed = h.now
    tp, since, group_goes = base(h)
    assert h.shard.retention_ms(G) == override and h.shard.retention_ms("neighbour") == RETENTION
    assert h.shard.expiry_times("neighbour") == {("t", 0): neighbour_committed + RETENTION}
    expected = NEVER if override == -1 else since + override
    check_expiry(h, G, {tp: expected}, removed=group_goes and expected is not NEVER)


def test_per_group_retention_removed_restores_the_default() -> None:
    h = Harness.new()
    h.commit(G, [("t", 0, 1, -1, None)])
    committed_at = h.now
    h.shard.group_retention_ms[G] = -1
    assert h.shard.expiry_times(G) == {("t", 0): NEVER}
    assert sweep(h, committed_at + 10 * RETENTION).records == []
    del h.shard.group_retention_ms[G]
    assert h.shard.retention_ms(G) == RETENTION
    assert h.shard.expiry_times(G) == {("t", 0): committed_at + RETENTION}
    assert offset_tombstones(sweep(h)) == {("t", 0)}


def test_broker_retention_setting_is_used() -> None:
    """offsets.retention.minutes reaches the shard as retention_ms (minutes x 60000, §2)."""
    h = Harness.new(retention_ms=1 * MINUTE)
    h.commit(G, [("t", 0, 1, -1, None)])
    check_expiry(h, G, {("t", 0): h.now + MINUTE}, removed=True)


# ------------------------------------------------------------------------------------------
# metrics, logging, records-only


def test_offset_expirations_counter() -> None:
    """offset-expiration-count (§2 Metrics): the number of expired offsets, not of group
    tombstones; OffsetDelete counts as deletions, not expirations."""
    h = Harness.new()
    counters = h.shard.counters
    h.commit("a", [("t", 0, 1, -1, None), ("t", 1, 1, -1, None), ("u", 0, 1, -1, None)])
    h.advance(DAY)
    h.commit("b", [("t", 0, 1, -1, None)])
    build_group(h, "idle", EMPTY_CONSUMER)  # no offsets: a group tombstone, no expiration
    assert counters.offset_expirations == 0
    sweep(h, h.now + RETENTION - DAY)
    assert counters.offset_expirations == 3
    sweep(h)
    assert counters.offset_expirations == 3
    sweep(h, h.now + DAY)
    assert counters.offset_expirations == 4
    h.commit("c", [("t", 0, 1, -1, None)])
    h.delete_offsets("c", [("t", [0])])
    assert counters.offset_deletions == 1 and counters.offset_expirations == 4


def test_expiry_warning_logged_once_a_day_before(caplog: pytest.LogCaptureFixture) -> None:
    """One warning line per group when its offsets will expire within a day; a new commit re-arms it."""
    h = Harness.new()
    group = "warned-group"
    h.commit(group, [("t", 0, 1, -1, None)])
    expiry = h.now + RETENTION
    caplog.set_level(logging.WARNING, logger="offsetd.coordinator")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and group in r.getMessage()]

    sweep(h, expiry - DAY - 1)
    assert warnings() == []
    sweep(h, expiry - DAY)
    assert len(warnings()) == 1
    sweep(h, expiry - 1)
    assert len(warnings()) == 1
    h.commit(group, [("t", 0, 2, -1, None)])
    sweep(h, h.now + RETENTION - DAY)
    assert len(warnings()) == 2


def test_expiration_is_records_only_until_replayed() -> None:
    """Expiration never mutates memory directly: the shard is unchanged until the tombstones are
    replayed, and a shard loaded from the log (tombstones included) agrees with the live one."""
    h = Harness.new()
    h.commit("simple", [("t", 0, 1, -1, None)])
    build_group(h, "idle", EMPTY_CONSUMER)
    info = build_group(h, "stable", STABLE_CONSUMER)
    h.commit("stable", [(SUBSCRIBED, 0, 9, -1, None)], member_id=info.leader, generation=info.generation)
    h.advance(RETENTION)
    result = h.shard.expire_offsets(h.now, list(h.shard.groups))
    assert result.replay is True
    assert set(result.records) == {(OffsetCommitKey("simple", "t", 0), None), (GroupMetadataKey("simple"), None),
                                   (GroupMetadataKey("idle"), None)}
    assert committed(h, "simple") == {("t", 0)} and listed(h) == {"simple", "idle", "stable"}
    h.run(result)
    assert listed(h) == {"stable"}
    loaded = replay_into_fresh_shard(h.log)
    assert {g for g, _, _ in loaded.list_groups()} == {"stable"}
    assert loaded.fetch_offsets("stable", None) == h.shard.fetch_offsets("stable", None)
    assert loaded.fetch_offsets("simple", None) == []


def test_expiry_times_survive_a_reload() -> None:
    """The retention clocks are durable (§4.5 commit/expire timestamps, §4.7 currentStateTimestamp):
    a shard loaded from the log computes the same expiry times as the live one, so a restart
    neither resets nor shortens any retention."""
    h = Harness.new()
    h.commit("simple", [("t", 0, 1, -1, None)])
    h.commit("explicit", [("t", 0, 1, -1, None)], retention_ms=3 * DAY, version=2)
    stable = build_group(h, "stable", STABLE_CONSUMER)
    h.commit("stable", [(SUBSCRIBED, 0, 1, -1, None), (OTHER_TOPIC, 0, 1, -1, None)],
             member_id=stable.leader, generation=stable.generation)
    h.advance(DAY)
    emptied = build_group(h, "emptied", STABLE_CONSUMER)
    h.commit("emptied", [(SUBSCRIBED, 1, 1, -1, None)], member_id=emptied.leader, generation=emptied.generation)
    h.advance(DAY)
    h.leave("emptied", [(m, None) for m in emptied.members])
    groups = ["simple", "explicit", "stable", "emptied"]
    live = {g: h.shard.expiry_times(g) for g in groups}
    assert live["emptied"] == {(SUBSCRIBED, 1): h.now + RETENTION}
    assert live["stable"][(SUBSCRIBED, 0)] is NEVER and live["stable"][(OTHER_TOPIC, 0)] is not NEVER
    loaded = replay_into_fresh_shard(h.log)
    assert {g: loaded.expiry_times(g) for g in groups} == live


# ------------------------------------------------------------------------------------------
# property: expiry_times is exactly what expire_offsets does


def _random_shard(rng: random.Random) -> Harness:
    h = Harness.new()
    t0 = h.now
    kinds = ["simple", "empty", "stable", "preparing", "completing", "connect", "empty-no-ts", "no-offsets"]
    for i in range(40):
        kind = rng.choice(kinds)
        g = f"{kind}-{i}"
        if kind in ("empty", "no-offsets"):
            build_group(h, g, EMPTY_CONSUMER)
        elif kind == "stable":
            build_group(h, g, STABLE_CONSUMER)
        elif kind == "preparing":
            build_group(h, g, PREPARING_CONSUMER)
        elif kind == "completing":
            build_group(h, g, COMPLETING_CONSUMER)
        elif kind == "connect":
            build_group(h, g, STABLE_CONNECT)
        elif kind == "empty-no-ts":
            value = GroupMetadataValue(protocol_type="consumer", generation=1, protocol=None, leader=None,
                                       current_state_timestamp=-1, members=())
            h.shard.replay(GroupMetadataKey(g), value)
        if kind != "no-offsets":
            for _ in range(rng.randint(1, 4)):
                tp = (rng.choice([SUBSCRIBED, OTHER_TOPIC, "x"]), rng.randint(0, 3))
                explicit = rng.random() < 0.3
                seed(h, g, tp, commit_ts=t0 - rng.randint(0, 20 * DAY),
                     expire_ts=t0 + rng.randint(-10 * DAY, 20 * DAY) if explicit else -1)
        if rng.random() < 0.3:
            h.shard.group_retention_ms[g] = rng.choice([DAY, 3 * DAY, 30 * DAY, -1])
        h.advance(rng.randint(0, DAY))
    return h


@pytest.mark.parametrize("seed_value", range(8))
def test_expiry_times_agrees_with_expire_offsets(seed_value: int) -> None:
    """For random groups and random instants (plus every expiry time and 1 ms before it): an offset
    is tombstoned iff now >= its expiry time, and a group tombstone is written iff the group is
    Empty and every offset it has (possibly none) is tombstoned."""
    rng = random.Random(seed_value)
    h = _random_shard(rng)
    groups = list(h.shard.groups)
    times = {g: h.shard.expiry_times(g) for g in groups}
    finite = {t for per_group in times.values() for t in per_group.values() if t is not None}
    instants = {h.now + rng.randint(0, 60 * DAY) for _ in range(100)}
    instants |= {t for t in finite if t >= h.now} | {t - 1 for t in finite if t - 1 >= h.now}
    for now in sorted(instants):
        result = h.shard.expire_offsets(now, groups)  # not replayed: the state stays as built
        tombstoned = {(k.group, k.topic, k.partition) for k, _ in result.records if isinstance(k, OffsetCommitKey)}
        expected = {(g, tp[0], tp[1]) for g, per_group in times.items()
                    for tp, at in per_group.items() if at is not None and now >= at}
        assert tombstoned == expected, now
        empty = {g for g in groups if h.state(g) == EMPTY}
        expected_groups = {g for g in empty if all(at is not None and now >= at for at in times[g].values())}
        assert group_tombstones(result) == expected_groups, now
    assert times == {g: h.shard.expiry_times(g) for g in groups}


# ------------------------------------------------------------------------------------------
# bounded sweeps over a large shard


N_GROUPS = 100_000
CHUNK = 1000


def _large_shard(now: int) -> GroupCoordinatorShard:
    """100k simple groups, each with one offset; even-numbered ones committed a retention ago, the
    others just now."""
    shard = GroupCoordinatorShard(0, make_config())
    old = encode_value(OffsetCommitValue(offset=1, commit_timestamp=now - RETENTION))
    fresh = encode_value(OffsetCommitValue(offset=1, commit_timestamp=now))
    for i in range(N_GROUPS):
        shard.replay_raw(encode_key(OffsetCommitKey(f"g{i:06d}", "t", 0)), fresh if i % 2 else old)
    assert len(shard.groups) == N_GROUPS
    return shard


def test_sweep_chunks_touch_only_the_groups_given() -> None:
    """expire_offsets(now, chunk) is one bounded slice of the sweep: over 100k groups in chunks of
    1000, each call writes records only for groups of its chunk (exactly the expired ones: offset
    tombstone + group tombstone), groups outside the chunk are untouched, and the union equals a
    sweep of everything."""
    now = 10 * RETENTION
    shard = _large_shard(now)
    ids = list(shard.groups)
    expired_total = 0
    for start in range(0, N_GROUPS, CHUNK):
        chunk = ids[start:start + CHUNK]
        result = shard.expire_offsets(now, chunk)
        touched = {k.group for k, _ in result.records}
        expired = {g for g in chunk if int(g[1:]) % 2 == 0}
        assert touched == expired
        assert len(result.records) == 2 * len(expired)
        for key, value in result.records:
            shard.replay(key, value)
        expired_total += len(expired)
        assert len(shard.groups) == N_GROUPS - expired_total  # nothing beyond this chunk went
        if start + CHUNK < N_GROUPS:
            assert shard.committed_partitions(ids[start + CHUNK]) == [("t", 0)]
    assert expired_total == N_GROUPS // 2
    assert shard.counters.offset_expirations == N_GROUPS // 2
    assert shard.expire_offsets(now, ["gone-already", ids[0]]).records == []  # unknown ids are skipped


def test_runtime_sweep_calls_the_shard_in_chunks_and_yields_between_them() -> None:
    """The shell's sweep (coordinator_runtime.ShardRuntime.sweep) hands the shard at most
    SWEEP_CHUNK (1000) groups per call, covers every group exactly once, and gives the event loop
    a turn between calls, so a 100k-group shard never stalls it."""
    now = 10 * RETENTION
    shard = _large_shard(now)
    runtime = ShardRuntime(shard, None, fsync=False, clock=lambda: now)  # type: ignore[arg-type]
    runtime.state = ShardState.ACTIVE  # as if loaded (the sweep never runs on a loading shard)
    submitted: list[CoordinatorResult] = []
    runtime.submit = submitted.append  # type: ignore[method-assign]
    calls: list[tuple[int, list[str]]] = []
    real = shard.expire_offsets
    ticks = 0

    durations: list[float] = []

    def spy(at: int, group_ids):
        group_ids = list(group_ids)
        calls.append((ticks, group_ids))
        # CPU time of this thread, not wall time: a loaded machine (a full test run beside other
        # work on 2 cores) must not fail the test, a chunk doing too much work must.
        started = time.thread_time()
        try:
            return real(at, group_ids)
        finally:
            durations.append(time.thread_time() - started)

    shard.expire_offsets = spy  # type: ignore[method-assign]

    async def main() -> None:
        nonlocal ticks

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await runtime.sweep()
        task.cancel()

    asyncio.run(main())
    assert SWEEP_CHUNK == CHUNK
    assert len(calls) == N_GROUPS // CHUNK
    assert all(0 < len(ids) <= SWEEP_CHUNK for _, ids in calls)
    assert [g for _, ids in calls for g in ids] == list(shard.groups)  # nothing replayed: all still there
    ticks_seen = [t for t, _ in calls]
    assert all(a < b for a, b in zip(ticks_seen, ticks_seen[1:])), "the loop got no turn between chunks"
    assert max(durations) < 1.0, f"one chunk took {max(durations):.3f} s of CPU on the event loop"
    tombstoned = {k.group for r in submitted for k, _ in r.records if isinstance(k, OffsetCommitKey)}
    assert tombstoned == {g for g in shard.groups if int(g[1:]) % 2 == 0}


# ------------------------------------------------------------------------------------------
# the sweep and writes that are not yet durable (§5.3)


class _MemoryLog:
    """Stands in for the `__consumer_offsets` partition: keeps the appended batches."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    def append(self, batch: bytes, now: int, validated: object = None, *, sync: bool = False) -> None:
        self.batches.append(batch)


def test_sweep_never_expires_an_offset_whose_recommit_is_still_being_written() -> None:
    """§5.3: a write validates against the latest state including writes that are not durable yet
    (NEW), and OLD's expiration skipped partitions with a pending commit. So a sweep that fires
    while a fresh commit of an about-to-expire offset is being written must not tombstone it: once
    both writes are done the group has the fresh offset."""
    now = 10 * RETENTION
    shard = GroupCoordinatorShard(0, make_config())
    shard.replay(OffsetCommitKey(G, "t", 0), OffsetCommitValue(offset=1, commit_timestamp=now - RETENTION))
    runtime = ShardRuntime(shard, _MemoryLog(), fsync=False, clock=lambda: now)  # type: ignore[arg-type]
    runtime.state = ShardState.ACTIVE  # as if loaded (the sweep never runs on a loading shard)

    async def main() -> dict:
        token = asyncio.get_running_loop().create_future()
        runtime.submit(shard.commit_offsets(token, G, "", None, -1, [("t", 0, 2, -1, None)], -1, 9, now))
        await runtime.sweep()  # the periodic sweep fires while the commit is in flight
        errors = await token
        while runtime._queue or runtime._writing:
            await asyncio.sleep(0)
        return errors

    assert asyncio.run(main()) == {("t", 0): NONE}
    assert shard.fetch_offsets(G, [("t", [0])]) == [("t", [(0, 2, -1, "")])], "a fresh commit was expired"
    assert G in shard.groups


def test_topic_deletion_also_removes_an_offset_whose_commit_is_still_being_written() -> None:
    """§2 topic deletion + §5.3 (writes see the latest state, including writes not yet durable): a
    commit on a partition that is written while its topic is deleted must not survive the deletion
    as an orphan offset of a topic that no longer exists."""
    now = RETENTION
    shard = GroupCoordinatorShard(0, make_config())
    runtime = ShardRuntime(shard, _MemoryLog(), fsync=False, clock=lambda: now)  # type: ignore[arg-type]

    async def main() -> None:
        token = asyncio.get_running_loop().create_future()
        runtime.submit(shard.commit_offsets(token, G, "", None, -1, [("doomed", 0, 5, -1, None)], -1, 9, now))
        runtime.submit(shard.on_partitions_deleted("doomed", range(1)))  # DeleteTopics meanwhile
        assert await token == {("doomed", 0): NONE}
        while runtime._queue or runtime._writing:
            await asyncio.sleep(0)

    asyncio.run(main())
    assert shard.fetch_offsets(G, [("doomed", [0])]) == [("doomed", [(0, -1, -1, "")])], \
        "an offset of the deleted topic survived"
