"""`offsetd lag` and the admin clients' look at lag (admin/lag_source.py) against a real broker, as
they would run against any Kafka cluster: the look equals `offsetd groups --describe --verbose`,
`--once` exits 1 with the firing alert as a JSON line, the daemon posts to a webhook and bad
input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from broker_process import wait_for
from clients import create_topic
from integration.test_lag_metrics import Webhook, describe

from offsetd.admin.cluster import Cluster
from offsetd.admin.lag_source import AdminLagSource


def lagging_group(bootstrap: str, records: int, committed: int) -> tuple[str, str]:
    topic, group = f"cli-{uuid.uuid4().hex[:8]}", f"cli-group-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, committed), TopicPartition(topic, 1, records // 2)],
                    asynchronous=False)
    consumer.close()
    return topic, group


def lag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offsetd.cli", "lag", *argv], capture_output=True, text=True,
                          timeout=60)


def test_admin_look_equals_the_cli(shared_broker) -> None:
    topic, group = lagging_group(shared_broker.bootstrap, 100, 20)
    cluster = Cluster({"bootstrap.servers": shared_broker.bootstrap}, 10)
    try:
        look = AdminLagSource(cluster).take()
    finally:
        cluster.close()
    (mine,) = [g for g in look.groups if g.group == group]
    assert {(p.topic, p.partition): (p.committed, p.log_end, p.lag) for p in mine.partitions} == {
        (r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
        for r in describe(shared_broker, group)} == {(topic, 0): (20, 50, 30), (topic, 1): (50, 50, 0)}
    assert mine.total_lag == 30 and mine.max_time_lag_ms is not None and mine.state == "Empty"


def test_once_reports_the_firing_alert_and_exits_1(shared_broker) -> None:
    _, group = lagging_group(shared_broker.bootstrap, 100, 0)
    done = lag("--bootstrap-server", shared_broker.bootstrap, "--once", "--output", "json",
               "--set", "lag.alert.lag.threshold=40", "--set", f"lag.alert.groups.include={group}")
    assert done.returncode == 1, done.stderr
    (event,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert {k: event[k] for k in ("status", "rule", "group", "value", "threshold")} == {
        "status": "firing", "rule": "lag", "group": group, "value": 50, "threshold": 40}
    calm = lag("--bootstrap-server", shared_broker.bootstrap, "--once",
               "--set", "lag.alert.lag.threshold=1000", "--set", f"lag.alert.groups.include={group}")
    assert (calm.returncode, calm.stdout) == (0, "")


def test_daemon_posts_to_the_webhook(shared_broker, tmp_path) -> None:
    _, group = lagging_group(shared_broker.bootstrap, 60, 0)
    hook = Webhook()
    config = tmp_path / "alerts.properties"
    config.write_text(f"# a server.properties works too: other keys are ignored\nlog.dirs=/nowhere\n"
                      f"lag.alert.time.lag.threshold.ms=1\nlag.alert.for.ms=0\nlag.alert.interval.ms=200\n"
                      f"lag.alert.groups.include={group}\nlag.alert.webhook.url={hook.url}\n")
    proc = subprocess.Popen([sys.executable, "-m", "offsetd.cli", "lag", "--bootstrap-server",
                             shared_broker.bootstrap, "--config", str(config)], stdout=subprocess.PIPE, text=True)
    try:
        (event,) = wait_for(lambda: hook.received, timeout=30, message="the webhook")
        assert (event["status"], event["rule"], event["group"], event["unit"]) == ("firing", "time_lag", group, "seconds")
        assert event["source"] == shared_broker.bootstrap
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        hook.close()
    assert proc.returncode == 0 and f"lag alert FIRING: time_lag of group '{group}'" in out


def test_bad_input_is_one_line_and_exit_2(shared_broker) -> None:
    for argv, message in ((["--set", "lag.alert.lag.threshold=zero"], "lag.alert.lag.threshold"),
                          (["--set", "log.dirs=/x"], "expected lag.alert.KEY=VALUE"),
                          ([], "no rule is set"),
                          (["--set", "lag.alert.nonsense=1"], "unknown key")):
        done = lag("--bootstrap-server", shared_broker.bootstrap, *argv)
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
