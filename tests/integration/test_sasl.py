"""SASL listeners against real `offsetd serve` processes: PLAIN and SCRAM-SHA-256/512 with
confluent-kafka, kafka-python and aiokafka, wrong passwords (an authentication error, a closed
connection, never data), the pre-authentication gate, v0 handshakes with raw token frames,
re-authentication (KIP-368) and expiry, SASL_SSL, and start-up errors (reference security.md §2)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import re
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import kafka
import pytest
import scramp
from broker_process import BrokerProcess, wait_for
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from integration.clients import consume_all, produce
from integration.test_tls import certs, round_trip, ssl_overrides  # noqa: F401 (certs: a fixture)
from kio.index import load_request_schema
from raw_client import RawClient

from offsetd.dev.broker import LineReader
from offsetd.dev.certs import CertFiles

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_USERS = {"carol": "carol-secret", "dan=,x": "dan-secret"}  # '=' and ',' are escaped on the wire
PLAIN, SCRAM_256, SCRAM_512 = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS, PRODUCE = 17, 36, 3, 18, 0
ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 34, 33, 58


def write_scram_users(log_dir: Path, users: dict[str, str], mechanisms=(SCRAM_256, SCRAM_512)) -> None:
    """SCRAM credentials (derived keys only) where the broker's local credential store keeps them."""
    stored: dict[str, dict[str, dict]] = {}
    for user, password in users.items():
        for mechanism in mechanisms:
            salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
                password, iteration_count=4096)
            stored.setdefault(user, {})[mechanism] = {
                "salt": base64.b64encode(salt).decode(), "stored_key": base64.b64encode(stored_key).decode(),
                "server_key": base64.b64encode(server_key).decode(), "iterations": iterations}
    (log_dir / "security").mkdir(parents=True, exist_ok=True)
    (log_dir / "security" / "scram-credentials.json").write_text(json.dumps({"version": 1, "users": stored}))


