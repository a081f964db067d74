"""`offsetd share-groups` against a real broker with confluent-kafka ShareConsumers (reference
share-groups.md §6): listing, the three describe views right after records were accepted, the
NON_EMPTY_GROUP refusals while a consumer is in the group, then, once it left, a reset to the
earliest offset that a new consumer re-reads from, and the deletion of the offsets and the group."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from integration.clients import create_topic
from integration.group_helpers import unique
from offsetd.admin.share_groups_cli import main

BROKER = {"group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000"}


def earliest(bootstrap: str, group: str) -> None:
    """share.auto.offset.reset=earliest for the group (IncrementalAlterConfigs on GROUP)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(15) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **conf: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
    consumer.subscribe([topic])
    return consumer


def run(capsys, bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """`offsetd share-groups --bootstrap-server B ARGV` in-process: (exit status, stdout, stderr)."""
    code = main(["--bootstrap-server", bootstrap, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows(text: str) -> list[list[str]]:
    """The table lines of the output, split on whitespace, header first."""
    return [line.split() for line in text.splitlines() if line.strip()]


def read(consumer: ShareConsumer, count: int, timeout: float = 45.0) -> list[bytes]:
    """Poll until `count` records were read; their values."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count:
        assert time.monotonic() < deadline, f"timed out; {len(values)} read"
        for msg in consumer.poll(0.2):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    return values


def until(capsys, bootstrap: str, argv: tuple[str, ...], check, timeout: float = 30.0) -> str:
    """Run the tool until `check(stdout)` holds; that stdout."""
    deadline = time.monotonic() + timeout
    while True:
        code, out, _ = run(capsys, bootstrap, *argv)
        if code == 0 and check(out):
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.2)


@pytest.fixture
def active(broker_factory):
    """A broker, a 1-partition topic with 10 records all read and accepted by a share consumer
    still in the group: (bootstrap, topic, group, consumer)."""
    broker = broker_factory(BROKER)
    topic, group = unique("sg-t"), unique("sg")
    create_topic(broker.bootstrap, topic, 1)
    earliest(broker.bootstrap, group)
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    consumer = share_consumer(broker.bootstrap, group, topic, **{"client.id": "sg-client"})
    assert len(read(consumer, 10)) == 10
    consumer.commit_sync()  # the implicit acknowledgements: ACCEPT
    yield broker.bootstrap, topic, group, consumer
    consumer.close()


def test_list_and_describe_a_group_with_a_member(capsys, active) -> None:
    bootstrap, topic, group, _ = active
    code, out, _ = run(capsys, bootstrap, "--list")
    assert code == 0 and group in out.split()
    code, out, _ = run(capsys, bootstrap, "--list", "--state", "stable")
    assert code == 0 and [group, "Stable"] in rows(out) and rows(out)[0] == ["GROUP", "STATE"]

    out = until(capsys, bootstrap, ("--describe", "--group", group), lambda o: [group, topic, "0", "10", "0"] in rows(o))
    assert rows(out)[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    produce(bootstrap, topic, [b"late-1", b"late-2", b"late-3"])
    out = until(capsys, bootstrap, ("--describe", "--group", group, "--offsets", "--verbose"),
                lambda o: [group, topic, "0", "0", "10", "3"] in rows(o))
    assert rows(out)[0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]

    code, out, _ = run(capsys, bootstrap, "--describe", "--group", group, "--members")
    assert code == 0
    header, (member,) = rows(out)[0], rows(out)[1:]
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert member[0] == group and member[3:] == ["sg-client", "1", f"{topic}:0"]
    code, out, _ = run(capsys, bootstrap, "--describe", "--group", group, "--state", "--verbose")
    assert code == 0
    assert rows(out)[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    state = rows(out)[1]
    assert state[0] == group and state[3] == "Stable" and state[-1] == "1"

    code, out, _ = run(capsys, bootstrap, "--describe", "--group", group, "--output", "json")
    assert code == 0 and '"start_offset": 10' in out


def test_a_group_with_a_member_refuses_offset_changes_and_deletion(capsys, active) -> None:
    bootstrap, topic, group, _ = active
    code, out, _ = run(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert code == 1 and "NON_EMPTY_GROUP" in out
    code, out, _ = run(capsys, bootstrap, "--delete", "--group", group)
    assert code == 1 and "NON_EMPTY_GROUP" in out
    code, out, _ = run(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                       "--execute")
    assert code == 1 and f"Share group '{group}' is not empty." in out


def test_reset_delete_offsets_and_delete_once_the_group_is_empty(capsys, active) -> None:
    bootstrap, topic, group, consumer = active
    consumer.close()
    until(capsys, bootstrap, ("--describe", "--group", group, "--state"), lambda o: "Empty" in o)

    code, out, _ = run(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                       "--dry-run")
    assert code == 0 and rows(out) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"]]
    for scenario in (("--to-latest",), ("--to-datetime", "2999-01-01T00:00:00.000")):  # none that late: the end
        code, out, _ = run(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:0",
                           *scenario, "--dry-run", "--output", "json")
        assert code == 0 and '"new_offset": 10' in out
    _, out, _ = run(capsys, bootstrap, "--describe", "--group", group)
    assert [group, topic, "0", "10", "0"] in rows(out)  # a dry run changes nothing
    code, out, _ = run(capsys, bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                       "--execute")
    assert code == 0 and [group, topic, "0", "0"] in rows(out)
    _, out, _ = run(capsys, bootstrap, "--describe", "--group", group)
    assert [group, topic, "0", "0", "10"] in rows(out)

    again = share_consumer(bootstrap, group, topic)
    try:
        assert sorted(read(again, 10)) == sorted(f"v{i}".encode() for i in range(10))
    finally:
        again.close()
    until(capsys, bootstrap, ("--describe", "--group", group, "--state"), lambda o: "Empty" in o)

    code, out, _ = run(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert code == 0 and [topic, "Successful"] in rows(out)
    _, out, _ = run(capsys, bootstrap, "--describe", "--group", group)
    assert f"Share group '{group}' has no offset information." in out
    code, out, _ = run(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in out

    code, out, _ = run(capsys, bootstrap, "--delete", "--group", group)
    assert code == 0 and f"Deletion of requested share groups ('{group}') was successful." in out
    _, out, _ = run(capsys, bootstrap, "--list")
    assert group not in out.split()
