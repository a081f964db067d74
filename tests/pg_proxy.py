"""A TCP proxy between a broker and PostgreSQL for split-brain tests: point the broker's
storage.engine at `proxy.dsn`, then `blackhole()` cuts it off from PostgreSQL the way a network
partition does (nothing forwarded either way, no socket closed, new connections never reach the
server) while its clients still reach it; `heal()` delivers what was held; `disconnect()` resets
every connection (a PostgreSQL restart as the broker sees it). Runs its own event loop in a thread,
so sync and async tests drive it alike."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

_CHUNK = 65536


class PgProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port` until closed."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.accepted = 0  # connections accepted so far (a broker's pool shows up here)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pg-proxy", daemon=True)
        self._open: asyncio.Event | None = None  # set: forwarding; clear: blackholed
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._dsn_template: str | None = None

    @classmethod
    def for_dsn(cls, dsn: str) -> "PgProxy":
        """A started proxy to the server of `dsn`; `proxy.dsn` is the same URL through the proxy."""
        url = urlsplit(dsn)
        proxy = cls(url.hostname or "127.0.0.1", url.port or 5432)
        proxy._dsn_template = dsn
        return proxy.start()

    @property
    def dsn(self) -> str:
        """The dsn given to for_dsn() with its host:port replaced by the proxy's."""
        assert self._dsn_template is not None, "dsn needs PgProxy.for_dsn"
        url = urlsplit(self._dsn_template)
        user = url.netloc.rpartition("@")[0]
        return urlunsplit(url._replace(netloc=f"{user + '@' if user else ''}127.0.0.1:{self.port}"))

    def start(self) -> "PgProxy":
        """Listen on a free port of 127.0.0.1."""
        self._thread.start()
        self._call(self._listen())
        return self

    def blackhole(self) -> None:
        """From now on forward nothing, hold what arrives, and connect new clients to nothing."""
        self._call(self._set_open(False))

    def heal(self) -> None:
        """Forward again, what was held first."""
        self._call(self._set_open(True))

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to `host`:`port` from now on and reset the current ones (a
        virtual IP moved to a promoted standby)."""
        self.target = (host, port)
        self.disconnect()

    def disconnect(self) -> None:
        """Reset (abort) every current connection on both sides; new ones are served as usual."""
        self._call(self._abort_all())

    def close(self) -> None:
        """Stop listening, reset every connection, stop the thread."""
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> "PgProxy":
        return self if self._thread.is_alive() else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- on the proxy's loop ----------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the proxy's loop and wait for it, so the change holds when we return."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_open(self, forwarding: bool) -> None:
        assert self._open is not None
        if forwarding:
            self._open.set()
        else:
            self._open.clear()

    async def _abort_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._abort_all()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        """One client: reach the server once forwarding is open, then pump both ways."""
        assert self._open is not None
        self.accepted += 1
        self._writers.add(client_writer)
        await self._open.wait()  # blackholed: the client's connect "succeeded" but nothing answers
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            self._writers.discard(client_writer)
            return
        self._writers.add(server_writer)
        await asyncio.gather(self._pump(client_reader, server_writer), self._pump(server_reader, client_writer))
        self._writers.discard(client_writer)
        self._writers.discard(server_writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy `reader` to `writer` while forwarding is open; at EOF or error close `writer`."""
        assert self._open is not None
        try:
            while True:
                await self._open.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._open.wait()  # blackholed while reading: hold the chunk, never drop it
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


@pytest.fixture
def pg_proxy() -> Iterator[Callable[[str], PgProxy]]:
    """`pg_proxy(dsn)`: a started proxy to that dsn's server (its `.dsn` goes through it), closed
    after the test."""
    proxies: list[PgProxy] = []

    def start(dsn: str) -> PgProxy:
        proxy = PgProxy.for_dsn(dsn)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.close()
