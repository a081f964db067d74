"""Transaction coordinator: state table, load, marker re-send, timers, expiration, describe/list
(reference A7, A8, A9)."""

from __future__ import annotations

import itertools

import pytest

from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.transaction_log import TransactionLogValue, encode_key, encode_value
from offsetd.transaction.metadata import (
    STATE_NAMES, IllegalTransition, TransactionMetadata, split_state_filters,
)
from offsetd.transaction.result import MarkerJob

from test_transaction_harness import FIRST_PID, TIMEOUT, TP, Harness, S, decoded

# A8's table, as (from, to) pairs that are allowed.
ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT), (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)),
                         ids=[f"{a.name}->{b.name}" for a, b in itertools.product(S, S)])
def test_state_table(source: S, target: S) -> None:
    meta = TransactionMetadata("tx", 1, -1, 0, -1, TIMEOUT, source, {TP}, 0, 0)
    if (source, target) in ALLOWED:
        moved = meta.transit(target, 9)
        assert (moved.state, moved.last_update_timestamp, meta.state) == (target, 9, source)
    else:
        with pytest.raises(IllegalTransition):
            meta.transit(target, 9)


def test_state_names_are_kafkas() -> None:
    assert [STATE_NAMES[s] for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                           "CompleteAbort", "Dead", "PrepareEpochFence"]


# ========================================================================= load / replay


def comparable(meta: TransactionMetadata) -> tuple:
    """What a load must reproduce (the KIP-360 retry epoch is in memory only, as in Kafka)."""
    return (meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state, meta.partitions,
            meta.start_timestamp, meta.last_update_timestamp, meta.pending)


def test_load_reproduces_every_state() -> None:
    h = Harness()
    # Complete* first: reaching them runs every queued marker job
    for i, state in enumerate([S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                               S.PREPARE_ABORT]):
        h.to_state(state, txn=f"tx-{state.name}", now=100 * i)
    before = {txn: comparable(m) for txn, m in h.shard.transactions.items()}
    assert {m.state for m in h.shard.transactions.values()} == set(S) - {S.DEAD, S.PREPARE_EPOCH_FENCE}
    h.reload()
    assert {txn: comparable(m) for txn, m in h.shard.transactions.items()} == before
    assert len(before) == 6


def test_load_last_record_wins_and_a_tombstone_removes() -> None:
    h = Harness()
    key = encode_key("tx")
    h.shard.replay(key, encode_value(TransactionLogValue(5, 0, TIMEOUT, 0, None, 1, -1)))
    h.shard.replay(key, encode_value(TransactionLogValue(5, 3, TIMEOUT, 1, (("t", (1, 2)),), 2, 2)))
    meta = h.meta()
    assert (meta.producer_epoch, meta.state, meta.partitions) == (3, S.ONGOING, {("t", 1), ("t", 2)})
    h.shard.replay(key, None)
    assert h.shard.transactions == {}


def test_load_skips_unknown_key_versions_and_fails_on_unknown_value_versions() -> None:
    h = Harness()
    h.shard.replay(b"\x00\x05\x00\x02tx", b"whatever")
    h.shard.replay(None, b"whatever")
    assert h.shard.skipped_records == 2 and h.shard.transactions == {}
    with pytest.raises(RecordDecodeError):
        h.shard.replay(encode_key("tx"), b"\x00\x07" + bytes(40))


def test_loaded_value_v1_keeps_the_previous_producer_id() -> None:
    h = Harness()
    value = TransactionLogValue(FIRST_PID, 0, TIMEOUT, 0, None, 1, -1, previous_producer_id=500)
    h.shard.replay(encode_key("tx"), encode_value(value, 1))
    assert h.meta().last_producer_id == 500
    # the previous producer with an exhausted epoch passes the id check, but no last epoch
    # survives a load, so its epoch is fenced; with a live epoch it fails the id check
    assert h.init(pid=500, epoch=32766)["error_code"] == 90
    assert h.init(pid=500, epoch=32000)["error_code"] == 90
    assert h.init(pid=FIRST_PID, epoch=0)["producer_epoch"] == 1


