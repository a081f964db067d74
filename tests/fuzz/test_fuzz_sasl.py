"""A bounded fuzz of SASL against a real broker's SASL_PLAINTEXT listener (reference §2.2): ~200
seeded cases of random and malformed SaslHandshake / SaslAuthenticate bodies, raw v0 token frames,
garbage frames, oversize frames and broken SCRAM exchanges. Each case runs on a new connection and
ends with a Metadata request: the broker must close the connection (answering SASL requests on the
way, or not), never answer the Metadata (it would mean the connection authenticated), never hang
and never die. Afterwards normal PLAIN and SCRAM clients still work."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections import Counter
from typing import Callable

import pytest
import scramp
from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient

from offsetd.admin.configs_cli import bootstrap_credentials
from offsetd.admin.configs import ScramUpsert

SEED, CASES = 20261123, 200
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18
METADATA_CORRELATION = 0x4D455441  # the final Metadata's id: a response carrying it means "authenticated"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_alice="alice-secret";')
CLOSE_DEADLINE_S = 5.0


def header(api_key: int, version: int, correlation: int, flexible: bool) -> bytes:
    """A request header v1 (v2 with the empty tag buffer for flexible requests)."""
    client = b"fuzz"
    return struct.pack(">hhih", api_key, version, correlation, len(client)) + client + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def compact_bytes(data: bytes) -> bytes:
    """A compact (flexible) BYTES field: unsigned varint length+1, then the bytes."""
    n, out = len(data) + 1, b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n]) + data


def handshake(mechanism: bytes, version: int = 1, correlation: int = 1) -> bytes:
    return frame(header(SASL_HANDSHAKE, version, correlation, False) + string(mechanism))


def authenticate(token: bytes, version: int = 1, correlation: int = 2) -> bytes:
    """SaslAuthenticate v0/v1 (BYTES) or v2 (flexible: compact bytes + tag buffer)."""
    body = compact_bytes(token) + b"\x00" if version >= 2 else struct.pack(">i", len(token)) + token
    return frame(header(SASL_AUTHENTICATE, version, correlation, version >= 2) + body)


def metadata() -> bytes:
    return frame(header(METADATA, 1, METADATA_CORRELATION, False) + struct.pack(">i", 0))


class Fuzz:
    """The case generators; each returns the bytes to send (complete frames, so the broker never
    waits for the rest of a frame, except oversize ones it must refuse from the size alone)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def junk(self, most: int = 64) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, most))

    def mechanism(self) -> bytes:
        return self.rng.choice([b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512", b"GSSAPI", b"", b"plain",
                                b"SCRAM-SHA-1", b"\xff\xfe", b"OAUTHBEARER", self.junk(40)])

    def token(self) -> bytes:
        """Tokens near the real ones: PLAIN with wrong parts, SCRAM messages with broken fields."""
        r = self.rng
        return r.choice([
            b"\0alice\0wrong", b"alice\0alice\0nope", b"\0\0", b"\0alice\0", b"bob\0alice\0alice-secret",
            b"\0alice", b"\0" * r.randint(0, 5), b"n,,n=carol,r=" + self.junk(20), b"n,,n=,r=abc",
            b"p,,n=carol,r=abc", b"n,a=x,n=carol,r=abc", b"c=biws,r=abc,p=" + self.junk(10),
            b"n,,n=nobody,r=abc", b"n,,n=carol=2,r=abc", b"n,,n=carol,r=abc,ext=" + self.junk(8),
            self.junk(200), "n,,n=\u00e9,r=x".encode(),
        ])

    def case(self) -> tuple[str, bytes]:
        """(kind, bytes) of one random case."""
        r = self.rng
        kind = r.choice(["garbage-frame", "handshake-body", "handshake-version", "v1-token", "v1-garbage-body",
                         "v0-raw-token", "oversize", "scram-broken-final", "api-versions-then",
                         "authenticate-first", "double-handshake", "negative-size"])
        mech = self.mechanism()
        if kind == "garbage-frame":
            return kind, frame(self.junk())
        if kind == "handshake-body":  # a valid header, then a random or truncated body
            body = r.choice([self.junk(), string(mech)[: r.randint(0, len(mech) + 1)], b"\x7f\xff" + self.junk(8)])
            return kind, frame(header(SASL_HANDSHAKE, r.randint(0, 1), 1, False) + body)
        if kind == "handshake-version":  # versions outside 0-1
            return kind, frame(header(SASL_HANDSHAKE, r.choice([-1, 2, 3, 0x7FFF]), 1, False) + string(mech))
        if kind == "v1-token":
            return kind, handshake(mech) + authenticate(self.token(), r.randint(0, 2))
        if kind == "v1-garbage-body":  # SaslAuthenticate whose body does not decode
            version = r.randint(0, 5)
            return kind, handshake(b"PLAIN") + frame(header(SASL_AUTHENTICATE, version, 2, version >= 2) + self.junk())
        if kind == "v0-raw-token":
            return kind, handshake(r.choice([b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"]), 0) + frame(self.token())
        if kind == "oversize":  # declared well above sasl.server.max.receive.size: refused from the size
            # (not 524289: offsetd allows a request header's worth above the 524288-byte token limit)
            size = r.choice([524288 + 4096, 1 << 24, 0x7FFFFFFF])
            prefix = handshake(b"PLAIN", r.randint(0, 1)) if r.random() < 0.5 else b""
            return kind, prefix + struct.pack(">i", size) + self.junk(16)
        if kind == "scram-broken-final":
            mechanism = r.choice(["SCRAM-SHA-256", "SCRAM-SHA-512"])
            first = scramp.ScramClient([mechanism], r.choice(["carol", "nobody"]), "x").get_client_first().encode()
            final = r.choice([b"c=biws,r=" + self.junk(30) + b",p=" + self.junk(20), self.token(), b""])
            return kind, handshake(mechanism.encode()) + authenticate(first) + authenticate(final, correlation=3)
        if kind == "api-versions-then":  # ApiVersions is allowed once, then anything SASL or not
            versions = frame(header(API_VERSIONS, r.randint(0, 3), 1, False) + self.junk(8))
            return kind, versions + r.choice([handshake(mech), versions, authenticate(self.token())])
        if kind == "authenticate-first":
            return kind, authenticate(self.token(), r.randint(0, 2))
        if kind == "double-handshake":
            return kind, handshake(mech) + handshake(self.mechanism(), correlation=5)
        return kind, struct.pack(">i", r.choice([-1, -(2**31), 0])) + self.junk(8)


def run_case(port: int, data: bytes) -> tuple[list[int], bool]:
    """Send `data` then a Metadata request; read until the broker closes. Returns the correlation
    ids of the frames received and whether the connection was closed (False: a hang)."""
    ids: list[int] = []
    buffer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_DEADLINE_S) as sock:
        try:
            sock.sendall(data + metadata())
        except (BrokenPipeError, ConnectionResetError):
            return ids, True  # closed while we were still sending
        deadline = time.monotonic() + CLOSE_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return ids, True
            except TimeoutError:
                return ids, False
            if not chunk:
                return ids, True
            buffer += chunk
            while len(buffer) >= 8:
                (size,) = struct.unpack(">i", buffer[:4])
                if size >= 4 and len(buffer) >= 4 + size:
                    ids.append(struct.unpack(">i", buffer[4:8])[0])
                    buffer = buffer[4 + size:]
                elif size < 4:  # a raw v0 token frame (e.g. PLAIN's empty success) has no id
                    ids.append(-1)
                    buffer = buffer[4 + max(size, 0):]
                else:
                    break
    return ids, False


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory) -> BrokerProcess:
    data = tmp_path_factory.mktemp("sasl-fuzz") / "data"
    bootstrap_credentials(data, [ScramUpsert("carol", m, 4096, "carol-secret") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")])
    proc = BrokerProcess(data, {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                                "connection.failed.authentication.delay.ms": "0"}).start()
    yield proc
    proc.stop()


def test_random_sasl_frames_never_authenticate_hang_or_crash(sasl_broker: BrokerProcess) -> None:
    fuzz = Fuzz(random.Random(SEED))
    kinds: Counter[str] = Counter()
    for n in range(CASES):
        kind, data = fuzz.case()
        kinds[kind] += 1
        ids, closed = run_case(sasl_broker.port, data)
        assert closed, f"case {n} ({kind}): the broker neither answered nor closed within {CLOSE_DEADLINE_S}s: {data!r}"
        assert METADATA_CORRELATION not in ids, f"case {n} ({kind}) authenticated: {data!r}"
        assert sasl_broker.alive(), f"case {n} ({kind}) killed the broker: {data!r}"
    assert len(kinds) == 12 and min(kinds.values()) >= 5, kinds  # every kind was exercised


def check_client(proc: BrokerProcess, mechanism: str, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    assert list(admin.list_topics(timeout=15).brokers) == [1]


def test_clients_still_work_after_the_fuzz(sasl_broker: BrokerProcess) -> None:
    """Runs after the fuzz case above (same module broker, file order)."""
    checks: list[Callable[[], None]] = [
        lambda: check_client(sasl_broker, "PLAIN", "alice", "alice-secret"),
        lambda: check_client(sasl_broker, "SCRAM-SHA-256", "carol", "carol-secret"),
        lambda: check_client(sasl_broker, "SCRAM-SHA-512", "carol", "carol-secret")]
    for check in checks:
        check()
    assert sasl_broker.alive() and "Traceback" not in sasl_broker.log()
