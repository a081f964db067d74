"""A stand-in for KafkaServer as server.Connection sees it, for in-process connection tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from offsetd.server.connection import Connection


class FakeServer:
    """What Connection needs of KafkaServer; dispatch answers each request frame with
    `answers[key(frame)]()` (bytes now, a future, a SplitFrame...)."""

    def __init__(self, answers: dict[int, Callable[[], Any]], key: Callable[[bytes], int] = lambda frame: frame[0]) -> None:
        self.answers = answers
        self.key = key
        self.max_request_bytes = 1 << 20
        self.trace = False
        self.connections: set[Connection] = set()
        self.guard = SimpleNamespace(admit=lambda host: None, release=lambda host: None)

    def dispatch(self, conn: Connection, frame: bytes) -> Any:
        return self.answers[self.key(frame)]()

    def connection_closed(self, conn: Connection) -> None:
        pass
