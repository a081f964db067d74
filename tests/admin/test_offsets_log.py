"""`offsetd offsets-log dump` against a real broker (through the protocol, with and without
--group, and from the stopped broker's segment files), as a real subprocess, and on crafted
segment files (unknown key versions, transaction markers, corruption, bad arguments).

Expected lines are written out from Kafka's formatter formats (OffsetAndMetadata / GroupMetadata /
MemberMetadata toString) and filled with values decoded by the tests' own hand-written decoder
(integration/group_helpers.py), independent of offsetd's codecs."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from integration.clients import create_topic
from integration.group_helpers import (GROUP_BROKER, GroupKey, LogRecord, Member, OffsetKey, partition_for,
                                       poll_until, raw_offset_commit, read_offsets_log, records_of_group, unique)
from offsetd.admin.offsets_log_cli import main
from offsetd.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, build_batch
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    TopicPartitions,
)
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value

OFFSETD = Path(sys.executable).with_name("offsetd")


# --------------------------------------------------------------------------------------------
# Kafka's formatter lines, from independently decoded records


def kafka_line(record: LogRecord) -> str:
    """What Kafka's OffsetsMessageFormatter / GroupMetadataMessageFormatter print for a record."""
    key, v = record.key, record.value
    if isinstance(key, OffsetKey):
        prefix = f"[{key.group},{key.topic},{key.partition}]::"
        if v is None:
            return prefix + "NULL"
        epoch = f"Optional[{v.leader_epoch}]" if v.leader_epoch >= 0 else "Optional.empty"
        expire = f"Some({v.expire_timestamp})" if v.expire_timestamp >= 0 else "None"
        return (prefix + f"OffsetAndMetadata(offset={v.offset}, leaderEpoch={epoch}, metadata={v.metadata}, "
                f"commitTimestamp={v.commit_timestamp}, expireTimestamp={expire})")
    assert isinstance(key, GroupKey), record
    if v is None:
        return f"{key.group}::NULL"
    members = ", ".join(
        f"{m.member_id} -> MemberMetadata(memberId={m.member_id}, groupInstanceId=None, clientId={m.client_id}, "
        f"clientHost={m.client_host}, sessionTimeoutMs={m.session_timeout}, rebalanceTimeoutMs={m.rebalance_timeout}, "
        f"supportedProtocols=List({v.protocol}), )" for m in v.members)
    protocol_type = f"Some({v.protocol_type})" if v.protocol_type else "None"
    state = "Stable" if v.members else "Empty"
    return (f"{key.group}::GroupMetadata(groupId={key.group}, generation={v.generation}, "
            f"protocolType={protocol_type}, currentState={state}, members=HashMap({members}))")


@dataclass
class Scenario:
    """A broker whose log holds a simple group's and a consumer group's whole life."""

    broker: object
    topic: str
    simple: str
    consumer: str
    records: dict[str, list[LogRecord]]  # group -> its records (hand-decoded)
    partition_records: list[tuple[int, LogRecord]]  # every record of both partitions, in dump order


