"""The pipelines through `offsetd spark <name>` on a scripted history against a real broker:
known answers for commit-history, lag-history and reset-audit (with its undo CSV),
expiry-forecast equal to the broker's own /v1/groups/{group} preview, and the report rendered
by headless Chromium with its plots."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from broker_process import BrokerProcess, wait_for
from confluent_kafka import Consumer, TopicPartition
from helpers import commit, create_topic, produce, unique

from offsetd.spark.cli import main

RETENTION_MINUTES = 60
_METRICS = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


@dataclass
class History:
    """What the scripted history did, for the assertions."""

    broker: BrokerProcess
    metrics_url: str
    output: Path
    topic: str
    other: str
    groups: dict[str, str]
    stamps: dict[str, int] = field(default_factory=dict)
    active: Consumer | None = None


def _member(bootstrap: str, group: str, topics: list[str], client_id: str) -> Consumer:
    """A subscribed consumer that has its assignment (the group is Stable)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(topics)
    wait_for(lambda: consumer.poll(0.1) is None and consumer.assignment(), timeout=30, message=f"{group} assignment")
    return consumer


def _member_commit(consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
    result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    assert all(tp.error is None for tp in result), result


def _pause() -> int:
    """Let the clock move on (commit and record timestamps are in ms) and return 'now' in ms."""
    start = int(time.time() * 1000)
    wait_for(lambda: int(time.time() * 1000) > start + 2, timeout=1, interval=0.001, message="clock tick")
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    """One broker (metrics listener on, 60 min retention) and a scripted history:
    standalone group S (lag samples), standalone R (rewind, jump), member group M (member
    rewind, then Empty), active group A (Stable, one unsubscribed topic)."""
    base = tmp_path_factory.mktemp("pipelines")
    broker = BrokerProcess(base / "data", {"metrics.listener": "http://127.0.0.1:0",
                                           "group.initial.rebalance.delay.ms": "0",
                                           "offsets.retention.minutes": str(RETENTION_MINUTES)}).start()
    metrics_url = wait_for(lambda: _METRICS.search(broker.log()), message="metrics listener").group(1)
    topic, other = unique("hist"), unique("other")
    groups = {k: unique(k) for k in ("S", "R", "M", "A")}
    h = History(broker, metrics_url, base / "out", topic, other, groups)
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    create_topic(bs, other, 1)
    produce(bs, topic, [{"value": f"v{i}", "partition": i % 2} for i in range(10)])  # 5 per partition
    produce(bs, other, [{"value": b"o"} for _ in range(3)])
    _pause()
    S, R, M, A = (groups[k] for k in "SRMA")
    commit(bs, S, {(topic, 0): 2})
    commit(bs, S, {(topic, 0): 5, (topic, 1): 3})
    _pause()
    produce(bs, topic, [{"value": b"late", "partition": 0} for _ in range(4)])  # topic-0 ends at 9
    _pause()
    commit(bs, S, {(topic, 0): 7})

    commit(bs, R, {(topic, 0): 6})
    commit(bs, R, {(topic, 0): 8})
    h.stamps["before_rewind"] = _pause()
    commit(bs, R, {(topic, 0): 1})  # rewind: an admin-style reset of a member-less group
    commit(bs, R, {(topic, 0): 9})  # jump of 8 (threshold 5 in the test)

    member = _member(bs, M, [topic], "pipeline-client")
    _member_commit(member, {(topic, 0): 7})
    _member_commit(member, {(topic, 0): 4})  # rewind by a member
    member.close()  # M becomes Empty

    h.active = _member(bs, A, [topic], "active-client")
    _member_commit(h.active, {(topic, 0): 2, (other, 0): 1})  # `other` is not subscribed
    yield h
    h.active.close()
    broker.stop()


def _run(h: History, *args: str) -> None:
    assert main([*args, "--output", str(h.output)]) == 0


def _read(spark, h: History, name: str) -> list:
    return spark.read.parquet(str(h.output / name)).collect()


def test_commit_history_lists_every_commit(spark, history):
    _run(history, "commit-history", "--bootstrap-server", history.broker.bootstrap)
    rows = _read(spark, history, "commit-history")
    S, topic = history.groups["S"], history.topic
    got = [(r.partition, r.offset) for r in sorted((r for r in rows if r.group == S), key=lambda r: r.log_offset)]
    assert got == [(0, 2), (0, 5), (1, 3), (0, 7)]
    assert all(r.topic == topic and r.commit_time is not None for r in rows if r.group == S)
    assert len([r for r in rows if r.group in history.groups.values()]) == 4 + 4 + 2 + 2
    # Parquet format 2 (pipelines.parquet_writer): offsets delta-encoded, and Arrow reads the same rows
    files = sorted((history.output / "commit-history").glob("*.parquet"))
    table = pq.read_table(files)
    assert sorted(zip(table["group"].to_pylist(), table["log_partition"].to_pylist(), table["log_offset"].to_pylist(),
                      table["offset"].to_pylist())) == sorted((r.group, r.log_partition, r.log_offset, r.offset)
                                                            for r in rows)
    offset_column = pq.ParquetFile(files[0]).schema_arrow.get_field_index("offset")
    assert "DELTA_BINARY_PACKED" in pq.ParquetFile(files[0]).metadata.row_group(0).column(offset_column).encodings


def test_lag_history_samples_commits_and_log_end(spark, history):
    _run(history, "lag-history", "--bootstrap-server", history.broker.bootstrap)
    rows = [r for r in _read(spark, history, "lag-history") if r.group == history.groups["S"]]
    by_commit = sorted((r.time_ms, r.partition, r.committed_offset, r.log_end_offset, r.lag)
                       for r in rows if r.sample == "commit")
    assert [x[1:] for x in by_commit] == [(0, 2, 5, 3), (0, 5, 5, 0), (1, 3, 5, 2), (0, 7, 9, 2)]
    now = sorted((r.partition, r.committed_offset, r.log_end_offset, r.lag) for r in rows if r.sample == "now")
    assert now == [(0, 7, 9, 2), (1, 3, 5, 2)]


def test_reset_audit_finds_rewinds_and_jumps_with_committer_and_undo_plan(spark, history, tmp_path):
    undo = tmp_path / "undo.csv"
    _run(history, "reset-audit", "--bootstrap-server", history.broker.bootstrap, "--jump-threshold", "5",
         "--as-of", str(history.stamps["before_rewind"]), "--undo-file", str(undo))
    rows = _read(spark, history, "reset-audit")
    R, M, topic = history.groups["R"], history.groups["M"], history.topic
    ours = sorted(((r.group, r.kind, r.from_offset, r.to_offset, r.committer, list(r.members))
                   for r in rows if r.group in (R, M)), key=lambda x: (x[0], x[2]))
    assert ours == sorted([
        (R, "rewind", 8, 1, "admin", []),
        (R, "jump", 1, 9, "admin", []),
        (M, "rewind", 7, 4, "member", ["pipeline-client"]),
    ], key=lambda x: (x[0], x[2]))
    # kafka-consumer-groups --from-file layout: group,topic,partition,offset - no header.
    # R as of before its rewind: 8. M had no commit before then: nothing to restore.
    lines = [line for line in undo.read_text().splitlines() if line.split(",")[0] in (R, M)]
    assert lines == [f"{R},{topic},0,8"]


def _broker_preview(h: History, group: str) -> dict[tuple[str, int], int | None]:
    url = f"{h.metrics_url}/v1/groups/{urllib.parse.quote(group, safe='')}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    return {(o["topic"], o["partition"]): o["expires_at_ms"] for o in body["offsets"]}


def test_expiry_forecast_equals_the_brokers_preview(spark, history):
    _run(history, "expiry-forecast", "--bootstrap-server", history.broker.bootstrap,
         "--retention-minutes", str(RETENTION_MINUTES))
    rows = _read(spark, history, "expiry-forecast")
    for key, group in history.groups.items():
        ours = {(r.topic, r.partition): r.expires_at_ms for r in rows if r.group == group}
        assert ours == _broker_preview(history, group), key
    by = {(r.group, r.topic): r for r in rows}
    A, M, S = history.groups["A"], history.groups["M"], history.groups["S"]
    assert by[(A, history.topic)].expires_at_ms is None and by[(A, history.topic)].rule == "subscribed"
    assert by[(A, history.other)].rule == "unsubscribed"
    retention = RETENTION_MINUTES * 60_000
    assert by[(A, history.other)].expires_at_ms == by[(A, history.other)].commit_timestamp + retention
    assert by[(M, history.topic)].rule == "empty"
    assert by[(S, history.topic)].rule == "standalone"


def test_report_renders_with_plots_in_headless_chromium(spark, history):
    for name in ("commit-history", "lag-history", "expiry-forecast", "reset-audit"):
        if not (history.output / name).exists():
            _run(history, name, "--bootstrap-server", history.broker.bootstrap)
    _run(history, "report")
    report = history.output / "report.html"
    profile = tempfile.mkdtemp(prefix="chromium-")
    dom = subprocess.run(
        ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=120).stdout
    assert 'data-plots-rendered="3"' in dom, dom[:2000]
    for heading in ("Lag over time per group", "Commit rate", "Expiry timeline"):
        assert heading in dom
    assert history.groups["R"] in dom  # the reset table
