"""InitProducerId rules of the transaction coordinator, one test per rule or cell (reference A2)."""

from __future__ import annotations

import pytest

from offsetd.records.transaction_log import TransactionLogValue
from offsetd.transaction.result import MarkerJob

from test_transaction_harness import FIRST_PID, TIMEOUT, TP, Harness, S, decoded

FAILED = {"producer_id": -1, "producer_epoch": -1}


def ok(pid: int, epoch: int) -> dict:
    return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}


def err(code: int) -> dict:
    return {"error_code": code, **FAILED}


@pytest.mark.parametrize(("pid", "epoch"), [(5, -1), (-1, 3)])
def test_only_one_of_producer_id_and_epoch_is_invalid_request(pid: int, epoch: int) -> None:
    h = Harness()
    assert h.init(pid=pid, epoch=epoch) == err(42)
    assert h.init(None, pid=pid, epoch=epoch) == err(42)
    assert h.last.records == [] and h.shard.transactions == {}


def test_null_transactional_id_gets_a_fresh_producer_id_with_epoch_0() -> None:
    h = Harness()
    assert h.init(None) == ok(FIRST_PID, 0)
    assert h.init(None, pid=FIRST_PID, epoch=0) == ok(FIRST_PID + 1, 0)
    assert h.log == [] and h.shard.transactions == {}


def test_empty_transactional_id_is_invalid_request() -> None:
    h = Harness()
    assert h.init("") == err(42)
    assert h.log == []


@pytest.mark.parametrize(("timeout", "code"), [(0, 50), (-1, 50), (900_001, 50), (1, 0), (900_000, 0)])
def test_timeout_must_be_positive_and_at_most_the_maximum(timeout: int, code: int) -> None:
    h = Harness()
    assert h.init(timeout=timeout)["error_code"] == code
    assert ("tx" in h.shard.transactions) == (code == 0)


def test_configured_maximum_timeout() -> None:
    h = Harness(transaction_max_timeout_ms=1000)
    assert h.init(timeout=1001) == err(50)
    assert h.init(timeout=1000) == ok(FIRST_PID, 0)


def test_unknown_id_gets_a_new_producer_id_epoch_0_and_an_empty_record() -> None:
    h = Harness()
    result_response = h.init(now=42)
    assert result_response == ok(FIRST_PID, 0)
    assert decoded(h.last) == [("tx", TransactionLogValue(FIRST_PID, 0, TIMEOUT, 0, None, 42, -1))]
    meta = h.meta()
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.timeout_ms) == (S.EMPTY, FIRST_PID, 0, TIMEOUT)


def test_unknown_id_with_a_sent_producer_id_starts_afresh() -> None:
    # e.g. a KIP-360 producer whose id expired: no stored epoch, so any sent pid is accepted
    h = Harness()
    assert h.init(pid=55, epoch=9) == ok(FIRST_PID, 0)


def test_reply_and_record_travel_together() -> None:
    h = Harness()
    result = h.shard.init_producer_id("token", "tx", TIMEOUT, -1, -1, 4, 0)
    assert len(result.records) == 1 and result.completions == [("token", ok(FIRST_PID, 0))]


def test_pending_transition_gets_concurrent_transactions() -> None:
    h = Harness()
    first = h.shard.init_producer_id("a", "tx", TIMEOUT, -1, -1, 4, 0)
    assert h.init() == err(51)
    assert h.last.records == []
    h.write(first)
    assert h.meta().pending is None
    assert h.init() == ok(FIRST_PID, 1)


@pytest.mark.parametrize(("state", "expected"), [
    (S.EMPTY, "bump"),
    (S.COMPLETE_COMMIT, "bump"),
    (S.COMPLETE_ABORT, "bump"),
    (S.PREPARE_COMMIT, 51),
    (S.PREPARE_ABORT, 51),
    (S.ONGOING, 51),  # fence + abort, below
])
def test_init_by_state(state: S, expected: str | int) -> None:
    h = Harness()
    pid, epoch = h.to_state(state)
    response = h.init(now=10)
    if expected == "bump":
        assert response == ok(pid, epoch + 1)
        assert decoded(h.last) == [("tx", TransactionLogValue(pid, epoch + 1, TIMEOUT, 0, None, 10, -1))]
        assert h.meta().state is S.EMPTY and h.meta().partitions == set()
    else:
        assert response == err(expected)


def test_init_takes_the_new_timeout() -> None:
    h = Harness()
    h.to_state(S.COMPLETE_COMMIT)
    h.init(timeout=5000)
    assert h.meta().timeout_ms == 5000


@pytest.mark.parametrize(("version", "code"), [(3, 47), (4, 90), (5, 90)])
def test_a_sent_producer_id_that_is_not_ours_is_fenced(version: int, code: int) -> None:
    h = Harness()
    pid, epoch = h.to_state(S.EMPTY)
    assert h.init(pid=pid + 77, epoch=epoch, version=version) == err(code)
    assert h.last.records == []


