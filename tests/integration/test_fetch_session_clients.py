"""Fetch sessions (KIP-227) against a real broker.

librdkafka (confluent-kafka) fetches sessionless (session id 0, epoch -1, checked on the wire
below); kafka-python implements KIP-227 (full fetch with epoch 0, then incremental ones), so it is
the real session client here. A wire tap between the clients and the broker (the broker advertises
the tap's address) decodes every Fetch request and response with kio, so the tests see what the
clients asked for and what the broker answered."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kio.index import load_request_schema
from kio.serial import entity_reader

from broker_process import wait_for
from clients import create_topic, produce
from raw_client import RawClient, decode_response

FETCH, METADATA = 1, 3
SLOTS = "max.incremental.fetch.session.cache.slots"


# ------------------------------------------------------------------------------------ wire tap


@dataclass
class FetchSeen:
    """One Fetch exchange seen on the wire."""

    client: str
    version: int
    session_id: int
    epoch: int
    requested: int  # partitions in the request
    forgotten: int
    error: int = -1
    response_session_id: int = -1
    answered: list[tuple[object, int]] = field(default_factory=list)  # (topic or id, partition) answered


class WireTap:
    """A TCP relay that decodes the Fetch requests and responses passing through it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream = 0
        self.fetches: list[FetchSeen] = []
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = [self.listener]
        self.failures: list[str] = []

    def start(self, upstream_port: int) -> "WireTap":
        self.upstream = upstream_port
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass

    def snapshot(self) -> list[FetchSeen]:
        assert not self.failures, self.failures
        with self.lock:
            return [f for f in self.fetches if f.error != -1]

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, server]
            pending: dict[int, FetchSeen] = {}
            threading.Thread(target=self._pump, args=(client, server, pending, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, pending, False), daemon=True).start()

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = sock.recv(n - len(data))
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def _pump(self, src: socket.socket, dst: socket.socket, pending: dict[int, FetchSeen], requests: bool) -> None:
        while True:
            size = self._read(src, 4)
            frame = self._read(src, struct.unpack(">i", size)[0]) if size else None
            if frame is None:
                for sock in (src, dst):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            try:
                (self._request if requests else self._response)(frame, pending)
            except Exception as exc:  # reported by snapshot(); the bytes are relayed regardless
                self.failures.append(repr(exc))
            try:
                dst.sendall(size + frame)
            except OSError:
                return

    def _request(self, frame: bytes, pending: dict[int, FetchSeen]) -> None:
        api_key, version, corr = struct.unpack_from(">hhi", frame, 0)
        if api_key != FETCH:
            return
        (id_len,) = struct.unpack_from(">h", frame, 8)
        client = frame[10:10 + max(id_len, 0)].decode()
        pos = 10 + max(id_len, 0)
        cls = load_request_schema(FETCH, version)
        if cls.__flexible__:
            pos += 1  # no tagged fields in the header (neither client sends any)
        body, _ = entity_reader(cls)(frame, pos)
        with self.lock:
            pending[corr] = seen = FetchSeen(
                client, version, getattr(body, "session_id", 0), getattr(body, "session_epoch", -1),
                sum(len(t.partitions) for t in body.topics),
                sum(len(t.partitions) for t in getattr(body, "forgotten_topics_data", ())))
            self.fetches.append(seen)

    def _response(self, frame: bytes, pending: dict[int, FetchSeen]) -> None:
        (corr,) = struct.unpack_from(">i", frame, 0)
        with self.lock:
            seen = pending.pop(corr, None)
        if seen is None:
            return
        body = decode_response(FETCH, seen.version, frame, corr)
        answered = [(getattr(t, "topic", None) or t.topic_id, p.partition_index)
                    for t in body.responses for p in t.partitions]
        with self.lock:
            seen.answered = answered
            seen.response_session_id = getattr(body, "session_id", 0)
            seen.error = body.error_code.value


