"""`offsetd groups` --list, --describe (offsets, members, state; lag and time lag), --delete and
--delete-offsets against a real offsetd process, golden output compared exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker_process import wait_for
from groups_support import commit, committed, make_topic, module_broker, pad, run
from integration.group_helpers import GROUP_BROKER, Member, poll_until, unique

# Retention is checked every 200 ms so a test can push a log start offset forward.
BROKER = {**GROUP_BROKER, "log.retention.check.interval.ms": "200"}
OFFSETS_WIDTHS = [15, 15, 10, 15, 15, 15, 15, 15, 0]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "groups-describe", BROKER)


def test_list_plain_and_with_state_and_type(capsys, broker_factory) -> None:
    b = broker_factory(GROUP_BROKER).bootstrap
    make_topic(b, "t", [3])
    commit(b, "beta", {("t", 0): 1})
    commit(b, "alpha-group-with-a-long-name", {("t", 0): 2})
    assert run(capsys, b, "--list") == (0, "alpha-group-with-a-long-name\nbeta\n", "")
    width = len("alpha-group-with-a-long-name") + 10
    assert run(capsys, b, "--list", "--state", "--type") == (0, "".join(pad(r, [width, 20, 20]) + "\n" for r in [
        ["GROUP", "TYPE", "STATE"], ["alpha-group-with-a-long-name", "Classic", "Empty"],
        ["beta", "Classic", "Empty"]]), "")
    code, out, _ = run(capsys, b, "--list", "--state", "STABLE")
    assert (code, out) == (0, pad(["GROUP", "STATE"], [25, 20]) + "\n")
    code, out, _ = run(capsys, b, "--list", "--output", "json")
    assert json.loads(out) == [{"group": "alpha-group-with-a-long-name", "type": "Classic", "state": "Empty"},
                               {"group": "beta", "type": "Classic", "state": "Empty"}]


def test_describe_empty_group_golden(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("orders"), unique("app")
    make_topic(b, topic, [10, 10, 5])
    commit(b, group, {(topic, 0): 4, (topic, 1): 10})
    code, out, err = run(capsys, b, "--describe", "--group", group)
    tw = len(topic)
    widths = [max(15, len(group)), max(15, tw)] + OFFSETS_WIDTHS[2:]
    assert err == f"\nConsumer group '{group}' has no active members.\n"
    # Committed partitions only (partition 2 has neither a commit nor an owner); lag is exact
    # (no transaction markers: the log end is the latest stable offset).
    assert out == "\n" + "".join(pad(r, widths) + "\n" for r in [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        [group, topic, 0, 4, 10, 6, "-", "-", "-"],
        [group, topic, 1, 10, 10, 0, "-", "-", "-"]])
    assert code == 0


def test_describe_verbose_time_lag_from_the_record_timestamp(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("clicks"), unique("app")
    first = int(time.time() * 1000) - 120_000
    make_topic(b, topic, [10, 4], first_ts_ms=first, step_ms=5_000)
    commit(b, group, {(topic, 0): 3, (topic, 1): 4})
    before = int(time.time() * 1000)
    code, out, _ = run(capsys, b, "--describe", "--group", group, "--output", "json")
    after = int(time.time() * 1000)
    [doc] = json.loads(out)
    p0, p1 = doc["partitions"]
    # The first unconsumed record of partition 0 is offset 3, stamped first + 15 s.
    assert before - (first + 15_000) <= p0["lag_time_ms"] <= after - (first + 15_000)
    assert (p0["lag"], p0["current_offset"], p0["log_end_offset"], p0["log_start_offset"]) == (7, 3, 10, 0)
    assert (p1["lag"], p1["lag_time_ms"]) == (0, 0)  # caught up
    code, out, _ = run(capsys, b, "--describe", "--group", group, "--verbose")
    lines = out.splitlines()
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                "LAG", "LAG-TIME", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[2].split()[:7] == [group, topic, "0", "-", "3", "10", "7"]
    assert lines[2].split()[7].startswith("PT1M") and lines[3].split()[7] == "PT0S"


def test_lag_below_log_start_counts_only_existing_records(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("short"), unique("app")
    now = int(time.time() * 1000)
    # Tiny segments roll after every batch; the five old records fall out of the 10-minute retention.
    make_topic(b, topic, [5], first_ts_ms=now - 3_600_000, config={"retention.ms": "600000", "segment.bytes": "100"})
    make_topic_tail = [{"partition": 0, "value": b"new", "timestamp": now} for _ in range(3)]
    from integration.clients import produce
    for message in make_topic_tail:
        produce(b, topic, [message])
    admin = AdminClient({"bootstrap.servers": b})

    def log_start() -> int:
        return admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})[TopicPartition(topic, 0)].result(10).offset

    wait_for(lambda: log_start() == 5, timeout=15, message="retention to delete the old records")
    commit(b, group, {(topic, 0): 2})
    code, out, _ = run(capsys, b, "--describe", "--group", group, "--output", "json")
    [row] = json.loads(out)[0]["partitions"]
    assert (row["current_offset"], row["log_start_offset"], row["log_end_offset"], row["lag"]) == (2, 5, 8, 3)
    assert 0 <= row["lag_time_ms"] < 60_000  # the first record left is the new one
    code, out, _ = run(capsys, b, "--describe", "--group", group)
    assert out.splitlines()[2].split()[2:6] == ["0", "2", "8", "3"]


def test_partition_without_commit_shows_dash_and_null(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("nocommit"), unique("app")
    make_topic(b, topic, [6, 6])
    member = Member(b, group, [topic], "m1")
    try:
        poll_until([member], lambda: member.partitions() == {0, 1}, message="assignment")
        member.consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        code, out, err = run(capsys, b, "--describe", "--group", group, "--output", "json")
        [doc] = json.loads(out)
        rows = {r["partition"]: r for r in doc["partitions"]}
        assert (rows[0]["lag"], rows[1]["current_offset"], rows[1]["lag"], rows[1]["lag_time_ms"]) == (4, None, None, None)
        assert rows[1]["log_end_offset"] == 6 and rows[1]["client_id"] == "m1"
        code, out, err = run(capsys, b, "--describe", "--group", group)
        assert out.splitlines()[3].split()[2:6] == ["1", "-", "6", "-"]
    finally:
        member.close()


def test_active_group_views_and_refusals(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("live"), unique("app")
    make_topic(b, topic, [5, 5])
    member = Member(b, group, [topic], "client-1")
    try:
        poll_until([member], lambda: member.partitions() == {0, 1}, message="assignment")
        member.consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 1)], asynchronous=False)
        consumer_id = member.consumer.memberid()
        admin = AdminClient({"bootstrap.servers": b})
        host = admin.describe_consumer_groups([group])[group].result(10).members[0].host

        code, out, err = run(capsys, b, "--describe", "--group", group)
        widths = [max(15, len(group)), max(15, len(topic)), 10, 15, 15, 15, max(15, len(consumer_id)), max(15, len(host)), 0]
        assert (code, err) == (0, "")
        assert out == "\n" + "".join(pad(r, widths) + "\n" for r in [
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
            [group, topic, 0, 5, 5, 0, consumer_id, host, "client-1"],
            [group, topic, 1, 1, 5, 4, consumer_id, host, "client-1"]])

        code, out, _ = run(capsys, b, "--describe", "--group", group, "--members")
        mw = [max(15, len(group)), max(15, len(consumer_id)), max(15, len(host)), 15, 15, 0]
        assert out == "\n" + "".join(pad(r, mw) + "\n" for r in [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", ""],
            [group, consumer_id, host, "client-1", 2, ""]])

        code, out, _ = run(capsys, b, "--describe", "--group", group, "--state")
        coordinator = f"{b}  (1)"
        sw = [max(15, len(group)), max(25, len(coordinator)), 20, 20, 0]
        assert out == "\n" + "".join(pad(r, sw) + "\n" for r in [
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [group, coordinator, "range", "Stable", 1]])

        # Refusals: reset of an active group, deleting it, deleting offsets of a subscribed topic.
        code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--to-earliest", "--all-topics", "--execute")
        gw, tw = max(15, len(group)), 15
        assert (code, out) == (1, f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the "
                                  f"current state is Stable.\n\n" + pad(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                                                      [gw, tw, 10, 0]) + "\n")
        code, out, _ = run(capsys, b, "--delete", "--group", group)
        assert (code, out) == (1, "\nError: Deletion of some consumer groups failed:\n"
                                  f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.\n")
        code, out, _ = run(capsys, b, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
        message = "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."
        assert (code, out) == (1, "\nError: Encountered some partition-level error, see the follow-up details.\n\n"
                                  + pad(["TOPIC", "PARTITION", "STATUS"], [max(15, len(topic)), 10, 15]) + "\n"
                                  + pad([topic, 0, f"Error: {message}"], [max(15, len(topic)), 10, 15]) + "\n")
        assert committed(b, group) == {(topic, 0): 5, (topic, 1): 1}
    finally:
        member.close()
    code, _, err = run(capsys, b, "--describe", "--group", group)
    assert err == f"\nConsumer group '{group}' has no active members.\n"


def test_missing_group(capsys, broker) -> None:
    b = broker.bootstrap
    assert run(capsys, b, "--describe", "--group", "no-such-group") == (
        1, "\nError: Consumer group 'no-such-group' does not exist.\n", "")
    code, out, err = run(capsys, b, "--describe", "--group", "no-such-group", "--state", "--output", "json")
    assert code == 1 and err == "\nError: Consumer group 'no-such-group' does not exist.\n"
    assert json.loads(out)[0]["error"] == "Consumer group 'no-such-group' does not exist."


def test_delete_offsets_result_table(capsys, broker) -> None:
    b, t, u, group = broker.bootstrap, unique("t"), unique("u"), unique("app")
    make_topic(b, t, [3, 3])
    make_topic(b, u, [3])
    commit(b, group, {(t, 0): 1, (t, 1): 2, (u, 0): 3})
    code, out, err = run(capsys, b, "--delete-offsets", "--group", group, "--topic", t, "--topic", "missing-topic")
    w = [max(15, len(t)), 10, 15]
    assert out == (f"Request succeeded for deleting offsets from group {group}.\n\n" + "".join(pad(r, w) + "\n" for r in [
        ["TOPIC", "PARTITION", "STATUS"],
        ["missing-topic", "-", "Error: This server does not host this topic-partition."],
        [t, 0, "Successful"], [t, 1, "Successful"]]))
    assert code == 1  # one topic failed
    assert committed(b, group) == {(u, 0): 3}
    code, out, _ = run(capsys, b, "--delete-offsets", "--group", group, "--topic", f"{u}:0", "--output", "json")
    assert code == 0
    assert json.loads(out) == {"group": group, "error": None, "message": None, "partitions": [
        {"topic": u, "partition": 0, "status": "Successful", "error": None}]}
    code, out, _ = run(capsys, b, "--delete-offsets", "--group", unique("nobody"), "--topic", f"{u}:0")
    assert (code, out.splitlines()[:2]) == (1, ["", "Error: The group id does not exist."])


def test_delete_groups(capsys, broker) -> None:
    b, topic = broker.bootstrap, unique("t")
    g1, g2 = unique("a"), unique("b")
    make_topic(b, topic, [1])
    commit(b, g1, {(topic, 0): 1})
    commit(b, g2, {(topic, 0): 1})
    assert run(capsys, b, "--delete", "--group", g1, "--group", g2) == (
        0, f"Deletion of requested consumer groups ('{g1}', '{g2}') was successful.\n", "")
    assert committed(b, g1) == {}
    code, out, _ = run(capsys, b, "--delete", "--group", g1, "--output", "json")
    assert (code, json.loads(out)) == (1, {"deleted": [], "failed": [
        {"group": g1, "error": "GROUP_ID_NOT_FOUND: The group id does not exist."}]})


def test_real_command_matches_in_process_output(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("sub"), unique("app")
    make_topic(b, topic, [4])
    commit(b, group, {(topic, 0): 1})
    expected = run(capsys, b, "--describe", "--group", group)
    done = subprocess.run([sys.executable, "-m", "offsetd.cli", "groups", "--bootstrap-server", b, "--describe",
                           "--group", group], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == expected
    bad = subprocess.run([sys.executable, "-m", "offsetd.cli", "groups", "--bootstrap-server", b, "--reset-offsets",
                          "--group", group, "--topic", "x:y", "--to-earliest"], capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        2, "", "offsetd groups: Invalid partition 'y' specified in topic arg 'x:y'\n")


def test_describe_health_is_wired(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("h"), unique("app")
    make_topic(b, topic, [5, 5])
    commit(b, group, {(topic, 0): 5, (topic, 1): 5})
    code, out, _ = run(capsys, b, "--describe", "--group", group, "--health", "--output", "json")
    [doc] = json.loads(out)
    assert (code, doc["group"], doc["status"], doc["total_lag"], doc["partition_count"]) == (0, group, "OK", 0, 2)
    code, out, _ = run(capsys, b, "--describe", "--group", group, "--health")
    assert code == 0 and f"{group}" in out and "OK" in out
    code, _, _ = run(capsys, b, "--describe", "--group", unique("nobody"), "--health")
    assert code == 1


# The consumer protocol (KIP-848) with heartbeats short enough for a test (Kafka's bounds, lowered).
CONSUMER_PROTOCOL_BROKER = {**GROUP_BROKER, "group.consumer.min.heartbeat.interval.ms": "300",
                            "group.consumer.heartbeat.interval.ms": "300"}


def test_consumer_group_type_epochs_and_target_assignment(capsys, broker_factory) -> None:
    b = broker_factory(CONSUMER_PROTOCOL_BROKER).bootstrap
    topic, group, classic = unique("cp"), unique("cg"), unique("classic")
    make_topic(b, topic, [3, 3])
    commit(b, classic, {(topic, 0): 1})
    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "group.protocol": "consumer",
                         "client.id": "cp-client", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        def assigned() -> bool:
            consumer.poll(0.1)  # polling drives the heartbeats
            return len(consumer.assignment()) == 2

        wait_for(assigned, timeout=30, message="both partitions assigned")
        member_id = consumer.memberid()

        code, out, _ = run(capsys, b, "--list", "--type")
        assert code == 0 and {tuple(line.split()) for line in out.splitlines()} >= {
            ("GROUP", "TYPE"), (group, "Consumer"), (classic, "Classic")}

        def state() -> list[str]:
            code, out, _ = run(capsys, b, "--describe", "--group", group, "--state", "--verbose")
            lines = out.splitlines()
            assert code == 0 and lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                                      "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
            return lines[2].split()

        wait_for(lambda: state()[4] == "Stable", timeout=30, message="a stable group")
        _, _, _, strategy, _, group_epoch, target_epoch, members = state()
        assert (strategy, members) == ("uniform", "1") and int(group_epoch) >= 1 and target_epoch == group_epoch

        code, out, _ = run(capsys, b, "--describe", "--group", group, "--members", "--verbose")
        lines = out.splitlines()
        assert code == 0 and lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                                  "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                                  "TARGET-ASSIGNMENT"]
        row = lines[2].split()
        assert row[:2] == [group, member_id] and row[3:] == [
            "cp-client", "2", group_epoch, f"{topic}:0,1", group_epoch, f"{topic}:0,1"]

        code, out, _ = run(capsys, b, "--describe", "--group", group, "--members", "--verbose", "--output", "json")
        [doc] = json.loads(out)
        [member] = doc["members"]
        assert (member["member_epoch"], member["target_assignment_epoch"], member["upgraded"]) == (
            int(group_epoch), int(group_epoch), True)
        assert member["target_assignment"] == member["assignment"] == [
            {"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]

        # a classic group keeps `-` for what it does not have
        code, out, _ = run(capsys, b, "--describe", "--group", classic, "--state", "--verbose")
        assert out.splitlines()[2].split()[-3:] == ["-", "-", "0"]
    finally:
        consumer.close()
