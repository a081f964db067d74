"""EndTxn v5 (TV2): epoch bumped at Prepare*, one test per cell of A6's TV2 table, epoch overflow."""

from __future__ import annotations

import pytest

from offsetd.records.transaction_log import TransactionLogValue, decode_value
from offsetd.transaction.result import MarkerJob

from test_transaction_harness import FIRST_PID, TIMEOUT, TP, Harness, S, decoded

CUR, RETRY = "cur", "retry"

# A6 TV2: state -> {(commit, sent epoch kind): outcome}; a state = "bump the epoch, write it, NONE".
TV2_TABLE = {
    S.ONGOING: {(True, CUR): S.PREPARE_COMMIT, (True, RETRY): 90,
                (False, CUR): S.PREPARE_ABORT, (False, RETRY): 90},
    S.EMPTY: {(True, CUR): 48, (True, RETRY): 90, (False, CUR): S.PREPARE_ABORT, (False, RETRY): 90},
    S.COMPLETE_COMMIT: {(True, CUR): 48, (True, RETRY): 0, (False, CUR): S.PREPARE_ABORT, (False, RETRY): 48},
    S.COMPLETE_ABORT: {(True, CUR): 48, (True, RETRY): 48, (False, CUR): S.PREPARE_ABORT, (False, RETRY): 0},
    # Prepare* answers as TV1 to the epoch the EndTxn was sent with (current - 1)
    S.PREPARE_COMMIT: {(True, RETRY): 51, (False, RETRY): 48, (True, CUR): 90, (False, CUR): 90},
    S.PREPARE_ABORT: {(True, RETRY): 48, (False, RETRY): 51, (True, CUR): 90, (False, CUR): 90},
}
CELLS = [(state, commit, kind, outcome) for state, row in TV2_TABLE.items()
         for (commit, kind), outcome in row.items()]


def end5(h: Harness, pid: int, epoch: int, commit: bool, now: int = 0) -> dict:
    return h.end(pid, epoch, commit, version=5, now=now)


def tv2_state(h: Harness, state: S) -> tuple[int, int]:
    """Drive an id to `state` with TV2 requests; returns (pid, the epoch the producer now holds)."""
    pid = h.init(now=1)["producer_id"]
    epoch = h.init(now=1)["producer_epoch"]  # epoch 1: a "current - 1" exists in every state
    if state is S.EMPTY:
        return pid, epoch
    assert h.add(pid, epoch, [TP], version=4, now=1) == {TP: 0}
    if state is S.ONGOING:
        return pid, epoch
    commit = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    assert end5(h, pid, epoch, commit, now=2) == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        h.run_markers(now=3)
        return pid, epoch + 1
    return pid, epoch  # Prepare*: the producer has not seen the bumped epoch yet


@pytest.mark.parametrize(("state", "commit", "kind", "outcome"), CELLS,
                         ids=[f"{s.name}-{'commit' if c else 'abort'}-{k}" for s, c, k, _ in CELLS])
def test_end_txn_tv2_table(state: S, commit: bool, kind: str, outcome: S | int) -> None:
    h = Harness()
    pid, held = tv2_state(h, state)
    meta = h.meta()
    current = meta.producer_epoch
    sent = current if kind == CUR else current - 1
    if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        assert held == current - 1
    h.markers.clear()
    response = end5(h, pid, sent, commit, now=50)
    if isinstance(outcome, S):
        assert response == {"error_code": 0, "producer_id": pid, "producer_epoch": current + 1}
        parts = [TP] if state is S.ONGOING else []
        assert h.markers == [MarkerJob("tx", pid, current + 1, commit, 3, parts)]
        [(_, value)] = decoded(h.last)
        assert (value.producer_epoch, value.transaction_status, value.client_transaction_version) == (
            current + 1, int(outcome), 2)
        assert h.meta().state is outcome
        h.run_markers(now=60)
        assert (h.meta().producer_id, h.meta().producer_epoch) == (pid, current + 1)
    elif outcome == 0:
        assert response == {"error_code": 0, "producer_id": pid, "producer_epoch": current}
        assert h.last.records == []
    else:
        assert response == {"error_code": outcome, "producer_id": -1, "producer_epoch": -1}
        assert h.last.records == [] and h.markers == []


