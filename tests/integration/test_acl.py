"""Authorization end to end (reference security.md §4, §5): a real `offsetd serve` with ACLs on and
a SASL_PLAINTEXT listener (PLAIN users admin — a super user —, alice, bob), real clients
(confluent-kafka, kafka-python). Each test grants alice what its case needs through CreateAcls."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import kafka.errors as kerr
import pytest
from broker_process import wait_for
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTP

from integration.acl_helpers import (
    CLUSTER,
    GROUP,
    PREFIXED,
    TOPIC,
    TXN,
    AclOperation as Op,
    AclPermissionType as Perm,
    binding,
    conf,
    grant,
    kafka_python_conf,
    secured_overrides,
)

OFFSETD = str(Path(sys.executable).parent / "offsetd")
OK = KafkaError.NO_ERROR
TOPIC_DENIED, GROUP_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED, TXN_DENIED = KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.fixture
def secured(broker_factory):
    """A secured broker with topics `orders` (2 partitions) and `other`, each holding a record."""
    proc = broker_factory(secured_overrides())
    admin = AdminClient(conf(proc.bootstrap, "admin"))
    for future in admin.create_topics([NewTopic("orders", 2, 1), NewTopic("other", 1, 1)]).values():
        future.result()
    producer = Producer(conf(proc.bootstrap, "admin"))
    for topic in ("orders", "other"):
        producer.produce(topic, b"v", partition=0)
    assert producer.flush(10) == 0
    return proc


def consumer(bootstrap: str, user: str, group: str = "app", **extra) -> Consumer:
    return Consumer(conf(bootstrap, user, **{"group.id": group, "enable.auto.commit": False,
                                              "auto.offset.reset": "earliest", **extra}))


def commit_error(bootstrap: str, user: str, group: str, offsets: list[TopicPartition]) -> int:
    """OffsetCommit as `user`: the first error (top level or per partition), or NO_ERROR."""
    c = consumer(bootstrap, user, group)
    try:
        result = c.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        return exc.args[0].code()
    finally:
        c.close()
    errors = [tp.error.code() for tp in result if tp.error is not None]
    return errors[0] if errors else OK


def admin_commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    assert commit_error(bootstrap, "admin", group, offsets) == OK


@pytest.fixture
def kp_admin():
    """`kp_admin(bootstrap, user)`: a kafka-python admin client as `user` (one per user and broker
    for the test: each new one is a bootstrap), closed after the test (an unclosed one keeps
    reconnecting to the stopped broker through later tests)."""
    opened: dict[tuple[str, str], KafkaAdminClient] = {}

    def make(bootstrap: str, user: str) -> KafkaAdminClient:
        if (bootstrap, user) not in opened:
            opened[bootstrap, user] = KafkaAdminClient(**kafka_python_conf(bootstrap, user), request_timeout_ms=10000)
        return opened[bootstrap, user]

    yield make
    for admin in opened.values():
        admin.close()


# ------------------------------------------------------------------------------ commit


def test_commit_needs_read_on_the_group_then_read_on_the_topic(secured):
    b = secured.bootstrap
    offsets = [TopicPartition("orders", 0, 1)]
    grant(b, binding("alice", GROUP, "app", Op.DESCRIBE))  # FindCoordinator only
    assert commit_error(b, "alice", "app", offsets) == GROUP_DENIED
    grant(b, binding("alice", GROUP, "app", Op.READ))
    assert commit_error(b, "alice", "app", offsets) == TOPIC_DENIED
    grant(b, binding("alice", TOPIC, "orders", Op.WRITE), binding("alice", TOPIC, "orders", Op.DESCRIBE))
    assert commit_error(b, "alice", "app", offsets) == TOPIC_DENIED  # WRITE or DESCRIBE is not READ
    grant(b, binding("alice", TOPIC, "orders", Op.READ))
    assert commit_error(b, "alice", "app", offsets) == OK


def test_topic_read_without_a_group_acl_is_a_group_error(secured, kp_admin):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "orders", Op.READ))
    with pytest.raises(kerr.GroupAuthorizationFailedError):  # FindCoordinator: DESCRIBE on the group
        kp_admin(b, "alice").list_group_offsets({"app": [KTP("orders", 0)]})


# ---------------------------------------------------------------------------- OffsetFetch


def test_offset_fetch_needs_describe_on_group_and_topic_and_filters_all_partitions(secured, kp_admin):
    b = secured.bootstrap
    admin_commit(b, "app", [TopicPartition("orders", 0, 1), TopicPartition("other", 0, 1)])
    alice = kp_admin(b, "alice")
    with pytest.raises(kerr.GroupAuthorizationFailedError):
        alice.list_group_offsets({"app": None})
    grant(b, binding("alice", GROUP, "app", Op.READ))
    # all partitions, group READ only: no error, nothing shown
    assert alice.list_group_offsets({"app": None}) == {"app": {}}
    # a named topic without DESCRIBE: 29 on its partition
    with pytest.raises(kerr.TopicAuthorizationFailedError):
        alice.list_group_offsets({"app": [KTP("orders", 0)]})
    grant(b, binding("alice", TOPIC, "orders", Op.DESCRIBE))
    shown = alice.list_group_offsets({"app": None})["app"]
    assert {tp: om.offset for tp, om in shown.items()} == {KTP("orders", 0): 1}  # `other` stays hidden
    named = alice.list_group_offsets({"app": [KTP("orders", 0)]})["app"]
    assert named[KTP("orders", 0)].offset == 1


# ------------------------------------------------------------------------ group admin


def test_list_groups_shows_what_the_principal_may_describe(secured, kp_admin):
    b = secured.bootstrap
    for group in ("g-one", "g-two", "g-three"):
        admin_commit(b, group, [TopicPartition("orders", 0, 1)])

    def listed() -> set[str]:
        return {g["group_id"] for g in kp_admin(b, "alice").list_groups()}

    assert listed() == set()
    grant(b, binding("alice", GROUP, "g-two", Op.READ))  # READ implies DESCRIBE
    assert listed() == {"g-two"}
    grant(b, binding("alice", CLUSTER, "kafka-cluster", Op.DESCRIBE))
    assert listed() == {"g-one", "g-two", "g-three"}


def test_describe_and_delete_groups_need_describe_and_delete(secured, kp_admin):
    b = secured.bootstrap
    admin_commit(b, "doomed", [TopicPartition("orders", 0, 1)])
    admin = AdminClient(conf(b, "alice"))
    with pytest.raises(KafkaException) as denied:
        admin.describe_consumer_groups(["doomed"], request_timeout=10)["doomed"].result()
    assert denied.value.args[0].code() == GROUP_DENIED
    with pytest.raises(KafkaException) as denied_missing:  # before existence: no leak
        admin.describe_consumer_groups(["missing"], request_timeout=10)["missing"].result()
    assert denied_missing.value.args[0].code() == GROUP_DENIED
    grant(b, binding("alice", GROUP, "doomed", Op.DESCRIBE))
    assert admin.describe_consumer_groups(["doomed"], request_timeout=10)["doomed"].result().group_id == "doomed"
    with pytest.raises(KafkaException) as no_delete:
        admin.delete_consumer_groups(["doomed"], request_timeout=10)["doomed"].result()
    assert no_delete.value.args[0].code() == GROUP_DENIED
    grant(b, binding("alice", GROUP, "doomed", Op.DELETE))
    admin.delete_consumer_groups(["doomed"], request_timeout=10)["doomed"].result()
    assert "doomed" not in {g["group_id"] for g in kp_admin(b, "admin").list_groups()}


def test_offset_delete_needs_delete_on_the_group_and_read_on_the_topic(secured, kp_admin):
    b = secured.bootstrap
    admin_commit(b, "od", [TopicPartition("orders", 0, 1)])
    alice = kp_admin(b, "alice")
    grant(b, binding("alice", GROUP, "od", Op.DESCRIBE))
    with pytest.raises(kerr.GroupAuthorizationFailedError):
        alice.delete_group_offsets("od", [KTP("orders", 0)])
    grant(b, binding("alice", GROUP, "od", Op.DELETE))
    result = alice.delete_group_offsets("od", [KTP("orders", 0)])
    assert result[KTP("orders", 0)] is kerr.TopicAuthorizationFailedError
    grant(b, binding("alice", TOPIC, "orders", Op.READ))
    assert alice.delete_group_offsets("od", [KTP("orders", 0)])[KTP("orders", 0)] is kerr.NoError
    assert kp_admin(b, "admin").list_group_offsets({"od": None}) == {"od": {}}


# --------------------------------------------------------------------------- producers


def produce_error(bootstrap: str, user: str, topic: str, **extra) -> int:
    errors: list = []
    p = Producer(conf(bootstrap, user, **{"message.timeout.ms": 5000, **extra}))
    p.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    return errors[0].code() if errors and errors[0] is not None else OK


@pytest.mark.parametrize("create_on", ["cluster", "topic"])
def test_auto_create_needs_create_on_the_cluster_or_the_topic(secured, create_on):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "auto-t", Op.WRITE))  # WRITE implies DESCRIBE
    assert produce_error(b, "alice", "auto-t") == TOPIC_DENIED
    assert "auto-t" not in AdminClient(conf(b, "admin")).list_topics(timeout=5).topics
    grant(b, binding("alice", CLUSTER, "kafka-cluster", Op.CREATE) if create_on == "cluster"
          else binding("alice", TOPIC, "auto-t", Op.CREATE))
    assert produce_error(b, "alice", "auto-t") == OK
    assert "auto-t" in AdminClient(conf(b, "admin")).list_topics(timeout=5).topics


def test_idempotent_producer_without_idempotent_write_nor_topic_write_is_31(secured):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "orders", Op.DESCRIBE))  # Metadata passes; InitProducerId decides
    fatal: list = []
    p = Producer(conf(b, "alice", **{"enable.idempotence": True, "error_cb": fatal.append,
                                     "message.timeout.ms": 5000}))
    try:
        p.produce("orders", b"x")
        p.flush(8)
    except KafkaException as exc:  # the fatal error, raised once known
        fatal.append(exc.args[0])
    assert any(e.code() == CLUSTER_DENIED for e in fatal), fatal
    # WRITE on some topic is enough (authorize_by_type), with no IDEMPOTENT_WRITE on the cluster
    grant(b, binding("alice", TOPIC, "orders", Op.WRITE))
    assert produce_error(b, "alice", "orders", **{"enable.idempotence": True}) == OK


def test_transactional_producer_needs_write_on_its_id_and_read_on_the_group(secured):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "orders", Op.WRITE))
    p = Producer(conf(b, "alice", **{"transactional.id": "tx-1"}))
    with pytest.raises(KafkaException) as denied:
        p.init_transactions(10)
    assert denied.value.args[0].code() == TXN_DENIED
    grant(b, binding("alice", TXN, "tx-1", Op.WRITE))
    p = Producer(conf(b, "alice", **{"transactional.id": "tx-1"}))
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("orders", b"in-txn", partition=0)
    c = consumer(b, "admin", "txn-group")
    with pytest.raises(KafkaException) as no_group:
        p.send_offsets_to_transaction([TopicPartition("orders", 0, 1)], c.consumer_group_metadata(), 10)
    assert no_group.value.args[0].code() == GROUP_DENIED
    c.close()


# ---------------------------------------------------------------------- ACL semantics


def consume_error(bootstrap: str, user: str, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
    """Fetch as `user` with kafka-python (no group, so no group ACL is asked): NO_ERROR once a
    record arrives, TOPIC_AUTHORIZATION_FAILED if the fetch is refused, _TIMED_OUT otherwise."""
    c = KafkaConsumer(**kafka_python_conf(bootstrap, user), group_id=None, enable_auto_commit=False)
    c.assign([KTP(topic, partition)])
    c.seek(KTP(topic, partition), 0)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if any(c.poll(timeout_ms=300).values()):
                    return OK
            except kerr.TopicAuthorizationFailedError:
                return TOPIC_DENIED
        return KafkaError._TIMED_OUT
    finally:
        c.close()


def test_prefixed_allow_and_deny_beats_allow(secured):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "ord", Op.READ, pattern=PREFIXED),
          binding("alice", TOPIC, "other", Op.DESCRIBE))  # Metadata passes, Fetch decides
    assert consume_error(b, "alice", "orders") == OK
    assert consume_error(b, "alice", "other") == TOPIC_DENIED
    grant(b, binding("alice", TOPIC, "orders", Op.READ, Perm.DENY))
    assert consume_error(b, "alice", "orders") == TOPIC_DENIED
    assert consume_error(b, "admin", "orders") == OK  # super users pass even a DENY


def test_wildcard_principal_and_topic(secured):
    b = secured.bootstrap
    grant(b, binding("User:*", TOPIC, "*", Op.READ))
    assert consume_error(b, "bob", "other") == OK


def test_consumer_offsets_is_readable_only_with_read_on_it(secured):
    b = secured.bootstrap
    admin_commit(b, "app", [TopicPartition("orders", 0, 1)])
    partition = next(p for p in range(50) if consume_error(b, "admin", "__consumer_offsets", p, 0.3) == OK)
    grant(b, binding("alice", TOPIC, "orders", Op.READ),
          binding("alice", TOPIC, "__consumer_offsets", Op.DESCRIBE))  # Metadata passes, Fetch decides
    assert consume_error(b, "alice", "__consumer_offsets", partition) == TOPIC_DENIED
    grant(b, binding("alice", TOPIC, "__consumer_offsets", Op.READ))
    assert consume_error(b, "alice", "__consumer_offsets", partition) == OK


# ------------------------------------------------------------------------- the CLI


def test_groups_describe_hides_topics_the_principal_may_not_describe(secured, tmp_path):
    b = secured.bootstrap
    admin_commit(b, "cli", [TopicPartition("orders", 0, 1), TopicPartition("other", 0, 1)])
    grant(b, binding("alice", GROUP, "cli", Op.DESCRIBE), binding("alice", TOPIC, "orders", Op.DESCRIBE))
    props = tmp_path / "alice.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     "username=\"alice\" password=\"alice-secret\";\n")
    out = subprocess.run([OFFSETD, "groups", "--bootstrap-server", b, "--describe",
                          "--group", "cli", "--command-config", str(props)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "orders" in out.stdout
    assert "other" not in out.stdout


def test_offsetd_groups_cli_is_reachable():
    """offsetd groups exists with --command-config (the CLI test above depends on both)."""
    out = subprocess.run([OFFSETD, "groups", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert "--command-config" in out.stdout


def test_acls_are_visible_to_a_new_client_at_once(secured):
    b = secured.bootstrap
    grant(b, binding("alice", TOPIC, "orders", Op.READ))
    wait_for(lambda: consume_error(b, "alice", "orders") == OK, timeout=15, message="alice reads orders")


def test_authorized_operations_of_topics_and_groups(secured):
    """Metadata v8+ (describe_topics) and DescribeGroups v3+ fill authorized_operations when asked."""
    b = secured.bootstrap
    admin_commit(b, "ops", [TopicPartition("orders", 0, 1)])
    grant(b, binding("alice", TOPIC, "orders", Op.READ), binding("alice", GROUP, "ops", Op.READ))
    alice = AdminClient(conf(b, "alice"))
    topic = alice.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True,
                                  request_timeout=10)["orders"].result()
    assert set(topic.authorized_operations) == {Op.READ, Op.DESCRIBE}  # READ implies DESCRIBE
    group = alice.describe_consumer_groups(["ops"], include_authorized_operations=True,
                                           request_timeout=10)["ops"].result()
    assert set(group.authorized_operations) == {Op.READ, Op.DESCRIBE}
    grant(b, binding("alice", TOPIC, "orders", Op.ALL))
    topic = alice.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True,
                                  request_timeout=10)["orders"].result()
    assert set(topic.authorized_operations) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