def sasl_broker(broker_factory, tmp_path: Path, protocol: str = "SASL_PLAINTEXT",
                mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", name: str = "data", **extra: str) -> BrokerProcess:
    """A broker with one SASL listener, PLAIN users admin/alice and SCRAM users carol and 'dan=,x'."""
    write_scram_users(tmp_path / name, SCRAM_USERS)
    overrides = {"listeners": f"{protocol}://127.0.0.1:0", "sasl.enabled.mechanisms": mechanisms,
                 f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": JAAS, **extra}
    return broker_factory(overrides, name=name)


def confluent_sasl(mechanism: str, user: str, password: str, protocol: str = "SASL_PLAINTEXT", **extra) -> dict:
    return {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password, **extra}


def handshake(raw: RawClient, mechanism: str, version: int = 1):
    return raw.call(SASL_HANDSHAKE, version, load_request_schema(SASL_HANDSHAKE, version)(mechanism=mechanism))


def authenticate(raw: RawClient, token: bytes, version: int = 2):
    return raw.call(SASL_AUTHENTICATE, version, load_request_schema(SASL_AUTHENTICATE, version)(auth_bytes=token))


def metadata(raw: RawClient):
    return raw.call(METADATA, 1, load_request_schema(METADATA, 1)(topics=[]))


def test_plain_and_scram_with_confluent(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path)
    round_trip(proc.bootstrap, "sasl-plain", confluent_sasl(PLAIN, "alice", "alice-secret"))
    for mechanism in (SCRAM_256, SCRAM_512):
        conf = confluent_sasl(mechanism, "carol", "carol-secret")
        got = consume_all(proc.bootstrap, "sasl-plain", [0], 5, **conf)
        assert len(got) == 5
    produce(proc.bootstrap, "sasl-plain", [{"value": b"dan"}], **confluent_sasl(SCRAM_512, "dan=,x", "dan-secret"))
    wait_for(lambda: "authenticated as User:dan=,x" in proc.log(), timeout=5, message="dan's principal")
    # kcat (PLAIN: the system's librdkafka 2.0.2 repeats the client nonce in its SCRAM client-final)
    kcat = subprocess.run(["kcat", "-b", proc.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X",
                           f"sasl.mechanisms={PLAIN}", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret",
                           "-C", "-t", "sasl-plain", "-o", "beginning", "-e", "-q"],
                          capture_output=True, text=True, timeout=30)
    assert kcat.returncode == 0 and kcat.stdout.split() == [f"m{i}" for i in range(5)] + ["dan"], kcat.stderr


def test_plain_and_scram_with_kafka_python(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path)
    for mechanism, user, password in ((PLAIN, "alice", "alice-secret"), (SCRAM_256, "carol", "carol-secret"),
                                      (SCRAM_512, "carol", "carol-secret")):
        common = {"bootstrap_servers": proc.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                  "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
        producer = kafka.KafkaProducer(**common)
        producer.send("sasl-kp", mechanism.encode()).get(timeout=15)
        producer.close()
    consumer = kafka.KafkaConsumer("sasl-kp", auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                   **common)  # type: ignore[possibly-undefined]
    values = [m.value for _, m in zip(range(3), consumer)]
    consumer.close()
    assert values == [b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"]


def test_plain_and_scram_with_aiokafka(broker_factory, tmp_path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    proc = sasl_broker(broker_factory, tmp_path)

    async def run() -> list[bytes]:
        for mechanism, user, password in ((PLAIN, "alice", "alice-secret"), (SCRAM_256, "carol", "carol-secret")):
            producer = AIOKafkaProducer(bootstrap_servers=proc.bootstrap, security_protocol="SASL_PLAINTEXT",
                                        sasl_mechanism=mechanism, sasl_plain_username=user,
                                        sasl_plain_password=password)
            await producer.start()
            try:
                await producer.send_and_wait("sasl-aio", mechanism.encode())
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer("sasl-aio", bootstrap_servers=proc.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism=SCRAM_512, sasl_plain_username="carol",
                                    sasl_plain_password="carol-secret", auto_offset_reset="earliest")
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(20):
                while len(got) < 2:
                    batch = await consumer.getmany(timeout_ms=1000)
                    got += [m.value for messages in batch.values() for m in messages]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"PLAIN", b"SCRAM-SHA-256"]


def test_wrong_password_fails_and_closes_without_data(broker_factory, tmp_path) -> None:
    """(kafka-python retries a refused login until its 30 s bootstrap timeout, as against Kafka: not here.)"""
    proc = sasl_broker(broker_factory, tmp_path, **{"connection.failed.authentication.delay.ms": "200"})
    for mechanism, user in ((PLAIN, "alice"), (SCRAM_256, "carol"), (SCRAM_512, "nobody")):
        errors: list = []
        producer = Producer({"bootstrap.servers": proc.bootstrap, "error_cb": errors.append,
                             **confluent_sasl(mechanism, user, "wrong")})
        wait_for(lambda: producer.poll(0.2) is not None and errors or errors, timeout=15,
                 message=f"{mechanism} authentication error")
        assert any("uthentication" in e.str() for e in errors), errors
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    async def aiokafka_wrong() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=proc.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism=SCRAM_256, sasl_plain_username="carol", sasl_plain_password="x",
                                    request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(aiokafka_wrong())
    with RawClient(proc.bootstrap) as raw:
        assert handshake(raw, PLAIN).error_code == 0
        started = time.monotonic()
        reply = authenticate(raw, b"\0alice\0wrong")
        assert reply.error_code == SASL_AUTHENTICATION_FAILED and reply.auth_bytes == b""
        assert "Invalid username or password" in (reply.error_message or "")
        raw.send_frame(raw.encode_request(METADATA, 1, load_request_schema(METADATA, 1)(topics=None)))
        assert raw.is_closed_by_peer(5) and time.monotonic() - started >= 0.19  # after the delay, no answer


def test_requests_before_authentication_close_the_socket(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path)
    with RawClient(proc.bootstrap) as raw:  # a Produce first: closed, no reply
        body = load_request_schema(PRODUCE, 3)(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
                                                topic_data=())
        raw.send_frame(raw.encode_request(PRODUCE, 3, body))
        assert raw.read_frame() is None
    with RawClient(proc.bootstrap) as raw:  # ApiVersions is allowed (and lists SASL), then nothing else
        versions = raw.call(API_VERSIONS, 0, load_request_schema(API_VERSIONS, 0)())
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2)
        raw.send_frame(raw.encode_request(METADATA, 1, load_request_schema(METADATA, 1)(topics=[])))
        assert raw.read_frame() is None
    with RawClient(proc.bootstrap) as raw:  # after a v1 handshake, anything but SaslAuthenticate closes
        assert handshake(raw, PLAIN).error_code == 0
        raw.send_frame(raw.encode_request(METADATA, 1, load_request_schema(METADATA, 1)(topics=[])))
        assert raw.is_closed_by_peer(5)
    with RawClient(proc.bootstrap) as raw:  # an oversized frame before authentication: closed
        raw.send_raw(struct.pack(">i", 524288 + 1024) + b"\0" * 64)
        assert raw.is_closed_by_peer(5)
    with RawClient(proc.bootstrap) as raw:  # an unknown mechanism: 33 with the enabled list, then closed
        reply = handshake(raw, "GSSAPI")
        assert reply.error_code == UNSUPPORTED_SASL_MECHANISM
        assert list(reply.mechanisms) == [PLAIN, SCRAM_256, SCRAM_512]
        assert raw.is_closed_by_peer(5)
    with RawClient(proc.bootstrap) as raw:  # success, then a second SaslAuthenticate is out of order
        assert handshake(raw, PLAIN).error_code == 0
        ok = authenticate(raw, b"\0alice\0alice-secret", version=1)
        assert ok.error_code == 0 and ok.session_lifetime.total_seconds() == 0
        assert [b.node_id for b in metadata(raw).brokers] == [1]
        assert authenticate(raw, b"\0alice\0alice-secret").error_code == ILLEGAL_SASL_STATE


def test_v0_handshake_switches_to_raw_token_frames(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path)
    with RawClient(proc.bootstrap) as raw:  # PLAIN: the success is a zero-length frame
        assert handshake(raw, PLAIN, version=0).error_code == 0
        raw.send_frame(b"\0alice\0alice-secret")
        assert raw.read_frame() == b""
        assert [b.node_id for b in metadata(raw).brokers] == [1]
    with RawClient(proc.bootstrap) as raw:  # a wrong password: just closed
        assert handshake(raw, PLAIN, version=0).error_code == 0
        raw.send_frame(b"\0alice\0nope")
        assert raw.read_frame() is None
    with RawClient(proc.bootstrap) as raw:  # SCRAM: every challenge in a raw frame (scramp is the client)
        assert handshake(raw, SCRAM_256, version=0).error_code == 0
        client = scramp.ScramClient([SCRAM_256], "carol", "carol-secret")
        raw.send_frame(client.get_client_first().encode())
        client.set_server_first(raw.read_frame().decode())
        raw.send_frame(client.get_client_final().encode())
        client.set_server_final(raw.read_frame().decode())  # raises unless the server proved the password
        assert [b.node_id for b in metadata(raw).brokers] == [1]


def test_scram_over_raw_v1_and_session_expiry(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path, **{
        "connections.max.reauth.ms": "60000",
        "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": "1500"})
    with RawClient(proc.bootstrap) as raw:  # PLAIN: the listener-wide lifetime
        assert handshake(raw, PLAIN).error_code == 0
        assert authenticate(raw, b"\0alice\0alice-secret").session_lifetime.total_seconds() == 60
    with RawClient(proc.bootstrap) as raw:
        assert handshake(raw, SCRAM_512).error_code == 0
        client = scramp.ScramClient([SCRAM_512], "carol", "carol-secret")
        first = authenticate(raw, client.get_client_first().encode())
        assert first.error_code == 0 and first.session_lifetime.total_seconds() == 0
        client.set_server_first(first.auth_bytes.decode())
        final = authenticate(raw, client.get_client_final().encode())
        assert final.error_code == 0 and final.session_lifetime.total_seconds() * 1000 == pytest.approx(1500, abs=5)
        client.set_server_final(final.auth_bytes.decode())
        started = time.monotonic()
        assert metadata(raw).brokers
        wait_for(lambda: time.monotonic() - started > 1.6, timeout=5, message="the session to expire")
        raw.send_frame(raw.encode_request(METADATA, 1, load_request_schema(METADATA, 1)(topics=[])))
        assert raw.read_frame() is None  # expired: closed without a reply


def test_librdkafka_reauthenticates_and_keeps_working(broker_factory, tmp_path) -> None:
    proc = sasl_broker(broker_factory, tmp_path, **{"connections.max.reauth.ms": "2000"})
    conf = confluent_sasl(SCRAM_256, "carol", "carol-secret")
    delivered: list = []
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0, **conf})
    deadline = time.monotonic() + 7
    while time.monotonic() < deadline:
        producer.produce("sasl-reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.25)
    assert producer.flush(15) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    # one connection authenticated again and again (librdkafka at 85-95% of the 2 s lifetime)
    per_connection = Counter(re.findall(r"(\S+) on SASL_PLAINTEXT: authenticated as User:carol", proc.log()))
    assert max(per_connection.values()) >= 3, per_connection


def test_sasl_ssl_with_scram(broker_factory, tmp_path, certs: CertFiles) -> None:  # noqa: F811
    proc = sasl_broker(broker_factory, tmp_path, protocol="SASL_SSL", mechanisms="SCRAM-SHA-512,PLAIN",
                       **{k: v for k, v in ssl_overrides(certs).items() if k != "listeners"})
    conf = confluent_sasl(SCRAM_512, "carol", "carol-secret", protocol="SASL_SSL", **{"ssl.ca.location": str(certs.ca)})
    round_trip(proc.bootstrap, "sasl-ssl", conf)


def test_saslhandshake_on_a_plaintext_listener_is_illegal_state(broker) -> None:
    with RawClient(broker.bootstrap) as raw:
        assert handshake(raw, PLAIN).error_code == ILLEGAL_SASL_STATE
        assert metadata(raw).brokers  # and the connection goes on


@pytest.mark.parametrize("overrides,key", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
    ({"sasl.server.max.receive.size": "0"}, "sasl.server.max.receive.size"),
])
def test_sasl_listener_without_usable_mechanism_stops_start_up(tmp_path, overrides, key) -> None:
    settings = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"), **overrides}
    args = [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]
    out = subprocess.run([sys.executable, "-m", "offsetd.cli", "serve", *args], capture_output=True, text=True,
                         timeout=30)
    lines = [line for line in out.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert out.returncode == 2 and len(lines) == 1 and key in lines[0], out.stderr


def test_three_brokers_with_sasl_listeners(pg_dsn, cluster_factory) -> None:
    from integration.cluster_helpers import FAST

    cluster = cluster_factory(pg_dsn, overrides={
        **FAST, "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS})
    conf = confluent_sasl(PLAIN, "alice", "alice-secret")
    wait_for(lambda: sorted(AdminClient({"bootstrap.servers": cluster.bootstrap, **conf}).list_topics(
        timeout=10).brokers) == [1, 2, 3], timeout=30, message="three brokers in Metadata over SASL")
    md = AdminClient({"bootstrap.servers": cluster.bootstrap, **conf}).list_topics(timeout=10)
    assert {b.id: b.port for b in md.brokers.values()} == {n: cluster.broker(n).port for n in (1, 2, 3)}
    round_trip(cluster.bootstrap, "sasl-cluster", conf, count=20)
    with pytest.raises(KafkaException):  # and no data without authenticating
        AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=3)
    # a transaction over partitions led by every broker: its coordinator reaches the other leaders
    # (WriteTxnMarkers) with SASL PLAIN as the JAAS username, as Kafka brokers do
    _transaction_across_brokers(cluster.bootstrap, "sasl-txn", conf)
    # a share group over the same spread: the leaders read and write share state at its owners
    # (share state APIs 83-87 between brokers), logged in the same way
    _share_group_across_brokers(cluster.bootstrap, "sasl-share", conf)


def _share_group_across_brokers(bootstrap: str, topic: str, conf: dict) -> None:
    """A ShareConsumer reads every record of 6 partitions led by several brokers, accepting each."""
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    create_topic_with(bootstrap, topic, 6, conf)
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    resource = ConfigResource(ResourceType.GROUP, f"{topic}-q", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    for i in range(30):
        producer.produce(topic, f"s{i}".encode(), partition=i % 6)
    assert producer.flush(15) == 0
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-q", **conf})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 45
    try:
        while len(seen) < 30:
            assert time.monotonic() < deadline, f"{len(seen)} of 30 records read"
            for msg in consumer.poll(0.5):
                assert msg.error() is None, msg.error()
                seen.append(msg.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"s{i}".encode() for i in range(30))


def _transaction_across_brokers(bootstrap: str, topic: str, conf: dict) -> None:
    """A committed transaction over 6 partitions, some led by a broker that is not its coordinator
    (which then sends that leader WriteTxnMarkers): read_committed sees all of it."""
    create_topic_with(bootstrap, topic, 6, conf)

    def leaders() -> set[int]:
        found = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(topic, timeout=10)
        return {p.leader for p in found.topics[topic].partitions.values()}
    wait_for(lambda: -1 not in leaders() and len(leaders()) >= 2, timeout=30,
             message=f"{topic} led by several brokers")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-1", **conf})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(6):
        producer.produce(topic, f"t{partition}".encode(), partition=partition)
    producer.commit_transaction(60)
    got = consume_all(bootstrap, topic, list(range(6)), 6, **conf, **{"isolation.level": "read_committed"})
    assert sorted(m.value() for m in got) == [f"t{p}".encode() for p in range(6)]


def test_three_brokers_log_in_to_each_other_with_scram(pg_dsn, cluster_factory) -> None:
    """sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512: brokers send each other transaction
    markers logged in with the SCRAM JAAS username and password (a SCRAM user of the cluster, kept
    in PostgreSQL), the server's signature checked."""
    from integration.cluster_helpers import FAST

    cluster = cluster_factory(pg_dsn, overrides={
        **FAST, "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";',
        "sasl.mechanism.inter.broker.protocol": SCRAM_512})
    conf = confluent_sasl(PLAIN, "admin", "admin-secret")
    wait_for(lambda: sorted(AdminClient({"bootstrap.servers": cluster.bootstrap, **conf}).list_topics(
        timeout=10).brokers) == [1, 2, 3], timeout=30, message="three brokers in Metadata over SASL")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **conf})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("broker", info, b"broker-secret")]).values():
        future.result(15)
    _transaction_across_brokers(cluster.bootstrap, "scram-txn", conf)
    logs = cluster.logs(tail=200_000)
    assert "authenticated as User:broker" in logs, logs


