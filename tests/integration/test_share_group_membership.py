"""KIP-932 share-group membership end to end (share-groups.md §2, §6, §7): raw ShareGroupHeartbeat
and ShareGroupDescribe v1 against a real broker process (join, a second member, the simple
assignor sharing a single partition, leave, the member-id and type checks, ListGroups v5 and
DescribeGroups v6 on a share group, a restart replaying records 10-15, group.share.enable=false,
the ACL checks in Kafka's order),
and confluent-kafka's ShareConsumer (librdkafka, a client we did not write) joining as a member.
ShareFetch is not served on this side yet: nothing here depends on records being delivered."""

from __future__ import annotations

import base64
import datetime
import socket
import time
import uuid

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType
from kio.index import load_request_schema
from kio.static.primitive import i8

from broker_process import wait_for
from clients import create_topic
from group_helpers import unique
from integration.share_helpers import group_configs
from integration.acl_helpers import GROUP, TOPIC, binding, conf, grant, secured_overrides
from raw_client import RawClient

API_VERSIONS, LIST_GROUPS, DESCRIBE_GROUPS, CONSUMER_GROUP_HEARTBEAT = 18, 16, 15, 68
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, FIND_COORDINATOR = 76, 77, 78, 10
NONE, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 0, 25, 35, 42, 69

# Short heartbeats so assignments move within a second (Kafka's bounds, lowered for tests).
BROKER = {"group.share.min.heartbeat.interval.ms": "300", "group.share.heartbeat.interval.ms": "300",
          "group.share.min.session.timeout.ms": "3000", "group.share.session.timeout.ms": "6000"}