@pytest.fixture
def tapped(broker_factory):
    """start(overrides) -> (broker, tap): clients bootstrap at the tap and are sent back to it."""
    taps: list[WireTap] = []

    def start(overrides: dict[str, str] | None = None):
        tap = WireTap()
        taps.append(tap)
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{tap.port}", **(overrides or {})})
        tap.start(broker.port)
        return broker, tap

    yield start
    for tap in taps:
        tap.close()


# --------------------------------------------------------------------------------- consumers


class KpReader:
    """A kafka-python consumer (KIP-227 fetch sessions) of assigned partitions, from the start."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=name, auto_offset_reset="earliest",
                                      enable_auto_commit=False, fetch_max_wait_ms=100)
        self.consumer.assign([KpTopicPartition(topic, p) for p in range(partitions)])
        self.seen: list[tuple[int, int, bytes]] = []

    def poll(self) -> None:
        for records in self.consumer.poll(timeout_ms=100).values():
            self.seen += [(r.partition, r.offset, r.value) for r in records]

    def close(self) -> None:
        self.consumer.close()


class CkReader:
    """A confluent-kafka (librdkafka) consumer of assigned partitions, from the start."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "client.id": name,
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        self.consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        self.seen: list[tuple[int, int, bytes]] = []

    def poll(self) -> None:
        for msg in self.consumer.consume(1000, 0.1):
            assert not msg.error(), msg.error()
            self.seen.append((msg.partition(), msg.offset(), msg.value()))

    def close(self) -> None:
        self.consumer.close()


def _wave(bootstrap: str, topic: str, partitions: list[int], tag: str) -> set[tuple[int, bytes]]:
    """Produce three records to each partition; their (partition, value) pairs."""
    messages = [{"partition": p, "value": f"{tag}-{p}-{i}".encode()} for p in partitions for i in range(3)]
    produce(bootstrap, topic, messages)
    return {(m["partition"], m["value"]) for m in messages}


def _read_until(readers: list, expected: set[tuple[int, bytes]], timeout: float = 20.0) -> None:
    """Poll every reader until each has seen exactly `expected` (partition, value) pairs, once each."""
    deadline = time.monotonic() + timeout
    while True:
        for reader in readers:
            reader.poll()
        if all({(p, v) for p, _, v in r.seen} >= expected for r in readers):
            break
        assert time.monotonic() < deadline, [len(r.seen) for r in readers]
    for reader in readers:
        reader.poll()  # anything delivered twice would show up here
        pairs = [(p, v) for p, _, v in reader.seen]
        assert sorted(pairs) == sorted(expected), f"{type(reader).__name__}: duplicates or strays"
        assert len({(p, o) for p, o, _ in reader.seen}) == len(reader.seen)


# ------------------------------------------------------------------------------------- tests


def test_consumers_of_200_partitions_read_everything_once_incrementally(tapped):
    broker, tap = tapped()
    bootstrap = f"127.0.0.1:{tap.port}"
    create_topic(broker.bootstrap, "wide", partitions=200)
    expected = _wave(broker.bootstrap, "wide", list(range(0, 200, 10)), "a")
    readers = [KpReader(bootstrap, "wide", 200, "kp-wide"), CkReader(bootstrap, "wide", 200, "ck-wide")]
    try:
        _read_until(readers, expected)
        second = [3, 77, 150, 199]
        expected |= _wave(broker.bootstrap, "wide", second, "b")
        _read_until(readers, expected)
    finally:
        for reader in readers:
            reader.close()
    fetches = tap.snapshot()
    ck = [f for f in fetches if f.client == "ck-wide"]
    kp = [f for f in fetches if f.client == "kp-wide"]
    assert ck and all(f.session_id == 0 and f.epoch == -1 for f in ck)  # librdkafka: sessionless
    full = [f for f in kp if f.epoch == 0 and f.response_session_id > 0]
    incremental = [f for f in kp if f.epoch > 0]
    assert full and full[0].requested == 200 and len(full[0].answered) == 200
    assert len(incremental) >= 2 and all(f.error == 0 for f in incremental)
    assert all(f.response_session_id == f.session_id for f in incremental)
    # incremental requests carry only moved partitions, responses only changed ones
    assert max(f.requested for f in incremental) <= 20
    changed = {("wide", p) for p in list(range(0, 200, 10)) + second}
    answered = {key for f in incremental for key in f.answered}
    assert answered and answered <= changed, answered - changed
    assert {("wide", p) for p in second} <= answered


