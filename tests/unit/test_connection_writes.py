"""server.Connection's writes over a real socket pair: of the answers to pipelined OffsetCommits
(one fsync answers many), the first of a loop turn goes out at once and the later ones of the same
turn are joined and written by one call at the head of the next turn, in request order, and before
a close; responses answered at once are written at once."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any, Callable

from connection_helpers import FakeServer

from offsetd.server.connection import Connection

METADATA, OFFSET_COMMIT = 3, 8


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _connected(answers: dict[int, Callable[[], Any]]) -> tuple[Connection, socket.socket, list[bytes]]:
    """A Connection on one end of a socket pair (the other end returned), its transport's
    writes recorded."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, conn = await loop.connect_accepted_socket(lambda: Connection(FakeServer(answers, key=lambda frame: frame[1])), ours)
    writes: list[bytes] = []
    real = transport.write

    def write(data: bytes) -> None:
        writes.append(bytes(data))
        real(data)

    transport.write = write  # type: ignore[method-assign]
    return conn, theirs, writes


async def _read(sock: socket.socket, n: int) -> bytes:
    loop = asyncio.get_running_loop()
    got = b""
    deadline = loop.time() + 10
    while len(got) < n:
        assert loop.time() < deadline, f"read {len(got)} of {n} bytes"
        got += await asyncio.wait_for(loop.sock_recv(sock, n - len(got)), 10)
    return got


def test_answers_given_at_once_are_written_at_once_one_each() -> None:
    """A burst of requests answered synchronously (a client's FindCoordinator and Metadata) is
    written as it is answered: holding those back for a turn upset librdkafka's coordinator
    discovery in the disk-full chaos run."""
    async def scenario() -> None:
        replies = [_framed(b"reply-%d" % i) for i in range(5)]
        answers = iter(replies)
        conn, theirs, writes = await _connected({METADATA: lambda: next(answers)})
        theirs.send(b"".join(_framed(bytes([0, METADATA])) for _ in replies))  # five requests, answered at once
        assert await _read(theirs, sum(map(len, replies))) == b"".join(replies)
        assert writes == replies
        conn.close("done")
        theirs.close()

    asyncio.run(scenario())


def test_deferred_answers_completing_together_keep_their_order_and_go_out_before_a_close() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pending = [loop.create_future() for _ in range(3)]
        futures = iter(pending)
        conn, theirs, writes = await _connected({OFFSET_COMMIT: lambda: next(futures)})
        theirs.send(b"".join(_framed(bytes([0, OFFSET_COMMIT])) for _ in pending))
        deadline = loop.time() + 10
        while len(conn._inflight) < 3:  # the three commits are in flight together, in request order
            assert loop.time() < deadline, f"{len(conn._inflight)} in flight"
            await asyncio.sleep(0.001)
        replies = [_framed(b"late-%d" % i) for i in range(3)]
        for future, reply in reversed(list(zip(pending, replies))):  # completed in reverse order, one turn
            future.set_result(reply)
        await asyncio.sleep(0)  # their callbacks ran: the first is written, the other two wait for the next turn
        assert writes == [replies[0]]
        conn.close("closing with answers held for the next turn")  # they still go out, before the close
        assert await _read(theirs, sum(map(len, replies))) == b"".join(replies)
        assert writes == [replies[0], b"".join(replies[1:])]
        theirs.close()

    asyncio.run(scenario())
