"""Mixed KIP-848 consumer groups end to end (reference B7): classic-protocol clients (confluent-kafka
with `group.protocol=classic`, and kafka-python, which has nothing else) as members of a consumer
group beside a consumer-protocol member, the broker assigning all of them; a live classic group
upgraded by a consumer-protocol member and downgraded when it leaves, or when a classic static member
takes the place of the last consumer-protocol one. Every record is read once,
no partition is ever held by two members, and a classic member's leave hands its partitions back.
Every wait polls the members against a deadline."""

from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from clients import create_topic
from consumer_protocol_helpers import BROKER, Member, poll_until, read_by, send, values
from group_helpers import unique

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


class KafkaPythonMember:
    """A kafka-python consumer (classic protocol only) with Member's interface."""

    def __init__(self, bootstrap: str, group: str, topics: list[str]) -> None:
        self.consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=6000, heartbeat_interval_ms=300, client_id="kafka-python")
        self.read: dict[bytes, int] = {}
        self.errors: list = []

    def poll(self) -> None:
        for records in self.consumer.poll(timeout_ms=50).values():
            for record in records:
                self.read[record.value] = self.read.get(record.value, 0) + 1

    def assigned(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def _balanced(members, topic: str, partitions: int) -> bool:
    """Every partition owned by exactly one member and the sizes within one of each other; on
    the way there (it is checked at every poll) no partition is ever held by two members."""
    sets = [m.assigned() for m in members]
    assert sum(len(s) for s in sets) == len(set().union(*sets)), f"a partition with two owners: {sets}"
    sizes = [len(s) for s in sets]
    return sum(sizes) == partitions and set().union(*sets) == {(topic, p) for p in range(partitions)} \
        and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_classic_members_inside_a_consumer_group(broker_factory, strategy):
    broker = broker_factory(BROKER)
    topic, group = unique("mig-mixed"), unique("g")
    create_topic(broker.bootstrap, topic, 6)
    modern = Member(broker.bootstrap, group, [topic], **{"client.id": "modern"})
    poll_until([modern], lambda: len(modern.assigned()) == 6, message="the consumer-protocol member owns all")
    classic = Member(broker.bootstrap, group, [topic], **{"client.id": "classic", **CLASSIC,
                                                          "partition.assignment.strategy": strategy})
    members = [modern, classic]
    poll_until(members, lambda: _balanced(members, topic, 6), timeout=40, message="3 partitions each")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type == ConsumerGroupType.CONSUMER
    assert sorted(m.client_id for m in described.members) == ["classic", "modern"]
    assert sorted(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
                  for m in described.members) == sorted(sorted(m.assigned()) for m in members)

    first = values("first", 120)
    send(broker.bootstrap, topic, first, 6)
    poll_until(members, lambda: len(read_by(members)) == len(first), message="every record read")
    assert read_by(members) == dict.fromkeys(first, 1)
    assert _balanced(members, topic, 6)
    classic.consumer.commit(asynchronous=False)  # a classic member's commit: generation = member epoch
    modern.consumer.commit(asynchronous=False)

    old = KafkaPythonMember(broker.bootstrap, group, [topic])
    members.append(old)
    poll_until(members, lambda: _balanced(members, topic, 6), timeout=40, message="2 partitions each")
    second = values("second", 120)
    send(broker.bootstrap, topic, second, 6)
    poll_until(members, lambda: all(v in read_by(members) for v in second), message="the second batch read")
    assert all(read_by(members)[v] == 1 for v in second)
    assert not any(m.errors for m in members)
    _commit(members)  # kafka-python's OffsetCommit carries its generation = member epoch

    classic.consumer.close()  # committed above: leave
    old.close()
    poll_until([modern], lambda: len(modern.assigned()) == 6, timeout=40,
               message="the classic members' partitions handed back")
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert [m.client_id for m in described.members] == ["modern"]
    modern.consumer.close()


def _commit(members) -> None:
    """Each member commits what it read (nothing read yet: nothing to commit)."""
    for m in members:
        if isinstance(m, KafkaPythonMember):
            m.consumer.commit()
            continue
        try:
            m.consumer.commit(asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            assert exc.args[0].code() == confluent_kafka.KafkaError._NO_OFFSET, exc


@pytest.mark.parametrize("second_client,strategy", [("confluent-kafka", "range,roundrobin"),
                                                     ("confluent-kafka", "cooperative-sticky"),
                                                     ("kafka-python", "range,roundrobin")])
def test_a_live_classic_group_upgrades_and_downgrades(broker_factory, second_client, strategy):
    broker = broker_factory(BROKER)
    topic, group = unique("mig-live"), unique("g")
    create_topic(broker.bootstrap, topic, 6)
    conf = {**CLASSIC, "partition.assignment.strategy": strategy}
    classics = [Member(broker.bootstrap, group, [topic], **{"client.id": "classic0", **conf}),
                KafkaPythonMember(broker.bootstrap, group, [topic]) if second_client == "kafka-python"
                else Member(broker.bootstrap, group, [topic], **{"client.id": "classic1", **conf})]
    poll_until(classics, lambda: _balanced(classics, topic, 6), timeout=40, message="a stable classic group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def group_type():
        return admin.describe_consumer_groups([group])[group].result(10).type

    assert group_type() == ConsumerGroupType.CLASSIC
    first = values("first", 120)
    send(broker.bootstrap, topic, first, 6)
    poll_until(classics, lambda: len(read_by(classics)) == len(first), message="the first batch read")
    _commit(classics)

    modern = Member(broker.bootstrap, group, [topic], **{"client.id": "modern"})
    members = classics + [modern]
    poll_until(members, lambda: _balanced(members, topic, 6), timeout=40, message="2 partitions each")
    assert group_type() == ConsumerGroupType.CONSUMER
    second = values("second", 120)
    send(broker.bootstrap, topic, second, 6)
    poll_until(members, lambda: all(v in read_by(members) for v in second), message="the second batch read")
    assert _balanced(members, topic, 6)
    _commit(members)

    modern.consumer.close()  # committed above: leave
    poll_until(classics, lambda: _balanced(classics, topic, 6) and group_type() == ConsumerGroupType.CLASSIC,
               timeout=40, message="a classic group again, 3 partitions each")
    third = values("third", 120)
    send(broker.bootstrap, topic, third, 6)
    poll_until(classics, lambda: all(v in read_by(members) for v in third), message="the third batch read")
    total = read_by(members)
    assert all(total[v] == 1 for v in first + second + third), "a record read twice"
    assert not any(m.errors for m in members)
    for m in classics:
        m.consumer.close()


def test_a_mixed_group_survives_a_broker_kill9(broker_factory):
    """Record 5's ClassicMemberMetadata is loaded back: after a kill -9 and a restart the classic
    member is still a classic member of the consumer group, with its partitions, and reads on."""
    broker = broker_factory(BROKER)
    topic, group = unique("mig-restart"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    modern = Member(broker.bootstrap, group, [topic], **{"client.id": "modern"})
    poll_until([modern], lambda: len(modern.assigned()) == 4, message="the consumer-protocol member owns all")
    classic = Member(broker.bootstrap, group, [topic], **{"client.id": "classic", **CLASSIC})
    members = [modern, classic]
    poll_until(members, lambda: _balanced(members, topic, 4), timeout=40, message="2 partitions each")
    broker.kill9()
    broker.restart()
    after = values("after", 80)
    send(broker.bootstrap, topic, after, 4)
    poll_until(members, lambda: all(v in read_by(members) for v in after), timeout=60,
               message="both read on after the restart")
    assert _balanced(members, topic, 4) and all(read_by(members)[v] == 1 for v in after)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type == ConsumerGroupType.CONSUMER
    assert sorted(m.client_id for m in described.members) == ["classic", "modern"]
    for m in members:
        m.consumer.close()


def test_a_classic_static_member_replacing_the_consumer_member_downgrades_the_group(broker_factory):
    """A static consumer-protocol member closes (epoch -2: its slot and partitions kept, with a 45 s
    session nobody waits out here); a classic consumer with its group.instance.id takes its place:
    the group is classic again at once, its commits kept, and the newcomer reads on from them."""
    broker = broker_factory({**BROKER, "group.consumer.session.timeout.ms": "45000"})
    topic, group = unique("mig-static"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    first = values("first", 80)
    send(broker.bootstrap, topic, first, 4)
    modern = Member(broker.bootstrap, group, [topic], **{"client.id": "modern", "group.instance.id": "x"})
    poll_until([modern], lambda: len(modern.read) == len(first), message="the first batch read")
    modern.close()  # commits, then leaves as a static member: epoch -2
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type == ConsumerGroupType.CONSUMER and [m.group_instance_id for m in described.members] == ["x"]

    second = values("second", 80)
    send(broker.bootstrap, topic, second, 4)
    classic = Member(broker.bootstrap, group, [topic], **{"client.id": "classic", "group.instance.id": "x",
                                                          **CLASSIC})
    poll_until([classic], lambda: len(classic.read) == len(second), message="the second batch read")
    assert classic.read == dict.fromkeys(second, 1)  # from the committed offsets: nothing of the first
    assert classic.assigned() == {(topic, p) for p in range(4)}
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10)  # ListGroups v5
    assert [(g.group_id, g.type) for g in listed.valid] == [(group, ConsumerGroupType.CLASSIC)]
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type == ConsumerGroupType.CLASSIC and described.state.name == "STABLE"
    assert [(m.client_id, m.group_instance_id) for m in described.members] == [("classic", "x")]
    classic.consumer.close()