def _dump(capsys, *argv: str) -> tuple[int, list[str], str]:
    rc = main(["dump", *argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


@pytest.fixture
def scenario(broker_factory) -> Scenario:
    """Simple group: two standalone commits (metadata "meta-ü" with leader epoch 4; "kept" through
    OffsetCommit v2 with a retention time, i.e. value v1 with an expire timestamp), then deleted.
    Consumer group: one member joins (range assignor), commits offset 17 with leader epoch 4,
    leaves, then the group is deleted."""
    broker = broker_factory(GROUP_BROKER)
    topic, simple, consumer = unique("dumped"), unique("gsimple"), unique("gconsumer")
    create_topic(broker.bootstrap, topic, partitions=3)
    assert raw_offset_commit(broker.bootstrap, simple, topic, {0: (42, "meta-ü", 4)}) == {0: 0}
    assert raw_offset_commit(broker.bootstrap, simple, topic, {1: (43, "kept", -1)}, version=2,
                             retention_ms=60_000) == {1: 0}
    member = Member(broker.bootstrap, consumer, [topic], "dump-client",
                    **{"session.timeout.ms": 7000, "max.poll.interval.ms": 20000,
                       "partition.assignment.strategy": "range"})
    try:
        poll_until([member], lambda: member.partitions() == {0, 1, 2}, timeout=15, message="assignment")
        member.consumer.commit(offsets=[TopicPartition(topic, 2, 17, leader_epoch=4)], asynchronous=False)
    finally:
        member.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for group, future in admin.delete_consumer_groups([simple, consumer], request_timeout=10).items():
        future.result(15)

    records = {g: records_of_group(read_offsets_log(broker.bootstrap, g), g) for g in (simple, consumer)}
    partitions = sorted({partition_for(simple), partition_for(consumer)})
    every = [(p, r) for p in partitions for r in read_offsets_log_partition(broker.bootstrap, p, simple, consumer)]
    return Scenario(broker, topic, simple, consumer, records, every)


def read_offsets_log_partition(bootstrap: str, partition: int, *groups: str) -> list[LogRecord]:
    """Every record of one `__consumer_offsets` partition (via a group that lives in it)."""
    group = next(g for g in groups if partition_for(g) == partition)
    return read_offsets_log(bootstrap, group)


def test_scenario_wrote_what_the_expected_lines_assume(scenario):
    """Guard for the tests below: the records the broker wrote are the ones the scenario means."""
    s = scenario
    kinds = [(type(r.key).__name__, r.value is None) for r in s.records[s.simple]]
    assert sorted(kinds) == sorted([("OffsetKey", False), ("OffsetKey", False), ("OffsetKey", True),
                                    ("OffsetKey", True), ("GroupKey", True)])
    consumer_kinds = {(type(r.key).__name__, r.value is None) for r in s.records[s.consumer]}
    assert consumer_kinds == {("GroupKey", False), ("OffsetKey", False), ("OffsetKey", True), ("GroupKey", True)}


def test_dump_one_group_from_the_cluster(scenario, capsys):
    """--group reads only the group's partition and prints only its records, as Kafka formats them."""
    s = scenario
    rc, lines, err = _dump(capsys, "--bootstrap-server", s.broker.bootstrap, "--group", s.simple)
    assert (rc, err) == (0, "")
    first, second = s.records[s.simple][:2]
    ts0, ts1 = first.value.commit_timestamp, second.value.commit_timestamp
    assert lines[:2] == [
        f"[{s.simple},{s.topic},0]::OffsetAndMetadata(offset=42, leaderEpoch=Optional[4], metadata=meta-ü, "
        f"commitTimestamp={ts0}, expireTimestamp=None)",
        f"[{s.simple},{s.topic},1]::OffsetAndMetadata(offset=43, leaderEpoch=Optional.empty, metadata=kept, "
        f"commitTimestamp={ts1}, expireTimestamp=Some({ts1 + 60_000}))",
    ]
    assert lines == [kafka_line(r) for r in s.records[s.simple]]
    assert sorted(lines[2:]) == sorted([f"[{s.simple},{s.topic},0]::NULL", f"[{s.simple},{s.topic},1]::NULL",
                                        f"{s.simple}::NULL"])

    rc, lines, err = _dump(capsys, "--bootstrap-server", s.broker.bootstrap, "--group", s.consumer)
    assert (rc, err) == (0, "")
    assert lines == [kafka_line(r) for r in s.records[s.consumer]]
    member_id = next(r.value.members[0].member_id for r in s.records[s.consumer]
                                  if isinstance(r.key, GroupKey) and r.value is not None and r.value.members)
    assert any(line.startswith(f"{s.consumer}::GroupMetadata(groupId={s.consumer}, generation=1, "
                               f"protocolType=Some(consumer), currentState=Stable, members=HashMap({member_id} -> "
                               f"MemberMetadata(memberId={member_id}, groupInstanceId=None, clientId=dump-client, ")
               and line.endswith("sessionTimeoutMs=7000, rebalanceTimeoutMs=20000, supportedProtocols=List(range), )))")
               for line in lines), lines
    assert f"[{s.consumer},{s.topic},2]::NULL" in lines and lines[-1] == f"{s.consumer}::NULL"


def test_dump_everything_from_the_cluster_then_from_the_files(scenario, capsys):
    """Without --group every partition is read (partition order, then log order); the stopped
    broker's data dir, a partition directory and a segment file give the same lines."""
    s = scenario
    expected = [kafka_line(r) for _, r in s.partition_records]
    rc, lines, err = _dump(capsys, "--bootstrap-server", s.broker.bootstrap)
    assert (rc, lines, err) == (0, expected, "")

    s.broker.stop()
    rc, lines, err = _dump(capsys, "--files", str(s.broker.data_dir))
    assert (rc, lines, err) == (0, expected, "")

    simple_dir = s.broker.data_dir / f"__consumer_offsets-{partition_for(s.simple)}"
    rc, lines, _ = _dump(capsys, "--files", str(simple_dir), "--group", s.simple)
    assert (rc, lines) == (0, [kafka_line(r) for r in s.records[s.simple]])
    rc, lines, _ = _dump(capsys, "--files", str(simple_dir / "00000000000000000000.log"), "--group", s.simple)
    assert (rc, lines) == (0, [kafka_line(r) for r in s.records[s.simple]])


def test_dump_json_has_every_field(scenario, capsys):
    """--output json: one object per line with log position, record type, versions, tombstone
    flag and every value field; the same objects from the cluster and from the files."""
    s = scenario
    rc, lines, _ = _dump(capsys, "--bootstrap-server", s.broker.bootstrap, "--group", s.simple, "--output", "json")
    assert rc == 0
    docs = [json.loads(line) for line in lines]
    first, second = s.records[s.simple][:2]
    log_partition = partition_for(s.simple)
    assert docs[0] == {
        "log_partition": log_partition, "log_offset": first.offset, "timestamp": first.timestamp,
        "record_type": "offset_commit", "key_version": 1, "value_version": 3, "tombstone": False,
        "group": s.simple, "topic": s.topic, "partition": 0, "offset": 42, "leader_epoch": 4,
        "metadata": "meta-ü", "commit_timestamp": first.value.commit_timestamp, "expire_timestamp": None,
    }
    assert (docs[1]["value_version"], docs[1]["leader_epoch"], docs[1]["expire_timestamp"]) == (
        1, None, second.value.commit_timestamp + 60_000)
    tombstones = [d for d in docs if d["tombstone"]]
    assert [(d["record_type"], d.get("offset")) for d in tombstones] == [
        ("offset_commit" if isinstance(r.key, OffsetKey) else "group_metadata", None)
        for r in s.records[s.simple] if r.value is None]
    assert [d["log_offset"] for d in docs] == [r.offset for r in s.records[s.simple]]

    rc, lines, _ = _dump(capsys, "--bootstrap-server", s.broker.bootstrap, "--group", s.consumer, "--output", "json")
    groups = [json.loads(line) for line in lines]
    [joined] = [d for d in groups if d["record_type"] == "group_metadata" and d.get("members")]
    assert (joined["protocol_type"], joined["protocol"], joined["generation"]) == ("consumer", "range", 1)
    [m] = joined["members"]
    assert (m["client_id"], m["subscribed_topics"], m["session_timeout"], m["rebalance_timeout"]) == (
        "dump-client", [s.topic], 7000, 20000)
    assert joined["leader"] == m["member_id"]

    s.broker.stop()
    rc, file_lines, _ = _dump(capsys, "--files", str(s.broker.data_dir), "--group", s.consumer, "--output", "json")
    assert [json.loads(line) for line in file_lines] == groups


def test_dump_as_a_real_subprocess(scenario, capsys):
    """`offsetd offsets-log dump` as installed: the same lines as in-process; bad arguments exit 2."""
    s = scenario
    argv = ["--bootstrap-server", s.broker.bootstrap, "--group", s.consumer]
    proc = subprocess.run([str(OFFSETD), "offsets-log", "dump", *argv], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == [kafka_line(r) for r in s.records[s.consumer]]
    bad = subprocess.run([str(OFFSETD), "offsets-log", "dump", "--output", "xml", *argv],
                         capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.splitlines() == [
        "offsetd offsets-log dump: error: argument --output: invalid choice: 'xml' (choose from 'text', 'json')"]


# --------------------------------------------------------------------------------------------
# Crafted segment files


def _commit(group: str, topic: str, partition: int, offset: int, ts: int) -> tuple[bytes, bytes, int, list]:
    return (encode_key(OffsetCommitKey(group, topic, partition)),
            encode_value(OffsetCommitValue(offset, 2, "", ts)), ts, [])


def _segment(tmp_path: Path, *batches: bytes, partition: int = 7) -> Path:
    directory = tmp_path / f"__consumer_offsets-{partition}"
    directory.mkdir()
    path = directory / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path


def test_unknown_key_versions_and_transaction_markers_are_printed(tmp_path, capsys):
    """Records Kafka's formatters skip: a key version offsetd does not decode (here 17 and 18,
    streams-group records) prints as unknown with its version; a transaction marker prints with its
    producer id."""
    unknown_key, unknown_value = b"\x00\x11\x00\x01g", b"\x00\x00\xab"
    path = _segment(
        tmp_path,
        build_batch([_commit("g", "t", 0, 5, 1000)], base_offset=0),
        build_batch([(unknown_key, unknown_value, 1001, []), (b"\x00\x12\x00\x01g", None, 1002, [])], base_offset=1),
        build_batch([_commit("g", "t", 1, 6, 1003)], base_offset=3, producer_id=7, producer_epoch=0,
                    attributes=TRANSACTIONAL_MASK),
        build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 1004, [])], base_offset=4,
                    producer_id=7, producer_epoch=0, attributes=TRANSACTIONAL_MASK | CONTROL_MASK),
        build_batch([(encode_key(GroupMetadataKey("g")), None, 1005, [])], base_offset=5),
    )
    rc, lines, err = _dump(capsys, "--files", str(path))
    assert (rc, err) == (0, "")
    assert lines == [
        "[g,t,0]::OffsetAndMetadata(offset=5, leaderEpoch=Optional[2], metadata=, commitTimestamp=1000, "
        "expireTimestamp=None)",
        "UnknownKey(version=17)::0000ab",
        "UnknownKey(version=18)::NULL",
        "[g,t,1]::OffsetAndMetadata(offset=6, leaderEpoch=Optional[2], metadata=, commitTimestamp=1003, "
        "expireTimestamp=None)",
        "TransactionMarker(producerId=7)::COMMIT",
        "g::NULL",
    ]
    rc, lines, _ = _dump(capsys, "--files", str(path), "--output", "json")
    docs = [json.loads(line) for line in lines]
    assert [(d["log_partition"], d["log_offset"], d["timestamp"], d["record_type"], d["key_version"], d["tombstone"])
            for d in docs] == [(7, 0, 1000, "offset_commit", 1, False), (7, 1, 1001, "unknown", 17, False),
                               (7, 2, 1002, "unknown", 18, True), (7, 3, 1003, "offset_commit", 1, False),
                               (7, 4, 1004, "txn_marker", None, False), (7, 5, 1005, "group_metadata", 2, True)]
    assert (docs[1]["value"], docs[4]["marker"], docs[4]["producer_id"]) == ("0000ab", "COMMIT", 7)
    rc, lines, _ = _dump(capsys, "--files", str(path), "--group", "g")
    assert len(lines) == 3 and all(line.startswith(("[g,", "g::")) for line in lines)


def test_consumer_group_records_are_decoded(tmp_path, capsys):
    """KIP-848 records (types 3-8, 16) print with their key fields and decoded value, tombstones as
    NULL; JSON names each type and gives every field (topic ids as UUID strings)."""
    topic_id = uuid.UUID(int=0xF00)
    records = [
        (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(3)),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m1"), ConsumerGroupCurrentMemberAssignmentValue(
            3, 2, 0, (TopicPartitions(topic_id, (0, 1)),), ())),
        (ConsumerGroupRegularExpressionKey("g", "rx-.*"), None),
    ]
    path = _segment(tmp_path, build_batch([(encode_key(k), None if v is None else encode_value(v), 1000 + i, [])
                                           for i, (k, v) in enumerate(records)], base_offset=0))
    rc, lines, err = _dump(capsys, "--files", str(path), "--group", "g")
    assert (rc, err) == (0, "")
    assert lines == [
        "ConsumerGroupMetadata[g]::ConsumerGroupMetadataValue(epoch=3)",
        "ConsumerGroupCurrentMemberAssignment[g,m1]::ConsumerGroupCurrentMemberAssignmentValue(member_epoch=3, "
        f"previous_member_epoch=2, state=0, assigned_partitions=[TopicPartitions(topic_id={topic_id}, "
        "partitions=[0, 1])], partitions_pending_revocation=[])",
        "ConsumerGroupRegularExpression[g,rx-.*]::NULL",
    ]
    rc, lines, _ = _dump(capsys, "--files", str(path), "--output", "json")
    docs = [json.loads(line) for line in lines]
    assert [(d["record_type"], d["key_version"], d["tombstone"]) for d in docs] == [
        ("consumer_group_metadata", 3, False), ("consumer_group_current_member_assignment", 8, False),
        ("consumer_group_regular_expression", 16, True)]
    assert docs[1]["member_id"] == "m1" and docs[1]["value"]["assigned_partitions"] == [
        {"topic_id": str(topic_id), "partitions": [0, 1]}]
    assert docs[2]["regular_expression"] == "rx-.*" and docs[2]["value"] is None


