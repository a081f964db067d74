"""Connection handling against a real broker: idle connections and stalled request frames are
closed on time while active clients are untouched; Kafka's connection limits; ApiVersions bodies
that do not parse close only their own connection; a bad value stops start-up naming the key."""

from __future__ import annotations

import datetime
import json
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.index import load_request_schema

from broker_process import wait_for
from clients import create_topic
from raw_client import RawClient, decode_response

API_VERSIONS, FETCH = 18, 1
IDLE_S, RECEIVE_S = 2.0, 1.0
SWEEP_S = min(IDLE_S, RECEIVE_S) / 10  # ConnectionGuard.sweep_interval_ms for these limits
SLACK_S = 2 * SWEEP_S + 0.5  # a limit is enforced within two sweeps; the rest is scheduling


def _api_versions_v3(client: RawClient, name: str = "itest", version: str = "1.0") -> bytes:
    return client.encode_request(API_VERSIONS, 3, load_request_schema(API_VERSIONS, 3)(
        client_software_name=name, client_software_version=version))


def _works(client: RawClient) -> bool:
    """One ApiVersions round trip succeeds on this connection."""
    return client.call(API_VERSIONS, 0, load_request_schema(API_VERSIONS, 0)()).error_code.value == 0


def _fetch_request(topic: str, max_wait_ms: int):
    cls = load_request_schema(FETCH, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    part = mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return cls(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
               topics=(mod.FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=())


def _connect_from(bootstrap: str, source: str) -> RawClient:
    """A RawClient whose socket is bound to a local source address (another 127.0.0.x)."""
    host, port = bootstrap.rsplit(":", 1)
    client = RawClient.__new__(RawClient)
    client.sock = socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))
    client.correlation_id = 0
    return client


def _port(client: RawClient) -> int:
    return client.sock.getsockname()[1]


