"""ACLs and SCRAM credentials are kept: across a restart (local mode, `<log.dirs>/security/`, derived
keys only) and across brokers (cluster mode, PostgreSQL: what one broker stores another enforces)."""

from __future__ import annotations

import json

import pytest
from broker_process import wait_for
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from integration.acl_helpers import CLUSTER, TOPIC, TXN, AclOperation as Op, all_acls, binding, conf, grant, revoke, secured_overrides
from integration.cluster_helpers import FAST

SCRAM = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
# enough partitions that rendezvous placement puts some on each of two brokers (all on one: 2^-11)
PARTITIONS = 12


def scram_conf(bootstrap: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password}


def set_password(bootstrap: str, user: str, password: str, iterations: int = 4096) -> None:
    """AlterUserScramCredentials as the admin (the client salts and hashes; the broker derives keys)."""
    admin = AdminClient(conf(bootstrap, "admin"))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, iterations),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=10).values():
        future.result()


def described_scram(bootstrap: str, user: str):
    """DescribeUserScramCredentials of one user (retried: right after a restart librdkafka may time
    out looking up the controller)."""
    admin = AdminClient(conf(bootstrap, "admin"))

    def attempt():
        try:
            return admin.describe_user_scram_credentials([user], request_timeout=10)[user].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._TIMED_OUT:
                raise
            return None
    return wait_for(attempt, timeout=30, message=f"DescribeUserScramCredentials of {user}")


def scram_login_works(bootstrap: str, user: str, password: str) -> bool:
    try:
        AdminClient(scram_conf(bootstrap, user, password)).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def test_acls_and_scram_credentials_survive_a_restart(broker_factory):
    proc = broker_factory(secured_overrides(**SCRAM))
    b = proc.bootstrap
    grant(b, binding("carol", TOPIC, "orders", Op.READ))
    set_password(b, "carol", "carol-secret", iterations=8192)
    assert scram_login_works(b, "carol", "carol-secret")
    assert not scram_login_works(b, "carol", "wrong")
    security = proc.data_dir / "security"
    creds = (security / "scram-credentials.json").read_text()
    assert "carol-secret" not in creds
    assert json.loads(creds)["users"]["carol"]["SCRAM-SHA-256"]["iterations"] == 8192
    assert len(json.loads((security / "acls.json").read_text())["acls"]) == 1

    proc.restart()
    b = proc.bootstrap  # a listener on port 0 gets a new port
    assert [(a.name, a.principal, a.operation) for a in all_acls(b)] == [("orders", "User:carol", Op.READ)]
    assert scram_login_works(b, "carol", "carol-secret")
    info = described_scram(b, "carol").scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(ScramMechanism.SCRAM_SHA_256, 8192)]

    # deleted credentials and ACLs stay deleted after a restart too
    admin = AdminClient(conf(b, "admin"))
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)], request_timeout=10).values():
        future.result()
    assert len(revoke(b, binding("carol", TOPIC, "orders", Op.READ))) == 1
    proc.restart()
    b = proc.bootstrap
    assert all_acls(b) == []
    assert not scram_login_works(b, "carol", "carol-secret")


def test_scram_apis_need_the_cluster_acls(broker_factory):
    proc = broker_factory(secured_overrides(**SCRAM))
    alice = AdminClient(conf(proc.bootstrap, "alice"))
    upsert = UserScramCredentialUpsertion("mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    with pytest.raises(KafkaException) as denied:
        for future in alice.alter_user_scram_credentials([upsert], request_timeout=10).values():
            future.result()
    assert denied.value.args[0].code() == 31
    assert not scram_login_works(proc.bootstrap, "mallory", "pw")
    grant(proc.bootstrap, binding("alice", CLUSTER, "kafka-cluster", Op.ALTER))
    for future in alice.alter_user_scram_credentials([upsert], request_timeout=10).values():
        future.result()
    assert scram_login_works(proc.bootstrap, "mallory", "pw")


def test_cluster_an_acl_created_through_one_broker_is_enforced_by_another(pg_dsn, cluster_factory):
    cluster = cluster_factory(pg_dsn, size=2, overrides={**FAST, **secured_overrides(**SCRAM)})
    first, second = cluster.broker(1).bootstrap, cluster.broker(2).bootstrap
    wait_for(lambda: len(AdminClient(conf(second, "admin")).list_topics(timeout=10).brokers) == 2, timeout=30,
             message="both brokers registered")
    admin = AdminClient(conf(first, "admin"))
    for future in admin.create_topics([NewTopic("shared", 1, 1)]).values():
        future.result()

    def visible_to_alice_at(bootstrap: str) -> bool:  # Metadata answered by that broker itself
        return "shared" in AdminClient(conf(bootstrap, "alice")).list_topics(timeout=10).topics

    assert not visible_to_alice_at(second)
    grant(first, binding("alice", TOPIC, "shared", Op.DESCRIBE))
    wait_for(lambda: visible_to_alice_at(second), timeout=15, message="broker 2 enforcing broker 1's ACL")
    assert [a.name for a in all_acls(second)] == ["shared"]
    set_password(first, "dave", "dave-secret")
    wait_for(lambda: scram_login_works(second, "dave", "dave-secret"), timeout=15,
             message="broker 2 knowing broker 1's SCRAM credential")
    assert len(revoke(second, binding("alice", TOPIC, "shared", Op.DESCRIBE))) == 1
    wait_for(lambda: not visible_to_alice_at(first), timeout=15, message="broker 1 dropping the ACL")


def test_cluster_transactions_under_acls_commit_across_brokers(pg_dsn, cluster_factory):
    """Markers go from the transaction coordinator to the other brokers (WriteTxnMarkers, which needs
    CLUSTER_ACTION): the peers authenticate with the listener's JAAS user, the super user admin."""
    from confluent_kafka import Consumer, Producer

    cluster = cluster_factory(pg_dsn, size=2, overrides={**FAST, **secured_overrides()})
    b = cluster.bootstrap
    wait_for(lambda: len(AdminClient(conf(b, "admin")).list_topics(timeout=10).brokers) == 2, timeout=30,
             message="both brokers registered")
    admin = AdminClient(conf(b, "admin"))
    for future in admin.create_topics([NewTopic("spread", PARTITIONS, 1)]).values():
        future.result()
    wait_for(lambda: len({p.leader for p in admin.list_topics(timeout=10).topics["spread"].partitions.values()
                          if p.leader >= 0}) == 2, timeout=30, message="partitions led by both brokers")
    grant(b, binding("alice", TOPIC, "spread", Op.WRITE), binding("alice", TXN, "tx-a", Op.WRITE))
    producer = Producer(conf(b, "alice", **{"transactional.id": "tx-a"}))
    producer.init_transactions(20)
    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce("spread", f"m{partition}".encode(), partition=partition)
    producer.commit_transaction(20)
    consumer = Consumer(conf(b, "admin", **{"group.id": "reader", "isolation.level": "read_committed",
                                            "auto.offset.reset": "earliest"}))
    consumer.subscribe(["spread"])
    seen: set[bytes] = set()

    def all_committed() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(msg.value())
        return len(seen) == PARTITIONS

    wait_for(all_committed, timeout=30, message="every committed record")
    consumer.close()
    assert seen == {f"m{p}".encode() for p in range(PARTITIONS)}
