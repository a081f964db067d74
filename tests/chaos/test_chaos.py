"""The chaos harness in its bounded form (`make chaos` runs it at full length): concurrent
idempotent producers and committers against one real broker, faults injected while they run, and
the history checker after every round and every restart."""

from __future__ import annotations

from pathlib import Path

from harness import ChaosConfig, Harness, Summary


def _run(config: ChaosConfig) -> Summary:
    with Harness(config, log=print) as harness:
        return harness.run()


def _assert_clean(summary: Summary, faults: dict[str, int]) -> None:
    report = summary.text()
    assert summary.lost == 0 and summary.lost_commits == 0, report
    assert summary.duplicates == 0 and summary.reordered == 0, report
    assert summary.phantoms == 0 and summary.phantom_commits == 0, report
    assert not summary.incidents, report  # no unexpected exit, stuck client, or fault not recovered from
    for kind, count in faults.items():
        assert summary.faults[kind] == count, report
    # The checks are not vacuous: the workload made progress through every round.
    assert summary.count("ok", "produce") >= 300 * summary.rounds, report
    assert summary.count("ok", "commit") >= 100 * summary.rounds, report
    assert summary.checks == 2 * summary.rounds, report


def test_kill_stop_and_stall_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """kill -9 with restart, a SIGSTOP pause, and a burst of short pauses (the emulated slow fsync),
    one per round; rounds end with a kill -9 or a clean restart, checked before and after."""
    config = ChaosConfig(run_dir=tmp_path, rounds=3, round_seconds=6.0, faults=("kill", "stop", "stall"), seed=16)
    summary = _run(config)
    print(summary.text())
    _assert_clean(summary, {"kill": 1, "stop": 1, "stall": 1})


def test_full_disk_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """log.dirs on a tmpfs the harness mounts (fails, saying why, where mount is not permitted);
    a filler takes all free space for a few seconds while clients run, then is deleted; each
    round ends with a kill -9 and the check after the restart."""
    config = ChaosConfig(run_dir=tmp_path, rounds=2, round_seconds=7.0, faults=("diskfull",),
                         diskfull_hold=(2.0, 3.0), seed=16)
    summary = _run(config)
    print(summary.text())
    _assert_clean(summary, {"diskfull": 2, "end-kill9": 2})
