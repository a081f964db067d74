"""SSL listeners against real `offsetd serve` processes and real clients (confluent-kafka,
kafka-python, aiokafka, kcat): PEM, inline PEM and PKCS12 keystores, client certificates
(none / requested / required), the principal taken from the certificate's DN, and a broker with
a PLAINTEXT and an SSL listener whose Metadata answers each listener's own endpoint."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path

import kafka
import pytest
from broker_process import BrokerProcess, wait_for
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.index import load_request_schema
from integration.clients import consume_all, create_topic, produce
from raw_client import RawClient

from offsetd.dev.certs import KEYSTORE_PASSWORD, CertFiles, write_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> CertFiles:
    """A CA, the broker's certificate for localhost/127.0.0.1 and clients alice and bob."""
    return write_certs(tmp_path_factory.mktemp("certs"), {"alice": ("alice", "A"), "bob": ("bob", "A")})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ssl_overrides(certs: CertFiles, listeners: str = "SSL://127.0.0.1:0", **extra: str) -> dict[str, str]:
    """A broker whose listeners include SSL, with a PEM keystore and the test CA as truststore."""
    return {"listeners": listeners, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker_pem),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca), **extra}


def confluent_tls(certs: CertFiles, client: str | None = None, **extra: str) -> dict[str, str]:
    """librdkafka settings for SSL (with `client`'s certificate if given)."""
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca), **extra}
    if client is not None:
        cert, key = certs.clients[client]
        conf.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return conf


def listener_ports(proc: BrokerProcess) -> dict[str, int]:
    """Listener name -> bound port, from the broker's start-up log."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"listener (\w+) \(\w+\) on [^:]+:(\d+)", proc.log())}


def round_trip(bootstrap: str, topic: str, conf: dict[str, str], count: int = 5) -> None:
    """Create a topic, produce `count` messages and read them back, all with `conf`."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(15)
    produce(bootstrap, topic, [{"value": f"m{i}".encode()} for i in range(count)], **conf)
    got = consume_all(bootstrap, topic, [0], count, **conf)
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(count)]


def test_confluent_produces_and_consumes_over_tls(broker_factory, certs) -> None:
    proc = broker_factory(ssl_overrides(certs))
    round_trip(proc.bootstrap, "tls-plain", confluent_tls(certs))
    # the SSL listener speaks only TLS: a plaintext Kafka request gets no answer
    with RawClient(proc.bootstrap, timeout=5) as raw:
        raw.send_frame(raw.encode_request(18, 0, load_request_schema(18, 0)()))
        assert raw.read_frame() is None


def test_client_certificate_gives_the_principal(broker_factory, certs, monkeypatch) -> None:
    monkeypatch.setattr(BrokerProcess, "log_level", "DEBUG")
    proc = broker_factory(ssl_overrides(certs, **{"ssl.client.auth": "required"}))
    round_trip(proc.bootstrap, "tls-mtls", confluent_tls(certs, "alice"))
    wait_for(lambda: "TLS principal User:CN=alice,OU=clients,O=A" in proc.log(), timeout=5,
             message="the principal of alice's certificate in the log")