class ActiveClients:
    """A producer and an assigned, fetching consumer that commits synchronously, run on a thread
    until stopped; librdkafka's statistics tell whether any of their connections dropped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.stats: dict[str, dict] = {}
        self.errors: list[object] = []
        self.delivered = 0
        self.commits = 0
        self._stop = threading.Event()
        common = {"bootstrap.servers": bootstrap, "statistics.interval.ms": 100,
                  "error_cb": self.errors.append}
        self.producer = Producer({**common, "linger.ms": 0, "stats_cb": lambda s: self._stat("producer", s)})
        self.consumer = Consumer({**common, "group.id": "active", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200,
                                  "stats_cb": lambda s: self._stat("consumer", s)})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _stat(self, who: str, raw: str) -> None:
        self.stats[who] = json.loads(raw)

    def _delivered(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, b"x", on_delivery=self._delivered)
            self.producer.poll(0.02)  # pacing: a steady trickle of requests, not a flood
            msg = self.consumer.poll(0)
            if msg is not None and msg.error():
                self.errors.append(msg.error())
            self.commits += 1
            self.consumer.commit(offsets=[TopicPartition(self.topic, 0, self.commits)], asynchronous=False)

    def start(self) -> "ActiveClients":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        assert self.producer.flush(10) == 0
        last = {who: self.stats.get(who, {}).get("ts") for who in ("producer", "consumer")}

        def new_round() -> bool:
            self.consumer.poll(0.1)
            self.producer.poll(0)
            return all(self.stats.get(who, {}).get("ts") not in (None, ts) for who, ts in last.items())

        try:
            wait_for(new_round, timeout=5, interval=0,
                     message="a statistics round of both clients after their last request")
        finally:
            self.consumer.close()

    def connection_counts(self) -> dict[str, tuple[int, int]]:
        """(connects, disconnects) per client and broker handle: 'producer 1' (node 1),
        'consumer GroupCoordinator' (librdkafka's logical coordinator handle), ..."""
        return {f"{who} {name.rsplit('/', 1)[-1]}": (b["connects"], b["disconnects"])
                for who, stats in self.stats.items() for name, b in stats["brokers"].items()}


def test_idle_and_stalled_connections_close_on_time_active_clients_untouched(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": str(int(IDLE_S * 1000)),
                             "socket.request.receive.timeout.ms": str(int(RECEIVE_S * 1000))})
    create_topic(broker.bootstrap, "active")
    create_topic(broker.bootstrap, "quiet")
    active = ActiveClients(broker.bootstrap, "active").start()
    try:
        idle, trickle, prefix, poll = (RawClient(broker.bootstrap) for _ in range(4))
        ports = {name: _port(c) for name, c in (("idle", idle), ("trickle", trickle), ("prefix", prefix))}
        started: dict[str, float] = {}
        started["idle"] = time.monotonic()  # before its last request: the broker saw activity later
        idle.send_frame(_api_versions_v3(idle))
        assert decode_response(API_VERSIONS, 3, idle.read_frame(), idle.correlation_id).error_code.value == 0
        started["trickle"] = time.monotonic()
        trickle.send_raw(struct.pack(">i", 64) + b"\0" * 10)  # a 64-byte frame, 10 bytes of it
        started["prefix"] = time.monotonic()
        prefix.send_raw(b"\0\0")  # half a size prefix, then nothing
        started["poll"] = time.monotonic()
        poll.send_frame(poll.encode_request(FETCH, 12, _fetch_request("quiet", max_wait_ms=2600)))

        closed: dict[str, float] = {}
        answered: float | None = None
        sel = selectors.DefaultSelector()
        for name, client in (("idle", idle), ("trickle", trickle), ("prefix", prefix), ("poll", poll)):
            client.sock.setblocking(False)
            sel.register(client.sock, selectors.EVENT_READ, name)
        deadline = time.monotonic() + IDLE_S + SLACK_S + 1
        next_trickle = time.monotonic()
        while (len(closed) < 3 or answered is None) and time.monotonic() < deadline:
            if "trickle" not in closed and time.monotonic() >= next_trickle:
                try:  # a byte now and then: the frame grows but never completes
                    trickle.sock.send(b"\0")
                except OSError:
                    pass
                next_trickle = time.monotonic() + 0.2
            for key, _ in sel.select(timeout=0.05):
                name = key.data
                try:
                    data = key.fileobj.recv(65536)
                except ConnectionResetError:
                    data = b""
                if name == "poll":
                    assert data, "the connection with a long poll in flight must not be closed as idle"
                    answered = time.monotonic()
                    sel.unregister(key.fileobj)
                elif not data:
                    closed[name] = time.monotonic()
                    sel.unregister(key.fileobj)
        waited = {name: round(closed[name] - started[name], 3) for name in closed}
        assert set(waited) == {"idle", "trickle", "prefix"}, f"not closed in time: {waited}"
        assert IDLE_S <= waited["idle"] <= IDLE_S + SLACK_S, waited
        assert RECEIVE_S <= waited["trickle"] <= RECEIVE_S + SLACK_S, waited
        assert RECEIVE_S <= waited["prefix"] <= RECEIVE_S + SLACK_S, waited
        assert answered is not None and answered - started["poll"] >= 2.5, "long poll answered early"
        poll.sock.setblocking(True)
        assert _works(poll), "after its long poll the connection still serves"
    finally:
        active.stop()
    for client in (idle, trickle, prefix, poll):
        client.close()

    assert not active.errors, active.errors
    assert active.delivered > 20 and active.commits > 20, (active.delivered, active.commits)
    counts = active.connection_counts()
    assert {"producer 1", "consumer 1", "consumer GroupCoordinator"} <= set(counts), counts
    assert all(disconnects == 0 for _, disconnects in counts.values()), f"an active connection dropped: {counts}"
    assert counts["producer 1"] == counts["consumer 1"] == (1, 0), counts
    log = broker.log()
    assert f"{ports['idle']}: idle for connections.max.idle.ms=2000" in log
    for name in ("trickle", "prefix"):
        assert f"{ports[name]}: request frame not received in full within " \
               f"socket.request.receive.timeout.ms=1000" in log
    closes = [line for line in log.splitlines() if "closing connection" in line]
    assert len(closes) == 3, closes