def test_one_session_slot_two_session_consumers_fall_back_and_read_everything_once(tapped):
    broker, tap = tapped({SLOTS: "1"})
    bootstrap = f"127.0.0.1:{tap.port}"
    create_topic(broker.bootstrap, "slot", partitions=8)
    expected = _wave(broker.bootstrap, "slot", [0, 3, 5], "a")
    first = KpReader(bootstrap, "slot", 8, "kp-first")
    readers = [first]
    try:
        _read_until(readers, expected)
        owner = wait_for(lambda: next((f.response_session_id for f in tap.snapshot()
                                       if f.client == "kp-first" and f.response_session_id > 0), 0),
                         message="kp-first's session")
        second = KpReader(bootstrap, "slot", 8, "kp-second")  # no free slot: answered sessionless
        readers = [first, second, CkReader(bootstrap, "slot", 8, "ck-slot")]
        _read_until(readers, expected)
        expected |= _wave(broker.bootstrap, "slot", [1, 3, 7], "b")
        _read_until(readers, expected)
        # the slot's owner loses its session (closed by id, as a client's FINAL epoch does)
        with RawClient(broker.bootstrap) as raw:
            closed = raw.call(FETCH, 12, _fetch_body(12, "slot", {}, session_id=owner, epoch=-1))
            assert closed.error_code.value == 0 and closed.session_id == 0
        expected |= _wave(broker.bootstrap, "slot", [2, 6], "c")
        _read_until(readers, expected)
        expected |= _wave(broker.bootstrap, "slot", [0, 4], "d")
        _read_until(readers, expected)
    finally:
        for reader in readers:
            reader.close()
    fetches = tap.snapshot()
    refused = [f for f in fetches if f.client == "kp-second" and f.epoch == 0 and f.response_session_id == 0]
    assert refused and all(f.error == 0 and len(f.answered) == 8 for f in refused)
    lost = [f for f in fetches if f.client == "kp-first" and f.session_id == owner and f.error != 0]
    assert lost and lost[0].error == 70  # FETCH_SESSION_ID_NOT_FOUND, then a full fetch again
    after = fetches[fetches.index(lost[0]) + 1:]
    assert any(f.epoch == 0 for f in after if f.client == "kp-first")
    # the freed slot goes to whichever consumer asks first; one of them has a session again
    assert any(f.response_session_id > 0 for f in after if f.client.startswith("kp-"))


