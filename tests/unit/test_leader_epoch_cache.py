"""The leader-epoch history (storage/leader_epoch_cache.py): Kafka's assign / truncate / end offset
rules and its checkpoint file text, on plain data."""

from __future__ import annotations

import pytest

from offsetd.storage.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_assign_keeps_epochs_and_starts_increasing() -> None:
    cache = LeaderEpochCache()
    assert cache.assign(2, 0)
    assert not cache.assign(2, 10)  # the same epoch appending further: nothing new
    assert cache.assign(4, 10)
    assert cache.entries == [(2, 0), (4, 10)]
    assert cache.latest_epoch == 4
    assert not cache.assign(-1, 20)  # a batch written without a leader epoch
    # an epoch claimed but never written to is replaced by the next one starting at the same offset
    assert cache.assign(5, 10)
    assert cache.entries == [(2, 0), (5, 10)]
    # a new entry drops those it contradicts (newer epoch or later start)
    assert cache.assign(3, 5)
    assert cache.entries == [(2, 0), (3, 5)]


def test_end_offset_for_answers_as_kafka() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 100), (6, 250)])
    assert cache.end_offset_for(6, 400) == (6, 400)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 400) == (3, 250)
    assert cache.end_offset_for(1, 400) == (1, 100)
    assert cache.end_offset_for(4, 400) == (3, 250)  # an epoch with no entry: the one before it
    assert cache.end_offset_for(0, 400) == (0, 0)  # older than the history: where it starts
    assert cache.end_offset_for(7, 400) == UNDEFINED  # newer than any known
    assert cache.end_offset_for(UNDEFINED_EPOCH, 400) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED


def test_epoch_for_offset() -> None:
    cache = LeaderEpochCache([(1, 10), (3, 100)])
    assert [cache.epoch_for_offset(o) for o in (5, 10, 99, 100, 10**6)] == [UNDEFINED_EPOCH, 1, 1, 3, 3]


def test_truncate_from_end_drops_epochs_starting_at_or_after_it() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 100), (6, 250)])
    assert not cache.truncate_from_end(300)
    assert cache.truncate_from_end(250)
    assert cache.entries == [(1, 0), (3, 100)]
    assert cache.truncate_from_end(50)
    assert cache.entries == [(1, 0)]


def test_truncate_from_start_moves_the_epoch_holding_the_new_start() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 100), (6, 250)])
    assert not cache.truncate_from_start(0)
    assert cache.truncate_from_start(120)
    assert cache.entries == [(3, 120), (6, 250)]
    assert cache.end_offset_for(1, 300) == (1, 120)  # an epoch retention removed: where the log starts
    assert cache.truncate_from_start(250)
    assert cache.entries == [(6, 250)]
    assert cache.truncate_from_start(400)  # an empty log past every epoch's start
    assert cache.entries == [(6, 400)]
    cache.clear()
    assert cache.entries == [] and not cache.truncate_from_start(10)


def test_checkpoint_text_round_trips_in_kafkas_format() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 57), (5, 1000)])
    text = cache.to_checkpoint()
    assert text == "0\n3\n0 0\n2 57\n5 1000\n"
    assert LeaderEpochCache.from_checkpoint(text).entries == cache.entries
    assert LeaderEpochCache.from_checkpoint("0\n0\n").entries == []


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\nx 1\n"])
def test_a_damaged_checkpoint_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache.from_checkpoint(text)
