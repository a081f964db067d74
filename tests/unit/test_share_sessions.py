"""Share sessions (broker/share_sessions.py): Kafka's epoch table for ShareFetch and
ShareAcknowledge (reference share-groups.md §3; ShareSessionCacheTest and the
ShareFetchAcknowledgeRequestTest session cases)."""

from __future__ import annotations

import uuid

from offsetd.broker.share_sessions import (
    INVALID_REQUEST, INVALID_SHARE_SESSION_EPOCH, MAX_EPOCH, NONE, SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND, ShareSessionCache,
)

T = uuid.UUID(int=9)


def test_a_session_opens_at_epoch_zero_and_expects_one_then_two() -> None:
    cache = ShareSessionCache()
    opened = cache.fetch("g", "m", 0, "c1", [(T, 0)], [], has_acks=False)
    assert (opened.error, opened.session is not None, opened.closed) == (NONE, True, False)
    assert opened.session.epoch == 1 and opened.session.partitions == {(T, 0)}
    assert cache.fetch("g", "m", 1, "c1", [(T, 1)], [(T, 0)], has_acks=True).session.partitions == {(T, 1)}
    assert cache.acknowledge("g", "m", 2).error == NONE
    assert cache.fetch("g", "m", 2, "c1", [], [], has_acks=False).error == INVALID_SHARE_SESSION_EPOCH
    assert cache.fetch("g", "m", 3, "c1", [], [], has_acks=False).error == NONE


def test_epoch_zero_with_acknowledgements_is_invalid_request_and_acknowledge_at_zero_is_a_bad_epoch() -> None:
    cache = ShareSessionCache()
    assert cache.fetch("g", "m", 0, "c1", [(T, 0)], [], has_acks=True).error == INVALID_REQUEST
    assert cache.sessions == {}
    assert cache.acknowledge("g", "m", 0).error == INVALID_SHARE_SESSION_EPOCH


def test_no_session_is_share_session_not_found_for_every_nonzero_epoch() -> None:
    cache = ShareSessionCache()
    assert cache.fetch("g", "m", 4, "c1", [], [], has_acks=False).error == SHARE_SESSION_NOT_FOUND
    assert cache.fetch("g", "m", -1, "c1", [], [], has_acks=False).error == SHARE_SESSION_NOT_FOUND
    assert cache.acknowledge("g", "m", 1).error == SHARE_SESSION_NOT_FOUND


def test_epoch_minus_one_closes_without_an_epoch_check() -> None:
    cache = ShareSessionCache()
    cache.fetch("g", "m", 0, "c1", [(T, 0)], [], has_acks=False)
    closed = cache.acknowledge("g", "m", -1)
    assert (closed.error, closed.closed, closed.session.member_id) == (NONE, True, "m")
    assert cache.sessions == {}
    cache.fetch("g", "m", 0, "c1", [(T, 0)], [], has_acks=False)
    assert cache.fetch("g", "m", -1, "c1", [], [], has_acks=False).closed


def test_a_full_cache_refuses_new_sessions_but_a_member_may_reopen_its_own() -> None:
    cache = ShareSessionCache(max_sessions=1)
    cache.fetch("g", "m1", 0, "c1", [], [], has_acks=False)
    assert cache.fetch("g", "m2", 0, "c2", [], [], has_acks=False).error == SHARE_SESSION_LIMIT_REACHED
    assert cache.fetch("g", "m1", 0, "c1", [], [], has_acks=False).error == NONE


def test_a_dropped_connection_closes_its_sessions_only() -> None:
    cache = ShareSessionCache()
    cache.fetch("g", "m1", 0, "c1", [], [], has_acks=False)
    cache.fetch("g", "m2", 0, "c2", [], [], has_acks=False)
    assert [s.member_id for s in cache.connection_closed("c1")] == ["m1"]
    assert list(cache.sessions) == [("g", "m2")]


def test_the_epoch_wraps_to_one_after_the_largest_int32() -> None:
    cache = ShareSessionCache()
    session = cache.fetch("g", "m", 0, "c1", [], [], has_acks=False).session
    session.epoch = MAX_EPOCH
    assert cache.acknowledge("g", "m", MAX_EPOCH).session.epoch == 1


def test_a_closed_or_reopened_session_leaves_no_trace_for_its_old_connection() -> None:
    cache = ShareSessionCache()
    cache.fetch("g", "m1", 0, "c1", [], [], has_acks=False)
    cache.fetch("g", "m1", 0, "c2", [], [], has_acks=False)  # reopened on another connection
    cache.fetch("g", "m2", 0, "c1", [], [], has_acks=False)
    cache.acknowledge("g", "m2", -1)
    assert cache.connection_closed("c1") == []
    assert [s.member_id for s in cache.connection_closed("c2")] == ["m1"]
    assert cache.sessions == {} and cache._by_connection == {}
