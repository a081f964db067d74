"""PostgreSQL for tests (offsetd.dev.postgres.LocalPostgres): one server for the whole session,
started only when a test first asks for it, a fresh database per test (`pg_dsn`), and private
servers for tests that crash theirs (`private_postgres`), and a primary with a synchronous standby
(`primary_and_standby`) for failover tests. Fixtures registered in conftest.py."""

from __future__ import annotations

import itertools
import re
from contextlib import contextmanager
from typing import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from offsetd.dev.postgres import LocalPostgres
from offsetd.dev.postgres_standby import start_standby

_numbers = itertools.count(1)
# database name -> what to run before it is dropped (brokers using it), newest first
_before_drop: dict[str, list[Callable[[], None]]] = {}


def database_name(label: str) -> str:
    """A unique database name from a test's name: t<n>_<label letters>, within PostgreSQL's 63."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", label.lower()).strip("_")
    return f"t{next(_numbers)}_{cleaned}"[:63]


def before_drop(dsn: str, cleanup: Callable[[], None]) -> None:
    """Run `cleanup` (e.g. stop the brokers using `dsn`) before the database of `dsn` is dropped:
    fixtures tear down in reverse order of set-up, so a test that lists `cluster_factory` before
    `pg_dsn` would otherwise drop the database under running brokers. Keyed by database name, so a
    dsn through a pg_proxy counts too."""
    _before_drop.setdefault(urlsplit(dsn).path.lstrip("/"), []).append(cleanup)


def run_before_drop(name: str | None = None) -> None:
    """Run (once) the cleanups registered for database `name`, or for every database."""
    for key in [name] if name is not None else list(_before_drop):
        for cleanup in reversed(_before_drop.pop(key, [])):
            cleanup()


@contextmanager
def fresh_database(server: LocalPostgres, label: str) -> Iterator[str]:
    """A new empty database on `server` for the block; its dsn. Dropped afterwards, disconnecting
    whoever still uses it (a broker that outlived its test)."""
    if not server.running:
        server.start()  # a test stopped the shared server and failed before starting it again
    name = database_name(label)
    dsn = server.create_database(name)
    try:
        yield dsn
    finally:
        try:
            run_before_drop(name)
        finally:
            server.drop_database(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """The session's PostgreSQL (started on first use, stopped and removed at the end). Its
    directory is a system temp dir, not pytest's: those are 0700, out of reach of the OS user
    PostgreSQL runs as when the tests run as root."""
    server = LocalPostgres().start()
    yield server
    server.close()


@pytest.fixture
def pg_dsn(postgres_server: LocalPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:PORT/t<n>_<test>`: a fresh database of the session server
    for this test, dropped afterwards."""
    with fresh_database(postgres_server, request.node.name) as dsn:
        yield dsn


@pytest.fixture
def private_postgres() -> Iterator[Callable[..., LocalPostgres]]:
    """A factory of servers of the test's own (for tests that crash or stop PostgreSQL), each
    started on call (`private_postgres(settings={...})`; `.create_database(name)` gives a dsn) and
    removed after the test, once the test's clusters have stopped."""
    servers: list[LocalPostgres] = []

    def start(**kwargs: object) -> LocalPostgres:
        server = LocalPostgres(**kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server.start()

    yield start
    try:
        run_before_drop()  # brokers on these servers stop first, whatever the fixture order
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """A private primary (with database `offsetd`) and its synchronous streaming standby
    (dev/postgres_standby.py), both removed after the test, once the test's brokers have stopped."""
    servers: list[LocalPostgres] = []
    try:
        primary = LocalPostgres()
        servers.append(primary.start())
        primary.create_database("offsetd")
        servers.append(start_standby(primary))
        yield servers[0], servers[1]
    finally:
        try:
            run_before_drop()
        finally:
            for server in reversed(servers):
                server.close()