def _fetch_body(version: int, topic: str | uuid.UUID, offsets: dict[int, int], session_id: int, epoch: int,
                max_wait_ms: int = 0, forgotten: tuple[int, ...] = ()):
    cls = load_request_schema(FETCH, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    field_name = "topic_id" if version >= 13 else "topic"
    parts = tuple(mod.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                  for p, o in offsets.items())
    topics = (mod.FetchTopic(**{field_name: topic}, partitions=parts),) if parts else ()
    forget = (mod.ForgottenTopic(**{field_name: topic}, partitions=forgotten),) if forgotten else ()
    return cls(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=50 << 20,
               session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=forget)


def _topic_id(client: RawClient, topic: str) -> uuid.UUID:
    cls = load_request_schema(METADATA, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    body = cls(topics=(mod.MetadataRequestTopic(name=topic, topic_id=None),), allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)
    return client.call(METADATA, 12, body).topics[0].topic_id


def _partitions(response) -> list[int]:
    return [p.partition_index for t in response.responses for p in t.partitions]


def test_raw_incremental_answers_only_changes_and_session_errors(broker_factory):
    broker = broker_factory({SLOTS: "1"})
    create_topic(broker.bootstrap, "raw", partitions=3)
    produce(broker.bootstrap, "raw", [{"value": b"x", "partition": 0}])
    v = 16
    with RawClient(broker.bootstrap) as client, RawClient(broker.bootstrap) as other:
        tid = _topic_id(client, "raw")
        full = client.call(FETCH, v, _fetch_body(v, tid, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=0))
        sid = full.session_id
        assert full.error_code.value == 0 and sid > 0 and _partitions(full) == [0, 1, 2]
        # the only slot is taken by a young session: another client's full fetch is answered sessionless
        refused = other.call(FETCH, v, _fetch_body(v, tid, {0: 0}, session_id=0, epoch=0))
        assert refused.error_code.value == 0 and refused.session_id == 0 and _partitions(refused) == [0]
        # partition 0 moves past its record: nothing changed, nothing answered
        quiet = client.call(FETCH, v, _fetch_body(v, tid, {0: 1}, session_id=sid, epoch=1))
        assert quiet.error_code.value == 0 and quiet.session_id == sid and _partitions(quiet) == []
        # a parked incremental long poll wakes on an append and answers with that partition only
        client.send_frame(client.encode_request(FETCH, v, _fetch_body(v, tid, {}, sid, 2, max_wait_ms=15000)))
        started = time.monotonic()
        produce(broker.bootstrap, "raw", [{"value": b"y", "partition": 2}])
        woke = decode_response(FETCH, v, client.read_frame(), client.correlation_id)
        assert time.monotonic() - started < 10
        assert woke.session_id == sid and _partitions(woke) == [2]
        part = woke.responses[0].partitions[0]
        assert woke.responses[0].topic_id == tid and part.high_watermark == 1 and part.records
        # forgetting partition 2: an append there is no longer news for this session
        forget = client.call(FETCH, v, _fetch_body(v, tid, {}, sid, 3, forgotten=(2,)))
        assert _partitions(forget) == []
        produce(broker.bootstrap, "raw", [{"value": b"z", "partition": 2}, {"value": b"z", "partition": 1}])
        news = client.call(FETCH, v, _fetch_body(v, tid, {}, sid, 4))
        assert _partitions(news) == [1]
        # a repeated epoch, an unknown id
        stale = client.call(FETCH, v, _fetch_body(v, tid, {}, sid, 4))
        assert stale.error_code.value == 71 and stale.session_id == 0 and _partitions(stale) == []  # INVALID_FETCH_SESSION_EPOCH
        unknown = client.call(FETCH, v, _fetch_body(v, tid, {}, sid + 1, 1))
        assert unknown.error_code.value == 70 and unknown.session_id == 0  # FETCH_SESSION_ID_NOT_FOUND
        # the expected epoch is still 5; a session made with topic ids cannot go on by name
        by_name = client.call(FETCH, 12, _fetch_body(12, "raw", {}, sid, 5))
        assert by_name.error_code.value == 106  # FETCH_SESSION_TOPIC_ID_ERROR
        # closing it (epoch -1) answers sessionless and frees the slot for the other client
        closed = client.call(FETCH, v, _fetch_body(v, tid, {0: 1}, sid, -1))
        assert closed.error_code.value == 0 and closed.session_id == 0 and _partitions(closed) == [0]
        gone = client.call(FETCH, v, _fetch_body(v, tid, {}, sid, 5))
        assert gone.error_code.value == 70
        taken = other.call(FETCH, v, _fetch_body(v, tid, {0: 0}, session_id=0, epoch=0))
        assert taken.session_id > 0
