"""AddPartitionsToTxn (and its VerifyOnly form) and EndTxn TV1: one test per cell (reference A3, A6)."""

from __future__ import annotations

import pytest

from offsetd.records.transaction_log import TransactionLogValue, decode_value
from offsetd.transaction.result import MarkerJob

from test_transaction_harness import TIMEOUT, TP, Harness, S, decoded

TP2 = ("other", 4)


# ================================================================== AddPartitionsToTxn


def bumped(h: Harness) -> tuple[int, int]:
    """An Empty id at epoch 1 (so that epoch 0 is stale)."""
    pid, _ = h.to_state(S.EMPTY)
    return pid, h.init()["producer_epoch"]


# (case, request changes relative to the live producer) -> error for every partition
ADD_CHECKS = [
    ("empty id", {"txn": ""}, 42),
    ("unknown id", {"txn": "nope"}, 49),
    ("other producer id", {"pid_delta": 1}, 49),
    ("stale epoch v2", {"epoch_delta": -1, "version": 2}, 90),
    ("stale epoch v1", {"epoch_delta": -1, "version": 1}, 47),
    ("stale epoch v0", {"epoch_delta": -1, "version": 0}, 47),
    ("future epoch", {"epoch_delta": 1, "version": 3}, 90),
]


@pytest.mark.parametrize(("case", "change", "code"), ADD_CHECKS, ids=[c[0] for c in ADD_CHECKS])
def test_add_partitions_checks(case: str, change: dict, code: int) -> None:
    h = Harness()
    pid, epoch = bumped(h)
    response = h.add(pid + change.get("pid_delta", 0), epoch + change.get("epoch_delta", 0), [TP, TP2],
                     txn=change.get("txn", "tx"), version=change.get("version", 3))
    assert response == {TP: code, TP2: code}
    assert h.last.records == []


def test_add_partitions_while_pending_gets_51() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.EMPTY)
    first = h.shard.add_partitions("a", "tx", pid, epoch, [TP], 3, 0)
    assert h.add(pid, epoch, [TP2]) == {TP2: 51}
    h.write(first)
    assert h.add(pid, epoch, [TP2]) == {TP2: 0}


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_add_partitions_in_prepare_gets_51(state: S) -> None:
    h = Harness()
    pid, epoch = h.to_state(state)
    assert h.add(pid, epoch, [TP2]) == {TP2: 51}
    assert h.last.records == []


def test_add_partitions_already_in_the_txn_writes_nothing() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.add(pid, epoch, [TP], now=50) == {TP: 0}
    assert h.last.records == []


def test_add_partitions_to_an_ongoing_txn_writes_the_union_and_keeps_the_start() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING, now=10)
    assert h.add(pid, epoch, [TP, TP2], now=50) == {TP: 0, TP2: 0}
    assert decoded(h.last) == [("tx", TransactionLogValue(
        pid, epoch, TIMEOUT, 1, (("other", (4,)), ("topic", (0,))), 50, 10))]
    assert h.meta().partitions == {TP, TP2}


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_add_partitions_begins_a_txn(state: S) -> None:
    h = Harness()
    pid, epoch = h.to_state(state, now=10)
    assert h.add(pid, epoch, [TP2], now=70) == {TP2: 0}
    meta = h.meta()
    assert (meta.state, meta.partitions, meta.start_timestamp, meta.last_update_timestamp) == (
        S.ONGOING, {TP2}, 70, 70)


def test_add_offsets_is_adding_the_offsets_partition() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    offsets_tp = ("__consumer_offsets", 17)
    assert h.add(pid, epoch, [offsets_tp], version=0) == {offsets_tp: 0}
    assert h.meta().partitions == {TP, offsets_tp}


# ============================================================================ VerifyOnly


def test_verify_partitions_answers_per_partition_and_writes_nothing() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.shard.verify_partitions("tx", pid, epoch, [TP, TP2]) == {TP: 0, TP2: 120}
    assert h.meta().partitions == {TP} and h.meta().pending is None


VERIFY_CHECKS = [c for c in ADD_CHECKS if c[1].get("version", 2) >= 2]  # no version mapping here


@pytest.mark.parametrize(("case", "change", "code"), VERIFY_CHECKS, ids=[c[0] for c in VERIFY_CHECKS])
def test_verify_partitions_checks(case: str, change: dict, code: int) -> None:
    h = Harness()
    pid, epoch = bumped(h)
    got = h.shard.verify_partitions(change.get("txn", "tx"), pid + change.get("pid_delta", 0),
                                    epoch + change.get("epoch_delta", 0), [TP])
    assert got == {TP: code}


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_verify_partitions_in_prepare_gets_51(state: S) -> None:
    h = Harness()
    pid, epoch = h.to_state(state)
    assert h.shard.verify_partitions("tx", pid, epoch, [TP]) == {TP: 51}


def test_verify_partitions_while_pending_gets_51_for_what_is_not_durably_in() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    h.shard.add_partitions("a", "tx", pid, epoch, [TP2], 3, 0)
    assert h.shard.verify_partitions("tx", pid, epoch, [TP, TP2]) == {TP: 0, TP2: 51}


# ================================================================================ EndTxn

# A6, TV1: state -> (commit, abort); a state name means "write it and answer NONE".
END_TXN_TV1 = {
    S.ONGOING: (S.PREPARE_COMMIT, S.PREPARE_ABORT),
    S.PREPARE_COMMIT: (51, 48),
    S.PREPARE_ABORT: (48, 51),
    S.COMPLETE_COMMIT: (0, 48),
    S.COMPLETE_ABORT: (48, 0),
    S.EMPTY: (48, 48),
}
END_CELLS = [(state, commit, outcome[0 if commit else 1])
             for state, outcome in END_TXN_TV1.items() for commit in (True, False)]


