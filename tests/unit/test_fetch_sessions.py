"""Fetch sessions (KIP-227): the sans-IO cache with a fake clock, and the broker's read path over
a real (temporary) log: incremental responses hold only what changed since the last one sent."""

from __future__ import annotations

import datetime
import random
from types import SimpleNamespace

import pytest

from offsetd.broker.broker import Broker
from offsetd.broker.fetch import finish_fetch, open_fetch, read_fetch
from offsetd.broker.fetch_sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    CachedPartition,
    FetchRequestPartition,
    FetchSessionCache,
    new_context,
    next_epoch,
    session_sent,
)
from offsetd.config import BrokerConfig, ConfigError
from offsetd.protocol.errors import Error
from offsetd.records.batch import build_batch

T0 = 1_000_000


def _parts(*keys: tuple[str, int], offset: int = 0) -> dict:
    return {key: CachedPartition(offset, 1 << 20) for key in keys}


def _data(*keys: tuple[str, int], offset: int = 0) -> list:
    return [(key, FetchRequestPartition(offset, 1 << 20)) for key in keys]


def _cache(slots: int = 10) -> FetchSessionCache:
    return FetchSessionCache(slots, rng=random.Random(7))


def test_full_and_sessionless_contexts_and_creation():
    cache = _cache()
    assert new_context(cache, 0, FINAL_EPOCH, False, _data(("t", 0)), (), T0).kind == "sessionless"
    assert new_context(cache, 0, INITIAL_EPOCH, False, _data(("t", 0)), (), T0).kind == "full"
    assert len(cache) == 0  # a full context creates its session only when answered
    sid = cache.maybe_create(T0, _parts(("t", 0), ("t", 1)), False)
    assert sid > 0 and len(cache) == 1 and cache.total_partitions == 2
    session = cache.get(sid)
    assert session.epoch == 1 and session.created_ms == session.last_used_ms == T0


def test_incremental_add_update_forget_and_epochs():
    cache = _cache()
    sid = cache.maybe_create(T0, _parts(("t", 0), ("t", 1)), False)
    ctx = new_context(cache, sid, 1, False, _data(("t", 1), ("u", 0), offset=5), [("t", 0)], T0 + 10)
    assert ctx.kind == "incremental" and ctx.session is cache.get(sid)
    parts = ctx.session.partitions
    assert list(parts) == [("t", 1), ("u", 0)]
    assert parts[("t", 1)].fetch_offset == 5 and parts[("u", 0)].fetch_offset == 5
    assert parts[("u", 0)].high_watermark == -1  # new: sent with the next response whatever it holds
    assert ctx.session.epoch == 2 and ctx.session.last_used_ms == T0 + 10
    # a stale epoch: INVALID_FETCH_SESSION_EPOCH, the session unchanged
    again = new_context(cache, sid, 1, False, _data(("v", 0)), (), T0 + 20)
    assert again.kind == "error" and again.error_code == Error.INVALID_FETCH_SESSION_EPOCH
    assert ("v", 0) not in parts and ctx.session.epoch == 2
    assert new_context(cache, sid, 3, False, (), (), T0).error_code == Error.INVALID_FETCH_SESSION_EPOCH
    # an unknown id, and epoch > 0 without a session
    assert new_context(cache, sid + 1, 1, False, (), (), T0).error_code == Error.FETCH_SESSION_ID_NOT_FOUND
    assert new_context(cache, 0, 1, False, (), (), T0).error_code == Error.FETCH_SESSION_ID_NOT_FOUND
    # a session made with topic names cannot go on with topic ids (v13+)
    assert new_context(cache, sid, 2, True, (), (), T0).error_code == Error.FETCH_SESSION_TOPIC_ID_ERROR
    assert new_context(cache, sid, 2, False, (), (), T0).kind == "incremental"


def test_close_and_forget_everything():
    cache = _cache()
    sid = cache.maybe_create(T0, _parts(("t", 0)), False)
    ctx = new_context(cache, sid, FINAL_EPOCH, False, _data(("t", 0)), (), T0)
    assert ctx.kind == "sessionless" and sid not in cache
    sid = cache.maybe_create(T0, _parts(("t", 0)), False)
    ctx = new_context(cache, sid, INITIAL_EPOCH, False, _data(("t", 0)), (), T0)
    assert ctx.kind == "full" and sid not in cache  # closed; a new one is made on the answer
    sid = cache.maybe_create(T0, _parts(("t", 0)), False)
    ctx = new_context(cache, sid, 1, False, (), [("t", 0)], T0)
    assert ctx.kind == "sessionless" and sid not in cache


