"""Static membership (KIP-345, `group.instance.id`) with confluent-kafka: a static member that
restarts within its session timeout gets its partitions back without a rebalance, and a second
consumer with the same instance id fences the first (reference §1.1 step 8, §1.6, §1.8)."""

from __future__ import annotations

from confluent_kafka import KafkaError
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from clients import create_topic, produce
from group_helpers import GROUP_BROKER, Member, balanced, poll_until, unique


def _static(bootstrap: str, group: str, topic: str, name: str, instance: str) -> Member:
    return Member(bootstrap, group, [topic], name, **{"group.instance.id": instance,
                                                      "partition.assignment.strategy": "range",
                                                      "session.timeout.ms": 20000})


def test_static_member_restart_gets_same_partitions_without_rebalance(broker_factory):
    """§1.6 / KIP-345: static members send no LeaveGroup on close(); a consumer rejoining with the
    same group.instance.id within session.timeout.ms replaces the old member (new member id,
    `instance-id + "-" + UUID`) and receives the old assignment while the group stays Stable:
    the other member sees no revoke or assign callback at all."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("static"), unique("gstatic")
    create_topic(broker.bootstrap, topic, partitions=4)
    a = _static(broker.bootstrap, group, topic, "a", "static-a")
    members = [a]
    try:
        poll_until(members, lambda: a.partitions() == {0, 1, 2, 3}, timeout=15, message="a owns all partitions")
        b = _static(broker.bootstrap, group, topic, "b", "static-b")
        members.append(b)
        poll_until(members, lambda: balanced([a, b], 4, per_member=2), timeout=20, message="a and b with 2 each")
        a_parts, b_parts = a.partitions(), b.partitions()
        old_member_id = b.consumer.memberid()
        assert old_member_id
        a_events = len(a.events)

        b.close()  # static: no LeaveGroup
        b2 = _static(broker.bootstrap, group, topic, "b", "static-b")
        members.append(b2)
        poll_until([a, b2], lambda: b2.partitions() == b_parts, timeout=15,
                   message="the restarted static member gets its old partitions back")

        # both members fetch what is produced now: the group is stable with this assignment
        produce(broker.bootstrap, topic, [{"value": f"after-{p}".encode(), "partition": p} for p in range(4)])
        poll_until([a, b2], lambda: {m.partition() for m in a.messages if m.value().startswith(b"after")} == a_parts
                   and {m.partition() for m in b2.messages if m.value().startswith(b"after")} == b_parts,
                   timeout=15, message="each member consuming its own partitions")
        assert a.events[a_events:] == [], f"the other member was rebalanced: {a.events[a_events:]}"
        assert a.partitions() == a_parts
        new_member_id = b2.consumer.memberid()
        assert new_member_id and new_member_id != old_member_id
        assert new_member_id.startswith("static-b-"), new_member_id

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
        assert desc.state == ConsumerGroupState.STABLE
        by_instance = {m.group_instance_id: m for m in desc.members}
        assert set(by_instance) == {"static-a", "static-b"}
        assert by_instance["static-b"].member_id == new_member_id
        assert {tp.partition for tp in by_instance["static-b"].assignment.topic_partitions} == b_parts
        assert {tp.partition for tp in by_instance["static-a"].assignment.topic_partitions} == a_parts
    finally:
        for m in members:
            m.close()


def test_second_consumer_with_same_instance_id_fences_the_first(broker_factory):
    """§1.6/§1.8: a JoinGroup with a known group.instance.id and an empty member id replaces the
    static member; the old consumer's next Heartbeat gets FENCED_INSTANCE_ID(82), which librdkafka
    raises as a fatal error (code _FATAL, "Static consumer fenced ..."), and the new consumer owns
    the partitions."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("fence"), unique("gfence")
    create_topic(broker.bootstrap, topic, partitions=3)
    first = _static(broker.bootstrap, group, topic, "first", "dup")
    members = [first]
    try:
        poll_until(members, lambda: first.partitions() == {0, 1, 2}, timeout=15, message="first owns all")
        assert not first.errors
        second = _static(broker.bootstrap, group, topic, "second", "dup")
        members.append(second)

        def fenced():
            return [e for e in first.errors if e.fatal() or e.code() in (KafkaError._FATAL,
                                                                         KafkaError.FENCED_INSTANCE_ID)]
        poll_until(members, lambda: fenced() and second.partitions() == {0, 1, 2}, timeout=20,
                   message="first fenced (fatal) and second owning all partitions")
        assert any("fenced" in e.str().lower() for e in fenced()), [e.str() for e in fenced()]
        assert not [e for e in second.errors if e.fatal()], second.errors
    finally:
        for m in members:
            m.close()
