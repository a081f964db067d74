"""The lease / claim / fencing rules of cluster mode (cluster/ownership.py), sans-IO with a fake
clock: who claims, who releases, when a broker must stop serving."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offsetd.cluster.ownership import Lease, PartitionRow, Preferences, plan, rendezvous_owner

KEYS = [("t", p) for p in range(60)]


def rows(owner_of: dict, epoch: int = 1) -> list[PartitionRow]:
    return [PartitionRow(k, owner_of.get(k), epoch) for k in KEYS]


def test_rendezvous_is_deterministic_and_spreads() -> None:
    owners = [rendezvous_owner(k, [1, 2, 3]) for k in KEYS]
    assert owners == [rendezvous_owner(k, [3, 1, 2]) for k in KEYS]  # order of brokers does not matter
    counts = Counter(owners)
    assert set(counts) == {1, 2, 3} and min(counts.values()) >= 10, counts
    assert rendezvous_owner(("t", 0), []) is None


def test_a_joining_broker_takes_only_its_own_share() -> None:
    before = {k: rendezvous_owner(k, [1, 2, 3]) for k in KEYS}
    after = {k: rendezvous_owner(k, [1, 2, 3, 4]) for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert moved and all(after[k] == 4 for k in moved)  # nothing moves between the old brokers


def test_unowned_partitions_are_claimed_by_their_preferred_live_broker_only() -> None:
    live = [1, 2, 3]
    for me in live:
        decided = plan(me, live, rows({}), {}, lease_valid=True)
        assert decided.claim == [k for k in KEYS if rendezvous_owner(k, live) == me]
        assert decided.release == decided.lost == []


def test_partitions_of_a_dead_broker_are_claimed_and_a_live_owner_is_left_alone() -> None:
    owner_of = {k: rendezvous_owner(k, [1, 2, 3]) for k in KEYS}
    # broker 3 died: 1 and 2 are live; each claims the dead broker's partitions it now prefers
    claims = {me: plan(me, [1, 2], rows(owner_of), {k: 1 for k, o in owner_of.items() if o == me}, True).claim
              for me in (1, 2)}
    dead = {k for k, o in owner_of.items() if o == 3}
    assert set(claims[1]) | set(claims[2]) == dead and not set(claims[1]) & set(claims[2])
    # while 3 is live, nobody touches its partitions
    assert all(k not in dead for me in (1, 2)
               for k in plan(me, [1, 2, 3], rows(owner_of), {}, True).claim)


def test_a_broker_reclaims_what_its_earlier_incarnation_owned() -> None:
    """A restarted node takes a new epoch: the old process, if still alive, is fenced by it."""
    owner_of = {k: 1 for k in KEYS}
    decided = plan(1, [1], rows(owner_of), {}, lease_valid=True)
    assert decided.claim == KEYS


def test_what_is_recorded_as_ours_but_not_held_is_claimed_or_set_free() -> None:
    """A restarted node (or one that gave a partition up after an unknown outcome) is live, so
    peers never claim what the shared state still records as its: it claims what it prefers and
    sets the rest free at their epochs."""
    owner_of = {k: 1 for k in KEYS}
    decided = plan(1, [1, 2], rows(owner_of, epoch=4), {}, lease_valid=True)
    mine = [k for k in KEYS if rendezvous_owner(k, [1, 2]) == 1]
    assert decided.claim == mine
    assert decided.disown == [(k, 4) for k in KEYS if k not in mine]


def test_rebalance_releases_to_a_joining_broker() -> None:
    owner_of = {k: 1 for k in KEYS}
    decided = plan(1, [1, 2], rows(owner_of), {k: 1 for k in KEYS}, lease_valid=True)
    assert decided.release == [k for k in KEYS if rendezvous_owner(k, [1, 2]) == 2]
    assert decided.claim == decided.lost == []


def test_a_new_epoch_or_owner_means_lost() -> None:
    owned = {KEYS[0]: 1, KEYS[1]: 1}
    state = [PartitionRow(KEYS[0], 2, 2), PartitionRow(KEYS[1], 1, 2)]  # taken; re-claimed by a newer us
    assert plan(1, [1, 2], state, owned, True).lost == [KEYS[0], KEYS[1]]


def test_a_deleted_topic_is_lost() -> None:
    assert plan(1, [1], [], {KEYS[0]: 1}, True).lost == [KEYS[0]]


def test_an_incomplete_plan_decides_only_on_the_rows_given() -> None:
    """Rows left out (unchanged since a complete plan) are not lost, claimed or released."""
    owned = {KEYS[0]: 1, KEYS[1]: 1}
    decided = plan(1, [1], [PartitionRow(KEYS[2], None, 0)], owned, True, complete=False)
    assert decided.claim == [KEYS[2]] and decided.lost == decided.release == []
    assert plan(1, [1], [], owned, True, complete=True).lost == [KEYS[0], KEYS[1]]


def test_preferences_are_the_rendezvous_owners_of_the_current_brokers() -> None:
    prefs = Preferences()
    assert [prefs.owner(k, (1, 2, 3)) for k in KEYS] == [rendezvous_owner(k, [1, 2, 3]) for k in KEYS]
    assert [prefs.owner(k, (1, 2)) for k in KEYS] == [rendezvous_owner(k, [1, 2]) for k in KEYS]
    prefs.forget(KEYS[:3])
    assert prefs.owner(KEYS[0], (1, 2)) == rendezvous_owner(KEYS[0], [1, 2])


def test_an_invalid_lease_loses_everything_and_claims_nothing() -> None:
    decided = plan(1, [1], rows({}), {KEYS[0]: 1}, lease_valid=False)
    assert decided.lost == [KEYS[0]] and decided.claim == decided.release == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def advance(self, ms: float) -> float:
        self.now += ms
        return self.now


def test_lease_serves_until_send_time_plus_ttl_minus_margin() -> None:
    clock = FakeClock()
    lease = Lease(ttl_ms=3000, margin_ms=500)
    assert not lease.valid(clock.now)  # never renewed
    sent = clock.now
    clock.advance(400)  # the renewal's round trip: counted from when it was sent
    lease.renewed(sent)
    assert lease.valid(clock.advance(2000))  # 2400 ms after sending
    assert not lease.valid(clock.advance(100))  # 2500 = ttl - margin: stop before anyone may claim
    lease.renewed(clock.now - 5000)  # a late answer to an old renewal never moves the deadline back
    assert not lease.valid(clock.now)
    lease.renewed(clock.now)
    assert lease.valid(clock.now)
    lease.expire()
    assert not lease.valid(clock.now)


def test_lease_margin_must_be_below_ttl() -> None:
    with pytest.raises(ValueError):
        Lease(ttl_ms=1000, margin_ms=1000)


@settings(max_examples=200, deadline=None)
@given(live=st.sets(st.integers(1, 6), min_size=1), dead=st.sets(st.integers(7, 9)),
       seed=st.randoms(use_true_random=False))
def test_every_partition_ends_with_exactly_one_owner(live: set[int], dead: set[int], seed) -> None:
    """Brokers acting one after another on a shared state (each claim bumps the epoch) converge:
    after two rounds every partition has one live owner, its preferred one, and no broker
    believes it owns a partition it does not."""
    everyone = sorted(live | dead)
    table = {k: PartitionRow(k, seed.choice(everyone + [None]), 1) for k in KEYS}
    owned: dict[int, dict] = {b: {k: 1 for k, row in table.items() if row.owner == b and b in live}
                              for b in live}
    for _ in range(2):
        for me in sorted(live, key=lambda _: seed.random()):
            decided = plan(me, sorted(live), table.values(), owned[me], lease_valid=True)
            for key in decided.lost:
                owned[me].pop(key)
            for key in decided.release:
                owned[me].pop(key)
                table[key] = PartitionRow(key, None, table[key].epoch)
            for key, epoch in decided.disown:
                if table[key].owner == me and table[key].epoch == epoch:
                    table[key] = PartitionRow(key, None, epoch)
            for key in decided.claim:
                row = table[key]
                if row.owner is None or row.owner == me or row.owner not in live:  # the claim statement's rule
                    table[key] = PartitionRow(key, me, row.epoch + 1)
                    owned[me][key] = row.epoch + 1
    for key, row in table.items():
        assert row.owner == rendezvous_owner(key, sorted(live))
        assert [b for b in live if key in owned[b]] == [row.owner]
        assert owned[row.owner][key] == row.epoch


@settings(max_examples=200, deadline=None)
@given(live=st.sets(st.integers(1, 6), min_size=2), seed=st.randoms(use_true_random=False))
def test_plans_of_changed_rows_only_converge_like_complete_ones(live: set[int], seed) -> None:
    """As cluster/member.py plans: complete when the live brokers change, else only on the rows
    changed since each broker's last plan. A broker dies, the others take its partitions over
    and then it returns: every partition ends with its preferred live owner, once."""
    table = {k: PartitionRow(k, None, 0) for k in KEYS}
    owned: dict[int, dict] = {b: {} for b in live}
    prefs = {b: Preferences() for b in live}
    seen_live: dict[int, tuple] = {}
    changed: dict[int, set] = {b: set() for b in live}

    def write(key, row) -> None:
        table[key] = row
        for b in changed:
            changed[b].add(key)

    def rounds(now_live: list[int]) -> None:
        for _ in range(2):
            for me in sorted(now_live, key=lambda _: seed.random()):
                complete = seen_live.get(me) != tuple(now_live)
                seen_live[me] = tuple(now_live)
                rows = list(table.values()) if complete else [table[k] for k in sorted(changed[me])]
                changed[me] = set()
                decided = plan(me, now_live, rows, owned[me], True, complete=complete, preferences=prefs[me])
                for key in decided.lost:
                    owned[me].pop(key)
                for key in decided.release:
                    owned[me].pop(key)
                    write(key, PartitionRow(key, None, table[key].epoch))
                for key, epoch in decided.disown:
                    if table[key].owner == me and table[key].epoch == epoch:
                        write(key, PartitionRow(key, None, epoch))
                for key in decided.claim:
                    row = table[key]
                    if row.owner is None or row.owner == me or row.owner not in now_live:
                        write(key, PartitionRow(key, me, row.epoch + 1))
                        owned[me][key] = row.epoch + 1
        for key, row in table.items():
            assert row.owner == rendezvous_owner(key, now_live)
            assert [b for b in now_live if key in owned[b]] == [row.owner]

    everyone = sorted(live)
    rounds(everyone)
    victim = seed.choice(everyone)
    owned[victim] = {}  # killed: its process and everything it held are gone
    rounds([b for b in everyone if b != victim])
    rounds(everyone)
