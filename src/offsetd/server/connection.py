"""One client connection: framing, in-order request processing, flow control.

Requests on a connection are handled strictly in order and their responses written in the same
order (Kafka's guarantee). Most handlers answer synchronously from `data_received`; a handler that
must wait (a Fetch long poll) returns a coroutine, and the connection stops processing further
frames until it finishes, as Kafka mutes a channel with a request in flight.
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
        self._busy = False
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
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > limit:
                self.close(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}"
                           if size > limit else f"negative frame size {size}")
                return
            if end - pos - 4 < size:
                break
            self._queue.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        self._process()
        if len(self._queue) > MAX_QUEUED and not self._read_paused and self.transport:
            self._read_paused = True
            self.transport.pause_reading()

    # ---------------------------------------------------------------------- processing

    def _process(self) -> None:
        """Handle queued frames in order until one needs to wait or the socket is congested."""
        queue = self._queue
        while queue and not self._busy and not self._write_paused and not self._closed:
            frame = queue.popleft()
            try:
                result = self.server.dispatch(self, frame)
            except CloseConnection as exc:
                self.close(str(exc))
                return
            if result is None:
                continue
            if isinstance(result, bytes):
                self.transport.write(result)  # type: ignore[union-attr]
                continue
            self._busy = True
            task = asyncio.ensure_future(result)
            task.add_done_callback(self._waited)
            return
        if self._read_paused and len(queue) <= MAX_QUEUED // 2 and self.transport:
            self._read_paused = False
            self.transport.resume_reading()

    def _waited(self, task: "asyncio.Future[Any]") -> None:
        self._busy = False
        if task.cancelled() or self._closed:
            return
        exc = task.exception()
        if exc is not None:
            log.error("request from %s failed", self.peer, exc_info=exc)
            self.close("internal error while handling a request")
            return
        response = task.result()
        if response:
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


Pending = Coroutine[Any, Any, bytes | None]
