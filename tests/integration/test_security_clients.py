"""The client matrix against one real `offsetd serve` with SSL, SASL_SSL and SASL_PLAINTEXT
listeners: TLS with confluent-kafka, kafka-python, aiokafka and kcat; SASL PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512 with confluent-kafka, kafka-python and aiokafka; a wrong password is an
authentication error within seconds for every client type (never a hang); a consumer group's
commit seen by `offsetd groups --describe --command-config` over SASL_SSL. The SCRAM users are
stored before the broker starts with `offsetd configs --add-scram` (reference §2.6, §6.4)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import kafka
import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from integration.clients import consume_all, produce

from offsetd.dev.certs import CertFiles, write_certs

PLAIN, SCRAM_256, SCRAM_512 = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_256, SCRAM_512)
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_paul="paul-secret";')
# who logs in with each mechanism (PLAIN users come from the JAAS line, SCRAM ones from the store)
USERS = {PLAIN: ("paul", "paul-secret"), SCRAM_256: ("sam", "sam-secret"), SCRAM_512: ("sara", "sara-secret")}
FAIL_FAST_S = 10.0  # a wrong password must surface well before any client's default timeout


def offsetd(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the `offsetd` command line (the tools) and capture its output."""
    return subprocess.run([sys.executable, "-m", "offsetd.cli", *argv], capture_output=True, text=True,
                          timeout=timeout)


def listener_ports(proc: BrokerProcess) -> dict[str, int]:
    """Listener name -> bound port, from the broker's start-up log."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"listener (\w+) \(\w+\) on [^:]+:(\d+)", proc.log())}


class Secure:
    """The module's broker: its certificates and the bootstrap address of each listener."""

    def __init__(self, proc: BrokerProcess, certs: CertFiles) -> None:
        self.proc, self.certs = proc, certs
        self.ports = listener_ports(proc)

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Secure:
    """A broker with SSL, SASL_SSL and SASL_PLAINTEXT listeners; SCRAM users stored offline first."""
    base = tmp_path_factory.mktemp("secure")
    certs = write_certs(base / "certs", {"alice": ("alice", "A")})
    data = base / "data"
    for mechanism in (SCRAM_256, SCRAM_512):
        for user, password in (USERS[SCRAM_256], USERS[SCRAM_512]):
            done = offsetd("configs", "--log-dirs", str(data), "--add-scram",
                           f"{mechanism}=[name={user},password={password}]")
            assert done.returncode == 0, done.stderr
    overrides = {
        "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker_pem),
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "100",
    }
    proc = BrokerProcess(data, overrides).start()
    try:
        yield Secure(proc, certs)
    finally:
        proc.stop()


def confluent_conf(secure: Secure, listener: str, mechanism: str | None = None, password: str | None = None) -> dict:
    """librdkafka settings for a listener (and a SASL login)."""
    conf: dict[str, str] = {"security.protocol": listener}
    if "SSL" in listener:
        conf["ssl.ca.location"] = str(secure.certs.ca)
    if mechanism:
        user, right = USERS[mechanism]
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password or right})
    return conf


def kafka_python_conf(secure: Secure, listener: str, mechanism: str | None = None, password: str | None = None) -> dict:
    """kafka-python (and aiokafka) keyword arguments for the same."""
    conf: dict[str, object] = {"security_protocol": listener}
    if mechanism:
        user, right = USERS[mechanism]
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": password or right})
    return conf


def aiokafka_conf(secure: Secure, listener: str, mechanism: str | None = None, password: str | None = None) -> dict:
    from aiokafka.helpers import create_ssl_context

    conf = kafka_python_conf(secure, listener, mechanism, password)
    if "SSL" in listener:
        conf["ssl_context"] = create_ssl_context(cafile=str(secure.certs.ca))
    return conf


def round_trip_confluent(secure: Secure, listener: str, mechanism: str | None, topic: str) -> list[bytes]:
    conf = confluent_conf(secure, listener, mechanism)
    bootstrap = secure.bootstrap(listener)
    produce(bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(3)], **conf)
    return [m.value() for m in consume_all(bootstrap, topic, [0], 3, **conf)]


