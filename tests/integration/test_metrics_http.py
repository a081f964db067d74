"""`metrics.listener` against the real broker process: Prometheus /metrics and the /v1/groups JSON
API, scraped with urllib after real confluent-kafka commits and group membership; the / page and
the /v1/ index."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from broker_process import BrokerProcess, wait_for
from clients import create_topic

RETENTION_MINUTES = 30
RETENTION_MS = RETENTION_MINUTES * 60 * 1000
_METRICS_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with the HTTP endpoint on an ephemeral port; tests use their own groups/topics."""
    if os.environ.get("OFFSETD_TEST_LOG_LEVEL", "INFO") not in ("INFO", "DEBUG"):
        os.environ["OFFSETD_TEST_LOG_LEVEL"] = "INFO"  # the test reads the port from an INFO line
    proc = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", {
        "metrics.listener": "http://127.0.0.1:0",
        "offsets.retention.minutes": str(RETENTION_MINUTES),
        "group.initial.rebalance.delay.ms": "0",
    }).start()
    match = wait_for(lambda: _METRICS_LISTENING.search(proc.log()), message="the metrics listening line")
    proc.metrics_url = match.group(1)
    yield proc
    if proc.alive():
        proc.stop()


def http_get(broker: BrokerProcess, path: str, accept: str | None = None) -> tuple[int, str, bytes]:
    request = urllib.request.Request(broker.metrics_url + path, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def scrape(broker: BrokerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    status, content_type, body = http_get(broker, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def group_json(broker: BrokerProcess, group: str) -> tuple[int, dict]:
    status, content_type, body = http_get(broker, "/v1/groups/" + urllib.parse.quote(group, safe=""))
    assert content_type == "application/json"
    return status, json.loads(body)


def commit_standalone(broker: BrokerProcess, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.commit(offsets=offsets, asynchronous=False)
        assert all(tp.error is None for tp in committed), committed
    finally:
        consumer.close()


def test_all_partitions_are_loaded_and_reported(broker):
    def loaded():
        samples = scrape(broker)
        active = [k for k, v in samples.items()
                  if k[0] == "offsetd_group_coordinator_partition_state" and ("state", "active") in k[1] and v == 1]
        return samples if len(active) == 50 else None

    samples = wait_for(loaded, message="50 active __consumer_offsets partitions")
    load_times = {dict(labels)["partition"] for name, labels in samples
                  if name == "offsetd_group_coordinator_partition_load_time_ms"}
    assert load_times == {str(p) for p in range(50)}
    for name in ("offsetd_group_coordinator_offset_commit_total", "offsetd_group_coordinator_offset_expiration_total",
                 "offsetd_group_coordinator_offset_deletion_total",
                 "offsetd_group_coordinator_group_completed_rebalance_total",
                 "offsetd_group_coordinator_num_offsets"):
        assert (name, ()) in samples, name
    for state in ("Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead"):
        assert ("offsetd_group_coordinator_num_groups", (("state", state),)) in samples


def test_standalone_commit_shows_up_in_metrics_and_json(broker):
    topic, group = unique("metrics-topic"), unique("standalone")
    create_topic(broker.bootstrap, topic, 3)
    wait_for(lambda: group_json(broker, "probe")[0] == 404, message="coordinator loaded")
    before = scrape(broker)
    commits_before = before[("offsetd_group_coordinator_offset_commit_total", ())]
    offsets_before = before[("offsetd_group_coordinator_num_offsets", ())]

    started_ms = time.time_ns() // 1_000_000
    commit_standalone(broker, group, [TopicPartition(topic, p, 100 + p) for p in range(3)])
    finished_ms = time.time_ns() // 1_000_000

    def counted():
        samples = scrape(broker)
        return samples if samples[("offsetd_group_coordinator_offset_commit_total", ())] >= commits_before + 3 else None

    samples = wait_for(counted, message="the commits counted")
    assert samples[("offsetd_group_coordinator_offset_commit_total", ())] == commits_before + 3
    assert samples[("offsetd_group_coordinator_num_offsets", ())] == offsets_before + 3

    status, detail = group_json(broker, group)
    assert status == 200, detail
    assert detail["state"] == "Empty" and detail["protocol_type"] == "" and detail["members"] == []
    assert detail["retention_ms"] == RETENTION_MS
    assert [(o["topic"], o["partition"], o["offset"]) for o in detail["offsets"]] == [
        (topic, p, 100 + p) for p in range(3)]
    for o in detail["offsets"]:  # a standalone group's offsets expire retention after their commit
        assert started_ms - 1000 <= o["commit_timestamp_ms"] <= finished_ms + 1000
        assert o["expires_at_ms"] == o["commit_timestamp_ms"] + RETENTION_MS
    earliest = min(o["expires_at_ms"] for o in detail["offsets"])
    assert detail["earliest_expiry_ms"] == earliest
    assert samples[("offsetd_group_earliest_offset_expiry_timestamp_ms", (("group", group),))] == earliest

    status, _, body = http_get(broker, "/v1/groups")
    assert status == 200
    [row] = [r for r in json.loads(body) if r["group"] == group]
    assert row == {"group": group, "state": "Empty", "protocol_type": "", "members": 0, "offsets": 3,
                   "earliest_expiry_ms": earliest}


def test_subscribed_consumer_group_never_expires_until_it_empties(broker):
    topic, group = unique("metrics-sub"), unique("consumers")
    create_topic(broker.bootstrap, topic, 2)
    rebalances_before = scrape(broker)[("offsetd_group_coordinator_group_completed_rebalance_total", ())]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "metrics-test",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 8)], asynchronous=False)

        status, detail = group_json(broker, group)
        assert status == 200
        assert detail["state"] == "Stable" and detail["protocol_type"] == "consumer"
        assert detail["subscribed_topics"] == [topic]
        [member] = detail["members"]
        assert member["client_id"] == "metrics-test" and member["group_instance_id"] is None
        assert member["client_host"].endswith("127.0.0.1")
        assert [(o["partition"], o["offset"], o["expires_at_ms"]) for o in detail["offsets"]] == [
            (0, 7, None), (1, 8, None)]  # subscribed by a Stable group: never, while that lasts
        assert detail["earliest_expiry_ms"] is None
        samples = scrape(broker)
        assert ("offsetd_group_earliest_offset_expiry_timestamp_ms", (("group", group),)) not in samples
        assert samples[("offsetd_group_coordinator_group_completed_rebalance_total", ())] >= rebalances_before + 1
        assert samples[("offsetd_group_coordinator_num_groups", (("state", "Stable"),))] >= 1
    finally:
        consumer.close()  # LeaveGroup: the group becomes Empty and its retention clock starts
    left_ms = time.time_ns() // 1_000_000

    def emptied():
        status, detail = group_json(broker, group)
        return detail if detail["state"] == "Empty" else None

    detail = wait_for(emptied, message="the group to become Empty")
    times = {o["expires_at_ms"] for o in detail["offsets"]}
    assert len(times) == 1  # an Empty group's offsets expire together, retention after it emptied
    [at] = times
    assert abs(at - (left_ms + RETENTION_MS)) < 5000
    samples = scrape(broker)
    assert samples[("offsetd_group_earliest_offset_expiry_timestamp_ms", (("group", group),))] == at


def test_root_is_a_page_leading_to_the_console_and_the_api_index(broker):
    status, content_type, body = http_get(broker, "/")
    assert status == 200 and content_type == "text/html; charset=utf-8"
    links = re.findall(r'href="([^"]+)"', body.decode())
    assert {"console/", "metrics", "v1/"} <= set(links)
    for link in links:  # every link leads somewhere (relative to /)
        assert http_get(broker, "/" + link)[0] == 200, link
    status, content_type, body = http_get(broker, "/console/")
    assert status == 200 and content_type.startswith("text/html") and b'src="app.js"' in body
    browser_accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    assert http_get(broker, "/", browser_accept)[1].startswith("text/html")


def test_api_index_at_v1_and_for_json_clients_of_root(broker):
    for path, accept in (("/v1/", None), ("/v1", None), ("/", "application/json")):
        status, content_type, body = http_get(broker, path, accept)
        assert status == 200 and content_type == "application/json", (path, accept)
        index = json.loads(body)
        paths = [e["path"] for e in index["endpoints"]]
        assert {"/metrics", "/v1/groups", "/v1/groups/{group}", "/v1/lag", "/v1/topics", "/console/"} <= set(paths)
        assert all(e["answer"] for e in index["endpoints"])
    assert http_get(broker, "/v1/groups")[0] == 200  # a path of the index answers


def test_unknown_group_path_and_method(broker):
    status, body = group_json(broker, unique("nobody"))
    assert status == 404 and body["error"] == "GROUP_ID_NOT_FOUND"
    status, content_type, body = http_get(broker, "/nope")
    assert status == 404
    request = urllib.request.Request(broker.metrics_url + "/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 405 and info.value.headers["Allow"] == "GET"
    host, port = broker.metrics_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")


def test_bad_metrics_listener_stops_start_up_naming_the_key(tmp_path):
    proc = BrokerProcess(tmp_path / "data", {"metrics.listener": "localhost:9404"})
    with pytest.raises(AssertionError, match="exited early"):
        proc.start()
    proc._log.close()
    assert "for configuration metrics.listener" in proc.log()


def test_metrics_listener_is_off_by_default(broker_factory):
    proc = broker_factory()
    assert "metrics listening" not in proc.log()
