"""The reconciliation step alone (B3), in the manner of Kafka's CurrentAssignmentBuilderTest."""

from __future__ import annotations

import uuid

from offsetd.coordinator.consumer_group import ConsumerGroupMember, MemberState
from offsetd.coordinator.consumer_reconciliation import reconcile

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def member(epoch: int, state: MemberState = MemberState.STABLE, assigned=None, pending=None,
           previous: int = 0) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "m", member_epoch=epoch, previous_member_epoch=previous, state=state,
        assigned_partitions={t: frozenset(ps) for t, ps in (assigned or {}).items()},
        partitions_pending_revocation={t: frozenset(ps) for t, ps in (pending or {}).items()})


def nobody(_t, _p) -> bool:
    return False


def a(**parts) -> dict:
    return {T if k == "t" else U: frozenset(v) for k, v in parts.items()}


def test_stable_at_the_target_epoch_is_unchanged() -> None:
    m = member(10, assigned={T: {1, 2}})
    assert reconcile(m, 10, a(t={1, 2, 3}), a(t={1, 2}), nobody) is m


def test_stable_to_stable_when_only_adding_free_partitions() -> None:
    m = member(10, assigned={T: {1, 2}}, previous=9)
    out = reconcile(m, 11, a(t={1, 2, 3}, u={0}), a(t={1, 2}), nobody)
    assert (out.member_epoch, out.previous_member_epoch, out.state) == (11, 10, MemberState.STABLE)
    assert out.assigned_partitions == a(t={1, 2, 3}, u={0}) and out.partitions_pending_revocation == {}


def test_stable_to_unrevoked_partitions_keeps_the_epoch() -> None:
    m = member(10, assigned={T: {1, 2, 3}})
    out = reconcile(m, 11, a(t={3, 4}), a(t={1, 2, 3}), nobody)
    assert (out.member_epoch, out.state) == (10, MemberState.UNREVOKED_PARTITIONS)
    assert out.assigned_partitions == a(t={3}) and out.partitions_pending_revocation == a(t={1, 2})


def test_revocations_already_done_go_straight_to_the_target() -> None:
    m = member(10, assigned={T: {1, 2, 3}})
    out = reconcile(m, 11, a(t={3, 4}), a(t={3}), nobody)
    assert (out.member_epoch, out.state) == (11, MemberState.STABLE)
    assert out.assigned_partitions == a(t={3, 4})


def test_unrevoked_partitions_waits_while_they_are_still_owned_or_unknown() -> None:
    m = member(10, MemberState.UNREVOKED_PARTITIONS, assigned={T: {3}}, pending={T: {1, 2}})
    assert reconcile(m, 11, a(t={3, 4}), a(t={2, 3}), nobody) is m
    assert reconcile(m, 11, a(t={3, 4}), None, nobody) is m


def test_unrevoked_to_stable_once_revoked() -> None:
    m = member(10, MemberState.UNREVOKED_PARTITIONS, assigned={T: {3}}, pending={T: {1, 2}})
    out = reconcile(m, 11, a(t={3, 4}), a(t={3}), nobody)
    assert (out.member_epoch, out.previous_member_epoch, out.state) == (11, 10, MemberState.STABLE)
    assert out.assigned_partitions == a(t={3, 4}) and out.partitions_pending_revocation == {}


def test_unrevoked_to_unreleased_when_another_member_still_holds_one() -> None:
    m = member(10, MemberState.UNREVOKED_PARTITIONS, assigned={T: {3}}, pending={T: {1, 2}})
    out = reconcile(m, 11, a(t={3, 4, 5}), a(t={3}), lambda t, p: p == 5)
    assert (out.member_epoch, out.state) == (11, MemberState.UNRELEASED_PARTITIONS)
    assert out.assigned_partitions == a(t={3, 4})


def test_unreleased_partitions_are_given_once_released() -> None:
    m = member(11, MemberState.UNRELEASED_PARTITIONS, assigned={T: {3, 4}})
    assert reconcile(m, 11, a(t={3, 4, 5}), a(t={3, 4}), lambda t, p: p == 5).assigned_partitions == a(t={3, 4})
    out = reconcile(m, 11, a(t={3, 4, 5}), a(t={3, 4}), nobody)
    assert (out.member_epoch, out.state) == (11, MemberState.STABLE)
    assert out.assigned_partitions == a(t={3, 4, 5})


def test_unreleased_member_follows_a_newer_target() -> None:
    m = member(11, MemberState.UNRELEASED_PARTITIONS, assigned={T: {3, 4}})
    out = reconcile(m, 12, a(t={3}), a(t={3, 4}), lambda t, p: p == 5)
    assert (out.member_epoch, out.state) == (11, MemberState.UNREVOKED_PARTITIONS)
    assert out.partitions_pending_revocation == a(t={4})


def test_a_partition_the_member_is_itself_revoking_is_not_unreleased() -> None:
    # The owner index still lists the member for its pending partitions; only others count.
    m = member(10, MemberState.UNREVOKED_PARTITIONS, assigned={T: {3}}, pending={T: {1}})
    out = reconcile(m, 11, a(t={1, 3}), a(t={3}), nobody)
    assert out.assigned_partitions == a(t={1, 3}) and out.state is MemberState.STABLE
