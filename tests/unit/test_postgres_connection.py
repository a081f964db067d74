"""Cluster mode's connections to PostgreSQL: the primary only (target_session_attrs, a read-only
server refused) and an outage told once a second (storage/postgres_connection.py)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from offsetd.storage.postgres_connection import OutageLog, ReadOnlyServer, check_writable, session_attrs


def test_read_write_is_asked_for_unless_the_url_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    assert session_attrs("postgresql://offsetd@h1:5432,h2:5432/offsetd") == {"target_session_attrs": "read-write"}
    assert session_attrs("postgresql://offsetd@h1,h2/offsetd?target_session_attrs=any") == {}
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "primary")
    assert session_attrs("postgresql://offsetd@h1/offsetd") == {}


class FakeConnection:
    """What check_writable reads of an asyncpg connection."""

    def __init__(self, in_hot_standby: str | None, read_only: str = "off", recovery: bool = False) -> None:
        self._addr = ("127.0.0.1", 5433)
        settings = {"default_transaction_read_only": read_only}
        if in_hot_standby is not None:
            settings["in_hot_standby"] = in_hot_standby
        self.settings = SimpleNamespace(**settings)
        self.recovery = recovery

    def get_settings(self) -> SimpleNamespace:
        return self.settings

    async def fetchval(self, sql: str) -> bool:
        assert sql == "SELECT pg_is_in_recovery()"
        return self.recovery


@pytest.mark.parametrize("conn", [FakeConnection("on"), FakeConnection("off", read_only="on"),
                                  FakeConnection(None, recovery=True)], ids=["standby", "read-only", "old-standby"])
def test_a_server_that_would_refuse_writes_is_refused(conn: FakeConnection) -> None:
    with pytest.raises(ReadOnlyServer, match="127.0.0.1:5433"):
        asyncio.run(check_writable(conn))


@pytest.mark.parametrize("conn", [FakeConnection("off"), FakeConnection(None, recovery=False)], ids=["14+", "older"])
def test_a_primary_is_accepted(conn: FakeConnection) -> None:
    asyncio.run(check_writable(conn))


def test_an_outage_is_told_once_a_second_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outage = OutageLog(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "offsetd.storage")
    for _ in range(50):  # 50 failures within 0.49 s: one line
        outage.failed("ConnectionRefusedError")
        now[0] += 0.01
    now[0] = 101.2
    outage.failed("is a standby in recovery")
    outage.answered()
    outage.answered()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "ConnectionRefusedError" in lines[0] and "1 statements failed" in lines[0]
    assert "standby" in lines[1] and "50 statements failed" in lines[1] and "1.2 s" in lines[1]
    assert lines[2] == "PostgreSQL answers again after 1.2 s"
