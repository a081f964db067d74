"""Fetch requests (v4+; fetch_down_convert.py wraps older versions around this): answered at once
when min_bytes are there or the request may not wait, else a long poll that appends to its
partitions wake until max_wait passes. Reads and fetch sessions are broker/fetch.py's."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..broker.broker import Broker
from ..broker.fetch import finish_fetch, open_fetch, read_fetch
from ..broker.fetch_sessions import FetchSessionCache
from ..protocol.api_versions import ApiKey
from ..protocol.encoder import encode_response
from .connection import Pending


class FetchPolls:
    """The broker's Fetch requests, and the long polls waiting on partitions."""

    def __init__(self, broker: Broker, fetch_sessions: FetchSessionCache, clock: Callable[[], int]) -> None:
        self.broker = broker
        self.fetch_sessions = fetch_sessions
        self.clock = clock
        self._fetch_waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}

    def fetch(self, request: Any, version: int, correlation_id: int) -> bytes | Pending:
        """The encoded response now, or a long poll producing it."""
        context = open_fetch(self.fetch_sessions, request, version, self.clock)
        result = read_fetch(self.broker, request, version, context)
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if result.total_bytes >= request.min_bytes or max_wait_ms <= 0 or not result.partitions:
            return encode_response(ApiKey.FETCH, version, correlation_id, self._fetch_body(request, result))
        return self._fetch_long_poll(request, version, correlation_id, result, max_wait_ms)

    def _fetch_body(self, request: Any, result: Any) -> dict[str, Any]:
        """The body of a Fetch response about to be sent (a fetch session learns what it says)."""
        if result.context is None:
            return result.body
        return finish_fetch(self.fetch_sessions, request, result, self.clock())

    async def _fetch_long_poll(self, request: Any, version: int, correlation_id: int,
                               result: Any, max_wait_ms: int) -> bytes:
        """Wait until min_bytes are available or max_wait passes, waking on appends."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        keys = result.partitions
        context = result.context
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            waiter: asyncio.Future[None] = loop.create_future()
            for key in keys:
                self._fetch_waiters.setdefault(key, set()).add(waiter)
            timer = loop.call_later(remaining, lambda w=waiter: w.done() or w.set_result(None))
            try:
                await waiter
            finally:
                timer.cancel()
                for key in keys:
                    waiters = self._fetch_waiters.get(key)
                    if waiters is not None:
                        waiters.discard(waiter)
                        if not waiters:
                            del self._fetch_waiters[key]
            result = read_fetch(self.broker, request, version, context)
            if result.total_bytes >= request.min_bytes:
                return encode_response(ApiKey.FETCH, version, correlation_id, self._fetch_body(request, result))
        result = read_fetch(self.broker, request, version, context)
        return encode_response(ApiKey.FETCH, version, correlation_id, self._fetch_body(request, result))

    def wake(self, topic: str, partition: int) -> None:
        """Records were appended to a partition: the long polls waiting on it read again."""
        waiters = self._fetch_waiters.get((topic, partition))
        if waiters:
            for waiter in list(waiters):
                if not waiter.done():
                    waiter.set_result(None)