def test_connection_limits_per_ip_override_and_total(broker_factory):
    broker = broker_factory({"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.2:3",
                             "max.connections": "6"})
    admitted: list[RawClient] = []

    def refused_at_once(source: str, reason: str) -> None:
        with _connect_from(broker.bootstrap, source) as over:
            port, start = _port(over), time.monotonic()
            assert over.is_closed_by_peer(timeout=5), f"{source}: over-limit connection not closed"
            assert time.monotonic() - start < 1.0, "an over-limit connection is closed at once"
        assert f"{port}: connection refused: {reason}" in broker.log()

    for source, limit, reason in (
            ("127.0.0.1", 2, "127.0.0.1 already has max.connections.per.ip=2 connections"),
            ("127.0.0.2", 3, "127.0.0.2 already has max.connections.per.ip.overrides=127.0.0.2:3 connections"),
            ("127.0.0.3", 1, "the broker already has max.connections=6 connections")):  # 2 + 3 + 1 = 6
        admitted += [_connect_from(broker.bootstrap, source) for _ in range(limit)]
        assert all(_works(client) for client in admitted), f"the first {limit} from {source} work"
        refused_at_once(source, reason)
    assert all(_works(client) for client in admitted), "refusals leave the admitted connections alone"

    admitted.pop().close()  # frees a slot once the broker has seen the close

    def readmitted() -> RawClient | None:
        client = _connect_from(broker.bootstrap, "127.0.0.3")
        try:
            if _works(client):
                return client
        except (AssertionError, OSError):
            pass
        client.close()
        return None

    admitted.append(wait_for(readmitted, timeout=5, message="a connection admitted after one closed"))
    refused_at_once("127.0.0.3", "the broker already has max.connections=6 connections")
    for client in admitted:
        client.close()


def test_api_versions_bodies_that_do_not_parse_close_only_their_connection(broker):
    def frame(version: int, body: bytes, flexible_header: bool = True) -> bytes:
        head = struct.pack(">hhih", API_VERSIONS, version, 5, 1) + b"c"
        return head + (b"\x00" if flexible_header else b"") + body

    bad = {
        "v3 empty body": frame(3, b""),
        "v3 no header tags": frame(3, b"", flexible_header=False),
        "v3 truncated name": frame(3, b"\x06con"),
        "v3 no version": frame(3, b"\x02t"),
        "v3 no tags": frame(3, b"\x02t\x021"),
        "v4 truncated": frame(4, b"\x02t\x05"),
    }
    with RawClient(broker.bootstrap) as bystander:
        for name, payload in bad.items():
            with RawClient(broker.bootstrap) as client:
                client.send_frame(payload)
                assert client.is_closed_by_peer(timeout=5), f"{name}: connection not closed"
            assert _works(bystander), f"bystander broken after {name}"

        bystander.correlation_id = 5  # frame() writes correlation id 5
        bystander.send_frame(frame(0, b"", flexible_header=False))  # v0-2 bodies are empty: valid
        assert decode_response(API_VERSIONS, 0, bystander.read_frame(), 5).error_code.value == 0
        bystander.send_frame(frame(3, b"\x02t\x021\x00" + b"trailing"))  # Kafka ignores bytes after the body
        assert decode_response(API_VERSIONS, 3, bystander.read_frame(), 5).error_code.value == 0
        bystander.send_frame(frame(3, b"\x01\x021\x00"))  # parses, but an empty name breaks KIP-511
        invalid = decode_response(API_VERSIONS, 3, bystander.read_frame(), 5)
        assert invalid.error_code.value == 42 and len(invalid.api_keys) == 0  # INVALID_REQUEST
        bystander.send_frame(frame(3, b"\x04a b\x021\x00"))
        assert decode_response(API_VERSIONS, 3, bystander.read_frame(), 5).error_code.value == 42
        bystander.send_frame(frame(5, b""))  # unknown version: not parsed, answered in v0 layout
        unsupported = decode_response(API_VERSIONS, 0, bystander.read_frame(), 5)
        assert unsupported.error_code.value == 35 and len(unsupported.api_keys) > 10
        bystander.correlation_id = 9
        assert _works(bystander)
    log = broker.log()
    assert log.count("malformed API_VERSIONS v3 request") == 5 and "malformed API_VERSIONS v4 request" in log


def test_invalid_connection_settings_stop_start_up_naming_the_key(tmp_path):
    for key, value in (("connections.max.idle.ms", "-5"), ("max.connections.per.ip", "-1"),
                       ("socket.request.receive.timeout.ms", "0"),
                       ("max.connections.per.ip.overrides", "127.0.0.1")):
        proc = subprocess.run(
            [sys.executable, "-m", "offsetd.cli", "serve", "--override", f"log.dirs={tmp_path}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"{key}={value}"],
            capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (key, proc.returncode, proc.stdout)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"for configuration {key}" in lines[0], (key, proc.stderr)