def test_fence_while_ongoing_aborts_and_the_retry_ends_at_epoch_plus_2() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.init(now=5, version=3) == err(51)  # 51 at every version
    [(txn, value)] = decoded(h.last)
    assert txn == "tx" and value is not None
    assert (value.producer_id, value.producer_epoch, value.transaction_status) == (pid, epoch + 1, 3)
    assert value.partitions == (("topic", (0,)),)
    assert h.markers == [MarkerJob("tx", pid, epoch + 1, False, 3, [TP])]
    assert h.meta().state is S.PREPARE_ABORT
    assert h.end(pid, epoch, True)["error_code"] == 90  # the fenced instance cannot commit
    assert h.init(now=6) == err(51)  # markers still being written
    h.run_markers(now=7)
    assert h.meta().state is S.COMPLETE_ABORT and h.meta().partitions == set()
    assert h.init(now=8) == ok(pid, epoch + 2)


def test_kip360_bump_with_the_current_epoch() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.COMPLETE_ABORT)
    assert h.init(pid=pid, epoch=epoch) == ok(pid, epoch + 1)
    assert h.meta().last_producer_epoch == epoch


def test_kip360_retry_with_the_last_epoch_returns_the_current_values() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.EMPTY)
    assert h.init(pid=pid, epoch=epoch) == ok(pid, epoch + 1)
    assert h.init(pid=pid, epoch=epoch) == ok(pid, epoch + 1)  # the response was lost: same answer
    assert h.meta().producer_epoch == epoch + 1


def test_kip360_other_epoch_is_fenced() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.EMPTY)
    h.init(pid=pid, epoch=epoch)
    assert h.init(pid=pid, epoch=epoch + 7) == err(90)
    assert h.init(pid=pid, epoch=epoch + 7, version=3) == err(47)


def test_bump_without_a_sent_epoch_forgets_the_last_epoch() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.EMPTY)
    h.init(pid=pid, epoch=epoch)
    h.init()
    assert h.meta().last_producer_epoch == -1
    assert h.init(pid=pid, epoch=epoch + 1) == err(90)


def stored(pid: int, epoch: int, state: S = S.EMPTY, partitions=None) -> TransactionLogValue:
    return TransactionLogValue(pid, epoch, TIMEOUT, int(state), partitions, 0, -1 if partitions is None else 0)


def test_epoch_32765_bumps_to_32766() -> None:
    h = Harness()
    h.load_value(stored(500, 32765))
    assert h.init() == ok(500, 32766)


def test_exhausted_epoch_rotates_to_a_new_producer_id_with_epoch_0() -> None:
    h = Harness()
    h.load_value(stored(500, 32766, S.COMPLETE_COMMIT, ()))
    assert h.init(now=3) == ok(FIRST_PID, 0)
    meta = h.meta()
    assert (meta.last_producer_id, meta.last_producer_epoch, meta.state) == (500, -1, S.EMPTY)


def test_kip360_rotation_remembers_the_old_producer_and_its_retry_gets_the_new_one() -> None:
    h = Harness()
    h.load_value(stored(500, 32766))
    assert h.init(pid=500, epoch=32766) == ok(FIRST_PID, 0)
    assert (h.meta().last_producer_id, h.meta().last_producer_epoch) == (500, 32766)
    assert h.init(pid=500, epoch=32766) == ok(FIRST_PID, 0)  # retry of the lost response
    assert h.init(pid=500, epoch=5) == err(90)  # the old pid with a live epoch is a zombie


def test_fencing_an_epoch_32766_txn_uses_32767_and_the_retry_rotates() -> None:
    h = Harness()
    h.load_value(stored(500, 32766, S.ONGOING, (("topic", (0,)),)))
    assert h.init() == err(51)
    assert h.markers == [MarkerJob("tx", 500, 32767, False, 3, [TP])]
    h.run_markers()
    assert h.init() == ok(FIRST_PID, 0)


def test_a_fence_whose_write_failed_does_not_bump_twice() -> None:
    # the append of PrepareAbort fails: the shell resets and replays the log, so the epoch the
    # failed fence chose is forgotten and the next fence uses epoch + 1 again
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.init(durable=False) == err(51)
    h.shard.reset()
    for key, value in h.log:
        h.shard.replay(key, value)
    assert (h.meta().state, h.meta().producer_epoch, h.meta().pending) == (S.ONGOING, epoch, None)
    assert h.init() == err(51)
    assert h.markers == [MarkerJob("tx", pid, epoch + 1, False, 3, [TP])]


def test_the_fenced_producers_requests_fail_until_it_initialises_again() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    h.init()  # a new instance fences the old one
    assert h.add(pid, epoch, [("late", 0)]) == {("late", 0): 90}
    assert h.shard.verify_partitions("tx", pid, epoch, [TP]) == {TP: 90}
    assert h.end(pid, epoch, False, version=1) == {"error_code": 47}
    h.run_markers()
    fresh = h.init()
    assert fresh == ok(pid, epoch + 2)
    assert h.add(pid, epoch + 2, [("late", 0)]) == {("late", 0): 0}
