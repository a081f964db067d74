"""The share-partition state machine (broker/share_partition.py) with a fake clock: Kafka's
SharePartitionTest and ShareFetchAcknowledgeRequestTest cases from reference share-groups.md §8."""

from __future__ import annotations

import pytest

from offsetd.broker.share_partition import (
    INVALID_RECORD_STATE, INVALID_REQUEST, NONE, AckBatch, AckType, AcquiredRange, RecordState, SharePartition,
    StateBatch, validate_ack_batches,
)

A, ACQ, ACK, ARC = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def ack(first: int, last: int, *types: AckType) -> AckBatch:
    return AckBatch(first, last, tuple(int(t) for t in types))


def states(sp: SharePartition, first: int, last: int) -> list[tuple[RecordState, int, str | None] | None]:
    return [sp.state_of(o) for o in range(first, last + 1)]


def test_a_first_fetch_acquires_the_batches_read_with_count_one_and_moves_the_next_fetch_offset() -> None:
    sp = SharePartition(0, lock_duration_ms=1000)
    assert sp.acquire("m1", [(0, 4), (5, 9)], max_records=500, now_ms=0) == [AcquiredRange(0, 9, 1)]
    assert states(sp, 0, 9) == [(ACQ, 1, "m1")] * 10
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset(), sp.in_flight()) == (0, 9, 10, 10)
    assert sp.next_lock_deadline() == 1000


def test_max_records_stops_at_a_batch_boundary_after_passing_it() -> None:
    sp = SharePartition(0)
    assert sp.acquire("m1", [(0, 4), (5, 9), (10, 14)], max_records=6, now_ms=0) == [AcquiredRange(0, 9, 1)]
    assert sp.next_fetch_offset() == 10


def test_the_in_flight_cap_stops_new_offsets_but_released_ones_inside_the_window_are_taken_again() -> None:
    sp = SharePartition(0, max_in_flight=10)
    assert sp.acquire("m1", [(0, 14)], max_records=500, now_ms=0) == [AcquiredRange(0, 9, 1)]
    assert sp.acquire("m2", [(10, 14)], max_records=500, now_ms=0) == []
    assert sp.acknowledge("m1", [ack(3, 4, AckType.RELEASE)], now_ms=1) == (NONE, [StateBatch(3, 4, A, 1)])
    assert sp.acquire("m2", [(0, 14)], max_records=500, now_ms=2) == [AcquiredRange(3, 4, 2)]


def test_an_acknowledgement_of_another_members_records_is_invalid_record_state_and_changes_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 9)], max_records=500, now_ms=0)
    assert sp.acknowledge("m2", [ack(0, 9, AckType.ACCEPT)], now_ms=1) == (INVALID_RECORD_STATE, [])
    assert states(sp, 0, 9) == [(ACQ, 1, "m1")] * 10


def test_acknowledgements_apply_all_or_nothing_per_partition() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 4)], max_records=500, now_ms=0)
    sp.acknowledge("m1", [ack(4, 4, AckType.RELEASE)], now_ms=1)  # 4 is AVAILABLE now
    assert sp.acknowledge("m1", [ack(0, 1, AckType.ACCEPT), ack(3, 4, AckType.ACCEPT)], now_ms=2) == \
        (INVALID_RECORD_STATE, [])
    assert states(sp, 0, 3) == [(ACQ, 1, "m1")] * 4
    assert sp.acknowledge("m1", [ack(0, 9, AckType.ACCEPT)], now_ms=3) == (INVALID_REQUEST, [])  # past the window


