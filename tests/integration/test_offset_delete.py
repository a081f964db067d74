"""OffsetDelete (KIP-496, reference §1.4 and §3) through kafka-python's
`KafkaAdminClient.delete_group_offsets` (confluent-kafka's Python binding has no OffsetDelete
call), and DeleteGroups (§1.5) through confluent-kafka's `AdminClient.delete_consumer_groups`,
against the real broker. The broker sweeps every second with the default 7-day retention, so an
Empty group whose last offset was deleted disappears at the next sweep (§1.4: "OffsetDelete never
deletes the group itself. An Empty group left with no offsets is removed by the next expiration
cycle"), while nothing else can expire during the tests."""

from __future__ import annotations

import pytest
from confluent_kafka import (OFFSET_INVALID, Consumer, ConsumerGroupState, KafkaError, KafkaException,
                             TopicPartition)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka import errors as kerrors

from broker_process import BrokerProcess, wait_for
from clients import create_topic
from group_helpers import (GROUP_BROKER, GroupKey, Member, OffsetKey, member_conf, poll_until, read_offsets_log,
                           records_of_group, unique)

BROKER = {**GROUP_BROKER, "offsets.retention.check.interval.ms": "1000"}

TP = tuple[str, int]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("offset-delete") / "data", BROKER).start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture
def kadmin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield admin
    admin.close()


def committed(bootstrap: str, group: str, tps: list[TP]) -> dict[TP, int]:
    """Committed offsets of `group` read by a fresh (never-joining) confluent consumer."""
    consumer = Consumer(member_conf(bootstrap, group))
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=15)}
    finally:
        consumer.close()


def commit_standalone(bootstrap: str, group: str, offsets: dict[TP, int]) -> None:
    consumer = Consumer(member_conf(bootstrap, group))
    try:
        result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                 asynchronous=False)
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()


def listed(bootstrap: str) -> dict[str, ConsumerGroupState]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    result = admin.list_consumer_groups(request_timeout=10).result(15)
    assert not result.errors, result.errors
    return {g.group_id: g.state for g in result.valid}


def offset_tombstones(bootstrap: str, group: str) -> list[TP]:
    """(topic, partition) of every OffsetCommit tombstone of `group` in `__consumer_offsets`."""
    return [(r.key.topic, r.key.partition) for r in records_of_group(read_offsets_log(bootstrap, group), group)
            if isinstance(r.key, OffsetKey) and r.value is None]


def test_unknown_group_is_group_id_not_found(broker, kadmin) -> None:
    """§3 "group unknown": top-level GROUP_ID_NOT_FOUND(69), raised by kafka-python."""
    topic = unique("od-unknown")
    create_topic(broker.bootstrap, topic)
    with pytest.raises(kerrors.GroupIdNotFoundError):
        kadmin.delete_group_offsets(unique("g-nobody"), [KTP(topic, 0)])


def test_active_consumer_group(broker, kadmin) -> None:
    """§3 "non-empty, protocol consumer": every requested partition of the subscribed topic gets
    GROUP_SUBSCRIBED_TO_TOPIC(86) and keeps its offset; the unsubscribed topic's partitions get
    NONE, the committed one is deleted (one tombstone) and the uncommitted one writes nothing; a
    missing partition gets UNKNOWN_TOPIC_OR_PARTITION(3). The group stays Stable."""
    subscribed, other, group = unique("od-sub"), unique("od-other"), unique("g-active")
    create_topic(broker.bootstrap, subscribed, partitions=2)
    create_topic(broker.bootstrap, other, partitions=2)
    member = Member(broker.bootstrap, group, [subscribed], "od-active")
    try:
        poll_until([member], lambda: member.assignment() == {(subscribed, 0), (subscribed, 1)}, timeout=20,
                   message="assigned")
        member.consumer.commit(offsets=[TopicPartition(subscribed, 0, 10), TopicPartition(subscribed, 1, 11),
                                        TopicPartition(other, 0, 20)], asynchronous=False)

        result = kadmin.delete_group_offsets(group, [KTP(subscribed, 0), KTP(subscribed, 1), KTP(other, 0),
                                                     KTP(other, 1), KTP(other, 7)])
        assert result == {
            KTP(subscribed, 0): kerrors.GroupSubscribedToTopicError,
            KTP(subscribed, 1): kerrors.GroupSubscribedToTopicError,
            KTP(other, 0): kerrors.NoError,
            KTP(other, 1): kerrors.NoError,
            KTP(other, 7): kerrors.UnknownTopicOrPartitionError,
        }
        assert committed(broker.bootstrap, group, [(subscribed, 0), (subscribed, 1), (other, 0)]) == {
            (subscribed, 0): 10, (subscribed, 1): 11, (other, 0): OFFSET_INVALID}
        assert offset_tombstones(broker.bootstrap, group) == [(other, 0)]
        assert listed(broker.bootstrap)[group] == ConsumerGroupState.STABLE
        poll_until([member], lambda: True)
        assert not member.errors, member.errors
    finally:
        member.close()