def test_on_loaded_resends_the_markers_of_prepared_txns() -> None:
    h = Harness()
    h.to_state(S.COMPLETE_COMMIT, txn="done")
    pc, ec = h.to_state(S.PREPARE_COMMIT, txn="c")
    pa, ea = h.to_state(S.PREPARE_ABORT, txn="a")
    h.to_state(S.ONGOING, txn="o")
    h.markers.clear()
    shard = h.reload()
    shard.coordinator_epoch = 4  # a new leader epoch after the restart
    result = shard.on_loaded(now=1000)
    assert result.records == [] and result.completions == []
    assert sorted(result.markers, key=lambda j: j.transactional_id) == [
        MarkerJob("a", pa, ea, False, 4, [TP]), MarkerJob("c", pc, ec, True, 4, [TP])]
    h.markers.extend(result.markers)
    h.run_markers(now=1001)
    assert (h.meta("a").state, h.meta("c").state) == (S.COMPLETE_ABORT, S.COMPLETE_COMMIT)


def test_reset_after_a_failed_write_and_replay_restores_the_durable_state() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    lost = h.shard.end_txn("t", "tx", pid, epoch, True, 3, 5)  # its append fails
    assert h.meta().pending is not None
    h.shard.reset()
    for key, value in h.log:
        h.shard.replay(key, value)
    assert h.meta().pending is None and h.meta().state is S.ONGOING
    assert lost.records and h.end(pid, epoch, True)["error_code"] == 0


def test_a_new_id_whose_first_write_failed_is_gone_after_reset() -> None:
    h = Harness()
    h.init(durable=False)
    h.shard.reset()
    assert h.shard.transactions == {}


# ================================================================================ timers


def test_no_timers_before_load() -> None:
    h = Harness()
    assert h.shard.next_deadline() is None
    assert h.shard.fire_timers(10**12).records == []


def test_timed_out_txn_is_fenced_and_aborted() -> None:
    h = Harness(abort_timed_out_transaction_cleanup_interval_ms=1000)
    h.shard.on_loaded(0)
    pid, epoch = h.to_state(S.ONGOING, now=100)  # start 100, timeout 60000
    h.to_state(S.PREPARE_COMMIT, txn="p", now=100)
    h.to_state(S.EMPTY, txn="e", now=100)
    h.markers.clear()
    assert h.shard.next_deadline() == 1000
    assert h.shard.fire_timers(999).records == []
    assert h.write(h.shard.fire_timers(60_000)).records == []  # 100 + 60000 is not < 60000
    assert h.shard.next_deadline() == 61_000
    result = h.write(h.shard.fire_timers(61_000))
    [(txn, value)] = decoded(result)
    assert txn == "tx" and (value.producer_epoch, value.transaction_status) == (epoch + 1, 3)
    assert result.markers == [MarkerJob("tx", pid, epoch + 1, False, 3, [TP])]
    assert result.completions == []
    assert h.end(pid, epoch, True)["error_code"] == 90  # the timed-out producer is fenced
    h.run_markers(now=61_001)
    assert h.meta().state is S.COMPLETE_ABORT
    assert h.init(pid=pid, epoch=epoch, now=61_002)["error_code"] == 90
    assert h.init(now=61_003)["producer_epoch"] == epoch + 2


def test_timeout_skips_a_txn_with_a_pending_transition() -> None:
    h = Harness(abort_timed_out_transaction_cleanup_interval_ms=1000)
    h.shard.on_loaded(0)
    pid, epoch = h.to_state(S.ONGOING)
    h.shard.end_txn("t", "tx", pid, epoch, True, 3, 5)
    assert h.shard.fire_timers(10**9).records == []