def test_accept_moves_the_start_offset_past_the_done_records_at_its_front() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 9)], max_records=500, now_ms=0)
    assert sp.acknowledge("m1", [ack(5, 9, AckType.ACCEPT)], now_ms=1) == (NONE, [StateBatch(5, 9, ACK, 1)])
    assert sp.start_offset == 0
    assert sp.acknowledge("m1", [ack(0, 4, AckType.ACCEPT, AckType.REJECT, AckType.ACCEPT, AckType.GAP,
                                     AckType.ACCEPT)], now_ms=2) == \
        (NONE, [StateBatch(0, 0, ACK, 1), StateBatch(1, 1, ARC, 1), StateBatch(2, 2, ACK, 1),
                StateBatch(3, 3, ARC, 1), StateBatch(4, 4, ACK, 1)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset(), sp.in_flight()) == (10, 10, 10, 0)
    assert sp.state_batches() == []


def test_the_delivery_limit_archives_a_record_released_at_its_last_count() -> None:
    """testShareAcknowledgeRequestMaxDeliveryAttemptExhausted: limit 2, fetch 0-9, release,
    fetch 0-9 again (count 2), release: archived; the next fetch returns only 10 on."""
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    assert sp.acknowledge("m1", [ack(0, 9, AckType.RELEASE)], now_ms=1) == (NONE, [StateBatch(0, 9, A, 1)])
    assert sp.acquire("m1", [(0, 9), (10, 19)], max_records=10, now_ms=2) == [AcquiredRange(0, 9, 2)]
    assert sp.acknowledge("m1", [ack(0, 9, AckType.RELEASE)], now_ms=3) == (NONE, [StateBatch(0, 9, ARC, 2)])
    assert sp.start_offset == 10
    assert sp.acquire("m1", [(10, 19)], max_records=10, now_ms=4) == [AcquiredRange(10, 19, 1)]


def test_a_lock_running_out_releases_with_the_count_kept_then_archives_at_the_limit() -> None:
    """testAcquisitionLockTimeoutCauseMaxDeliveryCountExceed (limit 2)."""
    sp = SharePartition(0, delivery_count_limit=2, lock_duration_ms=1000)
    sp.acquire("m1", [(0, 9)], max_records=500, now_ms=0)
    assert sp.expire_locks(999) == []
    assert sp.expire_locks(1000) == [StateBatch(0, 9, A, 1)]
    assert states(sp, 0, 0) == [(A, 1, None)]
    sp.acquire("m2", [(0, 9)], max_records=500, now_ms=1500)
    assert sp.acknowledge("m1", [ack(0, 0, AckType.ACCEPT)], now_ms=1600) == (INVALID_RECORD_STATE, [])
    assert sp.expire_locks(2500) == [StateBatch(0, 9, ARC, 2)]
    assert (sp.start_offset, sp.in_flight(), sp.next_lock_deadline()) == (10, 0, None)


def test_renew_restarts_the_lock_and_persists_nothing() -> None:
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("m1", [(0, 1)], max_records=500, now_ms=0)
    assert sp.acknowledge("m1", [ack(0, 1, AckType.RENEW)], now_ms=900) == (NONE, [])
    assert sp.expire_locks(1500) == []
    assert sp.next_lock_deadline() == 1900


def test_a_closed_session_releases_only_its_members_records_and_keeps_their_counts() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 4)], max_records=500, now_ms=0)
    sp.acquire("m2", [(5, 9)], max_records=500, now_ms=0)
    assert sp.release_member("m1") == [StateBatch(0, 4, A, 1)]
    assert states(sp, 4, 5) == [(A, 1, None), (ACQ, 1, "m2")]
    assert sp.acquire("m2", [(0, 4)], max_records=500, now_ms=1) == [AcquiredRange(0, 4, 2)]


def test_a_record_on_its_last_attempt_is_delivered_alone() -> None:
    sp = SharePartition(0, delivery_count_limit=3)
    for now in range(2):
        sp.acquire("m1", [(0, 3)], max_records=500, now_ms=now)
        sp.acknowledge("m1", [ack(0, 3, AckType.RELEASE)], now_ms=now)
    assert [sp.acquire("m1", [(0, 3)], max_records=500, now_ms=5) for _ in range(4)] == \
        [[AcquiredRange(o, o, 3)] for o in range(4)]


