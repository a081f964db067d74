"""The history checker on planted histories (no broker): a clean history passes, and each kind of
bug a chaos run hunts (a lost acknowledged record, an idempotent producer's duplicate, a committed
offset moving backwards, an aborted record visible to read_committed, half a transaction, ...) is
flagged exactly where it was planted. The chaos runs pass only when the checker finds nothing, so
it must be shown to find something."""

from __future__ import annotations

from checker import (
    CheckResult,
    check_commit_order,
    check_commits,
    check_exactly_once,
    check_records,
    check_transactions,
    txn_record,
)
from history import Op, commit_metadata

META = 32  # commit metadata size of these histories


def produced(op_id: int, value: str, partition: int, offset: int | None, outcome: str = "ok") -> Op:
    """A produce operation of instance/seq `value`, acknowledged at `offset`."""
    return Op(op_id, 0, "produce", value.split(":")[0], None, partition, value, float(op_id), float(op_id) + 0.5,
              outcome, offset)


def committed(op_id: int, group: str, value: int, start: float, end: float, outcome: str = "ok") -> Op:
    """A commit operation of offset `value` to data-0 for `group`, sent at `start`, answered at `end`."""
    return Op(op_id, 0, "commit", "c0", group, 0, str(value), start, end, outcome, topic="data")


def transaction(op_id: int, label: str, count: int, outcome: str) -> Op:
    """A consume-transform-produce transaction of `count` records with its outcome."""
    return Op(op_id, 0, "txn", "t0.1", "eos", -1, label, float(op_id), float(op_id) + 1, outcome,
              topic="out", count=count)


def records_of(values: list[str]) -> list[tuple[int, bytes]]:
    """(offset, value) of a partition holding `values` from offset 0."""
    return [(offset, value.encode()) for offset, value in enumerate(values)]


def test_a_clean_history_passes() -> None:
    """Acknowledged records in place, commits in order, transactions whole: nothing flagged."""
    result = CheckResult("clean")
    ops = [produced(1, "p0.1:0", 0, 0), produced(2, "p0.1:1", 0, 1), produced(3, "p0.1:2", 0, None, "unknown")]
    check_records(result, ops, "data", 0, records_of(["p0.1:0", "p0.1:1"]))
    commits = [committed(4, "g", 5, 1.0, 2.0), committed(5, "g", 7, 1.5, 2.5), committed(6, "g", 6, 1.6, 2.6)]
    check_commit_order(result, commits)  # 6 after 7 is fine: both were in flight at once
    check_commits(result, commits, {("g", "data"): {0: (7, commit_metadata(commits[1], META))}}, META)
    txns = [transaction(7, "t0.1.0", 2, "ok"), transaction(8, "t0.1.1", 1, "aborted"),
            transaction(9, "t0.1.2", 1, "unknown")]
    visible = {0: [(0, txn_record("t0.1.0", 0, 2, (0, 0))), (1, txn_record("t0.1.0", 1, 2, (0, 1)))]}
    logged = {0: [*visible[0], (2, txn_record("t0.1.1", 0, 1, (0, 2)))]}
    check_transactions(result, txns, visible, logged)
    check_exactly_once(result, txns, visible, {0: records_of(["a", "b", "c"])}, {"eos": {0: 2}})
    assert result.violations == 0, result
    assert result.aborted_in_log == 1 and result.txn_records_read == 2


def test_each_planted_bug_is_flagged() -> None:
    """Every kind of violation, planted once or twice, is counted and shown."""
    result = CheckResult("planted")
    # data-0: p0.1:1 acknowledged at 1 but another value there (lost); p0.1:2 twice (an idempotent
    # producer's duplicate, its sequence not increasing: out of order too); two records nobody sent
    ops = [produced(1, "p0.1:0", 0, 0), produced(2, "p0.1:1", 0, 1), produced(3, "p0.1:2", 0, 2)]
    check_records(result, ops, "data", 0, records_of(["p0.1:0", "p0.1:3x", "p0.1:2", "p0.1:2", "stranger:0"]))
    assert (result.lost, result.duplicates, result.phantoms) == (1, 1, 2), result
    # a commit of 5 sent after 9 was acknowledged, and acknowledged: the offset moved backwards
    commits = [committed(10, "g", 9, 1.0, 2.0), committed(11, "g", 5, 3.0, 4.0),
               committed(12, "lost", 3, 1.0, 2.0), committed(13, "stranger", 4, 1.0, 2.0)]
    check_commit_order(result, commits)
    assert result.backwards_commits == 1 and "backwards commit" in result.evidence, result
    # read back: g holds 5 (below the acknowledged 9: lost), `lost` nothing, `stranger` a value no attempt sent
    check_commits(result, commits, {("g", "data"): {0: (5, commit_metadata(commits[1], META))},
                                    ("lost", "data"): {0: (-1001, None)},
                                    ("stranger", "data"): {0: (4, "op99")}}, META)
    assert (result.lost_commits, result.phantom_commits) == (2, 1), result
    # transactions: an aborted one visible; a committed one of three records showing two; a
    # committed one showing nothing; an undecided one showing one record twice
    txns = [transaction(20, "aborted", 1, "aborted"), transaction(21, "partial", 3, "ok"),
            transaction(22, "vanished", 1, "ok"), transaction(23, "twice", 1, "unknown")]
    visible = {0: [(0, txn_record("aborted", 0, 1, (0, 0))), (1, txn_record("partial", 0, 3, (0, 1))),
                   (2, txn_record("partial", 1, 3, (0, 2))), (3, txn_record("twice", 0, 1, (0, 3))),
                   (4, txn_record("twice", 0, 1, (0, 3)))]}
    check_transactions(result, txns, visible, visible)
    assert (result.aborted_visible, result.partial_txns, result.lost_txns) == (1, 2, 1), result
    # exactly once: input 0:3 transformed twice; inputs 0:4 and 0:5 below the committed position 6, transformed by none
    check_exactly_once(result, txns, visible, {0: records_of(["a", "b", "c", "d", "e", "f", "g"])}, {"eos": {0: 6}})
    assert (result.eos_duplicates, result.eos_lost) == (1, 2), result
    assert set(result.evidence) == {"lost", "duplicate", "reordered", "phantom", "backwards commit", "lost commit",
                                    "phantom commit", "aborted visible", "partial transaction", "lost transaction",
                                    "transformed twice", "input skipped"}, result.evidence
    assert result.violations == 1 + 1 + 2 + result.reordered + 1 + 2 + 1 + 1 + 2 + 1 + 1 + 2, result


def test_a_copy_under_a_bumped_producer_epoch_is_told_from_a_duplicate() -> None:
    """librdkafka sends a message again under a bumped epoch when it cannot tell whether the first
    copy was stored: no broker can refuse that copy, so it is counted apart; a second copy under
    the same producer id and epoch is the broker's duplicate."""
    result = CheckResult("epochs")
    ops = [produced(1, "p0.1:0", 0, 1), produced(2, "p0.1:1", 0, 3)]
    producers = {0: (7, 1), 1: (7, 2), 2: (7, 2), 3: (7, 2)}  # offset -> (producer id, epoch)
    check_records(result, ops, "data", 0, records_of(["p0.1:0", "p0.1:0", "p0.1:1", "p0.1:1"]), producers)
    assert (result.epoch_resends, result.duplicates, result.reordered) == (1, 1, 1), result
    assert result.violations == 2 and "re-sent under a bumped epoch" in result.evidence, result