def test_required_client_certificate_missing_fails_on_the_first_request(broker_factory, certs) -> None:
    proc = broker_factory(ssl_overrides(certs, **{"ssl.client.auth": "required"}))
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as plain:
        with context.wrap_socket(plain, server_hostname="localhost") as tls:
            # TLS 1.3: the client's handshake completes; the broker's refusal arrives with the first read
            header = struct.pack(">hhih", 18, 0, 1, 1) + b"x"
            with pytest.raises((ssl.SSLError, ConnectionError)):
                tls.sendall(struct.pack(">i", len(header)) + header)
                data = tls.recv(4)
                if not data:
                    raise ConnectionError("closed")
    admin = AdminClient({"bootstrap.servers": proc.bootstrap, **confluent_tls(certs)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    # with a certificate the same broker serves
    assert AdminClient({"bootstrap.servers": proc.bootstrap, **confluent_tls(certs, "bob")}).list_topics(
        timeout=10).brokers


def test_kafka_python_over_tls_with_requested_certificate(broker_factory, certs) -> None:
    proc = broker_factory(ssl_overrides(certs, **{"ssl.client.auth": "requested"}))
    cert, key = certs.clients["bob"]
    common = {"bootstrap_servers": proc.bootstrap, "security_protocol": "SSL", "ssl_cafile": str(certs.ca),
              "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    producer = kafka.KafkaProducer(**common)
    for i in range(3):
        producer.send("tls-kp", f"k{i}".encode()).get(timeout=15)
    producer.close()
    # and without a certificate (requested, not required)
    consumer = kafka.KafkaConsumer("tls-kp", bootstrap_servers=proc.bootstrap, security_protocol="SSL",
                                   ssl_cafile=str(certs.ca), auto_offset_reset="earliest",
                                   consumer_timeout_ms=10000)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"k0", b"k1", b"k2"]


def test_aiokafka_over_tls_with_pkcs12_keystore(broker_factory, certs) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    proc = broker_factory(ssl_overrides(certs, **{
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.broker_p12),
        "ssl.keystore.password": KEYSTORE_PASSWORD, "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(certs.truststore_p12), "ssl.truststore.password": KEYSTORE_PASSWORD,
        "ssl.client.auth": "required"}))
    cert, key = certs.clients["alice"]

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=str(certs.ca), certfile=str(cert), keyfile=str(key))
        producer = AIOKafkaProducer(bootstrap_servers=proc.bootstrap, security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait("tls-aio", f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tls-aio", bootstrap_servers=proc.bootstrap, security_protocol="SSL",
                                    ssl_context=context, auto_offset_reset="earliest")
        await consumer.start()
        try:
            got = []
            async with asyncio.timeout(20):
                while len(got) < 3:
                    batch = await consumer.getmany(timeout_ms=1000)
                    got += [m.value for messages in batch.values() for m in messages]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"a0", b"a1", b"a2"]
    # DescribeConfigs never shows the keystore's passwords
    conf = confluent_tls(certs, "alice")
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    admin = AdminClient({"bootstrap.servers": proc.bootstrap, **conf})
    entries = admin.describe_configs([resource])[resource].result(15)
    assert entries["ssl.keystore.password"].value is None and entries["ssl.truststore.password"].value is None
    assert entries["ssl.keystore.type"].value == "PKCS12"


