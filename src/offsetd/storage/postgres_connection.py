"""How cluster mode connects to PostgreSQL: only to a server that accepts writes, and an outage
told in the log once a second, not once per failed statement.

`storage.engine` may list several servers (`postgresql://offsetd@h1:5432,h2:5432/offsetd`), a
primary and its standbys: they are tried in order. A broker must never take a standby for the
primary, so unless the URL says otherwise it asks for `target_session_attrs=read-write` (the first
server that is not in recovery and not read-only), and every connection, whatever the URL asks,
is checked once more when it is opened: a read-only one is closed and the statement fails as
PostgreSQL being unavailable (Kafka's retriable errors), until a primary answers.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("offsetd.storage")

REPORT_INTERVAL_S = 1.0  # at most one line per second about an outage


class ReadOnlyServer(Exception):
    """The server answered but cannot take writes (a standby in recovery, or read-only by default)."""


def session_attrs(dsn: str) -> dict[str, str]:
    """asyncpg's connect arguments for `dsn`: target_session_attrs=read-write unless the URL (or
    PGTARGETSESSIONATTRS) chose one."""
    query = parse_qs(urlsplit(dsn).query)
    if "target_session_attrs" in query or os.environ.get("PGTARGETSESSIONATTRS"):
        return {}
    return {"target_session_attrs": "read-write"}


async def check_writable(conn: Any) -> None:
    """ReadOnlyServer when `conn` reached a server that would refuse writes. PostgreSQL 14+
    reports both states at connection start; older servers are asked."""
    settings = conn.get_settings()
    if getattr(settings, "default_transaction_read_only", "off") == "on":
        raise ReadOnlyServer(f"{_address(conn)} is read-only (default_transaction_read_only = on)")
    standby = getattr(settings, "in_hot_standby", None)
    in_recovery = standby == "on" if standby is not None else bool(await conn.fetchval("SELECT pg_is_in_recovery()"))
    if in_recovery:
        raise ReadOnlyServer(f"{_address(conn)} is a standby in recovery, not the primary; list the primary "
                             "in storage.engine (or promote this standby)")


def _address(conn: Any) -> str:
    """host:port of a connection, for messages."""
    addr = conn._addr  # asyncpg keeps the address it connected to; no public accessor
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)


class OneLineErrors(logging.Filter):
    """A log filter that turns a record's traceback into one line: asyncpg's pool tells each
    failed attempt to restore its connections with a traceback (about once a second at first),
    which an outage the OutageLog already tells does not need."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}: {type(exc).__name__}: {exc}", ()
            record.exc_info = record.exc_text = None
        return True


class OutageLog:
    """Tells the log that PostgreSQL cannot take statements (why, and how many failed since the
    last line) at most once per `interval_s`, and once that it answers again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.since: float | None = None  # when the outage began (None: no outage)
        self._last_report = float("-inf")
        self._failed = 0  # statements failed since the last line

    def failed(self, reason: str) -> None:
        """A statement failed: say why unless a line went out less than `interval_s` ago."""
        now = self.clock()
        if self.since is None:
            self.since = now
        self._failed += 1
        if now - self._last_report < self.interval_s:
            return
        log.warning("PostgreSQL unavailable for %.1f s (%d statements failed; writes are refused with "
                    "retriable errors until it answers): %s", now - self.since, self._failed, reason)
        self._last_report = now
        self._failed = 0

    def answered(self) -> None:
        """A statement succeeded: the outage (if any) is over."""
        if self.since is None:
            return
        log.warning("PostgreSQL answers again after %.1f s", self.clock() - self.since)
        self.since = None
        self._last_report = float("-inf")
        self._failed = 0
