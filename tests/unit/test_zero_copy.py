"""Zero-copy Fetch in-process: FileRecords from a real PartitionLog, the encoder's SplitFrame, and
server.Connection sending it over a real socket pair with sendfile (and without, for TLS-like
transports), in order with pipelined responses, while segment files are deleted or cut."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path
from typing import Any, Callable

import pytest
from connection_helpers import FakeServer
from kio.index import load_response_schema
from kio.serial import entity_reader

from offsetd.protocol.encoder import SplitFrame, encode_response
from offsetd.records.batch import build_batch
from offsetd.server.connection import Connection
from offsetd.storage.file_records import FileRecords
from offsetd.storage.log_config import LogConfig
from offsetd.storage.partition_log import PartitionLog

FETCH = 1
BIG = 6 << 20  # several socket buffers: the send must wait for the reader (the async path)


def _file(tmp_path: Path, name: str, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


def _held(path: Path, ranges: list[tuple[int, int]]) -> FileRecords:
    """FileRecords over `path` at (position, length) ranges, each with a descriptor of its own."""
    return FileRecords([(os.open(path, os.O_RDONLY), pos, length) for pos, length in ranges])


def _fetch_body(records: Any) -> dict[str, Any]:
    part = {"partition_index": 3, "error_code": 0, "high_watermark": 42, "last_stable_offset": 42,
            "log_start_offset": 0, "records": records, "aborted_transactions": None}
    return {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [part, dict(part)]}]}


def _joined(frame: SplitFrame) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in frame.parts)


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_split_frame_is_the_plain_encoding_byte_for_byte(tmp_path: Path, version: int) -> None:
    path, data = _file(tmp_path, "seg", 100_000)
    ranges = [(0, 30_000), (50_000, 50_000)]
    plain_records = data[0:30_000] + data[50_000:100_000]
    body = _fetch_body(_held(path, ranges))
    body["responses"][0]["partitions"][1]["records"] = _held(path, [(10, 20_000)])
    frame = encode_response(FETCH, version, 77, body)
    assert isinstance(frame, SplitFrame)
    plain_body = _fetch_body(plain_records)
    plain_body["responses"][0]["partitions"][1]["records"] = data[10:20_010]
    plain = encode_response(FETCH, version, 77, plain_body)
    assert isinstance(plain, bytes)
    assert frame.size == len(plain) and _joined(frame) == plain
    # an independent reader (kio) sees the records where they belong
    decoded, _ = entity_reader(load_response_schema(FETCH, version))(memoryview(plain), 8 if version < 12 else 9)
    assert decoded.responses[0].partitions[0].records == plain_records
    frame.close()


def test_file_records_keep_a_deleted_file_readable(tmp_path: Path) -> None:
    path, data = _file(tmp_path, "seg", 10_000)
    records = _held(path, [(100, 5_000)])
    path.unlink()
    assert records.read() == data[100:5_100] and len(records) == 5_000
    records.close()
    assert records.ranges == [] and len(records) == 5_000


def _log(tmp_path: Path, batches: int, value_size: int) -> PartitionLog:
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=1 << 20), lambda: 1_000)
    for i in range(batches):
        plog.append(build_batch([(None, bytes([i % 251]) * value_size, 1_000 + i, [])] * 10), now_ms=1_000 + i)
    return plog


def test_read_file_is_read_as_ranges_across_segments(tmp_path: Path) -> None:
    plog = _log(tmp_path, 300, 1000)  # ~3 MB: several 1 MiB segments
    assert len(plog.segments) >= 3
    for offset, limit in [(0, 5 << 20), (0, 1 << 20), (1234, 2_500_000), (2990, 1)]:
        expected = plog.read(offset, limit)
        got = plog.read_file(offset, limit, min_file_bytes=1)
        assert isinstance(got, FileRecords) and got.read() == expected and len(got) == len(expected)
        got.close()
    small = plog.read_file(0, 20_000, min_file_bytes=1 << 20)  # under the threshold: bytes
    assert isinstance(small, bytes) and small == plog.read(0, 20_000)
    assert plog.read_file(3000, 1000, min_file_bytes=1) == b""  # at the log end
    plog.close()


def test_descriptors_held_are_capped_and_given_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past FileRecords' descriptor budget a read gives bytes (the same bytes); closing gives the
    descriptors back to the budget."""
    plog = _log(tmp_path, 300, 1000)
    base = FileRecords.held
    monkeypatch.setattr(FileRecords, "budget", base + 3)
    first = plog.read_file(0, 2_500_000, min_file_bytes=1)  # spans 3 segments: 3 descriptors
    assert isinstance(first, FileRecords) and len(first.ranges) == 3 and FileRecords.held == base + 3
    over = plog.read_file(0, 100_000, min_file_bytes=1)
    assert isinstance(over, bytes) and over == plog.read(0, 100_000)
    first.close()
    assert FileRecords.held == base
    again = plog.read_file(0, 100_000, min_file_bytes=1)
    assert isinstance(again, FileRecords) and again.read() == over
    del again  # dropped unsent: the descriptor goes back too
    assert FileRecords.held == base
    plog.close()


# ------------------------------------------------------------------ Connection over a socket pair