def test_expired_ids_get_a_tombstone() -> None:
    h = Harness(transactional_id_expiration_ms=5000, remove_expired_transaction_cleanup_interval_ms=1000)
    h.shard.on_loaded(0)
    h.to_state(S.COMPLETE_COMMIT, txn="done", now=0)
    h.to_state(S.EMPTY, txn="empty", now=2000)
    h.to_state(S.ONGOING, txn="open", now=0)
    h.to_state(S.PREPARE_ABORT, txn="prep", now=0)
    assert h.write(h.shard.fire_timers(4000)).records == []
    result = h.write(h.shard.fire_timers(5000))  # idle 5000 >= expiration: "done" goes
    assert result.records == [(encode_key("done"), None)]
    assert h.shard.describe("done")["error_code"] == 105
    assert set(h.shard.transactions) == {"empty", "open", "prep"}
    assert h.write(h.shard.fire_timers(6000)).records == []
    assert h.write(h.shard.fire_timers(7000)).records == [(encode_key("empty"), None)]
    assert h.init("done", now=7001) == {"error_code": 0, "producer_id": FIRST_PID + 4, "producer_epoch": 0}


def test_expiration_skips_a_pending_id_and_blocks_it_meanwhile() -> None:
    h = Harness(transactional_id_expiration_ms=10, remove_expired_transaction_cleanup_interval_ms=100)
    h.shard.on_loaded(0)
    h.to_state(S.EMPTY)
    pending = h.shard.fire_timers(100)
    assert pending.records == [(encode_key("tx"), None)]
    assert h.init(now=101)["error_code"] == 51
    h.write(pending)
    assert h.shard.transactions == {}


# ======================================================================= describe / list