def test_next_epoch_wraps_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_must_respond_and_sent_rotate_the_session():
    cache = _cache()
    sid = cache.maybe_create(T0, _parts(("t", 0), ("t", 1), ("t", 2)), False)
    session = cache.get(sid)
    quiet = {"records": b"", "error_code": 0, "high_watermark": 3, "last_stable_offset": 3, "log_start_offset": 0}
    for cached in session.partitions.values():
        cached.sent(quiet)
        assert not cached.must_respond(quiet)
    assert session.partitions[("t", 0)].must_respond({**quiet, "records": b"x"})
    assert session.partitions[("t", 0)].must_respond({**quiet, "high_watermark": 4, "last_stable_offset": 4})
    assert session.partitions[("t", 0)].must_respond({**quiet, "log_start_offset": 1})
    failed = {**quiet, "error_code": 1}
    assert session.partitions[("t", 0)].must_respond(failed)
    session_sent(session, [(("t", 0), failed)])
    assert list(session.partitions) == [("t", 1), ("t", 2), ("t", 0)]
    assert session.partitions[("t", 0)].must_respond(quiet)  # after an error, sent again when it clears


def test_eviction_follows_kafkas_rule():
    cache = _cache(slots=1)
    small = cache.maybe_create(T0, _parts(("t", 0)), False)
    # young sessions are not evictable, whatever their size
    assert cache.maybe_create(T0 + 1000, _parts(("t", 0), ("t", 1)), False) == 0
    # older than EVICTION_MS at its last touch, still in use: only a bigger newcomer evicts it
    now = T0 + EVICTION_MS + 1
    cache.touch(cache.get(small), now)
    assert cache.maybe_create(now, _parts(("u", 0)), False) == 0  # same size: the old one stays
    big = cache.maybe_create(now, _parts(("u", 0), ("u", 1)), False)
    assert big > 0 and small not in cache and cache.evictions == 1
    # unused for more than EVICTION_MS: stale, evicted by anyone
    later = now + EVICTION_MS + 1
    tiny = cache.maybe_create(later, {}, False)
    assert tiny > 0 and big not in cache and cache.evictions == 2


def test_eviction_picks_the_smallest_evictable_session_and_stale_first():
    cache = _cache(slots=3)
    a = cache.maybe_create(T0, _parts(("a", 0), ("a", 1), ("a", 2)), False)
    b = cache.maybe_create(T0, _parts(("b", 0)), False)
    c = cache.maybe_create(T0, _parts(("c", 0), ("c", 1)), False)
    now = T0 + EVICTION_MS + 10
    for sid in (a, b, c):
        cache.touch(cache.get(sid), now)
    d = cache.maybe_create(now + 1, _parts(("d", 0), ("d", 1)), False)
    assert d > 0 and b not in cache and a in cache and c in cache
    # c unused for longer than EVICTION_MS goes before anything smaller
    cache.touch(cache.get(a), now + EVICTION_MS)
    cache.touch(cache.get(d), now + EVICTION_MS)
    e = cache.maybe_create(now + EVICTION_MS + 5, {}, False)
    assert e > 0 and c not in cache and all(s in cache for s in (a, d, e))


def test_zero_slots_means_no_sessions():
    cache = _cache(slots=0)
    assert cache.maybe_create(T0, _parts(("t", 0)), False) == 0 and len(cache) == 0


def test_config_key_default_and_validation():
    assert BrokerConfig().get("max.incremental.fetch.session.cache.slots") == 1000
    assert BrokerConfig({"max.incremental.fetch.session.cache.slots": "0"}).get(
        "max.incremental.fetch.session.cache.slots") == 0
    with pytest.raises(ConfigError, match="max.incremental.fetch.session.cache.slots"):
        BrokerConfig({"max.incremental.fetch.session.cache.slots": "-1"})


# ----------------------------------------------------------------- the read path over real logs


def _request(offsets: dict[int, int], session_id: int, epoch: int, forgotten: tuple = ()):
    partitions = tuple(SimpleNamespace(partition=p, fetch_offset=o, partition_max_bytes=1 << 20,
                                       log_start_offset=-1) for p, o in offsets.items())
    return SimpleNamespace(max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                           session_id=session_id, session_epoch=epoch,
                           topics=(SimpleNamespace(topic="t", partitions=partitions),) if partitions else (),
                           forgotten_topics_data=tuple(SimpleNamespace(topic="t", partitions=forgotten)
                                                       for _ in [0] if forgotten))


def _answered(body: dict) -> list[int]:
    return [p["partition_index"] for t in body["responses"] for p in t["partitions"]]


