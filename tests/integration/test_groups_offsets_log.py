"""`__consumer_offsets` as any Kafka tool sees it: an internal, compacted topic of 50 partitions;
a plain consumer fetching partition `hash(group) % 50` finds byte-exact OffsetCommit and
GroupMetadata records, decoded here by hand from the reference layouts (reference §1.1, §1.5,
§1.6, §1.9, §4.1-§4.7)."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from clients import create_topic
from group_helpers import (GROUP_BROKER, OFFSETS_TOPIC, GroupKey, GroupValue, Member, OffsetKey, OffsetValue,
                           decode_assignment, decode_subscription_topics, java_string_hashcode, partition_for,
                           poll_until, raw_metadata, raw_offset_commit, read_offsets_log, records_of_group, unique)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _kstring(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


@pytest.mark.parametrize("group, hashcode, partition", [
    ("", 0, 0), ("my-group", -1906497762, 12), ("test-group", 627841412, 12),
    ("console-consumer-12345", 158455506, 6), ("polygenelubricants", -2147483648, 0),
    ("\U0001F600grp", 1276929186, 36)])
def test_group_partition_helper_matches_reference_vectors(group, hashcode, partition):
    """§4.3 test vectors for this file's own hash helper (Java String.hashCode over UTF-16 units,
    Kafka Utils.abs), which the record tests below rely on to pick the partition."""
    assert java_string_hashcode(group) == hashcode
    assert partition_for(group) == partition


def test_offsets_topic_is_internal_compacted_with_50_partitions(broker):
    """§4.1 / issue 3: `__consumer_offsets` exists from start-up, is listed as internal in Metadata
    with 50 partitions (offsets.topic.num.partitions default), and has cleanup.policy=compact."""
    [topic] = raw_metadata(broker.bootstrap, [OFFSETS_TOPIC])
    assert int(topic.error_code.value) == 0
    assert topic.is_internal is True
    assert sorted(p.partition_index for p in topic.partitions) == list(range(50))

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_topics(TopicCollection([OFFSETS_TOPIC]), request_timeout=10)[OFFSETS_TOPIC].result(15)
    assert described.is_internal is True
    assert len(described.partitions) == 50
    [config_future] = admin.describe_configs([ConfigResource("topic", OFFSETS_TOPIC)]).values()
    assert config_future.result(15)["cleanup.policy"].value == "compact"


def test_offsets_topic_partition_count_follows_config(broker_factory):
    """§4.1: offsets.topic.num.partitions sets the partition count at creation."""
    broker = broker_factory({**GROUP_BROKER, "offsets.topic.num.partitions": "7"})
    [topic] = raw_metadata(broker.bootstrap, [OFFSETS_TOPIC])
    assert topic.is_internal is True
    assert sorted(p.partition_index for p in topic.partitions) == list(range(7))


def test_standalone_commit_records_byte_exact(broker_factory):
    """§4.2/§4.4/§4.5: a standalone commit writes, in partition hash(group) % 50, one record per
    partition: key v1 (group, topic, partition) and value v3 (offset, leader epoch, metadata,
    commit timestamp), CREATE_TIME timestamped; an OffsetCommit v2 with RetentionTimeMs writes
    value v1 with expireTimestamp = commit time + retention (§1.1 step 11), and v2-v4 with -1
    writes v3. §1.1 step 7: a simple group gets no GroupMetadata value record."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("logged"), unique("gsimple-log")
    create_topic(broker.bootstrap, topic, partitions=3)
    before = _now_ms()
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (42, "meta-ü", 4)}) == {0: 0}
    assert raw_offset_commit(broker.bootstrap, group, topic, {1: (43, "kept", -1)}, version=2,
                             retention_ms=60_000) == {1: 0}
    assert raw_offset_commit(broker.bootstrap, group, topic, {2: (44, None, -1)}, version=4,
                             retention_ms=-1) == {2: 0}
    after = _now_ms()

    records = records_of_group(read_offsets_log(broker.bootstrap, group), group)
    assert [type(r.key) for r in records] == [OffsetKey, OffsetKey, OffsetKey], records  # no GroupMetadata
    first, second, third = records

    assert first.raw_key == b"\x00\x01" + _kstring(group) + _kstring(topic) + struct.pack(">i", 0)
    ts = struct.unpack(">q", first.raw_value[-8:])[0]
    assert before <= ts <= after
    assert first.raw_value == struct.pack(">hqi", 3, 42, 4) + _kstring("meta-ü") + struct.pack(">q", ts)
    assert first.timestamp_type == TIMESTAMP_CREATE_TIME and before <= first.timestamp <= after

    assert second.key == OffsetKey(1, group, topic, 1)
    assert second.value.version == 1 and second.value.offset == 43 and second.value.metadata == "kept"
    assert before <= second.value.commit_timestamp <= after
    assert second.value.expire_timestamp - second.value.commit_timestamp == 60_000

    assert third.key == OffsetKey(1, group, topic, 2)
    assert third.value == OffsetValue(3, 44, -1, "", third.value.commit_timestamp, -1)  # null metadata -> ""