def test_corrupt_batch_is_an_error_naming_the_file_and_position(tmp_path, capsys):
    """A batch failing its CRC: the records before it are printed, then one error line naming the
    file and the batch's byte position and offset; exit 1."""
    good = build_batch([_commit("g", "t", 0, 5, 1000)], base_offset=0)
    bad = bytearray(build_batch([_commit("g", "t", 0, 6, 1001)], base_offset=1))
    bad[-3] ^= 0xFF
    path = _segment(tmp_path, good, bytes(bad))
    rc, lines, err = _dump(capsys, "--files", str(path))
    assert rc == 1
    assert lines == ["[g,t,0]::OffsetAndMetadata(offset=5, leaderEpoch=Optional[2], metadata=, "
                     "commitTimestamp=1000, expireTimestamp=None)"]
    assert err.splitlines() == [f"Error: {path}: batch at byte {len(good)} (offset 1) failed its CRC-32C check"]


def test_truncated_batch_is_an_error(tmp_path, capsys):
    good = build_batch([_commit("g", "t", 0, 5, 1000)], base_offset=0)
    path = _segment(tmp_path, good, build_batch([_commit("g", "t", 0, 6, 1001)], base_offset=1)[:-10])
    rc, lines, err = _dump(capsys, "--files", str(path))
    assert (rc, len(lines)) == (1, 1)
    assert err.splitlines() == [f"Error: {path}: incomplete batch at byte {len(good)} ({path.stat().st_size - len(good)} "
                                "trailing bytes)"]