def test_describe() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING, now=33)
    h.add(pid, epoch, [("b", 2), ("b", 1)], now=40)
    assert h.shard.describe("tx") == {
        "error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing",
        "transaction_timeout_ms": TIMEOUT, "transaction_start_time_ms": 33, "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"topic": "b", "partitions": [1, 2]}, {"topic": "topic", "partitions": [0]}]}
    h.init("empty")
    described = h.shard.describe("empty")
    assert (described["transaction_state"], described["transaction_start_time_ms"], described["topics"]) == (
        "Empty", -1, [])


@pytest.mark.parametrize(("txn", "code"), [("", 42), ("nope", 105)])
def test_describe_errors(txn: str, code: int) -> None:
    described = Harness().shard.describe(txn)
    assert described["error_code"] == code and described["producer_id"] == -1


def listed(h: Harness, states=(), pids=(), duration=-1, now=10_000) -> list[str]:
    return sorted(row["transactional_id"] for row in h.shard.list_transactions(states, pids, duration, now))


def test_list_transactions_filters() -> None:
    h = Harness()
    h.to_state(S.ONGOING, txn="old", now=1000)  # pid 1000
    h.to_state(S.ONGOING, txn="new", now=9000)  # pid 1001
    h.to_state(S.COMPLETE_COMMIT, txn="done", now=5000)  # pid 1002
    h.to_state(S.EMPTY, txn="idle", now=5000)  # pid 1003
    rows = h.shard.list_transactions([], [], -1, 10_000)
    assert {"transactional_id": "old", "producer_id": FIRST_PID, "transaction_state": "Ongoing"} in rows
    assert listed(h) == ["done", "idle", "new", "old"]
    assert listed(h, states=["Ongoing"]) == ["new", "old"]
    assert listed(h, states=["Ongoing", "CompleteCommit"]) == ["done", "new", "old"]
    assert listed(h, states=["Bogus"]) == []  # unknown names match nothing
    assert listed(h, pids=[FIRST_PID + 1, FIRST_PID + 3, 77]) == ["idle", "new"]
    assert listed(h, states=["Ongoing"], pids=[FIRST_PID + 3]) == []
    # DurationFilter: now - start > duration (an Empty id's start is -1, so it always passes)
    assert listed(h, duration=5000) == ["idle", "old"]
    assert listed(h, duration=4999) == ["done", "idle", "old"]
    assert listed(h, duration=4999, states=["Ongoing"]) == ["old"]
    assert listed(h, duration=9000) == ["idle"]


def test_split_state_filters_echoes_unknown_names() -> None:
    assert split_state_filters(["Ongoing", "Nope", "Dead", "ongoing"]) == ({S.ONGOING, S.DEAD}, ["Nope", "ongoing"])


# ======================================================================= config / cycles


def test_config_defaults_and_kafka_property_names() -> None:
    from offsetd.transaction import TransactionConfig
    default = TransactionConfig()
    assert (default.transaction_max_timeout_ms, default.transactional_id_expiration_ms,
            default.abort_timed_out_transaction_cleanup_interval_ms,
            default.remove_expired_transaction_cleanup_interval_ms,
            default.transaction_state_log_num_partitions) == (900_000, 604_800_000, 10_000, 3_600_000, 50)
    custom = TransactionConfig.from_properties({"transaction.max.timeout.ms": "1000",
                                                "transactional.id.expiration.ms": 5, "log.dir": "/x",
                                                "transaction.state.log.num.partitions": None})
    assert (custom.transaction_max_timeout_ms, custom.transactional_id_expiration_ms,
            custom.transaction_state_log_num_partitions) == (1000, 5, 50)


def test_two_producers_interleave_through_full_cycles() -> None:
    h = Harness()
    a = h.init("a")
    b = h.init("b")
    pa, ea, pb, eb = a["producer_id"], a["producer_epoch"], b["producer_id"], b["producer_epoch"]
    assert h.add(pa, ea, [("t", 0)], txn="a") == {("t", 0): 0}
    assert h.add(pb, eb, [("t", 0), ("u", 1)], txn="b") == {("t", 0): 0, ("u", 1): 0}
    assert h.add(pa, ea, [("__consumer_offsets", 3)], txn="a", version=0) == {("__consumer_offsets", 3): 0}
    assert h.end(pa, ea, True, txn="a")["error_code"] == 0
    assert h.end(pb, eb, False, txn="b")["error_code"] == 0
    jobs = h.run_markers(now=5)
    assert [(j.transactional_id, j.commit, j.partitions) for j in jobs] == [
        ("a", True, [("__consumer_offsets", 3), ("t", 0)]), ("b", False, [("t", 0), ("u", 1)])]
    assert (h.meta("a").state, h.meta("b").state) == (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    # the next txn of "a" begins from CompleteCommit with the same epoch
    assert h.add(pa, ea, [("t", 1)], txn="a", now=9) == {("t", 1): 0}
    assert (h.meta("a").state, h.meta("a").start_timestamp) == (S.ONGOING, 9)
    h.reload()
    assert h.shard.describe("a")["topics"] == [{"topic": "t", "partitions": [1]}]


def test_complete_needs_no_fsync_of_its_own_but_prepare_does():
    """Complete* is recoverable (a loaded Prepare* sends its markers again), so the shell may
    append it without an fsync; every other write must be durable before its answer."""
    from offsetd.transaction.config import TransactionConfig
    from offsetd.transaction.shard import TransactionCoordinatorShard

    ids = iter(range(100, 200))
    shard = TransactionCoordinatorShard(0, TransactionConfig(), lambda: next(ids))

    def run(result):
        for key, value in result.records:
            shard.replay(key, value)
        return result

    init = run(shard.init_producer_id("t1", "app", 60000, -1, -1, 3, 1000))
    assert init.durable
    pid, epoch = init.completions[0][1]["producer_id"], init.completions[0][1]["producer_epoch"]
    assert run(shard.add_partitions("t2", "app", pid, epoch, [("t", 0)], 3, 1001)).durable
    prepare = run(shard.end_txn("t3", "app", pid, epoch, True, 3, 1002))
    assert prepare.durable and prepare.markers
    complete = shard.markers_written("app", pid, epoch, 1003)
    assert complete.records and not complete.durable
