"""`offsetd configs` and `offsetd acls` end to end against a broker with a SASL_SSL listener and the
StandardAuthorizer (super user User:admin over PLAIN): a SCRAM user added at runtime connects, a
deleted credential no longer does; ACLs added with kafka-acls' conveniences let a consumer commit
while a principal without them gets GROUP_AUTHORIZATION_FAILED; kafka-acls' output text; the tools
refused with CLUSTER_AUTHORIZATION_FAILED for a principal that is not allowed (reference §2.6, §3)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import kafka
import pytest
from broker_process import BrokerProcess
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from offsetd.dev.certs import CertFiles, write_certs

ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')
AUTH_ERROR_S = 10.0


def offsetd(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offsetd.cli", *argv], capture_output=True, text=True, timeout=60)


class Cluster:
    """The module's broker and the client settings of its users."""

    def __init__(self, proc: BrokerProcess, certs: CertFiles, base: Path) -> None:
        self.proc, self.certs, self.base = proc, certs, base
        self.bootstrap = proc.bootstrap

    def properties(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> str:
        """A Java client.properties for `user` (PLAIN for admin), as kafka-*.sh's --command-config."""
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        path = self.base / f"{user}-{mechanism}.properties"
        path.write_text("security.protocol=SASL_SSL\n"
                        f"sasl.mechanism={mechanism}\n"
                        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
                        f'username="{user}" password="{password}";\n'
                        f"ssl.truststore.type=PEM\nssl.truststore.location={self.certs.ca}\n")
        return str(path)

    def admin_tool(self, tool: str, *argv: str) -> subprocess.CompletedProcess:
        """`offsetd TOOL` as the super user."""
        return offsetd(tool, "--bootstrap-server", self.bootstrap, "--command-config",
                       self.properties("admin", "admin-secret", "PLAIN"), *argv)

    def conf(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings for `user`."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.certs.ca), "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password}

    def add_user(self, user: str, password: str) -> None:
        done = self.admin_tool("configs", "--entity-type", "users", "--entity-name", user, "--alter",
                               "--add-config", f"SCRAM-SHA-512=[password={password}]")
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    base = tmp_path_factory.mktemp("acls-e2e")
    certs = write_certs(base / "certs", {})
    proc = BrokerProcess(base / "data", {
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker_pem), "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "auto.create.topics.enable": "false"}).start()
    try:
        yield Cluster(proc, certs, base)
    finally:
        proc.stop()


def can_connect(conf: dict[str, str]) -> str | None:
    """None if a Metadata request succeeds with `conf`, else the error librdkafka reported."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + AUTH_ERROR_S
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return None
        except KafkaException:
            admin.poll(0)
            if errors:
                return f"{errors[0].name()}: {errors[0].str()}"
    raise AssertionError("neither connected nor refused")


def commit(cluster: Cluster, user: str, group: str, topic: str, offset: int) -> int:
    """OffsetCommit of one offset by a kafka-python consumer logged in as `user`; the Kafka error
    code (0: committed). (librdkafka's consumer reports a denied FindCoordinator from poll() but
    then takes ~35 s to close while its commit waits for a coordinator.)"""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
        security_protocol="SASL_SSL", ssl_cafile=str(cluster.certs.ca), sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user, sasl_plain_password=f"{user}-secret", request_timeout_ms=int(AUTH_ERROR_S * 1000))
    try:
        consumer.commit({kafka.TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
        return 0
    except kafka.errors.KafkaError as exc:
        return getattr(exc, "errno", -1)
    finally:
        consumer.close()


def create_topic(cluster: Cluster, topic: str) -> None:
    admin = AdminClient(cluster.conf("admin", "admin-secret", "PLAIN"))
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(15)


def test_scram_user_added_at_runtime_connects_and_a_deleted_credential_does_not(cluster: Cluster) -> None:
    assert can_connect(cluster.conf("alice", "alice-secret")) is not None  # not a user yet
    added = cluster.admin_tool("configs", "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                               "SCRAM-SHA-512=[iterations=8192,password=alice-secret],SCRAM-SHA-256=[password=alice-256]")
    assert (added.returncode, added.stdout) == (0, "Completed updating config for user alice.\n"), added.stderr
    described = cluster.admin_tool("configs", "--entity-type", "users", "--entity-name", "alice", "--describe")
    assert described.stdout == ("SCRAM credential configs for user-principal 'alice' are "
                                "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"), described.stderr
    assert can_connect(cluster.conf("alice", "alice-secret")) is None
    assert can_connect(cluster.conf("alice", "alice-256", "SCRAM-SHA-256")) is None
    assert "alice" not in cluster.admin_tool("configs", "--entity-type", "users", "--entity-name", "nobody",
                                             "--describe").stdout
    deleted = cluster.admin_tool("configs", "--entity-type", "users", "--entity-name", "alice", "--alter",
                                 "--delete-config", "SCRAM-SHA-512")
    assert deleted.returncode == 0, deleted.stdout
    refused = can_connect(cluster.conf("alice", "alice-secret"))
    assert refused is not None and "uthentication" in refused, refused
    assert can_connect(cluster.conf("alice", "alice-256", "SCRAM-SHA-256")) is None
    everyone = cluster.admin_tool("configs", "--entity-type", "users", "--describe").stdout
    assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096\n" in everyone


def test_a_user_without_cluster_alter_cannot_change_credentials(cluster: Cluster) -> None:
    cluster.add_user("mallory", "mallory-secret")
    out = offsetd("configs", "--bootstrap-server", cluster.bootstrap, "--command-config",
                  cluster.properties("mallory", "mallory-secret"), "--entity-type", "users", "--entity-name",
                  "mallory", "--alter", "--add-config", "SCRAM-SHA-512=[password=other]")
    assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out.stdout, out.stdout + out.stderr
    assert can_connect(cluster.conf("mallory", "mallory-secret")) is None  # unchanged
    listed = offsetd("acls", "--bootstrap-server", cluster.bootstrap, "--command-config",
                     cluster.properties("mallory", "mallory-secret"), "--list")
    assert listed.returncode == 1, listed.stdout
    assert listed.stdout.startswith("Error while executing ACL command: CLUSTER_AUTHORIZATION_FAILED"), listed.stdout


RESOURCE = "ResourcePattern(resourceType={}, name={}, patternType=LITERAL)"


def test_consumer_acls_let_one_principal_commit_and_not_another(cluster: Cluster) -> None:
    create_topic(cluster, "orders")
    cluster.add_user("carol", "carol-secret")
    cluster.add_user("dave", "dave-secret")
    assert commit(cluster, "carol", "app", "orders", 1) == KafkaError.GROUP_AUTHORIZATION_FAILED  # no ACL yet
    added = cluster.admin_tool("acls", "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "orders",
                               "--group", "app")
    assert added.returncode == 0, added.stdout + added.stderr
    topic_acls = (" \t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
                  "\t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) \n\n")
    group_acls = " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) \n\n"
    assert added.stdout == (
        f"Adding ACLs for resource `{RESOURCE.format('TOPIC', 'orders')}`: \n{topic_acls}"
        f"Adding ACLs for resource `{RESOURCE.format('GROUP', 'app')}`: \n{group_acls}"
        f"Current ACLs for resource `{RESOURCE.format('GROUP', 'app')}`: \n{group_acls}"
        f"Current ACLs for resource `{RESOURCE.format('TOPIC', 'orders')}`: \n{topic_acls}")
    assert commit(cluster, "carol", "app", "orders", 7) == 0
    assert commit(cluster, "dave", "app", "orders", 8) == KafkaError.GROUP_AUTHORIZATION_FAILED
    listed = cluster.admin_tool("acls", "--list", "--topic", "orders")
    assert listed.stdout == f"Current ACLs for resource `{RESOURCE.format('TOPIC', 'orders')}`: \n{topic_acls}"
    # the commit landed: offsetd groups (as admin, over SASL_SSL) shows it
    described = cluster.admin_tool("groups", "--describe", "--group", "app")
    assert any(line.split()[:4] == ["app", "orders", "0", "7"] for line in described.stdout.splitlines()), described
    removed = cluster.admin_tool("acls", "--remove", "--allow-principal", "User:carol", "--consumer", "--topic",
                                 "orders", "--group", "app", "--force")
    assert (removed.returncode, removed.stdout) == (0, ""), removed.stdout + removed.stderr
    assert cluster.admin_tool("acls", "--list", "--topic", "orders", "--group", "app").stdout == ""
    assert commit(cluster, "carol", "app", "orders", 9) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_prefixed_group_acl_listed_by_match_and_topic_error_without_topic_acl(cluster: Cluster) -> None:
    create_topic(cluster, "payments")
    cluster.add_user("erin", "erin-secret")
    out = cluster.admin_tool("acls", "--add", "--allow-principal", "User:erin", "--operation", "read", "--group",
                             "batch-", "--resource-pattern-type", "PREFIXED")
    assert out.returncode == 0, out.stdout + out.stderr
    match = cluster.admin_tool("acls", "--list", "--group", "batch-7", "--resource-pattern-type", "match")
    assert match.stdout == ("Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=batch-, "
                            "patternType=PREFIXED)`: \n"
                            " \t(principal=User:erin, host=*, operation=READ, permissionType=ALLOW) \n\n"), match
    # the group passes, the topic does not: TOPIC_AUTHORIZATION_FAILED (the group check came first)
    assert commit(cluster, "erin", "batch-7", "payments", 1) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert cluster.admin_tool("acls", "--add", "--allow-principal", "User:erin", "--operation", "Read",
                              "--topic", "pay", "--resource-pattern-type", "prefixed").returncode == 0
    assert commit(cluster, "erin", "batch-7", "payments", 1) == 0
    assert commit(cluster, "erin", "other", "payments", 1) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_producer_acls_with_idempotent(cluster: Cluster) -> None:
    create_topic(cluster, "events")
    cluster.add_user("frank", "frank-secret")

    def produce() -> str | None:
        failures: list[str] = []
        producer = Producer({**cluster.conf("frank", "frank-secret"), "enable.idempotence": True,
                             "message.timeout.ms": 8000, "error_cb": lambda e: failures.append(e.name())})
        producer.produce("events", b"x", partition=0,
                         on_delivery=lambda err, _m: failures.append(err.name() if err else "ok"))
        producer.flush(12)
        return failures[-1] if failures else None

    assert produce() in ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")
    out = cluster.admin_tool("acls", "--add", "--allow-principal", "User:frank", "--producer", "--topic", "events",
                             "--idempotent")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`" \
        in out.stdout and "operation=IDEMPOTENT_WRITE" in out.stdout
    assert produce() == "ok"
