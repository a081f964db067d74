"""Where ACLs and SCRAM credentials live: local mode in `<log.dirs>/security/` (two JSON files,
each replaced durably as a whole), cluster mode in PostgreSQL (postgres_security.PostgresSecurityStore).

Rows are plain tuples so that storage knows nothing of the security model: an ACL is
(resource type, resource name, pattern type, principal, host, operation, permission) with Kafka's
wire codes, a credential is (salt, stored key, server key, iterations) per (user, mechanism).
Passwords are never stored, only the keys derived from them (RFC 5802)."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol

from .durable_file import write_durably

AclRow = tuple[int, str, int, str, str, int, int]
CredentialKey = tuple[str, str]  # (user name, mechanism)

ACLS_FILE = "acls.json"
CREDENTIALS_FILE = "scram-credentials.json"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class CredentialRow:
    """A SCRAM credential as stored: what the server needs to verify a client proof."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class SecurityStore(Protocol):
    """Persistence of ACLs and credentials; every change is durable when the call returns."""

    async def load(self) -> tuple[list[AclRow], dict[CredentialKey, CredentialRow]]: ...
    async def add_acls(self, rows: Iterable[AclRow]) -> None: ...
    async def remove_acls(self, rows: Iterable[AclRow]) -> None: ...
    async def upsert_credentials(self, creds: dict[CredentialKey, CredentialRow]) -> None: ...
    async def delete_credentials(self, keys: Iterable[CredentialKey]) -> None: ...


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def acl_to_json(row: AclRow) -> dict[str, Any]:
    rtype, name, pattern, principal, host, op, permission = row
    return {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": op, "permission": permission}


def acl_from_json(item: dict[str, Any]) -> AclRow:
    return (int(item["resource_type"]), str(item["resource_name"]), int(item["pattern_type"]),
            str(item["principal"]), str(item["host"]), int(item["operation"]), int(item["permission"]))


class LocalSecurityStore:
    """The single-node store: `<log.dirs>/security/acls.json` and `scram-credentials.json`."""

    def __init__(self, log_dir: Path) -> None:
        self.dir = Path(log_dir) / "security"
        self._acls: set[AclRow] = set()
        self._creds: dict[CredentialKey, CredentialRow] = {}

    def load_now(self) -> tuple[list[AclRow], dict[CredentialKey, CredentialRow]]:
        """Read both files (missing files: nothing stored yet)."""
        acls_path, creds_path = self.dir / ACLS_FILE, self.dir / CREDENTIALS_FILE
        if acls_path.exists():
            self._acls = {acl_from_json(a) for a in json.loads(acls_path.read_text("utf-8"))["acls"]}
        if creds_path.exists():
            users = json.loads(creds_path.read_text("utf-8"))["users"]
            self._creds = {(user, mech): CredentialRow(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                                       base64.b64decode(c["server_key"]), int(c["iterations"]))
                           for user, mechs in users.items() for mech, c in mechs.items()}
        return sorted(self._acls), dict(self._creds)

    async def load(self) -> tuple[list[AclRow], dict[CredentialKey, CredentialRow]]:
        return self.load_now()

    async def add_acls(self, rows: Iterable[AclRow]) -> None:
        self._acls.update(rows)
        self._write_acls()

    async def remove_acls(self, rows: Iterable[AclRow]) -> None:
        self._acls.difference_update(rows)
        self._write_acls()

    async def upsert_credentials(self, creds: dict[CredentialKey, CredentialRow]) -> None:
        self._creds.update(creds)
        self._write_credentials()

    async def delete_credentials(self, keys: Iterable[CredentialKey]) -> None:
        for key in keys:
            self._creds.pop(key, None)
        self._write_credentials()

    def _write_acls(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_durably(self.dir / ACLS_FILE, json.dumps(
            {"version": FORMAT_VERSION, "acls": [acl_to_json(a) for a in sorted(self._acls)]}, indent=1))

    def _write_credentials(self) -> None:
        users: dict[str, dict[str, Any]] = {}
        for (user, mech), c in sorted(self._creds.items()):
            users.setdefault(user, {})[mech] = {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key),
                                                "server_key": _b64(c.server_key), "iterations": c.iterations}
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / CREDENTIALS_FILE
        write_durably(path, json.dumps({"version": FORMAT_VERSION, "users": users}, indent=1))
        os.chmod(path, 0o600)  # derived keys still allow offline guessing of weak passwords