def member_id() -> str:
    """A member id as the clients make one: a uuid in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def heartbeat(client: RawClient, group: str, member: str, epoch: int, topics: tuple[str, ...] | None = None):
    cls = load_request_schema(SHARE_GROUP_HEARTBEAT, 1)
    return client.call(SHARE_GROUP_HEARTBEAT, 1, cls(group_id=group, member_id=member, member_epoch=epoch,
                                                     rack_id=None, subscribed_topic_names=topics))


def describe(bootstrap: str, group: str):
    with RawClient(bootstrap) as client:
        cls = load_request_schema(SHARE_GROUP_DESCRIBE, 1)
        [described] = client.call(SHARE_GROUP_DESCRIBE, 1, cls(group_ids=(group,),
                                                                include_authorized_operations=False)).groups
        return described


def partitions(response) -> set[int]:
    return {p for tp in (response.assignment.topic_partitions if response.assignment else ()) for p in tp.partitions}


def test_raw_join_share_describe_and_leave(broker_factory):
    broker = broker_factory(BROKER)
    topic, single, group = unique("sg-t"), unique("sg-one"), unique("sg")
    create_topic(broker.bootstrap, topic, 4)
    create_topic(broker.bootstrap, single, 1)
    a, b = member_id(), member_id()
    with RawClient(broker.bootstrap) as client:
        versions = client.call(API_VERSIONS, 3, load_request_schema(API_VERSIONS, 3)(
            client_software_name="raw", client_software_version="1"))
        assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys if 76 <= k.api_key <= 79} \
            == {76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1)}
        joined = heartbeat(client, group, a, 0, (topic, single))
        assert (int(joined.error_code.value), joined.member_id, joined.member_epoch) == (NONE, a, 1)
        assert joined.heartbeat_interval.total_seconds() == 0.3
        assert len(joined.assignment.topic_partitions) == 2 and partitions(joined) == {0, 1, 2, 3}
        second = heartbeat(client, group, b, 0, (topic, single))
        assert second.member_epoch == 2
        moved = heartbeat(client, group, a, 1)
        assert moved.member_epoch == 2 and moved.assignment is not None
        described = describe(broker.bootstrap, group)
        assert (int(described.error_code.value), described.group_state, described.group_epoch,
                described.assignment_epoch, described.assignor_name) == (NONE, "Stable", 2, 2, "simple")
        by_topic = {m.member_id: {tp.topic_name: set(tp.partitions) for tp in m.assignment.topic_partitions}
                    for m in described.members}
        for m in described.members:
            assert m.subscribed_topic_names == tuple(sorted((topic, single))) and m.client_id == "raw-test"
        assert by_topic[a][single] == by_topic[b][single] == {0}  # one partition, shared by both
        assert by_topic[a][topic] | by_topic[b][topic] == {0, 1, 2, 3} and not by_topic[a][topic] & by_topic[b][topic]
        left = heartbeat(client, group, b, -1)
        assert (int(left.error_code.value), left.member_epoch) == (NONE, -1)
        assert int(heartbeat(client, group, b, 2).error_code.value) == UNKNOWN_MEMBER_ID
        assert int(heartbeat(client, group, "", 0, (topic,)).error_code.value) == INVALID_REQUEST
        assert int(heartbeat(client, group, "x" * 37, 0, (topic,)).error_code.value) == INVALID_REQUEST
        assert int(heartbeat(client, group, member_id(), 0, None).error_code.value) == INVALID_REQUEST
        assert int(heartbeat(client, unique("none"), a, 3).error_code.value) == GROUP_ID_NOT_FOUND
        missing = heartbeat(client, unique("sg-missing"), member_id(), 0, (unique("no-such-topic"),))
        assert (int(missing.error_code.value), missing.member_epoch, partitions(missing)) == (NONE, 1, set())
    assert [m.member_id for m in describe(broker.bootstrap, group).members] == [a]
    assert int(describe(broker.bootstrap, unique("nope")).error_code.value) == GROUP_ID_NOT_FOUND


def test_share_groups_are_listed_and_kept_apart_from_other_kinds(broker_factory):
    broker = broker_factory(BROKER)
    topic, group = unique("sg-t"), unique("sg")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as client:
        assert int(heartbeat(client, group, member_id(), 0, (topic,)).error_code.value) == NONE
        listed = client.call(LIST_GROUPS, 5, load_request_schema(LIST_GROUPS, 5)(
            states_filter=(), types_filter=("SHARE",)))
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] \
            == [(group, "share", "Stable", "share")]
        consumers = client.call(LIST_GROUPS, 5, load_request_schema(LIST_GROUPS, 5)(
            states_filter=(), types_filter=("consumer",)))
        assert group not in [g.group_id for g in consumers.groups]
        [dead] = client.call(DESCRIBE_GROUPS, 6, load_request_schema(DESCRIBE_GROUPS, 6)(
            groups=(group,), include_authorized_operations=False)).groups
        assert (int(dead.error_code.value), dead.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
        cg = load_request_schema(CONSUMER_GROUP_HEARTBEAT, 1)
        refused = client.call(CONSUMER_GROUP_HEARTBEAT, 1, cg(
            group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=()))
        assert int(refused.error_code.value) == GROUP_ID_NOT_FOUND
        other = unique("cg")
        client.call(CONSUMER_GROUP_HEARTBEAT, 1, cg(
            group_id=other, member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=()))
        assert int(heartbeat(client, other, member_id(), 0, (topic,)).error_code.value) == GROUP_ID_NOT_FOUND


def test_a_restart_replays_the_share_group(broker_factory):
    broker = broker_factory(BROKER)
    topic, group = unique("sg-t"), unique("sg")
    create_topic(broker.bootstrap, topic, 3)
    a = member_id()
    with RawClient(broker.bootstrap) as client:
        assert heartbeat(client, group, a, 0, (topic,)).member_epoch == 1
    before = describe(broker.bootstrap, group)
    broker.kill9()
    broker.restart()
    after = wait_for(lambda: (d := describe(broker.bootstrap, group)) and int(d.error_code.value) == NONE and d,
                     timeout=30, message="the share group after the restart")
    assert after == before
    with RawClient(broker.bootstrap) as client:
        again = heartbeat(client, group, a, 1)
        assert (int(again.error_code.value), again.member_epoch) == (NONE, 1)


def test_with_share_groups_off_the_apis_are_unsupported(broker_factory):
    broker = broker_factory({**BROKER, "group.share.enable": "false"})
    with RawClient(broker.bootstrap) as client:
        answer = heartbeat(client, unique("sg"), member_id(), 0, ("t",))
        assert int(answer.error_code.value) == UNSUPPORTED_VERSION
        fetch = load_request_schema(SHARE_FETCH, 1)
        fetched = client.call(SHARE_FETCH, 1, fetch(
            group_id="g", member_id=member_id(), share_session_epoch=0, max_wait=datetime.timedelta(0),
            min_bytes=1, max_bytes=1024, max_records=10, batch_size=10, topics=(), forgotten_topics_data=()))
        assert int(fetched.error_code.value) == UNSUPPORTED_VERSION
    assert int(describe(broker.bootstrap, "g").error_code.value) == UNSUPPORTED_VERSION


def _share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    return consumer


def _members_with(bootstrap: str, group: str, consumers: list[ShareConsumer], count: int,
                  wanted: set[int]) -> list:
    """Poll the consumers until the group has `count` members each assigned `wanted` (partitions of the topic)."""
    def step():
        for c in consumers:
            c.poll(0.1)
        d = describe(bootstrap, group)
        members = [m for m in d.members if {p for tp in m.assignment.topic_partitions for p in tp.partitions} == wanted]
        return members if int(d.error_code.value) == NONE and len(d.members) == count == len(members) else None
    return wait_for(step, timeout=45, interval=0, message=f"{count} share members holding {wanted}")


def test_confluent_kafka_share_consumers_join_and_share_partitions(broker_factory):
    broker = broker_factory(BROKER)
    topic, single, group = unique("sg-t"), unique("sg-one"), unique("q")
    create_topic(broker.bootstrap, topic, 3)
    create_topic(broker.bootstrap, single, 1)
    first = _share_consumer(broker.bootstrap, group, topic)
    try:
        [member] = _members_with(broker.bootstrap, group, [first], 1, {0, 1, 2})
        assert len(member.member_id) == 22 and member.member_epoch >= 1
        assert [tp.topic_name for tp in member.assignment.topic_partitions] == [topic]
    finally:
        first.close()
    wait_for(lambda: not describe(broker.bootstrap, group).members, timeout=30, message="the member left on close")
    shared = unique("q")
    both = [_share_consumer(broker.bootstrap, shared, single) for _ in range(2)]
    try:
        members = _members_with(broker.bootstrap, shared, both, 2, {0})
        assert len({m.member_id for m in members}) == 2
    finally:
        for c in both:
            c.close()


def test_acls_group_read_then_member_id_then_topic_describe(broker_factory):
    """§2's check order under ACLs: READ on the group (30), then the member id (42), then DESCRIBE
    on every subscribed topic (29); ShareGroupDescribe needs DESCRIBE on the group (30 in its entry)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = broker_factory(secured_overrides(**{**BROKER, "listeners": f"SASL_PLAINTEXT://127.0.0.1:0,"
                                                                      f"PLAINTEXT://127.0.0.1:{port}"}))
    admin, plain = proc.bootstrap, f"127.0.0.1:{port}"
    client = AdminClient(conf(admin, "admin"))
    client.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
    anonymous = "User:ANONYMOUS"
    with RawClient(plain) as raw:
        assert int(heartbeat(raw, "queue", "", 0, ("orders",)).error_code.value) == 30
        assert int(describe(plain, "queue").error_code.value) == 30
        grant(admin, binding(anonymous, GROUP, "queue", AclOperation.READ))  # READ implies DESCRIBE
        assert int(heartbeat(raw, "queue", "", 0, ("orders",)).error_code.value) == INVALID_REQUEST
        assert int(heartbeat(raw, "queue", member_id(), 0, ("orders",)).error_code.value) == 29
        grant(admin, binding(anonymous, TOPIC, "orders", AclOperation.DESCRIBE))
        joined = heartbeat(raw, "queue", member_id(), 0, ("orders",))
        assert (int(joined.error_code.value), joined.member_epoch, partitions(joined)) == (NONE, 1, {0, 1})
    assert int(describe(plain, "queue").error_code.value) == NONE