def test_inline_pem_keystore_and_kcat(broker_factory, certs) -> None:
    key = certs.broker_key.read_text()
    chain = certs.broker_cert.read_text()
    proc = broker_factory({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                           "ssl.keystore.key": key, "ssl.keystore.certificate.chain": chain})
    out = subprocess.run(["kcat", "-b", proc.bootstrap, "-X", "security.protocol=SSL", "-X",
                          f"ssl.ca.location={certs.ca}", "-L", "-m", "10"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"broker 1 at 127.0.0.1:{proc.port}" in out.stdout


def test_plaintext_and_ssl_listeners_each_advertise_their_own_endpoint(broker_factory, certs) -> None:
    plain_port, tls_port = free_port(), free_port()
    proc = broker_factory(ssl_overrides(
        certs, listeners=f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{tls_port}",
        **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://localhost:{tls_port}"}))
    assert listener_ports(proc) == {"PLAINTEXT": plain_port, "SSL": tls_port}
    plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain_port}"}).list_topics(timeout=10)
    assert (plain.brokers[1].host, plain.brokers[1].port) == ("127.0.0.1", plain_port)
    tls = AdminClient({"bootstrap.servers": f"localhost:{tls_port}", **confluent_tls(certs)}).list_topics(timeout=10)
    assert (tls.brokers[1].host, tls.brokers[1].port) == ("localhost", tls_port)
    # FindCoordinator too: the group's coordinator on each listener's own port
    create_topic(f"127.0.0.1:{plain_port}", "two-listeners")
    for bootstrap, conf, port in ((f"127.0.0.1:{plain_port}", {}, plain_port),
                                  (f"localhost:{tls_port}", confluent_tls(certs), tls_port)):
        produce(bootstrap, "two-listeners", [{"value": b"x"}], **conf)
        consume_all(bootstrap, "two-listeners", [0], 1, **conf)
        admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
        described = admin.describe_consumer_groups(["itest"])["itest"].result(15)
        assert described.coordinator.port == port


@pytest.mark.parametrize("overrides,message", [
    ({"ssl.keystore.type": "JKS"}, "keytool -importkeystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.password": "x"}, "ssl.keystore.password"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "ssl.cipher.suites"),
    ({"ssl.principal.mapping.rules": "RULE:broken"}, "ssl.principal.mapping.rules"),
])
def test_bad_tls_settings_stop_start_up_naming_the_key(tmp_path, certs, overrides, message) -> None:
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    settings = ssl_overrides(certs, **overrides)
    if overrides.get("ssl.keystore.type") == "JKS":
        settings["ssl.keystore.location"] = str(jks)
    args = [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]
    out = subprocess.run([*_serve(tmp_path), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_cipher_suites_by_iana_name(broker_factory, certs) -> None:
    proc = broker_factory(ssl_overrides(certs, **{
        "ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}))
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as plain:
        with context.wrap_socket(plain, server_hostname="localhost") as tls:
            assert tls.version() == "TLSv1.2"
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


def _serve(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "offsetd.cli", "serve", "--override", f"log.dirs={tmp_path / 'data'}"]


def test_cluster_brokers_register_every_listener(pg_dsn, cluster_factory, certs) -> None:
    from integration.cluster_helpers import FAST

    cluster = cluster_factory(pg_dsn, overrides={**FAST, **ssl_overrides(
        certs, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")})
    ports = {n: listener_ports(cluster.broker(n)) for n in cluster.node_ids}
    plain = f"127.0.0.1:{ports[1]['PLAINTEXT']}"
    tls = f"127.0.0.1:{ports[2]['SSL']}"

    def endpoints(bootstrap: str, conf: dict[str, str]) -> dict[int, int]:
        md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=10)
        return {b.id: b.port for b in md.brokers.values()}

    wait_for(lambda: len(endpoints(plain, {})) == 3, timeout=30, message="three brokers in Metadata")
    assert endpoints(plain, {}) == {n: ports[n]["PLAINTEXT"] for n in (1, 2, 3)}
    assert endpoints(tls, confluent_tls(certs)) == {n: ports[n]["SSL"] for n in (1, 2, 3)}
    round_trip(tls, "cluster-tls", confluent_tls(certs), count=10)


def test_renewed_keystore_file_serves_new_connections_without_restart(broker_factory, certs, tmp_path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(certs.broker_pem.read_bytes())
    proc = broker_factory(ssl_overrides(certs, **{"ssl.keystore.location": str(keystore)}))

    def served_by(ca: Path) -> bool:
        context = ssl.create_default_context(cafile=str(ca))
        try:
            with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as plain:
                with context.wrap_socket(plain, server_hostname="localhost"):
                    return True
        except ssl.SSLError:
            return False

    assert served_by(certs.ca)
    renewed = write_certs(tmp_path / "renewed", {})
    keystore.write_bytes(renewed.broker_pem.read_bytes())
    wait_for(lambda: served_by(renewed.ca), timeout=10, message="the renewed certificate")
    assert not served_by(certs.ca)
    round_trip(proc.bootstrap, "tls-renewed", {"security.protocol": "SSL", "ssl.ca.location": str(renewed.ca)})


def test_principal_mapping_rules_shape_the_principal(broker_factory, certs, monkeypatch) -> None:
    monkeypatch.setattr(BrokerProcess, "log_level", "DEBUG")
    proc = broker_factory(ssl_overrides(certs, **{
        "ssl.client.auth": "required", "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/U,DEFAULT"}))
    round_trip(proc.bootstrap, "tls-mapped", confluent_tls(certs, "bob"))
    wait_for(lambda: "TLS principal User:BOB" in proc.log(), timeout=5, message="the mapped principal in the log")


def test_broker_table_from_before_listeners_is_migrated(pg_dsn, cluster_factory) -> None:
    """A database whose offsetd_broker has no endpoints column (an older offsetd), holding a live
    row of such a broker: the column is added at start, and the old row is served by host/port."""
    from integration.cluster_helpers import FAST, pg_rows

    pg_rows(pg_dsn, "CREATE TABLE offsetd_broker (node_id int PRIMARY KEY, incarnation uuid NOT NULL, "
                    "host text NOT NULL, port int NOT NULL, expires_at timestamptz NOT NULL)")
    pg_rows(pg_dsn, "INSERT INTO offsetd_broker VALUES (7, gen_random_uuid(), 'old-host', 9999, "
                    "now() + interval '1 hour')")
    cluster = cluster_factory(pg_dsn, size=1, overrides=FAST)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
        1: ("127.0.0.1", cluster.broker(1).port), 7: ("old-host", 9999)}
    assert pg_rows(pg_dsn, "SELECT endpoints::text FROM offsetd_broker WHERE node_id = 7") == [("{}",)]