def round_trip_kafka_python(secure: Secure, listener: str, mechanism: str | None, topic: str) -> list[bytes]:
    conf = kafka_python_conf(secure, listener, mechanism)
    if "SSL" in listener:
        conf["ssl_cafile"] = str(secure.certs.ca)
    producer = kafka.KafkaProducer(bootstrap_servers=secure.bootstrap(listener), **conf)
    for i in range(3):
        producer.send(topic, f"v{i}".encode(), partition=0).get(timeout=15)
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=secure.bootstrap(listener), consumer_timeout_ms=15000,
                                   auto_offset_reset="earliest", **conf)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    values = [m.value for _, m in zip(range(3), consumer)]
    consumer.close()
    return values


def round_trip_aiokafka(secure: Secure, listener: str, mechanism: str | None, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as AioTP

    async def run() -> list[bytes]:
        conf = aiokafka_conf(secure, listener, mechanism)
        producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap(listener), **conf)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"v{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=secure.bootstrap(listener), auto_offset_reset="earliest",
                                    **conf)
        await consumer.start()
        try:
            consumer.assign([AioTP(topic, 0)])
            got: list[bytes] = []
            async with asyncio.timeout(20):
                while len(got) < 3:
                    batch = await consumer.getmany(timeout_ms=1000)
                    got += [m.value for messages in batch.values() for m in messages]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def round_trip_kcat(secure: Secure, listener: str, mechanism: str | None, topic: str) -> list[bytes]:
    settings = [a for k, v in confluent_conf(secure, listener, mechanism).items() for a in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", secure.bootstrap(listener), *settings, "-t", topic, "-p", "0"]
    put = subprocess.run([*base, "-P"], input="v0\nv1\nv2\n", capture_output=True, text=True, timeout=30)
    assert put.returncode == 0, put.stderr
    got = subprocess.run([*base, "-C", "-o", "beginning", "-c", "3", "-e"], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    return [line.encode() for line in got.stdout.splitlines()]


CLIENTS = {"confluent": round_trip_confluent, "kafka-python": round_trip_kafka_python,
           "aiokafka": round_trip_aiokafka, "kcat": round_trip_kcat}


def _create(secure: Secure, topic: str) -> None:
    """Create a one-partition topic over the SSL listener (no ACLs on this broker)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": secure.bootstrap("SSL"), **confluent_conf(secure, "SSL")})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(15)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_tls_round_trip(secure: Secure, client: str) -> None:
    topic = f"tls-{client}"
    _create(secure, topic)
    assert CLIENTS[client](secure, "SSL", None, topic) == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_sasl_round_trip(secure: Secure, client: str, mechanism: str, listener: str) -> None:
    topic = f"sasl-{client}-{mechanism}-{listener}".lower()
    _create(secure, topic)
    assert CLIENTS[client](secure, listener, mechanism, topic) == [b"v0", b"v1", b"v2"]
    assert f"authenticated as User:{USERS[mechanism][0]}" in secure.proc.log()


def _confluent_wrong_password(secure: Secure, listener: str, mechanism: str) -> str:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": secure.bootstrap(listener), "error_cb": errors.append,
                         **confluent_conf(secure, listener, mechanism, "wrong")})
    deadline = time.monotonic() + FAIL_FAST_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    return f"{errors[0].name()} {errors[0].str()}"


class _Records(logging.Handler):
    """Collects a library logger's messages (kafka-python and aiokafka log the broker's SASL error
    and raise a generic connection error)."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(name)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> "_Records":
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)


# kafka-python 3.0.12 leaves the IO thread of a client whose constructor raised running (it keeps
# retrying the login for the rest of the session), so the attempt runs in a process of its own.
_KAFKA_PYTHON_LOGIN = """
import json, logging, sys
import kafka
lines = []
class Lines(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("kafka").addHandler(Lines())
logging.getLogger("kafka").setLevel(logging.INFO)
try:
    kafka.KafkaAdminClient(**json.loads(sys.argv[1]))
except kafka.errors.KafkaError as exc:
    print(type(exc).__name__, exc, *lines)
else:
    print("logged in")
"""


def _kafka_python_wrong_password(secure: Secure, listener: str, mechanism: str) -> str:
    """kafka-python retries a failed login with back-off until its bootstrap timeout, then raises;
    the broker's SASL error is in its log."""
    conf = kafka_python_conf(secure, listener, mechanism, "wrong")
    if "SSL" in listener:
        conf["ssl_cafile"] = str(secure.certs.ca)
    conf.update(bootstrap_servers=secure.bootstrap(listener), bootstrap_timeout_ms=3000, request_timeout_ms=3000)
    done = subprocess.run([sys.executable, "-c", _KAFKA_PYTHON_LOGIN, json.dumps(conf)], capture_output=True,
                          text=True, timeout=FAIL_FAST_S)
    return done.stdout + done.stderr[-2000:]