def create_topic_with(bootstrap: str, topic: str, partitions: int, conf: dict) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic].result(15)


def test_secure_example_config_starts_as_documented(tmp_path) -> None:
    """config/secure.properties run from a directory holding `python -m offsetd.dev.certs secure-certs`
    (its listeners moved to free ports): the PLAIN admin works over SASL_SSL, a wrong password does not."""
    example = Path(__file__).resolve().parents[2] / "config" / "secure.properties"
    subprocess.run([sys.executable, "-m", "offsetd.dev.certs", "secure-certs"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=60)
    server = subprocess.Popen([sys.executable, "-m", "offsetd.cli", "serve", str(example), "--override",
                               "listeners=SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines = LineReader(server.stdout)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while (line := lines.readline(deadline)) is not None and "offsetd listening on" not in line:
            pass
        assert line is not None, "the secure example did not start"
        port = int(re.search(r"listening on [^:]+:(\d+)", line).group(1))  # type: ignore[union-attr]
        conf = confluent_sasl(PLAIN, "admin", "admin-secret", protocol="SASL_SSL",
                              **{"ssl.ca.location": str(tmp_path / "secure-certs" / "ca.pem")})
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **conf})
        assert list(admin.list_topics(timeout=10).brokers) == [1]
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **{**conf, "sasl.password": "no"}}).list_topics(
                timeout=3)
    finally:
        server.terminate()
        server.wait(20)


