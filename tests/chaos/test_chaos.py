"""The chaos harness in its bounded form (`make chaos` runs it at full length): concurrent
idempotent producers and committers against one real broker, faults injected while they run, and
the history checker after every round and every restart."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from checker import check
from harness import ChaosConfig, Harness
from history import History, commit_metadata
from report import Summary
from integration.clients import create_topic, produce


def _run(config: ChaosConfig) -> Summary:
    with Harness(config, log=print) as harness:
        return harness.run()


def _assert_clean(summary: Summary, faults: dict[str, int]) -> None:
    report = summary.text()
    assert summary.lost == 0 and summary.lost_commits == 0 and summary.backwards_commits == 0, report
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


def test_many_committers_across_many_groups_lose_nothing_acknowledged_through_kill9(tmp_path: Path) -> None:
    """Group commit across partitions (issue 24): 40 confluent-kafka consumers in 40 groups, spread
    over the `__consumer_offsets` partitions, commit synchronously back to back, so every turn of
    the broker's loop writes many partitions whose fsyncs run at once on its threads. A kill -9 in
    each round and at each round's end: every acknowledged commit is read back, none is invented."""
    config = ChaosConfig(run_dir=tmp_path, rounds=2, round_seconds=6.0, faults=("kill",), end_restart=("kill9",),
                         producers=1, committers=40, commit_interval=0.0, seed=24)
    summary = _run(config)
    print(summary.text())
    _assert_clean(summary, {"kill": 2, "end-kill9": 2})
    assert summary.count("ok", "commit") >= 1_000 * summary.rounds, summary.text()


def test_the_checker_finds_each_kind_of_violation(broker, tmp_path: Path) -> None:
    """The runs above pass only when check() finds nothing, so check() must be able to find
    something: a history that disagrees with what the broker holds gives exactly the cases planted."""
    cfg = ChaosConfig(run_dir=tmp_path, partitions=1)
    create_topic(broker.bootstrap, cfg.topic)
    create_topic(broker.bootstrap, cfg.commit_topic)
    history = History(tmp_path / "ops.jsonl")
    try:
        # offsets 0..4: seq 2 before seq 1 (reordered), seq 2 twice (duplicate), a record never sent
        payloads = ["p0.1:0", "p0.1:2", "p0.1:1", "p0.1:2", "stranger:0"]
        delivered = produce(broker.bootstrap, cfg.topic, [{"value": p.encode(), "partition": 0} for p in payloads])
        assert [m.offset() for m in delivered] == [0, 1, 2, 3, 4]
        for value, offset in (("p0.1:0", 0), ("p0.1:1", 2), ("p0.1:2", 1), ("p0.1:3", 5)):  # p0.1:3: lost
            history.complete(history.invoke(0, "produce", "p0.1", None, 0, value), "ok", offset=offset)

        def attempt(group: str, value: int, stored_metadata: str | None = None) -> None:
            """An acknowledged commit of `value`; the broker gets it (with its own metadata, or
            `stored_metadata` instead) only when stored_metadata is not None."""
            op = history.invoke(0, "commit", "c0", group, 0, str(value), cfg.commit_topic)
            history.complete(op, "ok")
            if stored_metadata is not None:
                consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                     "enable.auto.commit": False})
                try:
                    metadata = stored_metadata or commit_metadata(op, cfg.commit_metadata_bytes)
                    consumer.commit(offsets=[TopicPartition(cfg.commit_topic, 0, value, metadata=metadata)],
                                    asynchronous=False)
                finally:
                    consumer.close()

        attempt("g-true", 4, "")  # what was acknowledged is what the broker holds
        attempt("g-lower", 5, "")
        attempt("g-lower", 6)  # acknowledged, never stored: the broker holds 5 (lost commit)
        attempt("g-none", 3)  # acknowledged, nothing stored (lost commit)
        attempt("g-stranger", 9, "sent by nobody")  # (offset, metadata) of no attempt (phantom commit)

        result = check(history, cfg, broker.bootstrap, "planted")
    finally:
        history.close()
    found = (result.lost, result.duplicates, result.phantoms, result.reordered, result.lost_commits,
             result.phantom_commits)
    assert found == (1, 1, 1, 1, 2, 1), result
    assert result.violations == 7 and (result.records_read, result.commits_read) == (5, 4), result
    assert set(result.evidence) == {"lost", "duplicate", "phantom", "reordered", "lost commit", "phantom commit"}
