"""Group administration through confluent-kafka's AdminClient (ListGroups with a state filter,
DescribeGroups, DeleteGroups, OffsetFetch for a group), checked against the reference's results
(reference §1.3, §1.5, §1.10, §3)."""

from __future__ import annotations

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError,
                             KafkaException, TopicPartition)
from confluent_kafka.admin import AdminClient

from clients import create_topic
from group_helpers import (GROUP_BROKER, Member, balanced, member_conf, poll_until, raw_describe_groups,
                           raw_offset_fetch, unique)


def _listed(admin: AdminClient, states=None) -> dict[str, tuple]:
    kwargs = {"states": states} if states is not None else {}
    result = admin.list_consumer_groups(request_timeout=10, **kwargs).result(15)
    assert not result.errors, result.errors
    return {g.group_id: (g.state, g.is_simple_consumer_group) for g in result.valid}


@pytest.fixture
def two_groups(broker_factory):
    """An active group (2 confluent members, range, 4 partitions, member 0 committed its partitions)
    and an offsets-only (simple) group, on one broker."""
    broker = broker_factory(GROUP_BROKER)
    topic, active, simple = unique("adm"), unique("gactive"), unique("gsimple")
    create_topic(broker.bootstrap, topic, partitions=4)
    members = [Member(broker.bootstrap, active, [topic], f"adm{i}", **{"partition.assignment.strategy": "range"})
               for i in range(2)]
    try:
        poll_until(members, lambda: balanced(members, 4, per_member=2), timeout=20, message="2 members, 2 each")
        owned = sorted(members[0].partitions())
        members[0].consumer.commit(offsets=[TopicPartition(topic, p, 10 * (p + 1), metadata=f"md{p}")
                                            for p in owned], asynchronous=False)
        standalone = Consumer(member_conf(broker.bootstrap, simple))
        try:
            standalone.commit(offsets=[TopicPartition(topic, 3, 33)], asynchronous=False)
        finally:
            standalone.close()
        yield broker, topic, active, simple, members, owned
    finally:
        for m in members:
            m.close()


def test_list_groups_with_state_filter(two_groups):
    """§1.10 ListGroups: the active group is Stable, the simple group Empty with protocol type ""
    (is_simple_consumer_group); the state filter (v4+) returns only the matching groups."""
    broker, _, active, simple, _, _ = two_groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    everything = _listed(admin)
    assert everything[active] == (ConsumerGroupState.STABLE, False)
    assert everything[simple] == (ConsumerGroupState.EMPTY, True)
    stable = _listed(admin, {ConsumerGroupState.STABLE})
    assert active in stable and simple not in stable
    empty = _listed(admin, {ConsumerGroupState.EMPTY})
    assert simple in empty and active not in empty
    assert not {active, simple} & set(_listed(admin, {ConsumerGroupState.PREPARING_REBALANCING}))


def test_describe_groups(two_groups):
    """§1.10 DescribeGroups: a Stable group reports its protocol (assignor), and each member's id,
    client id, host and assignment (filled only in Stable); the simple group is Empty with no
    members; an unknown group is answered on the wire with error NONE and state "Dead"."""
    broker, topic, active, simple, members, _ = two_groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.describe_consumer_groups([active, simple], request_timeout=10)
    desc = futures[active].result(15)
    assert desc.state == ConsumerGroupState.STABLE
    assert desc.partition_assignor == "range" and desc.is_simple_consumer_group is False
    by_id = {m.member_id: m for m in desc.members}
    assert set(by_id) == {m.consumer.memberid() for m in members}
    for m in members:
        described = by_id[m.consumer.memberid()]
        assert described.client_id == m.name
        assert "127.0.0.1" in described.host
        assert {(tp.topic, tp.partition) for tp in described.assignment.topic_partitions} == m.assignment()

    empty = futures[simple].result(15)
    assert empty.state == ConsumerGroupState.EMPTY
    assert empty.members == [] and empty.is_simple_consumer_group is True

    unknown = unique("gunknown")
    [described] = raw_describe_groups(broker.bootstrap, [unknown])
    assert (int(described.error_code.value), described.group_id, described.group_state) == (0, unknown, "Dead")
    assert (described.protocol_type, described.members) == ("", ())


def test_list_consumer_group_offsets(two_groups):
    """§1.3 OffsetFetch "all topics" for a group: the committed offsets with their metadata; a
    partition without a commit is not listed."""
    broker, topic, active, simple, _, owned = two_groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(active)],
                                               request_timeout=10)[active].result(15)
    assert result.group_id == active
    got = {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in result.topic_partitions}
    assert got == {(topic, p): (10 * (p + 1), f"md{p}") for p in owned}
    simple_result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(simple)],
                                                      request_timeout=10)[simple].result(15)
    assert {(tp.topic, tp.partition): tp.offset for tp in simple_result.topic_partitions} == {(topic, 3): 33}


def test_delete_groups(two_groups):
    """§1.5/§3 DeleteGroups: an active group → NON_EMPTY_GROUP(68) and it keeps its offsets; the
    empty (simple) group is deleted with its offsets; an unknown group → GROUP_ID_NOT_FOUND(69)."""
    broker, topic, active, simple, _, owned = two_groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    unknown = unique("gunknown")
    futures = admin.delete_consumer_groups([active, simple, unknown], request_timeout=10)

    with pytest.raises(KafkaException) as non_empty:
        futures[active].result(15)
    assert non_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    assert futures[simple].result(15) is None
    with pytest.raises(KafkaException) as not_found:
        futures[unknown].result(15)
    assert not_found.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

    listed = _listed(admin)
    assert active in listed and simple not in listed
    # §1.3: offsets of a group that no longer exists read as -1 with no error
    assert raw_offset_fetch(broker.bootstrap, simple, topic, [3]) == {3: (-1, -1, "", 0)}
    kept = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(active)],
                                             request_timeout=10)[active].result(15)
    assert {tp.partition: tp.offset for tp in kept.topic_partitions} == {p: 10 * (p + 1) for p in owned}