def test_zero_fill_after_the_last_batch_is_fine(tmp_path, capsys):
    path = _segment(tmp_path, build_batch([_commit("g", "t", 0, 5, 1000)]), b"\x00" * 100)
    rc, lines, err = _dump(capsys, "--files", str(path))
    assert (rc, len(lines), err) == (0, 1, "")


def test_malformed_value_of_a_known_key_is_an_error_naming_the_offset(tmp_path, capsys):
    key = encode_key(OffsetCommitKey("g", "t", 0))
    path = _segment(tmp_path, build_batch([(key, b"\x00\x09" + b"\x00" * 20, 1000, [])], base_offset=41))
    rc, lines, err = _dump(capsys, "--files", str(path))
    assert (rc, lines) == (1, [])
    assert err.splitlines() == [f"Error: {path}: record at offset 41: unknown OffsetCommit value version 9"]


@pytest.mark.parametrize("argv, message", [
    ([], "one of the arguments --bootstrap-server --files is required"),
    (["--bootstrap-server", "h:1", "--files", "x"], "argument --files: not allowed with argument --bootstrap-server"),
    (["--files", "/nonexistent/seg.log"], "--files: no such file or directory: /nonexistent/seg.log"),
    (["--files", ".", "--command-config", "c.properties"], "--command-config requires --bootstrap-server"),
    (["--bootstrap-server", "h:1", "--command-config", "/nonexistent.properties"],
     "cannot read --command-config /nonexistent.properties: No such file or directory"),
    (["--bootstrap-server", "h:1", "--timeout", "0"], "--timeout must be a positive number of ms, got 0"),
    (["--bootstrap-server", "h:1", "--output", "yaml"],
     "argument --output: invalid choice: 'yaml' (choose from 'text', 'json')"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["dump", *argv])
    out, err = capsys.readouterr()
    assert (exc.value.code, out) == (2, "")
    assert err.splitlines() == [f"offsetd offsets-log dump: error: {message}"]


def test_missing_action_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "offsetd offsets-log: error: the following arguments are required: dump"]
