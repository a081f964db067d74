"""Error placement of reference security.md §4 on the wire, request by request: a broker with ACLs on,
a SASL_PLAINTEXT listener for the admin (grants) and a PLAINTEXT one where raw requests come from
User:ANONYMOUS. Checked before existence: a missing topic answers 29 until it may be described."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from raw_client import RawClient, build

from integration.acl_helpers import CLUSTER, GROUP, TOPIC, TXN, AclOperation as Op, binding, conf, grant, secured_overrides

ANON = "User:ANONYMOUS"
METADATA, LIST_OFFSETS, OFFSET_FETCH, FIND_COORDINATOR, DELETE_TOPICS, PRODUCE = 3, 2, 9, 10, 20, 0
INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 22, 32
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
UNKNOWN_TOPIC = 3


def call(raw: RawClient, api: int, version: int, **data: Any) -> Any:
    return raw.call(api, version, build(load_request_schema(api, version), data))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def anon(broker_factory):
    """(admin bootstrap over SASL, PLAINTEXT bootstrap for raw ANONYMOUS requests); topic `orders`
    exists, with a committed offset in group `app` and `other-app`."""
    port = free_port()
    proc = broker_factory(secured_overrides(**{
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:{port}",
        "auto.create.topics.enable": "false"}))
    admin = AdminClient(conf(proc.bootstrap, "admin"))
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
    producer = Producer(conf(proc.bootstrap, "admin"))
    producer.produce("orders", b"v", partition=0)
    assert producer.flush(10) == 0
    from confluent_kafka import Consumer
    for group in ("app", "other-app"):
        c = Consumer(conf(proc.bootstrap, "admin", **{"group.id": group}))
        c.commit(offsets=[TopicPartition("orders", 0, 1), TopicPartition("orders", 1, 0)], asynchronous=False)
        c.close()
    return proc.bootstrap, f"127.0.0.1:{port}"


def metadata_errors(raw: RawClient, *names: str) -> dict[str, int]:
    r = call(raw, METADATA, 12, topics=[{"name": n, "topic_id": None} for n in names],
             allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return {t.name: int(t.error_code) for t in r.topics}


def test_metadata_denies_named_topics_before_existence_and_filters_all_topics(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        assert metadata_errors(raw, "orders", "missing") == {"orders": TOPIC_DENIED, "missing": TOPIC_DENIED}
        everything = call(raw, METADATA, 12, topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
        assert [t.name for t in everything.topics] == []
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE), binding(ANON, TOPIC, "missing", Op.DESCRIBE))
        assert metadata_errors(raw, "orders", "missing") == {"orders": 0, "missing": UNKNOWN_TOPIC}
        everything = call(raw, METADATA, 12, topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
        assert [t.name for t in everything.topics] == ["orders"]  # __consumer_offsets stays hidden


def test_list_offsets_denied_partitions_answer_29_and_minus_one(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        r = call(raw, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
            {"name": "orders", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]},
            {"name": "missing", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
        assert [(t.name, int(p.error_code), p.offset, p.timestamp) for t in r.topics for p in t.partitions] == [
            ("orders", TOPIC_DENIED, -1, -1), ("missing", TOPIC_DENIED, -1, -1)]
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE))
        r = call(raw, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
            {"name": "orders", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
        assert [(int(p.error_code), p.offset) for t in r.topics for p in t.partitions] == [(0, 1)]


def test_offset_for_leader_epoch_needs_describe_or_cluster_action(anon):
    """KIP-320 as Kafka authorizes it: DESCRIBE on the topic, or CLUSTER_ACTION (brokers) for all."""
    admin, plain = anon

    def answers(raw: RawClient) -> list[tuple[str, int, int]]:
        r = call(raw, 23, 4, replica_id=-1, topics=[
            {"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
            for name in ("orders", "missing")])
        return [(t.topic, int(p.error_code), p.end_offset) for t in r.topics for p in t.partitions]

    with RawClient(plain) as raw:
        assert answers(raw) == [("orders", TOPIC_DENIED, -1), ("missing", TOPIC_DENIED, -1)]
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE))
        assert answers(raw) == [("orders", 0, 1), ("missing", TOPIC_DENIED, -1)]
        grant(admin, binding(ANON, CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
        assert answers(raw) == [("orders", 0, 1), ("missing", UNKNOWN_TOPIC, -1)]


def test_delete_topics_describe_decides_between_29_and_3(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        def errors(*names: str) -> dict[str, int]:
            r = call(raw, DELETE_TOPICS, 5, topic_names=list(names), timeout=timedelta(seconds=10))
            return {t.name: int(t.error_code) for t in r.responses}

        assert errors("orders", "missing") == {"orders": TOPIC_DENIED, "missing": TOPIC_DENIED}
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE), binding(ANON, TOPIC, "missing", Op.DESCRIBE))
        assert errors("orders", "missing") == {"orders": TOPIC_DENIED, "missing": UNKNOWN_TOPIC}
        grant(admin, binding(ANON, TOPIC, "orders", Op.DELETE))
        assert errors("orders") == {"orders": 0}


def test_offset_fetch_v8_several_groups_with_partial_acls(anon):
    admin, plain = anon
    grant(admin, binding(ANON, GROUP, "app", Op.DESCRIBE))  # not other-app; no topic ACL yet
    parts = [{"name": "orders", "partition_indexes": [0, 1]}]
    with RawClient(plain) as raw:
        def fetch() -> dict[str, Any]:
            r = call(raw, OFFSET_FETCH, 8, require_stable=False, groups=[
                {"group_id": "app", "topics": parts}, {"group_id": "other-app", "topics": parts},
                {"group_id": "app-all", "topics": None}])
            return {g.group_id: (int(g.error_code), [(t.name, p.partition_index, p.committed_offset,
                                                      int(p.error_code)) for t in g.topics for p in t.partitions])
                    for g in r.groups}

        assert fetch() == {"app": (0, [("orders", 0, -1, TOPIC_DENIED), ("orders", 1, -1, TOPIC_DENIED)]),
                           "other-app": (GROUP_DENIED, []), "app-all": (GROUP_DENIED, [])}
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE), binding(ANON, GROUP, "app-all", Op.READ))
        assert fetch() == {"app": (0, [("orders", 0, 1, 0), ("orders", 1, 0, 0)]),
                           "other-app": (GROUP_DENIED, []), "app-all": (0, [])}


def test_find_coordinator_per_key_from_v4_and_top_level_before(anon):
    admin, plain = anon
    grant(admin, binding(ANON, GROUP, "app", Op.DESCRIBE), binding(ANON, TXN, "tx", Op.DESCRIBE))
    with RawClient(plain) as raw:
        r = call(raw, FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["app", "secret"])
        assert [(c.key, int(c.error_code), c.node_id, c.host, c.port) for c in r.coordinators][1] == (
            "secret", GROUP_DENIED, -1, "", -1)
        assert int(r.coordinators[0].error_code) == 0
        assert int(call(raw, FIND_COORDINATOR, 3, key="secret", key_type=0).error_code) == GROUP_DENIED
        assert int(call(raw, FIND_COORDINATOR, 3, key="other-tx", key_type=1).error_code) == TXN_DENIED


def test_init_producer_id_and_describe_configs(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        r = call(raw, INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1,
                 producer_epoch=-1)
        assert (int(r.error_code), r.producer_id) == (CLUSTER_DENIED, -1)
        r = call(raw, INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout=timedelta(seconds=60), producer_id=-1,
                 producer_epoch=-1)
        assert (int(r.error_code), r.producer_id) == (TXN_DENIED, -1)
        grant(admin, binding(ANON, CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
        r = call(raw, INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1,
                 producer_epoch=-1)
        assert int(r.error_code) == 0 and r.producer_id >= 0
        r = call(raw, DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False, resources=[
            {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
            {"resource_type": 32, "resource_name": "app", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None}])
        assert [(int(x.error_code), len(x.configs)) for x in r.results] == [
            (TOPIC_DENIED, 0), (GROUP_DENIED, 0), (CLUSTER_DENIED, 0)]


def test_transaction_apis_check_the_transactional_id_group_and_topics(anon):
    admin, plain = anon
    grant(admin, binding(ANON, TXN, "tx", Op.WRITE))
    with RawClient(plain) as raw:
        # TxnOffsetCommit: 53 everywhere, then 30 everywhere, then 29 per topic
        def txn_commit(txn_id: str) -> list[int]:
            r = call(raw, 28, 3, transactional_id=txn_id, group_id="app", producer_id=1, producer_epoch=0,
                     generation_id=-1, member_id="", group_instance_id=None, topics=[
                         {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}]},
                         {"name": "missing", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}])
            return [int(p.error_code) for t in r.topics for p in t.partitions]

        assert txn_commit("other-tx") == [TXN_DENIED, TXN_DENIED]
        assert txn_commit("tx") == [GROUP_DENIED, GROUP_DENIED]
        grant(admin, binding(ANON, GROUP, "app", Op.READ))
        assert txn_commit("tx") == [TOPIC_DENIED, TOPIC_DENIED]
        # AddPartitionsToTxn: 29 on the denied topic, the others not attempted (55)
        grant(admin, binding(ANON, TOPIC, "orders", Op.WRITE))
        r = call(raw, 24, 3, v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
                 v3_and_below_producer_epoch=0, v3_and_below_topics=[
                     {"name": "orders", "partitions": [0]}, {"name": "secret", "partitions": [0]}])
        assert {(t.name, int(p.partition_error_code)) for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition} == {("orders", 55), ("secret", TOPIC_DENIED)}
        assert int(call(raw, 25, 3, transactional_id="other-tx", producer_id=1, producer_epoch=0,
                        group_id="app").error_code) == TXN_DENIED
        assert int(call(raw, 25, 3, transactional_id="tx", producer_id=1, producer_epoch=0,
                        group_id="secret").error_code) == GROUP_DENIED
        assert int(call(raw, 26, 3, transactional_id="other-tx", producer_id=1, producer_epoch=0,
                        committed=True).error_code) == TXN_DENIED
        r = call(raw, 27, 1, markers=[{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                       "coordinator_epoch": 0, "topics": [{"name": "orders", "partition_indexes": [0]}]}])
        assert [int(p.error_code) for m in r.markers for t in m.topics for p in t.partitions] == [CLUSTER_DENIED]
        # ListTransactions leaves out the ids the principal may not describe (none are open here,
        # so the answer is empty either way: the filter must not turn it into an error)
        r = call(raw, 66, 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
        assert (int(r.error_code), list(r.transaction_states)) == (0, [])
        # DescribeProducers: READ on the topic (WRITE is not enough), before existence
        r = call(raw, 61, 0, topics=[{"name": "secret", "partition_indexes": [0]},
                                     {"name": "orders", "partition_indexes": [0]}])
        assert [(t.name, int(p.error_code)) for t in r.topics for p in t.partitions] == [
            ("secret", TOPIC_DENIED), ("orders", TOPIC_DENIED)]
        grant(admin, binding(ANON, TOPIC, "orders", Op.READ))
        r = call(raw, 61, 0, topics=[{"name": "orders", "partition_indexes": [0]}])
        assert [int(p.error_code) for t in r.topics for p in t.partitions] == [0]


def test_list_and_describe_transactions_show_only_describable_ids(anon):
    admin, plain = anon
    producer = Producer(conf(admin, "admin", **{"transactional.id": "tx-open"}))
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("orders", b"pending", partition=0)
    assert producer.flush(10) == 0
    with RawClient(plain) as raw:
        def listed() -> list[str]:
            r = call(raw, 66, 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
            return [s.transactional_id for s in r.transaction_states]

        assert listed() == []
        grant(admin, binding(ANON, TXN, "tx-open", Op.DESCRIBE))
        assert listed() == ["tx-open"]
        r = call(raw, 65, 0, transactional_ids=["tx-open"])
        state = r.transaction_states[0]
        assert (int(state.error_code), state.transaction_state) == (0, "Ongoing")
        assert [t.topic for t in state.topics] == []  # orders is not describable: left out
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE))
        r = call(raw, 65, 0, transactional_ids=["tx-open"])
        assert [t.topic for t in r.transaction_states[0].topics] == ["orders"]
    producer.abort_transaction(10)


def test_topic_admin_apis(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        def create(name: str) -> tuple[int, int]:
            r = call(raw, 19, 7, timeout=timedelta(seconds=10), validate_only=False, topics=[
                {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}])
            return int(r.topics[0].error_code), int(r.topics[0].topic_config_error_code)

        assert create("made") == (TOPIC_DENIED, 0)
        grant(admin, binding(ANON, TOPIC, "made", Op.CREATE))
        assert create("made") == (0, TOPIC_DENIED)  # created, but its configs may not be described
        grant(admin, binding(ANON, CLUSTER, "kafka-cluster", Op.CREATE))
        assert create("made-too") == (0, TOPIC_DENIED)

        def grow(name: str) -> int:
            r = call(raw, 37, 3, timeout=timedelta(seconds=10), validate_only=False,
                     topics=[{"name": name, "count": 4, "assignments": None}])
            return int(r.results[0].error_code)

        assert grow("orders") == TOPIC_DENIED
        assert grow("missing") == TOPIC_DENIED
        grant(admin, binding(ANON, TOPIC, "orders", Op.ALTER))
        assert grow("orders") == 0

        def alter(rtype: int, name: str) -> int:
            r = call(raw, 44, 1, validate_only=True, resources=[{"resource_type": rtype, "resource_name": name,
                     "configs": [{"name": "offsets.retention.minutes", "config_operation": 0, "value": "60"}]}])
            return int(r.responses[0].error_code)

        assert (alter(32, "app"), alter(4, "1")) == (GROUP_DENIED, CLUSTER_DENIED)
        grant(admin, binding(ANON, GROUP, "app", Op.ALTER_CONFIGS))
        assert alter(32, "app") == 0


def test_group_membership_apis_answer_30_before_the_coordinator(anon):
    _, plain = anon
    with RawClient(plain) as raw:
        join = call(raw, 11, 9, group_id="app", session_timeout=timedelta(seconds=10),
                    rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
                    protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}], reason=None)
        assert (int(join.error_code), join.generation_id) == (GROUP_DENIED, -1)
        assert int(call(raw, 12, 4, group_id="app", generation_id=1, member_id="m",
                        group_instance_id=None).error_code) == GROUP_DENIED
        assert int(call(raw, 14, 5, group_id="app", generation_id=1, member_id="m", group_instance_id=None,
                        protocol_type="consumer", protocol_name="range", assignments=[]).error_code) == GROUP_DENIED
        assert int(call(raw, 13, 5, group_id="app", members=[
            {"member_id": "m", "group_instance_id": None, "reason": None}]).error_code) == GROUP_DENIED
        r = call(raw, 42, 2, groups_names=["app", "app"])
        assert [(x.group_id, int(x.error_code)) for x in r.results] == [("app", GROUP_DENIED)]
        r = call(raw, 47, 0, group_id="app", topics=[{"name": "orders", "partitions": [{"partition_index": 0}]}])
        assert (int(r.error_code), list(r.topics)) == (GROUP_DENIED, [])


def test_metadata_v10_cluster_authorized_operations(anon):
    admin, plain = anon
    with RawClient(plain) as raw:
        def cluster_ops() -> int:
            return call(raw, METADATA, 10, topics=[], allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=True,
                        include_topic_authorized_operations=False).cluster_authorized_operations

        assert cluster_ops() == 0  # 0 without DESCRIBE on the cluster
        grant(admin, binding(ANON, CLUSTER, "kafka-cluster", Op.ALTER))  # ALTER implies DESCRIBE
        assert cluster_ops() == (1 << 7) | (1 << 8)  # ALTER (7) and DESCRIBE (8)


def test_consumer_group_heartbeat_and_describe_check_the_group_then_the_topics(anon):
    """KIP-848 (reference B2, security.md §4 as Kafka applies it): ConsumerGroupHeartbeat needs READ
    on the group (30), then DESCRIBE on every subscribed topic name (29); ConsumerGroupDescribe
    DESCRIBE on each group (30 in its entry)."""
    admin, plain = anon

    def heartbeat(raw: RawClient, group: str) -> Any:
        return call(raw, 68, 1, group_id=group, member_id="m-" + group, member_epoch=0, instance_id=None,
                    rack_id=None, rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=["orders"],
                    subscribed_topic_regex=None, server_assignor=None, topic_partitions=[])

    with RawClient(plain) as raw:
        assert int(heartbeat(raw, "kip848").error_code) == GROUP_DENIED
        described = call(raw, 69, 0, group_ids=["kip848"], include_authorized_operations=False)
        assert [int(g.error_code) for g in described.groups] == [GROUP_DENIED]
        grant(admin, binding(ANON, GROUP, "kip848", Op.READ))  # READ implies DESCRIBE
        assert int(heartbeat(raw, "kip848").error_code) == TOPIC_DENIED
        grant(admin, binding(ANON, TOPIC, "orders", Op.DESCRIBE))
        joined = heartbeat(raw, "kip848")
        assert (int(joined.error_code), joined.member_epoch) == (0, 1)
        [group] = call(raw, 69, 0, group_ids=["kip848"], include_authorized_operations=False).groups
        assert (int(group.error_code), group.group_state, [m.member_id for m in group.members]) == (
            0, "Stable", ["m-kip848"])