def test_consumer_group_records_commit_leave_delete(broker_factory):
    """A confluent-kafka group's life in its `__consumer_offsets` partition, decoded by hand:
    §1.6/§4.7 the new group's first record is the empty GroupMetadata (generation 0, no protocol);
    §1.7 the leader's SyncGroup writes GroupMetadata v3 with protocol type/name, leader, state
    timestamp and the member (ids, client, timeouts, subscription, assignment); §1.1 a commit
    writes OffsetCommit key v1/value v3; §1.9 the last member leaving writes GroupMetadata with the
    next generation and no members; §1.5 DeleteGroups writes the offset tombstones, then the group
    tombstone."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("glog"), unique("glife")
    create_topic(broker.bootstrap, topic, partitions=3)
    before = _now_ms()
    member = Member(broker.bootstrap, group, [topic], "log-client",
                    **{"session.timeout.ms": 7000, "max.poll.interval.ms": 20000,
                       "partition.assignment.strategy": "range"})
    try:
        poll_until([member], lambda: member.partitions() == {0, 1, 2}, timeout=15, message="assignment")
        member_id = member.consumer.memberid()
        member.consumer.commit(offsets=[TopicPartition(topic, 1, 17, metadata="m", leader_epoch=4)],
                               asynchronous=False)
        after_commit = _now_ms()
    finally:
        member.close()

    records = records_of_group(read_offsets_log(broker.bootstrap, group), group)
    groups = [r for r in records if isinstance(r.key, GroupKey)]
    assert groups and all(r.key == GroupKey(2, group) for r in groups)
    assert all(r.value is not None and r.value.version == 3 for r in groups)

    empty = groups[0].value
    assert (empty.protocol_type, empty.generation, empty.protocol, empty.leader) == ("", 0, None, None)
    assert empty.members == []
    assert before <= empty.current_state_timestamp <= after_commit

    commits = [r for r in records if isinstance(r.key, OffsetKey)]
    assert len(commits) == 1
    commit = commits[0]
    assert commit.key == OffsetKey(1, group, topic, 1)
    assert (commit.value.version, commit.value.offset, commit.value.leader_epoch) == (3, 17, 4)
    # confluent-kafka-python sends metadata with a trailing NUL byte (strlen + 1)
    assert commit.value.metadata.rstrip("\x00") == "m"
    assert before <= commit.value.commit_timestamp <= after_commit

    stable = [r for r in groups if r.value.members and r.offset < commit.offset]
    assert stable, [r.value for r in groups]
    value: GroupValue = stable[-1].value
    assert value.protocol_type == "consumer" and value.protocol == "range"
    assert value.generation >= 1 and value.leader == member_id
    assert before <= value.current_state_timestamp <= after_commit
    [m] = value.members
    assert m.member_id == member_id and m.group_instance_id is None
    assert m.client_id == "log-client" and "127.0.0.1" in m.client_host
    assert (m.rebalance_timeout, m.session_timeout) == (20000, 7000)
    assert decode_subscription_topics(m.subscription) == [topic]
    assert decode_assignment(m.assignment) == {topic: [0, 1, 2]}

    left = groups[-1]
    assert left.offset > commit.offset
    assert (left.value.generation, left.value.members, left.value.leader) == (value.generation + 1, [], None)
    assert left.value.protocol_type == "consumer"

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
    tail = records_of_group(read_offsets_log(broker.bootstrap, group), group)[len(records):]
    assert [(type(r.key), r.value) for r in tail] == [(OffsetKey, None), (GroupKey, None)]
    assert tail[0].key == OffsetKey(1, group, topic, 1)
