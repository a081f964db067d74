"""One client connection: framing, in-order request processing, flow control.

Responses on a connection are written in request order (Kafka's guarantee). Most handlers answer
synchronously from `data_received`; a handler that must wait returns a coroutine. A waiting
request normally holds back the rest of the connection, as Kafka mutes a channel with a request
in flight, so every request sees the effects of the ones before it. The exceptions are a run of
OffsetCommits and a run of Produces: they are queued to the coordinator, or decided by their
partition logs, back to back (so librdkafka's pipelined async commits share one fsync, and in
cluster mode a producer's requests waiting for PostgreSQL share its statements,
storage/append_pipeline.py), and the first request of any other kind waits for them all.

Zero-copy Fetch: a response whose records are file ranges (a SplitFrame of FileRecords) is sent
with sendfile(2) from the segment files, its encoded parts by the transport between them. What
the socket takes at once goes out synchronously; the rest is sent by a task that holds the head
of the in-flight line, so every later response waits for it (and the connection reads no further
requests meanwhile, as a muted Kafka channel). TLS would need the bytes: a transport without a
plain socket gets the ranges read (pread) and written as one frame.

`ConnectionGuard` enforces the connection limits at accept and, by one periodic sweep, closes
connections idle too long and ones that started a request frame and did not finish it in time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Coroutine, Protocol

from ..protocol.encoder import SplitFrame
from .close_connection import CloseConnection
from .listeners import ANONYMOUS
from .log_limiter import LogLimiter

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .listeners import ListenerRuntime
    from .sasl_wire import SaslSession

log = logging.getLogger("offsetd.server")

_SIZE = struct.Struct(">i")
MAX_QUEUED = 128  # frames read ahead before we stop reading the socket
PRODUCE = 0
OFFSET_COMMIT = 8
# The request kinds that may be handled while others of their kind wait (see the module
# docstring), and how many may wait at once on one connection.
PIPELINED = {OFFSET_COMMIT: 1024, PRODUCE: 16}

# A response's parts ready to send: encoded bytes, or (fd, position, length) of a file range.
Pieces = deque[Any]


# Closes are logged one by one up to this many a second (a garbage storm closes thousands).
_closes = LogLimiter(log, per_second=20, what="connections closed")


class ConnectionServer(Protocol):
    """What a connection needs of the server that accepted it (server/app.py's KafkaServer): the
    frame limit, the guard and the set of open connections, and the dispatch of each request frame."""

    max_request_bytes: int
    trace: bool  # per-request log lines
    guard: "ConnectionGuard"
    connections: "set[Connection]"

    def dispatch(self, conn: "Connection", frame: bytes) -> "bytes | Pending | None":
        """The encoded response to one request frame, a coroutine producing it, or None."""

    def sasl_session(self, conn: "Connection", listener: "ListenerRuntime") -> "SaslSession":
        """The SASL state of a new connection on a SASL listener."""

    def connection_closed(self, conn: "Connection") -> None:
        """The connection is gone (its share sessions close with it)."""


class Connection(asyncio.Protocol):
    """asyncio protocol for one Kafka client socket."""

    def __init__(self, server: ConnectionServer, listener: "ListenerRuntime | None" = None) -> None:
        self.server = server
        self.listener_runtime = listener
        self.listener = listener.name if listener is not None else ""  # the listener name
        self.security_protocol = listener.protocol if listener is not None else "PLAINTEXT"
        self.principal = ANONYMOUS  # User:<mapped DN> on SSL with a certificate, User:<name> after SASL
        self.sasl: "SaslSession | None" = None  # on a SASL listener (server/sasl_wire.py)
        self.frame_limit = server.max_request_bytes  # sasl.server.max.receive.size until authenticated
        self._muted = False  # a failed authentication: nothing more is read or answered
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buf = bytearray()
        self._queue: deque[bytes] = deque()
        self._inflight: deque[asyncio.Future[Any]] = deque()  # waiting responses, request order
        self._pipelining = -1  # the api key of every request in flight when they are all of a PIPELINED kind
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self.host: str | None = None  # the peer address, once admitted (counted by the guard)
        self.client_host = "/?"  # the peer address as JoinGroup records it (Kafka's "/1.2.3.4")
        # Expiry, checked by ConnectionGuard.sweep: traffic only sets _active (no clock read, no
        # allocation per request); the sweep turns it into _last_active. The clock is read only
        # when a frame is left incomplete.
        self._active = False
        self._last_active = 0.0
        self._frame_started: float | None = None  # when the incomplete frame in _buf began
        self._sock_fd = -1  # the socket for sendfile; -1: none (TLS, not a socket, no sendfile)
        self._sending: asyncio.Task[None] | None = None  # the rest of a zero-copy response
        # Responses after the first of a loop turn, written together at the head of the next (_send)
        self._out: list[bytes] = []
        self._corked = False

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        host = str(peer[0]) if peer else "?"
        refused = self.server.guard.admit(host)
        if refused is not None:
            self.close(f"connection refused: {refused}")
            return
        self.host = host
        self.client_host = f"/{host}"
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("sslcontext") is None and hasattr(os, "sendfile"):
            self._sock_fd = sock.fileno()
        self._last_active = time.monotonic()
        self.server.connections.add(self)
        listener = self.listener_runtime
        if listener is not None and listener.principal_of is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            principal = listener.principal_of(der)
            if principal is None:  # Kafka fails the connection when no mapping rule matches
                self.close("no ssl.principal.mapping.rules rule matches the client certificate's DN")
                return
            self.principal = principal
            log.debug("%s on %s: TLS principal %s", self.peer, listener.name, principal)
        if listener is not None and listener.sasl:
            self.sasl = self.server.sasl_session(self, listener)
            self.frame_limit = min(self.frame_limit, self.sasl.max_token + 64)  # a SaslAuthenticate's header

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._sending is not None:
            self._sending.cancel()
        self._queue.clear()
        self._inflight.clear()
        self._out.clear()
        self.server.connections.discard(self)
        self.server.connection_closed(self)
        if self.host is not None:
            self.server.guard.release(self.host)
            self.host = None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._active = True  # the client is reading what we send
        self._process()

    def data_received(self, data: bytes) -> None:
        self._active = True
        if self._muted:
            return
        buf = self._buf
        buf += data
        limit = self.frame_limit
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:  # one copy per frame (a bytearray slice would be a second)
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > limit:
                    self.close((f"frame of {size} bytes exceeds socket.request.max.bytes={limit}"
                                if limit == self.server.max_request_bytes else
                                f"frame of {size} bytes before SASL authentication exceeds "
                                f"sasl.server.max.receive.size") if size > limit else f"negative frame size {size}")
                    return
                if end - pos - 4 < size:
                    break
                self._queue.append(view[pos + 4 : pos + 4 + size].tobytes())
                pos += 4 + size
        if pos:
            del buf[:pos]
        if buf:  # part of a frame: time it from its first byte (slowloris bound)
            if pos or self._frame_started is None:
                self._frame_started = time.monotonic()
        elif self._frame_started is not None:
            self._frame_started = None
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
        while queue and not self._write_paused and not self._closed and not self._muted:
            frame = queue[0]
            kind = frame[1] if len(frame) >= 2 and frame[0] == 0 and frame[1] in PIPELINED else -1
            if self._inflight and not (kind == self._pipelining >= 0 and len(self._inflight) < PIPELINED[kind]):
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
                else:  # answered at once: written at once, after any held back (not joined: see _send)
                    self._write_now(result)
                continue
            if result.__class__ is SplitFrame:
                if self._inflight:  # as bytes above: it waits for its turn
                    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    ready.set_result(result)
                    self._inflight.append(ready)
                else:
                    self._write_split(result)  # type: ignore[arg-type]
                continue
            self._pipelining = kind
            task = asyncio.ensure_future(result)
            self._inflight.append(task)
            task.add_done_callback(self._answered)
        if self._read_paused and len(queue) <= MAX_QUEUED // 2 and self.transport:
            self._read_paused = False
            if self._buf:  # we stopped reading, not the client: its frame's time starts again
                self._frame_started = time.monotonic()
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
                self._active = True
                if self.server.trace:
                    head = response.parts[0] if response.__class__ is SplitFrame else response
                    log.debug("%s response corr=%d (%d bytes, deferred)", self.peer,
                              int.from_bytes(head[4:8], "big"), len(response))
                if response.__class__ is SplitFrame:
                    self._write_split(response)  # a send left in flight heads the line now
                elif self._pipelining == OFFSET_COMMIT:  # a run of commits: one fsync answers many
                    self._send(response)
                else:
                    self._write_now(response)
        self._process()

    def _send(self, response: bytes) -> None:
        """Write the answer of a pipelined OffsetCommit: the first of a loop turn at once; the
        later ones of the same turn are joined and written by one call at the head of the next
        turn. One fsync can answer hundreds of pipelined commits at once, which then cost one send,
        not one each. Every other response goes out as soon as it is answered: joining a client's
        burst of FindCoordinator and Metadata answers left librdkafka consumers re-querying their
        coordinator for seconds after a disk-full (`make test`'s chaos run), and librdkafka's
        producers and transactions gain nothing from it."""
        if self._corked:
            self._out.append(response)
            return
        self.transport.write(response)  # type: ignore[union-attr]
        self._corked = True
        asyncio.get_running_loop().call_soon(self._uncork)

    def _uncork(self) -> None:
        self._corked = False
        self._flush_out()

    def _write_now(self, response: bytes) -> None:
        """Write a response at once, after the ones _send held back."""
        self._flush_out()
        self.transport.write(response)  # type: ignore[union-attr]

    def _flush_out(self) -> None:
        """Write the responses _send held back (before anything else is written, and at close)."""
        if self._out and not self._closed and self.transport is not None:
            out = self._out
            self._out = []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    # ------------------------------------------------------------------ zero-copy sends

    def _write_split(self, frame: SplitFrame) -> None:
        """Send a response with file ranges: what the socket takes now, synchronously; the rest
        by a task put at the head of the in-flight line (every later response waits for it)."""
        self._active = True
        self._flush_out()  # the responses before it go first
        pieces: Pieces = deque()
        try:
            if self._sock_fd < 0:  # no sendfile here: read the ranges, one write
                self.transport.write(b"".join(p if p.__class__ is bytes else p.read()  # type: ignore[union-attr]
                                              for p in frame.parts))
                frame.close()
                return
            for part in frame.parts:
                if part.__class__ is bytes:
                    pieces.append(part)
                else:
                    pieces.extend(part.ranges)
            if self._send_now(pieces):
                frame.close()
                return
        except OSError as exc:
            frame.close()
            self.close(f"zero-copy fetch response failed: {exc}")
            return
        self._sending = task = asyncio.ensure_future(self._send_rest(frame, pieces))
        self._inflight.appendleft(task)
        task.add_done_callback(self._answered)

    def _send_now(self, pieces: Pieces) -> bool:
        """Send pieces from the left while the socket takes them without waiting; True when all
        went. Encoded bytes go through the transport (buffered if need be); a file range only
        when the transport's buffer is empty, so the stream keeps its order."""
        transport = self.transport
        sock_fd = self._sock_fd
        while pieces:
            piece = pieces[0]
            if piece.__class__ is bytes:
                transport.write(piece)  # type: ignore[union-attr]
                pieces.popleft()
                continue
            if transport.get_write_buffer_size():  # type: ignore[union-attr]
                return False
            fd, pos, length = piece
            try:
                sent = os.sendfile(sock_fd, fd, pos, length)
            except BlockingIOError:
                return False
            if sent == 0:
                raise OSError(f"segment file shrank under a fetch (EOF at {pos}, {length} bytes due)")
            if sent < length:
                pieces[0] = (fd, pos + sent, length - sent)
                return False  # the socket is full: wait for it (loop.sendfile)
            pieces.popleft()
        return True

    async def _send_rest(self, frame: SplitFrame, pieces: Pieces) -> None:
        """Finish a zero-copy response the socket could not take at once. loop.sendfile waits
        for the transport's buffer to drain and for the socket to take the range; it pauses
        reading while it runs (and then resumes it: our own pause is restored after)."""
        loop = asyncio.get_running_loop()
        try:
            while not self._send_now(pieces):
                fd, pos, length = pieces[0]
                sent = await loop.sendfile(self.transport, _FileNo(fd), pos, length,  # type: ignore[arg-type]
                                           fallback=False)
                if self._read_paused and self.transport is not None:
                    self.transport.pause_reading()
                if sent < length:
                    raise OSError(f"segment file shrank under a fetch ({sent} of {length} bytes at {pos})")
                pieces.popleft()
        except (OSError, RuntimeError) as exc:  # the peer went away, or the file was cut
            if not self._closed:
                self.close(f"zero-copy fetch response failed: {exc}")
        finally:
            self._sending = None
            frame.close()

    def expire(self, now: float, guard: "ConnectionGuard") -> None:
        """Close this connection if its started request frame is overdue or it has been idle for
        connections.max.idle.ms; a request in flight (a long poll, a pending join) is activity."""
        if self._closed:
            return
        started = self._frame_started
        if (guard.receive_s is not None and started is not None and not self._read_paused
                and now - started >= guard.receive_s):
            self.close(f"request frame not received in full within socket.request.receive.timeout.ms="
                       f"{guard.receive_ms} ({len(self._buf)} bytes so far)")
        elif self._active or self._inflight:
            self._active = False
            self._last_active = now
        elif guard.idle_s is not None and now - self._last_active >= guard.idle_s:
            self.close(f"idle for connections.max.idle.ms={guard.idle_ms}", logging.INFO)

    def authenticated(self, principal: str) -> None:
        """SASL succeeded: the principal of every later request, and the usual frame limit."""
        self.principal = principal
        self.frame_limit = self.server.max_request_bytes

    def close_after(self, delay_ms: int, reason: str) -> None:
        """Answer nothing more and close after `delay_ms` (connection.failed.authentication.delay.ms:
        the response already written goes out first)."""
        self._muted = True
        self._queue.clear()
        if delay_ms <= 0:
            asyncio.get_running_loop().call_soon(self.close, reason, logging.INFO)
        else:
            asyncio.get_running_loop().call_later(delay_ms / 1000, self.close, reason, logging.INFO)

    def close(self, reason: str, level: int = logging.WARNING) -> None:
        """Close this connection, saying why in the log; the broker keeps serving everyone else."""
        if self._closed:
            return
        _closes.log(level, "closing connection from %s: %s", self.peer, reason)
        self._flush_out()  # answered before the close: they still go out (the transport flushes its buffer)
        self._closed = True
        self._queue.clear()
        if self._sending is not None:
            self._sending.cancel()
        if self.transport is not None:
            self.transport.close()


class ConnectionGuard:
    """Kafka's connection limits (max.connections, max.connections.per.ip and its overrides),
    checked when a connection is accepted, and the expiry of idle connections and stalled
    request frames, checked by one sweep over all connections every `sweep_interval_ms`."""

    def __init__(self, config: "BrokerConfig", connections: "set[Connection]") -> None:
        self.max_connections: int = config.get("max.connections")
        self.max_per_ip: int = config.get("max.connections.per.ip")
        self.per_ip_overrides: dict[str, int] = config.get("max.connections.per.ip.overrides")
        self.idle_ms: int = config.get("connections.max.idle.ms")
        self.receive_ms: int = config.get("socket.request.receive.timeout.ms")
        self.idle_s = self.idle_ms / 1000 if self.idle_ms > 0 else None
        self.receive_s = self.receive_ms / 1000 if self.receive_ms > 0 else None
        self.count = 0  # admitted connections still open
        self._per_ip: dict[str, int] = {}
        self._connections = connections

    @property
    def sweep_interval_ms(self) -> int | None:
        """A tenth of the shortest time limit, between 10 ms and 1 s; None when there is none.
        A connection is closed at most two intervals after its limit."""
        limits = [ms for ms in (self.idle_ms, self.receive_ms) if ms > 0]
        return min(max(min(limits) // 10, 10), 1000) if limits else None

    def admit(self, host: str) -> str | None:
        """Count a new connection from `host`, or say why it must be closed at once. Kafka's
        acceptor stops accepting at max.connections; we accept and close instead."""
        count = self._per_ip.get(host, 0)
        limit = self.per_ip_overrides.get(host)
        if limit is not None and count >= limit:
            return f"{host} already has max.connections.per.ip.overrides={host}:{limit} connections"
        if limit is None and count >= self.max_per_ip:
            return f"{host} already has max.connections.per.ip={self.max_per_ip} connections"
        if self.count >= self.max_connections:
            return f"the broker already has max.connections={self.max_connections} connections"
        self._per_ip[host] = count + 1
        self.count += 1
        return None

    def release(self, host: str) -> None:
        """Uncount a closed connection that `admit` counted."""
        self.count -= 1
        left = self._per_ip[host] - 1
        if left:
            self._per_ip[host] = left
        else:
            del self._per_ip[host]

    def sweep(self) -> None:
        """Close the connections that are idle too long or stalled mid-frame (periodic task)."""
        now = time.monotonic()
        for conn in tuple(self._connections):
            conn.expire(now, self)


class _FileNo:
    """The file object loop.sendfile wants, for a bare descriptor."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


Pending = Coroutine[Any, Any, bytes | SplitFrame | None] | asyncio.Future[bytes]
