"""KIP-848 consumer groups end to end (reference B2-B9): confluent-kafka consumers with
`group.protocol=consumer` against a real broker process, the broker assigning partitions through
ConsumerGroupHeartbeat: one member reading and committing, three sharing a topic, a member
leaving, a broker restart, a regular-expression subscription, static membership; and a raw
heartbeat with a bad regex. Every wait polls the consumers against a deadline (wait_for)."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kio.index import load_request_schema

from clients import create_topic
from consumer_protocol_helpers import BROKER, Member, poll_until, read_by, send, values
from group_helpers import raw_offset_commit, unique
from raw_client import RawClient

CONSUMER_GROUP_HEARTBEAT, API_VERSIONS = 68, 18
INVALID_REGULAR_EXPRESSION, UNSUPPORTED_VERSION, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID = 128, 35, 113, 25
GROUP_ID_NOT_FOUND = 69

def test_one_member_reads_everything_and_commits(broker_factory):
    broker = broker_factory(BROKER)
    topic, group = unique("cp-one"), unique("g")
    create_topic(broker.bootstrap, topic, 3)
    sent = values("one", 60)
    send(broker.bootstrap, topic, sent, 3)
    member = Member(broker.bootstrap, group, [topic])
    poll_until([member], lambda: len(member.read) == len(sent), message="every record read")
    assert set(member.read) == set(sent) and not member.errors
    assert member.assigned() == {(topic, p) for p in range(3)}
    member.consumer.commit(asynchronous=False)
    committed = member.consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    assert sorted(tp.offset for tp in committed) == [20, 20, 20]
    member.consumer.close()


def test_three_members_share_a_topic_and_one_leaves(broker_factory):
    broker = broker_factory(BROKER)
    topic, group = unique("cp-three"), unique("g")
    create_topic(broker.bootstrap, topic, 6)
    members = [Member(broker.bootstrap, group, [topic], **{"client.id": f"m{i}"}) for i in range(3)]

    def balanced(ms: list[Member], each: int) -> bool:
        sets = [m.assigned() for m in ms]
        union = set().union(*sets)
        return all(len(s) == each for s in sets) and union == {(topic, p) for p in range(6)} \
            and sum(len(s) for s in sets) == 6

    poll_until(members, lambda: balanced(members, 2), message="2 partitions each")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)  # ConsumerGroupDescribe (B8)
    assert (described.type, described.state, described.partition_assignor) == (
        ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE, "uniform")
    assert sorted(m.client_id for m in described.members) == ["m0", "m1", "m2"]
    assert sorted(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
                  for m in described.members) == sorted(sorted(m.assigned()) for m in members)
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    assert [(g.group_id, g.type) for g in listed.valid] == [(group, ConsumerGroupType.CONSUMER)]
    assert not admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10).valid
    first = values("first", 120)
    send(broker.bootstrap, topic, first, 6)
    poll_until(members, lambda: len(read_by(members)) == len(first), message="every record read")
    assert balanced(members, 2), "assignments moved while the group was stable"
    assert read_by(members) == dict.fromkeys(first, 1)  # each record read by exactly one member

    leaving, staying = members[0], members[1:]
    moved = leaving.assigned()
    leaving.close()
    poll_until(staying, lambda: balanced(staying, 3), message="the leaver's partitions taken over")
    assert moved <= staying[0].assigned() | staying[1].assigned()
    second = values("second", 120)
    send(broker.bootstrap, topic, second, 6)
    poll_until(staying, lambda: set(second) <= set(read_by(staying)), message="no record lost")
    assert set(first) | set(second) <= set(read_by(members))
    for m in staying:
        m.close()


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_a_broker_restart_keeps_the_group_and_its_commits(broker_factory, crash):
    """The group's records and commits are durable before they are answered: after a clean
    restart or a kill -9 the member carries on where it was."""
    broker = broker_factory(BROKER)
    topic, group = unique("cp-restart"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    before = values("before", 40)
    send(broker.bootstrap, topic, before, 2)
    member = Member(broker.bootstrap, group, [topic])
    poll_until([member], lambda: len(member.read) == len(before), message="records before the restart")
    member.consumer.commit(asynchronous=False)
    if crash:
        broker.kill9()
    broker.restart()
    after = values("after", 40)
    send(broker.bootstrap, topic, after, 2)
    poll_until([member], lambda: set(after) <= set(member.read), timeout=45, message="records after the restart")
    assert member.assigned() == {(topic, 0), (topic, 1)}
    member.consumer.commit(asynchronous=False)
    member.consumer.close()
    fresh = Member(broker.bootstrap, group, [topic])
    committed = fresh.consumer.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    assert [tp.offset for tp in committed] == [40, 40]
    fresh.consumer.close()


def test_an_empty_classic_group_is_taken_over_from_its_commits(broker_factory):
    """B7: a classic group with members refuses a consumer-protocol member (69) when the migration
    policy does not allow an upgrade (the upgrade: test_consumer_protocol_migration.py); once its
    members left it is replaced by a consumer group on the first consumer-protocol join, its
    offsets kept, so the new member resumes where the classic one stopped."""
    broker = broker_factory({**BROKER, "group.consumer.migration.policy": "downgrade"})
    topic, group = unique("cp-migrate"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    old = values("old", 20)
    send(broker.bootstrap, topic, old, 2)
    classic = Member(broker.bootstrap, group, [topic], **{"group.protocol": "classic"})
    poll_until([classic], lambda: len(classic.read) == len(old), message="the classic member's records")
    with RawClient(broker.bootstrap) as client:  # while it has members it stays classic
        refused = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, names=(topic,)))
        assert int(refused.error_code.value) == GROUP_ID_NOT_FOUND
    classic.close()
    new = values("new", 20)
    send(broker.bootstrap, topic, new, 2)
    member = Member(broker.bootstrap, group, [topic])
    poll_until([member], lambda: len(member.read) == len(new), message="the records after the commits")
    assert set(member.read) == set(new)
    member.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert admin.describe_consumer_groups([group])[group].result(10).type == ConsumerGroupType.CONSUMER


def test_regex_subscription_picks_up_a_topic_created_later(broker_factory):
    broker = broker_factory(BROKER)
    prefix, group = unique("rx"), unique("g")
    create_topic(broker.bootstrap, f"{prefix}-a", 1)
    create_topic(broker.bootstrap, "not-" + prefix, 1)
    member = Member(broker.bootstrap, group, [f"^{prefix}-.*"])
    poll_until([member], lambda: member.assigned() == {(f"{prefix}-a", 0)}, message="the matching topic assigned")
    create_topic(broker.bootstrap, f"{prefix}-b", 2)
    send(broker.bootstrap, f"{prefix}-b", values("late", 10), 2)
    send(broker.bootstrap, "not-" + prefix, values("no", 5), 1)
    # regexes are resolved again at most every 10 s (reference B5)
    poll_until([member], lambda: len(member.read) == 10, timeout=40, message="the later topic's records")
    assert member.assigned() == {(f"{prefix}-a", 0), (f"{prefix}-b", 0), (f"{prefix}-b", 1)}
    assert set(member.read) == set(values("late", 10))
    member.consumer.close()


def test_a_static_member_rejoins_with_its_partitions(broker_factory):
    broker = broker_factory(BROKER)
    topic, group = unique("cp-static"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    a = Member(broker.bootstrap, group, [topic], **{"group.instance.id": "a"})
    b = Member(broker.bootstrap, group, [topic], **{"group.instance.id": "b"})
    poll_until([a, b], lambda: len(a.assigned()) == 2 and len(b.assigned()) == 2, message="2 partitions each")
    held, others = a.assigned(), b.assigned()
    a.close()  # a static member leaves for a while (epoch -2): its partitions wait for it
    quiet_until = time.monotonic() + 2.0  # several heartbeat intervals: b is given nothing more
    while time.monotonic() < quiet_until:
        b.poll()
        assert b.assigned() == others
    again = Member(broker.bootstrap, group, [topic], **{"group.instance.id": "a"})
    poll_until([again, b], lambda: again.assigned() == held, message="the same partitions back")
    assert b.assigned() == others
    again.close()
    b.close()


def _heartbeat_request(group: str, regex: str | None = None, member_id: str | None = None, epoch: int = 0,
                       names: tuple[str, ...] | None = None, owned: dict | None = None):
    """A ConsumerGroupHeartbeat v1: a join (epoch 0) unless told otherwise; `owned` {topic id: partitions}."""
    cls = load_request_schema(CONSUMER_GROUP_HEARTBEAT, 1)
    mod = __import__(cls.__module__, fromlist=["x"])
    return cls(group_id=group, member_id=member_id or str(uuid.uuid4()), member_epoch=epoch, instance_id=None,
               rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=30000 if epoch == 0 else -1),
               subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=None,
               topic_partitions=() if epoch == 0 else None if owned is None else tuple(
                   mod.TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in owned.items()))


def test_a_commit_racing_an_epoch_bump_is_stale_then_succeeds(broker_factory):
    """B7: OffsetCommit v9 carries the member epoch; once the member moved on, its old epoch is
    STALE_MEMBER_EPOCH (113) and the new one commits."""
    broker = broker_factory(BROKER)
    topic, group = unique("cp-race"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as client:
        first = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, names=(topic,), member_id="m1"))
        assert (int(first.error_code.value), first.member_epoch) == (0, 1)
        assert raw_offset_commit(broker.bootstrap, group, topic, {0: (5, None, -1)}, generation=1,
                                 member_id="m1") == {0: 0}
        second = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, names=(topic,), member_id="m2"))
        assert int(second.error_code.value) == 0
        [owned] = first.assignment.topic_partitions
        revoked = {owned.topic_id: []}  # m1 has let go of everything it held: its epoch moves on
        moved = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, member_id="m1", epoch=1,
                                                                            owned=revoked))
        assert int(moved.error_code.value) == 0 and moved.member_epoch == 2
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (6, None, -1)}, generation=1,
                             member_id="m1") == {0: STALE_MEMBER_EPOCH}
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (6, None, -1)}, generation=2,
                             member_id="m1") == {0: 0}
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (7, None, -1)}, member_id="") == {
        0: UNKNOWN_MEMBER_ID}


def test_a_silent_member_loses_its_partitions_at_its_session_timeout(broker_factory):
    """B4: a member that stops heartbeating is removed by the shard's timer after
    group.consumer.session.timeout.ms (6 s here), and its partitions go to the member left."""
    broker = broker_factory(BROKER)
    topic, group = unique("cp-silent"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    with RawClient(broker.bootstrap) as client:
        silent = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, names=(topic,)))
        assert int(silent.error_code.value) == 0 and len(silent.assignment.topic_partitions[0].partitions) == 4
    member = Member(broker.bootstrap, group, [topic])
    poll_until([member], lambda: len(member.assigned()) == 4, timeout=30, message="the silent member's partitions")
    member.close()


def test_a_group_of_its_own_heartbeat_interval_and_session_timeout(broker_factory):
    """B1: the GROUP configs consumer.heartbeat.interval.ms / consumer.session.timeout.ms, within
    the broker's group.consumer.min/max.* bounds (else INVALID_CONFIG), described as the group's,
    and answered in the group's heartbeats."""
    broker = broker_factory(BROKER)
    group = unique("g")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(**configs: str):
        resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        [future] = admin.incremental_alter_configs([resource]).values()
        return future.result(10)

    with pytest.raises(KafkaException) as refused:
        alter(consumer_session_timeout_ms="999999")  # above group.consumer.max.session.timeout.ms
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    alter(consumer_heartbeat_interval_ms="700", consumer_session_timeout_ms="5000")
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)]).values()
    described = future.result(10)
    assert (described["consumer.heartbeat.interval.ms"].value, described["consumer.heartbeat.interval.ms"].source) \
        == ("700", ConfigSource.GROUP_CONFIG.value)
    assert described["consumer.session.timeout.ms"].value == "5000"
    with RawClient(broker.bootstrap) as client:
        joined = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(group, regex="x.*"))
        assert (int(joined.error_code.value), joined.heartbeat_interval) == (0, datetime.timedelta(milliseconds=700))


def test_a_bad_regex_is_an_error_and_the_broker_keeps_serving(broker_factory):
    broker = broker_factory(BROKER)
    with RawClient(broker.bootstrap) as client:
        versions = client.call(API_VERSIONS, 3, load_request_schema(API_VERSIONS, 3)(
            client_software_name="raw", client_software_version="1"))
        assert [(k.min_version, k.max_version) for k in versions.api_keys if k.api_key == 68] == [(0, 1)]
        bad = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(unique("g"), regex="rx-("))
        assert int(bad.error_code.value) == INVALID_REGULAR_EXPRESSION and bad.error_message
        good = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(unique("g"), regex="rx-.*"))
        assert int(good.error_code.value) == 0 and good.member_epoch == 1


def test_without_the_consumer_protocol_the_heartbeat_is_unsupported(broker_factory):
    broker = broker_factory({**BROKER, "group.coordinator.rebalance.protocols": "classic"})
    with RawClient(broker.bootstrap) as client:
        answer = client.call(CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat_request(unique("g"), regex="x"))
        assert int(answer.error_code.value) == UNSUPPORTED_VERSION
