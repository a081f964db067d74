"""One client connection: framing, in-order request processing, flow control.

Responses on a connection are written in request order (Kafka's guarantee). Most handlers answer
synchronously from `data_received`; a handler that must wait returns a coroutine. A waiting
request normally holds back the rest of the connection, as Kafka mutes a channel with a request
in flight, so every request sees the effects of the ones before it. The exception is a run of
OffsetCommits: they are queued to the coordinator back to back (so librdkafka's pipelined async
commits share one fsync), and the first request of any other kind waits for them all.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Coroutine

if TYPE_CHECKING:
    from .app import KafkaServer

log = logging.getLogger("offsetd.server")

_SIZE = struct.Struct(">i")
MAX_QUEUED = 128  # frames read ahead before we stop reading the socket
MAX_PIPELINED = 1024  # commits awaiting durability on one connection
OFFSET_COMMIT = 8  # the only request kind that may overtake-wait (see the module docstring)


class CloseConnection(Exception):
    """Raised by dispatch when the request is so bad the connection must be closed."""


class Connection(asyncio.Protocol):
    """asyncio protocol for one Kafka client socket."""

    def __init__(self, server: "KafkaServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buf = bytearray()
        self._queue: deque[bytes] = deque()
        self._inflight: deque[asyncio.Future[Any]] = deque()  # waiting responses, request order
        self._pipelining = False  # the requests in flight are all OffsetCommits
        self._write_paused = False
        self._read_paused = False
        self._closed = False

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._queue.clear()
        self._inflight.clear()
        self.server.connections.discard(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._process()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        limit = self.server.max_request_bytes
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:  # one copy per frame (a bytearray slice would be a second)
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > limit:
                    self.close(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}"
                               if size > limit else f"negative frame size {size}")
                    return
                if end - pos - 4 < size:
                    break
                self._queue.append(view[pos + 4 : pos + 4 + size].tobytes())
                pos += 4 + size
        if pos:
            del buf[:pos]
        if self.server.trace:
            log.debug("%s received %d bytes: %d frames queued, %d in flight, write paused %s", self.peer,
                      len(data), len(self._queue), len(self._inflight), self._write_paused)
        self._process()
        if len(self._queue) > MAX_QUEUED and not self._read_paused and self.transport:
            self._read_paused = True
            self.transport.pause_reading()

    # ---------------------------------------------------------------------- processing

    def _process(self) -> None:
        """Handle queued frames in order until one must wait or the socket is congested."""
        queue = self._queue
        while queue and not self._write_paused and not self._closed:
            frame = queue[0]
            commit = len(frame) >= 2 and frame[0] == 0 and frame[1] == OFFSET_COMMIT
            if self._inflight and not (commit and self._pipelining and len(self._inflight) < MAX_PIPELINED):
                break  # wait for the requests in flight
            queue.popleft()
            try:
                result = self.server.dispatch(self, frame)
            except CloseConnection as exc:
                self.close(str(exc))
                return
            if result is None:
                continue
            if isinstance(result, bytes):
                if self._inflight:  # cannot overtake; keep its place in line
                    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    done.set_result(result)
                    self._inflight.append(done)
                else:
                    self.transport.write(result)  # type: ignore[union-attr]
                continue
            self._pipelining = commit
            task = asyncio.ensure_future(result)
            self._inflight.append(task)
            task.add_done_callback(self._answered)
        if self._read_paused and len(queue) <= MAX_QUEUED // 2 and self.transport:
            self._read_paused = False
            self.transport.resume_reading()

    def _answered(self, _task: "asyncio.Future[Any]") -> None:
        """Write every response now at the head of the line, then carry on reading requests."""
        inflight = self._inflight
        while inflight and inflight[0].done():
            task = inflight.popleft()
            if self._closed or task.cancelled():
                continue
            exc = task.exception()
            if exc is not None:
                log.error("request from %s failed", self.peer, exc_info=exc)
                self.close("internal error while handling a request")
                return
            response = task.result()
            if response:
                if self.server.trace:
                    log.debug("%s response corr=%d (%d bytes, deferred)", self.peer,
                              int.from_bytes(response[4:8], "big"), len(response))
                self.transport.write(response)  # type: ignore[union-attr]
        self._process()

    def close(self, reason: str) -> None:
        """Close this connection, saying why in the log; the broker keeps serving everyone else."""
        if self._closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
        self._closed = True
        self._queue.clear()
        if self.transport is not None:
            self.transport.close()


Pending = Coroutine[Any, Any, bytes | None] | asyncio.Future[bytes]