def test_incremental_reads_answer_only_changes_and_remember_only_what_was_sent(tmp_path):
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path)}), T0)
    broker.topics.create("t", 4, {}, T0)
    cache = _cache()
    clock = lambda: T0  # noqa: E731

    def append(partition: int) -> None:
        broker.topics.partition("t", partition).append(build_batch([(None, b"v", T0, ())]), T0)

    append(1)
    req = _request({0: 0, 1: 0, 2: 0, 3: 0}, 0, INITIAL_EPOCH)
    first = read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock))
    body = finish_fetch(cache, req, first, T0)
    sid = body["session_id"]
    assert sid in cache and _answered(body) == [0, 1, 2, 3]
    # nothing changed: an incremental fetch holds no partition (partition 1 moved on to offset 1)
    req = _request({1: 1}, sid, 1)
    quiet = read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock))
    assert quiet.body["session_id"] == sid and _answered(finish_fetch(cache, req, quiet, T0)) == []
    # appends to 2 and 3: only they are in the answer; a pass not sent teaches the session nothing
    append(2)
    append(3)
    req = _request({}, sid, 2)
    ctx = open_fetch(cache, req, 12, clock)
    unsent = read_fetch(broker, req, 12, ctx)
    assert _answered(unsent.body) == [2, 3] and unsent.total_bytes > 0
    sent = read_fetch(broker, req, 12, ctx)  # the long poll's next pass
    assert _answered(finish_fetch(cache, req, sent, T0)) == [2, 3]
    # the client moves 2 on and forgets 3: 3 is gone from the session, 2 has nothing new
    req = _request({2: 1}, sid, 3, forgotten=(3,))
    after = read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock))
    assert _answered(finish_fetch(cache, req, after, T0)) == []
    assert sorted(p for _, p in cache.get(sid).partitions) == [0, 1, 2]
    # errors: a stale epoch and an unknown id answer with no partitions and session id 0
    for session_id, epoch, error in ((sid, 3, Error.INVALID_FETCH_SESSION_EPOCH),
                                     (sid + 1, 1, Error.FETCH_SESSION_ID_NOT_FOUND)):
        req = _request({}, session_id, epoch)
        bad = read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock))
        assert finish_fetch(cache, req, bad, T0) == {"error_code": error, "session_id": 0, "responses": ()}
    broker.close()


def test_sessionless_fetch_does_not_touch_the_cache_or_the_clock(tmp_path):
    cache = _cache()

    def clock() -> int:
        raise AssertionError("a sessionless fetch must not read the clock")

    assert open_fetch(cache, _request({0: 0}, 0, FINAL_EPOCH), 12, clock) is None
    assert open_fetch(cache, SimpleNamespace(topics=()), 4, clock) is None  # v4-6: no session fields
    assert len(cache) == 0 and cache.total_partitions == 0 and cache.evictions == 0


def test_a_session_keeps_the_clients_leader_epochs_and_answers_their_checks(tmp_path):
    """KIP-320 in a session: the leader epochs a request sends stay with its partitions until the
    client sends others; a fenced epoch answers 74 in the incremental response, a diverged
    last-fetched epoch its end offset."""
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path)}), T0)
    broker.topics.create("t", 1, {}, T0)
    plog = broker.topics.partition("t", 0)
    plog.append(build_batch([(None, b"v", T0, ()), (None, b"w", T0, ())]), T0)
    assert plog.lead_next_epoch() == 1  # as a restart would: epoch 0 holds offsets 0-1
    plog.append(build_batch([(None, b"x", T0, ()), (None, b"y", T0, ())]), T0)
    cache = _cache()
    clock = lambda: T0  # noqa: E731

    def request(session_id: int, epoch: int, current: int, last_fetched: int, offset: int = 0) -> SimpleNamespace:
        req = _request({0: offset}, session_id, epoch)
        part = req.topics[0].partitions[0]
        req.topics[0].partitions = (SimpleNamespace(**vars(part), current_leader_epoch=current,
                                                    last_fetched_epoch=last_fetched),)
        return req

    req = request(0, INITIAL_EPOCH, plog.leader_epoch, -1)
    body = finish_fetch(cache, req, read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock)), T0)
    sid = body["session_id"]
    assert body["responses"][0]["partitions"][0]["error_code"] == Error.NONE
    assert cache.get(sid).partitions[("t", 0)].current_leader_epoch == plog.leader_epoch
    # the client now claims an epoch older than the leader's: fenced, told the current leader
    req = request(sid, 1, plog.leader_epoch - 1, -1)
    entry = finish_fetch(cache, req, read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock)),
                         T0)["responses"][0]["partitions"][0]
    assert entry["error_code"] == Error.FENCED_LEADER_EPOCH
    assert entry["current_leader"] == {"leader_id": 1, "leader_epoch": plog.leader_epoch}
    # an empty incremental request keeps the epochs it had: still fenced
    req = _request({}, sid, 2)
    entry = finish_fetch(cache, req, read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock)),
                         T0)["responses"][0]["partitions"][0]
    assert entry["error_code"] == Error.FENCED_LEADER_EPOCH
    # the client last fetched at epoch 0 and asks for offset 3, but epoch 0 ended at 2: diverged
    req = request(sid, 3, 1, 0, offset=3)
    entry = finish_fetch(cache, req, read_fetch(broker, req, 12, open_fetch(cache, req, 12, clock)),
                         T0)["responses"][0]["partitions"][0]
    assert entry["error_code"] == Error.NONE and entry["diverging_epoch"] == {"epoch": 0, "end_offset": 2}
    assert not entry["records"]
    broker.close()
