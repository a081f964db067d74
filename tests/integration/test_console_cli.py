"""`offsetd console --bootstrap-server` against a real broker, as against any Kafka cluster: the
pages load in headless Chromium with the numbers of `offsetd groups --describe`, the history
comes from the offsets log through the protocol, and bad input is one line and exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from clients import create_topic
from console_browser import Browser, keep_artifact
from integration.test_lag_metrics import describe

_SERVING = re.compile(r"offsetd console on (http://127\.0\.0\.1:\d+)/console/")


def test_console_against_a_cluster_shows_what_the_cli_shows(shared_broker, tmp_path) -> None:
    topic, group = f"ext-{uuid.uuid4().hex[:8]}", f"ext-group-{uuid.uuid4().hex[:8]}"
    create_topic(shared_broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    for step in range(1, 4):  # a commit history: produce, commit, produce more
        for i in range(20):
            producer.produce(topic, value=b"x", partition=i % 2)
        assert producer.flush(30) == 0
        consumer.commit(offsets=[TopicPartition(topic, 0, 5 * step), TopicPartition(topic, 1, 10 * step)],
                        asynchronous=False)
    consumer.close()
    proc = subprocess.Popen([sys.executable, "-m", "offsetd.cli", "console", "--bootstrap-server",
                             shared_broker.bootstrap, "--listen", "http://127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = _SERVING.search(proc.stdout.readline()).group(1)  # type: ignore[union-attr]
        with urllib.request.urlopen(f"{url}/v1/lag?group={group}", timeout=30) as response:
            answer = json.loads(response.read())
        (looked,) = answer["groups"]
        assert answer["expiry_known"] is False  # a Kafka cluster does not report when offsets expire
        rows = describe(shared_broker, group)
        assert [(p["topic"], p["partition"], p["committed"], p["log_end"], p["lag"]) for p in looked["partitions"]] == [
            (r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
            (topic, 0, 15, 30, 15), (topic, 1, 30, 30, 0)]
        with urllib.request.urlopen(f"{url}/v1/groups/{group}/history?points=50", timeout=60) as response:
            history = json.loads(response.read())
        commits = {(p["topic"], p["partition"]): [o for _, o in p["commits"]] for p in history["partitions"]}
        assert commits == {(topic, 0): [5, 10, 15], (topic, 1): [10, 20, 30]}
        assert history["total_lag"][-1] == 15
        with Browser(tmp_path / "profile") as browser:
            browser.goto(f"{url}/console/#/group/{group}")
            browser.wait_for("document.body.dataset.loaded && document.querySelectorAll('svg path').length > 0",
                             timeout=30)
            # ... so the page says "unknown", never "never" (which would claim the offsets are safe)
            card = "document.querySelector('[data-card=earliest_expiry_ms] .v').textContent"
            assert browser.eval(card) == "unknown"
            assert "does not report when offsets expire" in browser.eval("document.body.textContent")
            shot = tmp_path / "console-cli-group.png"
            browser.screenshot(shot)
            keep_artifact(shot)
            assert not browser.errors
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_bad_input_is_one_line_and_exit_2() -> None:
    for argv, message in ((["--bootstrap-server", "127.0.0.1:1", "--listen", "ftp://x"], "--listen"),
                          ([], "--bootstrap-server")):
        done = subprocess.run([sys.executable, "-m", "offsetd.cli", "console", *argv], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
