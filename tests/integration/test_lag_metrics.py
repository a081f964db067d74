"""Lag from the broker itself, against a real broker and real clients: after confluent-kafka and
kafka-python consumers commit, every kafka_exporter / kafka-lag-exporter series on /metrics equals
what `offsetd groups --describe --verbose --output json` prints; the expiry countdown equals the
/v1/groups/{group} answer; transaction markers are not lag; and the built-in alert rules post
their JSON to a webhook (a real HTTP server in the test) when a consumer falls behind."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from broker_process import BrokerProcess, wait_for
from clients import create_topic

_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")
RETENTION_MINUTES = 60


class Webhook:
    """A real HTTP server collecting the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        received: list[dict] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.received = received
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    hook = Webhook()
    broker = BrokerProcess(tmp_path_factory.mktemp("lag") / "data", {
        "metrics.listener": "http://127.0.0.1:0", "offsets.retention.minutes": str(RETENTION_MINUTES),
        "lag.alert.lag.threshold": "500", "lag.alert.for.ms": "0", "lag.alert.interval.ms": "200",
        "lag.alert.groups.include": "alerting-.*", "lag.alert.webhook.url": hook.url}).start()
    try:
        broker.metrics_url = wait_for(lambda: _LISTENING.search(broker.log()), message="metrics listening").group(1)
        yield broker, hook
    finally:
        broker.stop()
        hook.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"v{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def samples(broker: BrokerProcess) -> dict[str, dict[tuple, float]]:
    """/metrics parsed by prometheus_client's text parser: family -> {labels: value}."""
    with urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def describe(broker: BrokerProcess, group: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "offsetd.cli", "groups", "--bootstrap-server", broker.bootstrap,
                          "--describe", "--verbose", "--group", group, "--output", "json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    document = json.loads(out)
    return (document[0] if isinstance(document, list) else document)["partitions"]


def of_group(family: dict[tuple, float], label: str, group: str) -> dict[tuple[str, int], float]:
    """A per-partition family's samples of one group, by (topic, partition)."""
    return {(dict(k)["topic"], int(dict(k)["partition"])): v for k, v in family.items() if dict(k).get(label) == group}


def test_every_lag_series_equals_the_cli(world) -> None:
    broker, _ = world
    topic, group, simple = unique("orders"), unique("billing"), unique("legacy")
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 50, 3)
    # a subscribed confluent-kafka consumer reads some and commits; it stays in the group
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        wait_for(lambda: consumer.poll(0.2) is not None and consumer.assignment(), timeout=30,
                 message="an assignment")
        consumer.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 50),
                                 TopicPartition(topic, 2, 0)], asynchronous=False)
        # kafka-python with an old protocol version commits for a standalone group
        old = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=simple, enable_auto_commit=False,
                                  api_version=(0, 10, 2))
        old.commit({kafka.TopicPartition(topic, 1): kafka.OffsetAndMetadata(20, "", -1)})
        old.close()

        rows = describe(broker, group)
        got = samples(broker)
        assert of_group(got["kafka_consumergroup_current_offset"], "consumergroup", group) == {
            (r["topic"], r["partition"]): r["current_offset"] for r in rows}
        assert of_group(got["kafka_consumergroup_lag"], "consumergroup", group) == {
            (r["topic"], r["partition"]): r["lag"] for r in rows} == {(topic, 0): 40, (topic, 1): 0, (topic, 2): 50}
        assert of_group(got["kafka_consumergroup_group_lag"], "group", group) == {
            (r["topic"], r["partition"]): r["lag"] for r in rows}
        ends = {(dict(k)["topic"], int(dict(k)["partition"])): v
                for k, v in got["kafka_topic_partition_current_offset"].items()}
        assert {(r["topic"], r["partition"]): r["log_end_offset"] for r in rows} == {
            tp: ends[tp] for tp in ((topic, 0), (topic, 1), (topic, 2))}
        # time lag: the first unconsumed record's age, the CLI's LAG-TIME a moment apart
        seconds = of_group(got["kafka_consumergroup_group_lag_seconds"], "group", group)
        for r in rows:
            assert seconds[(r["topic"], r["partition"])] == pytest.approx(r["lag_time_ms"] / 1000, abs=2.0)
        assert seconds[(topic, 1)] == 0
        # the member the partition is assigned to is on kafka-lag-exporter's labels
        member_labels = {dict(k)["consumer_id"] for k in got["kafka_consumergroup_group_lag"] if dict(k)["group"] == group}
        assert len(member_labels) == 1 and member_labels != {""}
        # per-group families
        assert got["kafka_consumergroup_members"][(("consumergroup", group),)] == 1
        assert got["kafka_consumergroup_lag_sum"][(("consumergroup", group), ("topic", topic))] == 90
        assert got["offsetd_consumergroup_state"][(("consumergroup", group), ("state", "Stable"))] == 1
        # the old client's standalone group: lag, and (no subscription) an expiry countdown that
        # equals the JSON API's expiry time
        assert of_group(got["kafka_consumergroup_lag"], "consumergroup", simple) == {(topic, 1): 30}
        with urllib.request.urlopen(f"{broker.metrics_url}/v1/groups/{simple}", timeout=10) as response:
            detail = json.loads(response.read())
        left = got["offsetd_consumergroup_offsets_expire_seconds"][(("consumergroup", simple),)]
        assert left == pytest.approx(detail["earliest_expiry_ms"] / 1000 - time.time(), abs=5)
        assert RETENTION_MINUTES * 60 - 30 < left <= RETENTION_MINUTES * 60  # from the commit a moment ago
        assert (("consumergroup", group),) not in got.get("offsetd_consumergroup_offsets_expire_seconds", {})
    finally:
        consumer.close()