@pytest.mark.parametrize(("state", "commit", "expected"), END_CELLS,
                         ids=[f"{s.name}-{'commit' if c else 'abort'}" for s, c, _ in END_CELLS])
def test_end_txn_tv1_table(state: S, commit: bool, expected: S | int) -> None:
    h = Harness()
    pid, epoch = h.to_state(state, now=10)
    h.markers.clear()
    before = (h.meta().state, h.meta().producer_epoch)
    response = h.end(pid, epoch, commit, now=20)
    if isinstance(expected, S):
        assert response == {"error_code": 0}
        assert decoded(h.last) == [("tx", TransactionLogValue(
            pid, epoch, TIMEOUT, int(expected), (("topic", (0,)),), 20, 10))]
        assert h.markers == [MarkerJob("tx", pid, epoch, commit, 3, [TP])]
        assert h.meta().state is expected
    else:
        assert response == {"error_code": expected}
        assert h.last.records == [] and h.last.markers == []
        assert (h.meta().state, h.meta().producer_epoch) == before


@pytest.mark.parametrize("txn", [None, ""])
def test_end_txn_without_id_is_invalid_request(txn: str | None) -> None:
    assert Harness().end(1, 0, True, txn=txn) == {"error_code": 42}


def test_end_txn_of_an_unknown_id_or_another_producer_is_49() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.end(pid, epoch, True, txn="nope") == {"error_code": 49}
    assert h.end(pid + 1, epoch, True) == {"error_code": 49}


@pytest.mark.parametrize(("version", "code"), [(0, 47), (1, 47), (2, 90), (4, 90)])
def test_end_txn_with_another_epoch_is_fenced(version: int, code: int) -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    assert h.end(pid, epoch + 1, True, version=version) == {"error_code": code}
    assert h.end(pid, epoch - 1, False, version=version) == {"error_code": code}
    assert h.meta().state is S.ONGOING


def test_end_txn_while_pending_gets_51() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    h.shard.add_partitions("a", "tx", pid, epoch, [TP2], 3, 0)
    assert h.end(pid, epoch, True) == {"error_code": 51}


def test_end_txn_replies_with_the_prepare_record_and_completes_after_the_markers() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.ONGOING)
    h.add(pid, epoch, [TP2])
    result = h.shard.end_txn("tok", "tx", pid, epoch, True, 3, 30)
    # the shell delivers the reply once the Prepare record is durable, then runs the markers
    assert result.completions == [("tok", {"error_code": 0})] and len(result.records) == 1
    assert result.markers == [MarkerJob("tx", pid, epoch, True, 3, [TP2, TP])]
    h.write(result)
    assert h.end(pid, epoch, True) == {"error_code": 51}  # a retry while the markers go out
    h.run_markers(now=40)
    assert decode_value(h.log[-1][1]) == TransactionLogValue(pid, epoch, TIMEOUT, 4, (), 40, 0)
    meta = h.meta()
    assert (meta.state, meta.partitions, meta.last_update_timestamp) == (S.COMPLETE_COMMIT, set(), 40)
    assert h.end(pid, epoch, True) == {"error_code": 0}  # a retry after completion


def test_markers_written_for_a_stale_job_writes_nothing() -> None:
    h = Harness()
    pid, epoch = h.to_state(S.COMPLETE_COMMIT)
    assert h.shard.markers_written("tx", pid, epoch, 5).records == []
    assert h.shard.markers_written("nope", pid, epoch, 5).records == []
    pid2, epoch2 = h.to_state(S.PREPARE_ABORT, txn="tx2")
    assert h.shard.markers_written("tx2", pid2, epoch2 + 1, 5).records == []
    assert len(h.shard.markers_written("tx2", pid2, epoch2, 5).records) == 1


def test_verify_passes_for_partitions_already_in_while_more_are_being_added():
    """TxnOffsetCommit right after AddOffsetsToTxn meets the AddPartitionsToTxn of the same
    transaction being written: the offsets partition is durably in, so it is verified at once;
    the partition still being added answers CONCURRENT_TRANSACTIONS until its record is replayed."""
    from offsetd.transaction.config import TransactionConfig
    from offsetd.transaction.shard import TransactionCoordinatorShard

    ids = iter(range(10, 20))
    shard = TransactionCoordinatorShard(0, TransactionConfig(), lambda: next(ids))

    def durable(result):
        for key, value in result.records:
            shard.replay(key, value)
        return result.completions[0][1]

    init = durable(shard.init_producer_id("t", "app", 60000, -1, -1, 3, 0))
    pid, epoch = init["producer_id"], init["producer_epoch"]
    offsets = ("__consumer_offsets", 7)
    assert durable(shard.add_partitions("t", "app", pid, epoch, [offsets], 0, 1)) == {offsets: 0}
    in_flight = shard.add_partitions("t", "app", pid, epoch, [("out", 0)], 0, 2)
    assert in_flight.records  # written, not yet replayed
    assert shard.verify_partitions("app", pid, epoch, [offsets, ("out", 0)]) == {offsets: 0, ("out", 0): 51}
    durable(in_flight)
    assert shard.verify_partitions("app", pid, epoch, [offsets, ("out", 0)]) == {offsets: 0, ("out", 0): 0}
