"""ACLs and SCRAM credentials of cluster mode in PostgreSQL: their tables and statements
(storage/security_store.py's rows); each change NOTIFYs `offsetd_security` so that every broker
reloads its authorizer."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["SECURITY_NOTIFY_CHANNEL", "SECURITY_SCHEMA", "PostgresSecurityStore"]

SECURITY_NOTIFY_CHANNEL = "offsetd_security"  # payload: "acls" or "scram"

# Created with the rest of the schema (postgres_store.PostgresStore.open).
SECURITY_SCHEMA = """
CREATE TABLE IF NOT EXISTS offsetd_acl (
    resource_type int NOT NULL, resource_name text NOT NULL, pattern_type int NOT NULL,
    principal text NOT NULL, host text NOT NULL, operation int NOT NULL, permission int NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission));
CREATE TABLE IF NOT EXISTS offsetd_scram_credential (
    username text NOT NULL, mechanism text NOT NULL, salt bytea NOT NULL, stored_key bytea NOT NULL,
    server_key bytea NOT NULL, iterations int NOT NULL, PRIMARY KEY (username, mechanism));
"""


class _Store(Protocol):
    """What this module uses of postgres_store.PostgresStore (which imports this module)."""

    pool: Any
    dsn: str
    timeout_s: float
    connect_args: dict[str, Any]


class PostgresSecurityStore:
    """ACLs and SCRAM credentials shared by every broker (storage/security_store.py's rows);
    each change NOTIFYs `offsetd_security` so that every broker reloads its authorizer."""

    def __init__(self, store: _Store) -> None:
        self.store = store

    async def load(self) -> tuple[list[Any], dict[tuple[str, str], Any]]:
        from .security_store import CredentialRow

        pool = self.store.pool
        acls = [tuple(r) for r in await pool.fetch(
            "SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission "
            "FROM offsetd_acl")]
        creds = {(r[0], r[1]): CredentialRow(bytes(r[2]), bytes(r[3]), bytes(r[4]), int(r[5])) for r in await pool.fetch(
            "SELECT username, mechanism, salt, stored_key, server_key, iterations FROM offsetd_scram_credential")}
        return acls, creds  # type: ignore[return-value]

    async def _in_transaction(self, what: str, statement: str, rows: list[tuple[Any, ...]]) -> None:
        async with self.store.pool.acquire() as conn:
            async with conn.transaction():
                if rows:
                    await conn.executemany(statement, rows)
                await conn.execute("SELECT pg_notify($1, $2)", SECURITY_NOTIFY_CHANNEL, what)

    async def add_acls(self, rows: Any) -> None:
        await self._in_transaction("acls", "INSERT INTO offsetd_acl VALUES ($1, $2, $3, $4, $5, $6, $7) "
                                           "ON CONFLICT DO NOTHING", [tuple(r) for r in rows])

    async def remove_acls(self, rows: Any) -> None:
        await self._in_transaction("acls", "DELETE FROM offsetd_acl WHERE resource_type = $1 AND resource_name = $2 "
                                           "AND pattern_type = $3 AND principal = $4 AND host = $5 AND operation = $6 "
                                           "AND permission = $7", [tuple(r) for r in rows])

    async def upsert_credentials(self, creds: dict[tuple[str, str], Any]) -> None:
        await self._in_transaction(
            "scram", "INSERT INTO offsetd_scram_credential VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT "
                     "(username, mechanism) DO UPDATE SET salt = excluded.salt, stored_key = excluded.stored_key, "
                     "server_key = excluded.server_key, iterations = excluded.iterations",
            [(user, mech, c.salt, c.stored_key, c.server_key, c.iterations) for (user, mech), c in creds.items()])

    async def delete_credentials(self, keys: Any) -> None:
        await self._in_transaction("scram", "DELETE FROM offsetd_scram_credential WHERE username = $1 AND mechanism = $2",
                                   [tuple(k) for k in keys])

    async def listen(self, callback: Any) -> Any:
        """A dedicated connection delivering this channel's payloads to callback(payload)."""
        import asyncpg

        conn = await asyncpg.connect(self.store.dsn, timeout=self.store.timeout_s, **self.store.connect_args)
        await conn.add_listener(SECURITY_NOTIFY_CHANNEL, lambda _c, _pid, _ch, payload: callback(payload))
        return conn
