"""The share coordinator shard (share/shard.py) and its batch combiner: records out, replay in
(a fresh shard replaying the same log has the same state), Kafka's fencing rules
(reference share-groups.md §5)."""

from __future__ import annotations

import uuid

import pytest

from offsetd.records.share_state_records import SHARE_SNAPSHOT, SHARE_UPDATE, StateBatch, decode_key
from offsetd.share.shard import (
    FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST, NONE, ShareCoordinatorShard,
)
from offsetd.share.state_batches import combine

SP = ("q", uuid.UUID(int=7), 0)
AV, ACK, ARC = 0, 2, 4


class Log:
    """The shard with the log it wrote: every record is replayed as the shell would."""

    def __init__(self, **kwargs: int) -> None:
        self.shard = ShareCoordinatorShard(0, **kwargs)
        self.records: list[tuple[bytes, bytes | None]] = []

    def apply(self, answer: tuple) -> int:
        error, records = answer[0], answer[-1]
        for key, value in records:
            self.shard.replay(key, value)
            self.records.append((key, value))
        return error

    def types(self) -> list[int]:
        return [decode_key(k).record_type for k, _ in self.records]


def test_initialize_then_write_then_read_back() -> None:
    log = Log()
    assert log.apply(log.shard.initialize(SP, state_epoch=0, start_offset=100, now_ms=1)) == NONE
    assert log.apply(log.shard.read(SP, leader_epoch=3)) == NONE  # a new leader: its epoch is recorded
    assert log.apply(log.shard.write(SP, 0, 3, -1, (StateBatch(100, 104, ACK, 1), StateBatch(105, 109, AV, 2)),
                                     now_ms=2)) == NONE
    assert log.apply(log.shard.write(SP, 0, 3, 105, (StateBatch(105, 106, ARC, 2),), now_ms=3)) == NONE
    error, state, _ = log.shard.read(SP, leader_epoch=3)
    assert error == NONE and state is not None
    assert (state.start_offset, state.leader_epoch, state.state_batches) == \
        (105, 3, (StateBatch(105, 106, ARC, 2), StateBatch(107, 109, AV, 2)))
    assert log.types() == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE, SHARE_UPDATE]


def test_a_fresh_shard_replaying_the_log_has_the_same_state() -> None:
    log = Log(snapshot_update_records=2)
    log.apply(log.shard.initialize(SP, 0, 0, now_ms=1))
    for i in range(5):
        log.apply(log.shard.write(SP, 0, 0, -1, (StateBatch(i, i, ACK, 1),), now_ms=2 + i))
    again = ShareCoordinatorShard(0)
    for key, value in log.records:
        again.replay(key, value)
    assert again.states == log.shard.states


def test_a_snapshot_follows_the_configured_number_of_updates() -> None:
    log = Log(snapshot_update_records=2)
    log.apply(log.shard.initialize(SP, 0, 0, now_ms=1))
    for i in range(5):
        log.apply(log.shard.write(SP, 0, 0, -1, (StateBatch(i, i, ACK, 1),), now_ms=2 + i))
    assert log.types() == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE, SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE]
    state = log.shard.states[SP]
    assert (state.snapshot_epoch, state.state_batches) == (1, (StateBatch(0, 4, ACK, 1),))


def test_fencing_and_uninitialized_share_partitions() -> None:
    log = Log()
    assert log.shard.read(SP, 0)[0] == INVALID_REQUEST
    assert log.shard.write(SP, 0, 0, 0, (), now_ms=1)[0] == INVALID_REQUEST
    log.apply(log.shard.initialize(SP, state_epoch=2, start_offset=0, now_ms=1))
    log.apply(log.shard.read(SP, leader_epoch=5))
    assert log.shard.read(SP, 4)[0] == FENCED_LEADER_EPOCH
    assert log.shard.write(SP, 2, 4, 0, (), now_ms=2) == (FENCED_LEADER_EPOCH, [])
    assert log.shard.write(SP, 1, 5, 0, (), now_ms=2) == (FENCED_STATE_EPOCH, [])
    assert log.shard.initialize(SP, state_epoch=1, start_offset=0, now_ms=2) == (FENCED_STATE_EPOCH, [])
    assert log.apply(log.shard.initialize(SP, state_epoch=3, start_offset=50, now_ms=3)) == NONE  # a reset
    assert (log.shard.states[SP].snapshot_epoch, log.shard.states[SP].start_offset) == (1, 50)


def test_delete_writes_a_tombstone_of_the_snapshot_key_and_forgets() -> None:
    log = Log()
    log.apply(log.shard.initialize(SP, 0, 0, now_ms=1))
    assert log.apply(log.shard.delete(SP)) == NONE
    assert log.records[-1][1] is None and decode_key(log.records[-1][0]).record_type == SHARE_SNAPSHOT
    assert SP not in log.shard.states
    assert log.shard.delete(SP) == (NONE, [])


@pytest.mark.parametrize(("current", "changes", "start", "expected"), [
    ((), (StateBatch(0, 9, AV, 1),), 0, (StateBatch(0, 9, AV, 1),)),
    ((StateBatch(0, 9, AV, 1),), (StateBatch(3, 4, ACK, 1),), 0,
     (StateBatch(0, 2, AV, 1), StateBatch(3, 4, ACK, 1), StateBatch(5, 9, AV, 1))),
    ((StateBatch(0, 9, AV, 1),), (StateBatch(0, 9, ACK, 1),), 5, (StateBatch(5, 9, ACK, 1),)),
    ((StateBatch(0, 4, AV, 1), StateBatch(5, 9, AV, 2)), (StateBatch(5, 9, AV, 1),), 2, (StateBatch(2, 9, AV, 1),)),
    ((StateBatch(0, 4, ACK, 1),), (StateBatch(8, 9, AV, 1), StateBatch(2, 8, ARC, 3)), 0,
     (StateBatch(0, 1, ACK, 1), StateBatch(2, 8, ARC, 3), StateBatch(9, 9, AV, 1))),
])
def test_combine_lays_changes_over_the_state_and_cuts_at_the_start_offset(
        current: tuple, changes: tuple, start: int, expected: tuple) -> None:
    assert combine(current, changes, start) == expected


def test_initialize_at_a_known_offset_counts_delivery_complete_from_zero() -> None:
    """The lag of an altered start offset is known at once; an unknown one (-1) stays unknown."""
    log = Log()
    log.apply(log.shard.initialize(SP, state_epoch=0, start_offset=-1, now_ms=1))
    assert log.shard.states[SP].delivery_complete_count == -1
    log.apply(log.shard.initialize(SP, state_epoch=2, start_offset=40, now_ms=2))
    state = log.shard.states[SP]
    assert (state.state_epoch, state.start_offset, state.delivery_complete_count, state.snapshot_epoch) == (2, 40, 0, 1)
    assert log.apply(log.shard.write(SP, 0, 0, -1, (), now_ms=3)) == FENCED_STATE_EPOCH  # an older window's write