@pytest.mark.parametrize("kind", ["simple group", "consumer group whose members left"])
def test_empty_group(broker, kadmin, kind: str) -> None:
    """§3 "Empty classic": allowed, every partition NONE (86 is impossible: an Empty group
    subscribes to nothing, even a topic its members used to read). OffsetDelete leaves the group;
    once its last offset is deleted, the next expiration sweep (1 s here, with the default 7-day
    retention) removes it from ListGroups."""
    topic, group = unique("od-empty"), unique("g-empty")
    create_topic(broker.bootstrap, topic, partitions=2)
    if kind == "simple group":
        commit_standalone(broker.bootstrap, group, {(topic, 0): 5, (topic, 1): 6})
    else:
        member = Member(broker.bootstrap, group, [topic], "od-empty")
        try:
            poll_until([member], lambda: len(member.assignment()) == 2, timeout=20, message="assigned")
            member.consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)],
                                   asynchronous=False)
        finally:
            member.close()
    wait_for(lambda: listed(broker.bootstrap).get(group) == ConsumerGroupState.EMPTY, message="group Empty")

    assert kadmin.delete_group_offsets(group, [KTP(topic, 0)]) == {KTP(topic, 0): kerrors.NoError}
    assert committed(broker.bootstrap, group, [(topic, 0), (topic, 1)]) == {(topic, 0): OFFSET_INVALID,
                                                                            (topic, 1): 6}
    assert listed(broker.bootstrap).get(group) == ConsumerGroupState.EMPTY  # it still has an offset

    assert kadmin.delete_group_offsets(group, [KTP(topic, 1)]) == {KTP(topic, 1): kerrors.NoError}
    assert committed(broker.bootstrap, group, [(topic, 1)]) == {(topic, 1): OFFSET_INVALID}
    wait_for(lambda: group not in listed(broker.bootstrap), timeout=10,
             message="the Empty group without offsets to be removed by the next sweep")
    group_records = records_of_group(read_offsets_log(broker.bootstrap, group), group)
    assert isinstance(group_records[-1].key, GroupKey) and group_records[-1].value is None
    with pytest.raises(kerrors.GroupIdNotFoundError):  # and OffsetDelete now finds no group
        kadmin.delete_group_offsets(group, [KTP(topic, 0)])


def test_delete_consumer_groups(broker) -> None:
    """§1.5/§3 DeleteGroups through confluent-kafka: a group with an active member →
    NON_EMPTY_GROUP(68) and it keeps everything; a consumer group whose members left → deleted,
    with its offsets; an unknown group → GROUP_ID_NOT_FOUND(69)."""
    topic = unique("od-dg")
    create_topic(broker.bootstrap, topic, partitions=1)
    active, emptied, unknown = unique("g-dg-active"), unique("g-dg-empty"), unique("g-dg-unknown")
    live = Member(broker.bootstrap, active, [topic], "dg-live")
    leaver = Member(broker.bootstrap, emptied, [topic], "dg-leaver")
    try:
        poll_until([live, leaver], lambda: live.assignment() and leaver.assignment(), timeout=20,
                   message="both assigned")
        live.consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        leaver.consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        leaver.close()
        wait_for(lambda: listed(broker.bootstrap).get(emptied) == ConsumerGroupState.EMPTY, message="Empty")

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.delete_consumer_groups([active, emptied, unknown], request_timeout=10)
        with pytest.raises(KafkaException) as non_empty:
            futures[active].result(15)
        assert non_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert futures[emptied].result(15) is None
        with pytest.raises(KafkaException) as not_found:
            futures[unknown].result(15)
        assert not_found.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

        groups = listed(broker.bootstrap)
        assert groups[active] == ConsumerGroupState.STABLE and emptied not in groups
        assert committed(broker.bootstrap, active, [(topic, 0)]) == {(topic, 0): 1}
        assert committed(broker.bootstrap, emptied, [(topic, 0)]) == {(topic, 0): OFFSET_INVALID}
        records = records_of_group(read_offsets_log(broker.bootstrap, emptied), emptied)
        assert [(type(r.key).__name__, r.value is None) for r in records[-2:]] == [("OffsetKey", True),
                                                                                   ("GroupKey", True)]
    finally:
        live.close()
        leaver.close()


def test_topic_deletion_removes_every_groups_offsets(broker) -> None:
    """§2 "Topic or partition deletion": deleting a topic writes tombstones for every group's
    offsets on it at once (no retention wait); other topics keep theirs, and re-creating the topic
    does not bring the old offsets back."""
    doomed, kept = unique("od-doomed"), unique("od-kept")
    create_topic(broker.bootstrap, doomed, partitions=2)
    create_topic(broker.bootstrap, kept, partitions=1)
    simple, emptied = unique("g-td-simple"), unique("g-td-emptied")
    commit_standalone(broker.bootstrap, simple, {(doomed, 0): 1, (doomed, 1): 2, (kept, 0): 3})
    member = Member(broker.bootstrap, emptied, [doomed, kept], "td")
    try:
        poll_until([member], lambda: len(member.assignment()) == 3, timeout=20, message="assigned")
        member.consumer.commit(offsets=[TopicPartition(doomed, 1, 4), TopicPartition(kept, 0, 5)],
                               asynchronous=False)
    finally:
        member.close()
    wait_for(lambda: listed(broker.bootstrap).get(emptied) == ConsumerGroupState.EMPTY, message="Empty")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(15)
    everything = [(doomed, 0), (doomed, 1), (kept, 0)]
    wait_for(lambda: committed(broker.bootstrap, simple, everything) == {
        (doomed, 0): OFFSET_INVALID, (doomed, 1): OFFSET_INVALID, (kept, 0): 3}, message="simple's offsets")
    assert committed(broker.bootstrap, emptied, everything) == {
        (doomed, 0): OFFSET_INVALID, (doomed, 1): OFFSET_INVALID, (kept, 0): 5}
    assert sorted(offset_tombstones(broker.bootstrap, simple)) == [(doomed, 0), (doomed, 1)]
    assert offset_tombstones(broker.bootstrap, emptied) == [(doomed, 1)]

    create_topic(broker.bootstrap, doomed, partitions=2)
    assert committed(broker.bootstrap, simple, [(doomed, 0), (doomed, 1)]) == {
        (doomed, 0): OFFSET_INVALID, (doomed, 1): OFFSET_INVALID}