def test_a_groups_own_share_session_timeout_and_heartbeat_interval(broker_factory):
    """The GROUP configs share.session.timeout.ms and share.heartbeat.interval.ms (share-groups.md
    §1), set with confluent-kafka's AdminClient: out of the broker's bounds or a session timeout not
    above the heartbeat interval is refused naming the key; accepted, DescribeConfigs shows them, the
    group's members are told its interval and expire after its timeout; other groups keep the broker's."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    broker = broker_factory(BROKER)
    topic, group, other = unique("sg-t"), unique("sg-own"), unique("sg-other")
    create_topic(broker.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(**configs: str) -> None:
        group_configs(broker.bootstrap, group, **configs)

    for bad, says in (({"share_session_timeout_ms": "2999"}, "share.session.timeout.ms"),
                      ({"share_heartbeat_interval_ms": "299"}, "share.heartbeat.interval.ms"),
                      ({"share_session_timeout_ms": "3000", "share_heartbeat_interval_ms": "3000"},
                       "share.session.timeout.ms must be greater than share.heartbeat.interval.ms")):
        try:
            alter(**bad)
            raise AssertionError(f"{bad} accepted")
        except KafkaException as e:
            assert e.args[0].name() == "INVALID_CONFIG" and says in e.args[0].str(), e
    alter(share_session_timeout_ms="3000", share_heartbeat_interval_ms="1000")
    resource = ConfigResource(ResourceType.GROUP, group)
    described = admin.describe_configs([resource])[resource].result(15)
    assert (described["share.session.timeout.ms"].value, described["share.heartbeat.interval.ms"].value) == ("3000", "1000")
    assert described["share.session.timeout.ms"].source == 8  # DYNAMIC_GROUP_CONFIG
    mine, theirs = member_id(), member_id()
    with RawClient(broker.bootstrap) as client:
        joined = heartbeat(client, group, mine, 0, (topic,))
        assert (int(joined.error_code.value), joined.heartbeat_interval.total_seconds()) == (NONE, 1.0)
        elsewhere = heartbeat(client, other, theirs, 0, (topic,))
        assert elsewhere.heartbeat_interval.total_seconds() == 0.3
        # No more heartbeats from `mine`: gone after its group's 3 s, while `theirs` (6 s) stays.
        silent = time.monotonic()
        wait_for(lambda: not describe(broker.bootstrap, group).members, timeout=10, message="member expired")
        assert time.monotonic() - silent < 5.0
        assert [m.member_id for m in describe(broker.bootstrap, other).members] == [theirs]


def test_find_coordinator_share_keys_are_for_brokers(broker_factory):
    """FindCoordinator key type 2 (a share-partition's state, "group:topicId:partition") as Kafka
    answers it: INVALID_REQUEST before v6, CLUSTER_AUTHORIZATION_FAILED for every key without
    CLUSTER_ACTION; with it, this broker (it owns every `__share_group_state` partition)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = broker_factory(secured_overrides(**{**BROKER, "listeners": f"SASL_PLAINTEXT://127.0.0.1:0,"
                                                                      f"PLAINTEXT://127.0.0.1:{port}"}))
    key = f"queue:{uuid.uuid4()}:0"

    def find(version: int) -> list[tuple[int, int]]:
        with RawClient(f"127.0.0.1:{port}") as raw:
            cls = load_request_schema(FIND_COORDINATOR, version)
            found = raw.call(FIND_COORDINATOR, version, cls(key_type=i8(2), coordinator_keys=(key, key)))
            return [(int(c.error_code.value), c.node_id) for c in found.coordinators]

    assert find(5) == [(INVALID_REQUEST, -1)] * 2
    assert find(6) == [(31, -1)] * 2
    grant(proc.bootstrap, binding("User:ANONYMOUS", ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION))
    assert find(6) == [(NONE, 1)] * 2