def test_transaction_markers_are_not_lag(world) -> None:
    broker, _ = world
    topic, group = unique("txn"), unique("reader")
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"x", partition=0)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 11)], asynchronous=False)  # past the marker
    consumer.close()
    got = samples(broker)
    assert of_group(got["kafka_consumergroup_lag"], "consumergroup", group) == {(topic, 0): 0}
    assert describe(broker, group)[0]["lag"] == 0


def test_a_lagging_group_fires_the_webhook_and_resolves_when_it_catches_up(world) -> None:
    broker, hook = world
    topic, group, quiet = unique("alerts"), unique("alerting"), unique("ignored")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 800, 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 100)], asynchronous=False)
    other = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": quiet, "enable.auto.commit": False})
    other.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # lags too, but not included
    other.close()
    fired = wait_for(lambda: [e for e in hook.received if e["group"] == group], timeout=15, message="the webhook")
    assert fired[0] == {"status": "firing", "rule": "lag", "group": group, "value": 700, "threshold": 500,
                        "unit": "records", "at_ms": fired[0]["at_ms"], "since_ms": fired[0]["since_ms"],
                        "source": "broker 1"}
    assert samples(broker)["offsetd_lag_alert_firing"][(("consumergroup", group), ("rule", "lag"))] == 1
    consumer.commit(offsets=[TopicPartition(topic, 0, 800)], asynchronous=False)
    consumer.close()
    resolved = wait_for(lambda: [e for e in hook.received if e["group"] == group and e["status"] == "resolved"],
                        timeout=15, message="the resolved event")
    assert resolved[0]["value"] == 0
    assert "lag alert FIRING: lag of group" in broker.log()
    assert not [e for e in hook.received if e["group"] == quiet]


def test_the_group_filter_and_a_kept_look_follow_commits_and_appends(tmp_path) -> None:
    """metrics.group.filter: only matching groups have per-group series, every group is counted;
    between two scrapes a commit and an append show up (the look keeps unchanged rows only)."""
    broker = BrokerProcess(tmp_path / "data", {"metrics.listener": "http://127.0.0.1:0",
                                                "metrics.group.filter": "kept-.*"}).start()
    try:
        broker.metrics_url = wait_for(lambda: _LISTENING.search(broker.log()), message="metrics listening").group(1)
        topic, kept, other = unique("filtered"), unique("kept"), unique("other")
        create_topic(broker.bootstrap, topic, 2)
        produce(broker.bootstrap, topic, 30, 2)
        for group, offset in ((kept, 10), (other, 5)):
            client = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                                         api_version=(0, 10, 2))
            client.commit({kafka.TopicPartition(topic, 0): kafka.OffsetAndMetadata(offset, "", -1)})
            client.close()
        got = samples(broker)
        assert of_group(got["kafka_consumergroup_lag"], "consumergroup", kept) == {(topic, 0): 20}
        assert not of_group(got["kafka_consumergroup_lag"], "consumergroup", other)
        assert {dict(k)["group"] for k in got["offsetd_group_earliest_offset_expiry_timestamp_ms"]} == {kept}
        assert got["offsetd_group_coordinator_num_groups"][(("state", "Empty"),)] == 2
        produce(broker.bootstrap, topic, 5, 1)  # partition 0's end moves to 35 ...
        client = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=kept, enable_auto_commit=False,
                                     api_version=(0, 10, 2))
        client.commit({kafka.TopicPartition(topic, 1): kafka.OffsetAndMetadata(25, "", -1)})  # ... and a commit
        client.close()
        got = samples(broker)
        assert of_group(got["kafka_consumergroup_lag"], "consumergroup", kept) == {(topic, 0): 25, (topic, 1): 5}
    finally:
        broker.stop()