def test_tv2_abort_of_an_empty_txn_starts_and_ends_at_once() -> None:
    h = Harness()
    pid, epoch = tv2_state(h, S.EMPTY)
    end5(h, pid, epoch, False, now=70)
    assert (h.meta().start_timestamp, h.meta().partitions) == (70, set())
    [job] = h.run_markers(now=71)
    assert job.partitions == [] and h.meta().state is S.COMPLETE_ABORT


@pytest.mark.parametrize("txn", [None, ""])
def test_tv2_without_id_is_invalid_request(txn: str | None) -> None:
    assert Harness().end(1, 0, True, txn=txn, version=5) == {
        "error_code": 42, "producer_id": -1, "producer_epoch": -1}


def test_tv2_unknown_id_and_other_producer_are_49() -> None:
    h = Harness()
    pid, epoch = tv2_state(h, S.ONGOING)
    assert h.end(pid, epoch, True, txn="nope", version=5)["error_code"] == 49
    assert end5(h, pid + 1, epoch, True)["error_code"] == 49


def test_tv2_pending_gets_51() -> None:
    h = Harness()
    pid, epoch = tv2_state(h, S.ONGOING)
    h.shard.add_partitions("a", "tx", pid, epoch, [("x", 1)], 4, 0)
    assert end5(h, pid, epoch, True)["error_code"] == 51


def overflowing(h: Harness) -> None:
    """pid 500 at epoch 32766 with an open TV2 txn on TP."""
    h.load_value(TransactionLogValue(500, 32766, TIMEOUT, 1, (("topic", (0,)),), 0, 0,
                                     client_transaction_version=2))


def test_tv2_epoch_overflow_moves_to_a_new_producer_id() -> None:
    h = Harness()
    overflowing(h)
    assert end5(h, 500, 32766, True, now=5) == {"error_code": 0, "producer_id": FIRST_PID, "producer_epoch": 0}
    [(_, prepare)] = decoded(h.last)
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (500, 32767, FIRST_PID)
    assert h.log[-1][1][:2] == b"\x00\x01"  # a TV2 txn is stored as value v1 (keeps NextProducerId)
    assert h.markers == [MarkerJob("tx", 500, 32767, True, 3, [TP])]
    h.run_markers(now=6)
    meta = h.meta()
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.last_producer_id, meta.next_producer_id) == (
        S.COMPLETE_COMMIT, FIRST_PID, 0, 500, -1)
    assert end5(h, 500, 32766, True) == {"error_code": 0, "producer_id": FIRST_PID, "producer_epoch": 0}
    assert end5(h, 500, 32766, False)["error_code"] == 48
    assert end5(h, 500, 32765, True)["error_code"] == 49
    assert h.add(FIRST_PID, 0, [TP], version=4) == {TP: 0}


def test_tv2_overflow_survives_a_reload_in_prepare() -> None:
    h = Harness()
    overflowing(h)
    end5(h, 500, 32766, False)
    h.markers.clear()
    shard = h.reload()
    assert shard.transactions["tx"].next_producer_id == FIRST_PID
    h.markers.extend(shard.on_loaded(0).markers)
    h.run_markers()
    assert (h.meta().producer_id, h.meta().producer_epoch, h.meta().state) == (FIRST_PID, 0, S.COMPLETE_ABORT)


def test_tv0_txns_are_stored_as_value_v0() -> None:
    h = Harness()
    h.to_state(S.COMPLETE_COMMIT)
    assert {value[:2] for _, value in h.log if value is not None} == {b"\x00\x00"}
    assert decode_value(h.log[-1][1]).client_transaction_version == 0
