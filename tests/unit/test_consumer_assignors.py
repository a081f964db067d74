"""Server-side assignors `uniform` and `range` (reference B5): balance, stickiness, determinism."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from offsetd.coordinator.consumer_assignors import (
    ASSIGNORS,
    AssignmentMemberSpec,
    range_assign,
    uniform_assign,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
T3 = uuid.UUID(int=3)


def spec(*topics: uuid.UUID) -> AssignmentMemberSpec:
    return AssignmentMemberSpec(frozenset(topics), {})


def with_current(topics: set[uuid.UUID], current: dict[uuid.UUID, set[int]]) -> AssignmentMemberSpec:
    return AssignmentMemberSpec(frozenset(topics), {t: frozenset(ps) for t, ps in current.items()})


def sizes(result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def flat(assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def test_uniform_fresh_homogeneous_is_balanced() -> None:
    members = {m: spec(T1, T2) for m in ("a", "b", "c")}
    result = uniform_assign(members, {T1: 4, T2: 3})
    assert sorted(sizes(result).values()) == [2, 2, 3]
    assert set().union(*(flat(a) for a in result.values())) == {(T1, p) for p in range(4)} | {(T2, p) for p in range(3)}


def test_uniform_is_deterministic() -> None:
    members = {m: spec(T1) for m in ("c", "a", "b")}
    assert uniform_assign(members, {T1: 7}) == uniform_assign(dict(reversed(list(members.items()))), {T1: 7})


def test_uniform_member_join_moves_only_what_balance_needs() -> None:
    before = uniform_assign({"a": spec(T1), "b": spec(T1)}, {T1: 6})
    members = {m: with_current({T1}, {t: set(ps) for t, ps in before[m].items()}) for m in before}
    members["c"] = spec(T1)
    after = uniform_assign(members, {T1: 6})
    assert sizes(after) == {"a": 2, "b": 2, "c": 2}
    assert flat(after["a"]) <= flat(before["a"]) and flat(after["b"]) <= flat(before["b"])


def test_uniform_member_leave_keeps_the_others() -> None:
    before = uniform_assign({m: spec(T1) for m in "abc"}, {T1: 9})
    members = {m: with_current({T1}, dict(before[m])) for m in "ab"}
    after = uniform_assign(members, {T1: 9})
    assert sorted(sizes(after).values()) == [4, 5]
    for m in "ab":
        assert flat(before[m]) <= flat(after[m])


def test_uniform_heterogeneous_subscriptions() -> None:
    # a only reads T1, c only T2, b both: b takes the slack so loads are as even as possible.
    members = {"a": spec(T1), "b": spec(T1, T2), "c": spec(T2)}
    result = uniform_assign(members, {T1: 3, T2: 3})
    assert sizes(result) == {"a": 2, "b": 2, "c": 2}
    assert set(result["a"]) <= {T1} and set(result["c"]) <= {T2}


def test_uniform_drops_unsubscribed_and_vanished_partitions() -> None:
    members = {"a": with_current({T1}, {T1: {0, 1, 5}, T2: {0}})}
    assert uniform_assign(members, {T1: 2, T2: 1}) == {"a": {T1: frozenset({0, 1})}}


def test_uniform_double_claim_goes_to_one_member() -> None:
    members = {"a": with_current({T1}, {T1: {0}}), "b": with_current({T1}, {T1: {0}})}
    result = uniform_assign(members, {T1: 2})
    assert result == {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1})}}


def test_range_fresh_matches_the_classic_range() -> None:
    members = {m: spec(T1, T2) for m in ("a", "b", "c")}
    result = range_assign(members, {T1: 7, T2: 3})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({1})}
    assert result["c"] == {T1: frozenset({5, 6}), T2: frozenset({2})}


def test_range_co_partitioned_topics_line_up() -> None:
    members = {m: spec(T1, T2) for m in ("a", "b")}
    result = range_assign(members, {T1: 4, T2: 4})
    for m in members:
        assert result[m][T1] == result[m][T2]


def test_range_is_sticky_on_join() -> None:
    before = range_assign({"a": spec(T1), "b": spec(T1)}, {T1: 6})
    members = {m: with_current({T1}, dict(before[m])) for m in before}
    members["c"] = spec(T1)
    after = range_assign(members, {T1: 6})
    assert sizes(after) == {"a": 2, "b": 2, "c": 2}
    assert flat(after["a"]) <= flat(before["a"]) and flat(after["b"]) <= flat(before["b"])


def test_range_extra_partition_stays_with_its_owner() -> None:
    # b already holds 3 of 5: it keeps them and the extra slot is its.
    members = {"a": with_current({T1}, {T1: {0, 1}}), "b": with_current({T1}, {T1: {2, 3, 4}})}
    assert range_assign(members, {T1: 5}) == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3, 4})}}


def test_range_per_topic_subscribers_only() -> None:
    members = {"a": spec(T1), "b": spec(T1, T2)}
    result = range_assign(members, {T1: 2, T2: 2})
    assert result == {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1}), T2: frozenset({0, 1})}}


def test_members_without_topics_get_nothing() -> None:
    for assign in ASSIGNORS.values():
        assert assign({"a": spec(T3)}, {T1: 2}) == {"a": {}}


# ------------------------------------------------------------------------------ properties

_topics = [uuid.UUID(int=i) for i in range(1, 5)]


@st.composite
def groups(draw):
    counts = {t: draw(st.integers(0, 12)) for t in draw(st.sets(st.sampled_from(_topics), min_size=1))}
    member_ids = draw(st.sets(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=6))
    members = {}
    for m in sorted(member_ids):
        subscribed = draw(st.sets(st.sampled_from(_topics), min_size=0))
        current = {t: frozenset(draw(st.sets(st.integers(0, 14), max_size=4))) for t in
                   draw(st.sets(st.sampled_from(_topics), max_size=2))}
        members[m] = AssignmentMemberSpec(frozenset(subscribed), current)
    return members, counts


def _check_exactly_once(members, counts, result) -> None:
    assert set(result) == set(members)
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for m, assignment in result.items():
        for t, ps in assignment.items():
            assert t in members[m].subscribed_topic_ids
            for p in ps:
                assert 0 <= p < counts[t]
                assert (t, p) not in seen, "a partition with two owners"
                seen[(t, p)] = m
    expected = {(t, p) for t, n in counts.items() for p in range(n)
                if any(t in s.subscribed_topic_ids for s in members.values())}
    assert set(seen) == expected


@settings(max_examples=200, deadline=None)
@given(groups())
def test_every_subscribed_partition_assigned_exactly_once(group) -> None:
    members, counts = group
    for assign in ASSIGNORS.values():
        result = assign(members, counts)
        _check_exactly_once(members, counts, result)
        assert assign(members, counts) == result  # deterministic


@settings(max_examples=200, deadline=None)
@given(groups())
def test_uniform_homogeneous_is_balanced_and_sticky(group) -> None:
    members, counts = group
    topics = frozenset(counts)
    members = {m: AssignmentMemberSpec(topics, s.assignment) for m, s in members.items()}
    result = uniform_assign(members, counts)
    loads = sizes(result).values()
    assert max(loads) - min(loads) <= 1
    # A second run from its own result changes nothing (stable once balanced).
    again = {m: AssignmentMemberSpec(topics, result[m]) for m in members}
    assert uniform_assign(again, counts) == result


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_is_balanced_per_topic_and_stable(group) -> None:
    members, counts = group
    result = range_assign(members, counts)
    for t in counts:
        subs = [m for m in members if t in members[m].subscribed_topic_ids]
        if subs:
            per_member = [len(result[m].get(t, ())) for m in subs]
            assert max(per_member) - min(per_member) <= 1
    again = {m: AssignmentMemberSpec(s.subscribed_topic_ids, result[m]) for m, s in members.items()}
    assert range_assign(again, counts) == result