def test_state_read_back_brings_unacknowledged_records_back_available_with_their_counts() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 9)], max_records=500, now_ms=0)
    sp.acknowledge("m1", [ack(0, 2, AckType.RELEASE), ack(5, 6, AckType.ACCEPT)], now_ms=1)
    snapshot = sp.state_batches()
    assert snapshot == [StateBatch(0, 4, A, 1), StateBatch(5, 6, ACK, 1), StateBatch(7, 9, A, 1)]  # 3-4 held
    again = SharePartition(sp.start_offset, state=snapshot)
    assert again.acquire("m9", [(0, 9), (10, 10)], max_records=500, now_ms=2) == \
        [AcquiredRange(0, 4, 2), AcquiredRange(7, 9, 2), AcquiredRange(10, 10, 1)]


def test_offsets_without_records_are_archived_so_the_start_offset_passes_them() -> None:
    sp = SharePartition(0)
    assert sp.acquire("m1", [(0, 2), (5, 7)], max_records=500, now_ms=0) == \
        [AcquiredRange(0, 2, 1), AcquiredRange(5, 7, 1)]
    assert states(sp, 3, 4) == [(ARC, 0, None)] * 2
    sp.acknowledge("m1", [ack(0, 2, AckType.ACCEPT), ack(5, 7, AckType.ACCEPT)], now_ms=1)
    assert (sp.start_offset, sp.next_fetch_offset()) == (8, 8)


def test_a_moved_log_start_archives_available_records_below_it_and_acquired_ones_at_their_expiry() -> None:
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("m1", [(0, 9)], max_records=500, now_ms=0)
    sp.acknowledge("m1", [ack(0, 3, AckType.RELEASE)], now_ms=1)
    sp.move_log_start(6)
    assert sp.start_offset == 6
    assert states(sp, 0, 3) == [None] * 4
    assert states(sp, 4, 5) == [(ACQ, 1, "m1")] * 2
    assert sp.acknowledge("m1", [ack(4, 7, AckType.ACCEPT)], now_ms=2) == (NONE, [StateBatch(6, 7, ACK, 1)])
    assert sp.expire_locks(1000) == [StateBatch(4, 5, ARC, 1), StateBatch(8, 9, A, 1)]
    assert states(sp, 4, 5) == [None] * 2
    assert (sp.start_offset, sp.next_fetch_offset()) == (8, 8)


@pytest.mark.parametrize(("batches", "renew", "expected"), [
    ([ack(0, 9, AckType.ACCEPT)], False, NONE),
    ([ack(0, 1, AckType.ACCEPT, AckType.GAP)], False, NONE),
    ([ack(5, 4, AckType.ACCEPT)], False, INVALID_REQUEST),                       # first past last
    ([ack(5, 9, AckType.ACCEPT), ack(3, 4, AckType.ACCEPT)], False, INVALID_REQUEST),  # out of order
    ([AckBatch(0, 1, ())], False, INVALID_REQUEST),                              # no type
    ([ack(0, 2, AckType.ACCEPT, AckType.GAP)], False, INVALID_REQUEST),          # two types for three offsets
    ([AckBatch(0, 0, (5,))], True, INVALID_REQUEST),                             # unknown type
    ([ack(0, 0, AckType.RENEW)], False, INVALID_REQUEST),                        # RENEW outside a renew request
    ([ack(0, 0, AckType.RENEW)], True, NONE),
])
def test_acknowledgement_batches_kafka_refuses(batches: list[AckBatch], renew: bool, expected: int) -> None:
    assert validate_ack_batches(batches, renew) == expected


def test_aborted_batches_are_archived_and_never_acquired() -> None:
    """read_committed (§4): an aborted transaction's batches are archived, the rest acquired."""
    sp = SharePartition(0)
    assert sp.acquire("m1", [(0, 1), (2, 4), (5, 5)], max_records=500, now_ms=0, aborted={(2, 4)}) == \
        [AcquiredRange(0, 1, 1), AcquiredRange(5, 5, 1)]
    assert states(sp, 2, 4) == [(ARC, 0, None)] * 3
    sp.acknowledge("m1", [ack(0, 1, AckType.ACCEPT), ack(5, 5, AckType.GAP)], now_ms=1)
    assert (sp.start_offset, sp.in_flight()) == (6, 0)
