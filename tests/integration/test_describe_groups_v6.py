"""DescribeGroups v6 (KIP-1043, reference B8) against a real broker: at v5 a group that is not a
classic group (a KIP-848 consumer group, or none at all) is "Dead" with no error; at v6 it is
"Dead" with GROUP_ID_NOT_FOUND and a message saying which. A classic group is described alike at
both. kafka-python (which asks v6: it reports the error per group) and confluent-kafka (v5 at most,
after ConsumerGroupDescribe) describe the three as they did."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from clients import create_topic
from consumer_protocol_helpers import BROKER, Member, poll_until
from group_helpers import raw_describe_groups, unique

NONE, GROUP_ID_NOT_FOUND = 0, 69
CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


def _row(described) -> tuple:
    return (described.group_id, int(described.error_code.value), described.group_state, described.protocol_type,
            len(described.members))


def test_describe_groups_v5_and_v6(broker_factory):
    broker = broker_factory(BROKER)
    topic, classic_group, consumer_group, missing = unique("dg6"), unique("classic"), unique("consumer"), unique("none")
    create_topic(broker.bootstrap, topic, 2)
    classic = Member(broker.bootstrap, classic_group, [topic], **{"client.id": "classic", **CLASSIC})
    modern = Member(broker.bootstrap, consumer_group, [topic], **{"client.id": "modern"})
    members = [classic, modern]
    try:
        poll_until(members, lambda: all(len(m.assigned()) == 2 for m in members), message="both groups assigned")
        groups = [classic_group, consumer_group, missing]

        v5 = raw_describe_groups(broker.bootstrap, groups, version=5)
        assert [_row(d) for d in v5] == [(classic_group, NONE, "Stable", "consumer", 1),
                                         (consumer_group, NONE, "Dead", "", 0), (missing, NONE, "Dead", "", 0)]
        v6 = raw_describe_groups(broker.bootstrap, groups, version=6)
        assert [_row(d) for d in v6] == [(classic_group, NONE, "Stable", "consumer", 1),
                                         (consumer_group, GROUP_ID_NOT_FOUND, "Dead", "", 0),
                                         (missing, GROUP_ID_NOT_FOUND, "Dead", "", 0)]
        assert [d.error_message for d in v6] == [None, f"Group {consumer_group} is not a classic group.",
                                                 f"Group {missing} not found."]
        assert v6[0].protocol_data == v5[0].protocol_data == "range"
        assert v6[0].members[0].member_assignment == v5[0].members[0].member_assignment != b""

        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            described = kp.describe_groups(groups)
        finally:
            kp.close()
        assert described[classic_group]["error"] is None and described[classic_group]["group_state"] == "Stable"
        assert f"Group {consumer_group} is not a classic group." in described[consumer_group]["error"]
        assert f"Group {missing} not found." in described[missing]["error"]

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.describe_consumer_groups(groups, request_timeout=10)
        got = futures[classic_group].result(15)
        assert (got.type, got.state, len(got.members)) == (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE, 1)
        got = futures[consumer_group].result(15)  # ConsumerGroupDescribe
        assert (got.type, got.state, len(got.members)) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE, 1)
        # librdkafka tries ConsumerGroupDescribe, then DescribeGroups at v5 at most: "Dead"
        assert futures[missing].result(15).state == ConsumerGroupState.DEAD
    finally:
        for m in members:
            m.consumer.close()