def test_sasl_ssl_client_certificates_only_through_the_listener_prefix(broker_factory, tmp_path,
                                                                       certs: CertFiles) -> None:  # noqa: F811
    tls = {k: v for k, v in ssl_overrides(certs).items() if k != "listeners"}
    conf = confluent_sasl(PLAIN, "alice", "alice-secret", protocol="SASL_SSL", **{"ssl.ca.location": str(certs.ca)})
    cert, key = certs.clients["bob"]
    with_cert = {**conf, "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    # unprefixed: a warning, and no certificate is asked for (KIP-684)
    proc = sasl_broker(broker_factory, tmp_path, protocol="SASL_SSL", mechanisms="PLAIN",
                       **{**tls, "ssl.client.auth": "required"})
    assert "listener.name.sasl_ssl.ssl.client.auth" in proc.log()
    assert AdminClient({"bootstrap.servers": proc.bootstrap, **conf}).list_topics(timeout=10).brokers
    # prefixed: required; the principal is still the SASL user's
    proc = sasl_broker(broker_factory, tmp_path, protocol="SASL_SSL", mechanisms="PLAIN", name="prefixed",
                       **{**tls, "listener.name.sasl_ssl.ssl.client.auth": "required"})
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": proc.bootstrap, **conf}).list_topics(timeout=3)
    assert AdminClient({"bootstrap.servers": proc.bootstrap, **with_cert}).list_topics(timeout=10).brokers
    wait_for(lambda: "authenticated as User:alice" in proc.log(), timeout=5, message="alice's SASL principal")