def _read_all(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(1 << 20, n - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


async def _serve(answers: dict[int, Callable[[], Any]], requests: list[int], expected_len: int,
                 sendfile: bool = True, meanwhile: Callable[[Connection], None] | None = None) -> bytes:
    """Pipeline `requests` (one-byte frames) to a Connection, run `meanwhile` once the first
    response is in flight, then read `expected_len` bytes (or until the connection closes)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    server = FakeServer(answers)
    transport, conn = await loop.connect_accepted_socket(lambda: Connection(server), ours)
    if not sendfile:
        conn._sock_fd = -1  # as a transport without a plain socket (TLS) would be
    theirs.sendall(b"".join(struct.pack(">i", 1) + bytes([r]) for r in requests))
    if meanwhile is not None:  # once the first response waits for the reader
        deadline = loop.time() + 10
        while conn._sending is None and loop.time() < deadline:
            await asyncio.sleep(0.001)
        meanwhile(conn)
    data = await loop.run_in_executor(None, _read_all, theirs, expected_len)
    transport.close()
    theirs.close()
    return data


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_connection_sends_file_ranges_in_order_with_pipelined_requests(tmp_path: Path) -> None:
    path, data = _file(tmp_path, "seg", BIG + 1000)
    small = [_framed(b"small-%d" % i) for i in range(4)]
    big_ranges = [(0, BIG // 2), (BIG // 2 + 1000, BIG // 2)]
    big_payload = data[0:BIG // 2] + data[BIG // 2 + 1000:BIG + 1000]

    def big() -> SplitFrame:
        records = _held(path, big_ranges)
        head = b"HEAD"
        return SplitFrame([struct.pack(">i", 4 + len(records) + 4) + head, records, b"TAIL"], 4 + 4 + len(records) + 4)

    expected = small[0] + _framed(b"HEAD" + big_payload + b"TAIL") + small[1] + _framed(
        b"HEAD" + big_payload + b"TAIL") + small[2]
    smalls = iter(small)
    answers = {1: lambda: next(smalls), 2: big}
    for sendfile in (True, False):
        smalls = iter(small)
        got = asyncio.run(_serve(answers, [1, 2, 1, 2, 1], len(expected), sendfile=sendfile))
        assert len(got) == len(expected) and got == expected, f"sendfile={sendfile}"


def test_a_deferred_response_waits_for_a_send_in_flight(tmp_path: Path) -> None:
    """A long-poll-like answer (a future completing later) must not overtake a big send."""
    path, data = _file(tmp_path, "seg", BIG)

    def big() -> SplitFrame:
        return SplitFrame([struct.pack(">i", BIG), _held(path, [(0, BIG)])], BIG + 4)

    async def later() -> bytes:
        return _framed(b"later")

    expected = _framed(data) + _framed(b"later")
    got = asyncio.run(_serve({2: big, 3: later}, [2, 3], len(expected)))
    assert got == expected


def test_a_long_poll_answering_with_file_ranges_keeps_its_place(tmp_path: Path) -> None:
    """A coroutine (a Fetch long poll) whose answer is a SplitFrame, pipelined between bytes
    answers: the answers arrive in request order, the big one whole."""
    path, data = _file(tmp_path, "seg", BIG)

    async def long_poll() -> SplitFrame:
        await asyncio.sleep(0)
        return SplitFrame([struct.pack(">i", BIG), _held(path, [(0, BIG)])], BIG + 4)

    smalls = iter([_framed(b"first"), _framed(b"last")])
    expected = _framed(b"first") + _framed(data) + _framed(b"last")
    got = asyncio.run(_serve({1: lambda: next(smalls), 3: long_poll}, [1, 3, 1], len(expected)))
    assert got == expected


def test_segment_deleted_during_a_send_is_still_sent_whole(tmp_path: Path) -> None:
    """Retention unlinks the segment and closes its descriptor while the response is in flight:
    the response's own descriptor keeps the bytes."""
    path, data = _file(tmp_path, "seg", BIG)
    owner_fd = os.open(path, os.O_RDONLY)  # the segment's own descriptor

    def big() -> SplitFrame:
        return SplitFrame([struct.pack(">i", BIG), FileRecords([(os.dup(owner_fd), 0, BIG)])], BIG + 4)

    def delete(conn: Connection) -> None:
        assert conn._sending is not None, "the send must still be in flight"
        path.unlink()
        os.close(owner_fd)

    got = asyncio.run(_serve({2: big}, [2], BIG + 4, meanwhile=delete))
    assert got == _framed(data)


def test_a_file_cut_during_a_send_closes_the_connection(tmp_path: Path) -> None:
    """A range that can no longer be read in full cannot honour its framed length: the
    connection is closed rather than left waiting or sent short garbage."""
    path, data = _file(tmp_path, "seg", BIG)

    def big() -> SplitFrame:
        return SplitFrame([struct.pack(">i", BIG), _held(path, [(0, BIG)])], BIG + 4)

    def cut(conn: Connection) -> None:
        assert conn._sending is not None
        os.truncate(path, BIG // 4)

    got = asyncio.run(_serve({2: big}, [2], BIG + 4, meanwhile=cut))
    assert len(got) < BIG + 4
    assert got[4:] == data[: len(got) - 4]