def _aiokafka_wrong_password(secure: Secure, listener: str, mechanism: str) -> str:
    """aiokafka gives up on the first failed bootstrap; the SASL error is in its log."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    async def run() -> str:
        producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap(listener),
                                    request_timeout_ms=int(FAIL_FAST_S * 1000),
                                    **aiokafka_conf(secure, listener, mechanism, "wrong"))
        try:
            await producer.start()
        except AioKafkaError as exc:
            return f"{type(exc).__name__} {exc}"
        finally:
            await producer.stop()
        raise AssertionError("aiokafka started with a wrong password")

    with _Records("aiokafka") as records:
        return asyncio.run(run()) + " " + " ".join(records.lines)


WRONG_PASSWORD = {"confluent": _confluent_wrong_password, "kafka-python": _kafka_python_wrong_password,
                  "aiokafka": _aiokafka_wrong_password}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", sorted(WRONG_PASSWORD))
def test_wrong_password_is_an_authentication_error_fast(secure: Secure, client: str, mechanism: str) -> None:
    started = time.monotonic()
    failure = WRONG_PASSWORD[client](secure, "SASL_SSL", mechanism)
    assert time.monotonic() - started < FAIL_FAST_S
    assert re.search(r"SaslAuthenticationFailed|SASL_AUTHENTICATION_FAILED|_AUTHENTICATION", failure), failure
    assert "invalid credentials" in failure or "Invalid username or password" in failure, failure


def java_client_properties(path: Path, secure: Secure, mechanism: str) -> Path:
    """A Java-style client.properties (what one gives kafka-*.sh) for a SASL_SSL login."""
    user, password = USERS[mechanism]
    module = "plain.PlainLoginModule" if mechanism == PLAIN else "scram.ScramLoginModule"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.certs.ca}\n"
        "ssl.endpoint.identification.algorithm=https\n")
    return path


def test_groups_describe_over_sasl_ssl_shows_a_commit(secure: Secure, tmp_path) -> None:
    topic, group = "sasl-ssl-commits", "sasl-ssl-app"
    _create(secure, topic)
    conf = confluent_conf(secure, "SASL_SSL", SCRAM_512)
    produce(secure.bootstrap("SASL_SSL"), topic, [{"value": b"x"} for _ in range(5)], **conf)
    consumer = Consumer({"bootstrap.servers": secure.bootstrap("SASL_SSL"), "group.id": group,
                         "enable.auto.commit": False, **conf})
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()
    props = java_client_properties(tmp_path / "client.properties", secure, SCRAM_512)
    out = offsetd("groups", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(props),
                  "--describe", "--group", group)
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith(group))
    assert row[:5] == [group, topic, "0", "4", "5"]
    # kafka-python under the same file: `offsetd transactions list` connects over SASL_SSL
    listed = offsetd("transactions", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config",
                     str(java_client_properties(tmp_path / "plain.properties", secure, PLAIN)), "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]


def test_tools_with_a_wrong_password_fail_fast_and_say_so(secure: Secure, tmp_path) -> None:
    props = java_client_properties(tmp_path / "client.properties", secure, SCRAM_256)
    props.write_text(props.read_text().replace("sam-secret", "nope"))
    for tool in (["acls", "--list"], ["configs", "--entity-type", "users", "--describe"], ["groups", "--list"],
                 ["groups", "--describe", "--all-groups"], ["lag", "--once", "--set", "lag.alert.lag.threshold=100"], ["transactions", "list"]):
        started = time.monotonic()
        out = offsetd(*tool, "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(props),
                      "--timeout", "30000")
        assert out.returncode == 1 and time.monotonic() - started < FAIL_FAST_S + 5, (tool, out)
        assert re.search(r"(?i)authentication", out.stdout + out.stderr), (tool, out)


def test_acl_tool_without_an_authorizer_is_security_disabled(secure: Secure, tmp_path) -> None:
    props = java_client_properties(tmp_path / "client.properties", secure, PLAIN)
    out = offsetd("acls", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(props),
                  "--list")
    assert out.returncode == 1
    assert out.stdout.startswith("Error while executing ACL command: SECURITY_DISABLED"), out.stdout
