"""The model of `offsetd configs` (SCRAM users, kafka-configs.sh compatible): parsing
`--add-config 'SCRAM-SHA-256=[iterations=8192,password=s]'`, `--delete-config`, kafka-storage's
`--add-scram 'SCRAM-SHA-256=[name=admin,password=s]'`, kafka-configs' describe line, and the
SCRAM key derivation (RFC 5802) for bootstrapping credentials into the broker's store offline.

Kafka's rules: iterations default to 4096 and must be within 4096..16384 (the broker refuses
others); the password is used as its UTF-8 bytes (no SASLprep); only the derived keys are stored."""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from .errors import UsageError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


@dataclass(frozen=True)
class ScramUpsert:
    """One credential to set: user, mechanism, iterations, password (and a salt when given)."""

    user: str
    mechanism: str
    iterations: int
    password: str
    salt: bytes | None = None


def split_config(text: str) -> list[tuple[str, str]]:
    """kafka-configs' `k1=v1,k2=[a,b],k3` syntax: commas separate entries except inside square
    brackets; a bracketed value keeps its content without the brackets."""
    entries: list[tuple[str, str]] = []
    depth, current = 0, ""
    for char in text + ",":
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"Unbalanced ']' in '{text}'")
        if char == "," and depth == 0:
            if current.strip():
                key, _, value = current.partition("=")
                value = value.strip()
                if value.startswith("[") and value.endswith("]"):
                    value = value[1:-1]
                entries.append((key.strip(), value))
            current = ""
        else:
            current += char
    if depth:
        raise UsageError(f"Unbalanced '[' in '{text}'")
    return entries


def _mechanism(name: str) -> str:
    """A SCRAM mechanism name (case as Kafka writes it); UsageError for others (quotas are not served)."""
    upper = name.strip().upper()
    if upper not in MECHANISMS:
        raise UsageError(f"Only SCRAM-SHA-256 and SCRAM-SHA-512 can be set for users (got '{name}')")
    return upper


def _fields(value: str, what: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """`a=1,b=2` inside a mechanism's brackets; UsageError for unknown or repeated keys."""
    fields: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in allowed:
            raise UsageError(f"Invalid {what} entry '{item}': expected " + ", ".join(f"{k}=..." for k in allowed))
        if key in fields:
            raise UsageError(f"{key} given twice in {what}")
        fields[key] = val
    return fields


def _iterations(fields: dict[str, str], mechanism: str) -> int:
    """The `iterations=` value (default 4096), which must be an integer >= 4096."""
    text = fields.get("iterations", str(DEFAULT_ITERATIONS))
    try:
        iterations = int(text)
    except ValueError:
        raise UsageError(f"Invalid iterations '{text}' for {mechanism}") from None
    if iterations < MIN_ITERATIONS:
        raise UsageError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}")
    return iterations


def parse_add_config(text: str, user: str) -> list[ScramUpsert]:
    """`--add-config` for one user: `SCRAM-SHA-256=[iterations=8192,password=s],SCRAM-SHA-512=[password=s]`."""
    upserts = []
    for key, value in split_config(text):
        mechanism = _mechanism(key)
        fields = _fields(value, mechanism, ("iterations", "password"))
        if not fields.get("password"):
            raise UsageError(f"{mechanism} needs password=...")
        upserts.append(ScramUpsert(user, mechanism, _iterations(fields, mechanism), fields["password"]))
    if len({u.mechanism for u in upserts}) != len(upserts):
        raise UsageError("A mechanism is given twice in --add-config")
    return upserts


def parse_delete_config(text: str) -> list[str]:
    """`--delete-config 'SCRAM-SHA-256,SCRAM-SHA-512'`: the mechanisms to delete."""
    names = [name for name, _ in split_config(text)]
    if not names:
        raise UsageError("--delete-config needs a mechanism")
    return list(dict.fromkeys(_mechanism(name) for name in names))


def parse_add_scram(text: str) -> ScramUpsert:
    """kafka-storage's `--add-scram 'SCRAM-SHA-256=[name=admin,password=s,iterations=8192]'`."""
    entries = split_config(text)
    if len(entries) != 1:
        raise UsageError(f"--add-scram takes one MECHANISM=[name=...,password=...] (got '{text}')")
    mechanism = _mechanism(entries[0][0])
    fields = _fields(entries[0][1], mechanism, ("name", "password", "iterations", "salt"))
    if not fields.get("name") or not fields.get("password"):
        raise UsageError(f"--add-scram {mechanism} needs name=... and password=...")
    iterations = _iterations(fields, mechanism)
    if iterations > MAX_ITERATIONS:
        raise UsageError(f"Iterations {iterations} is more than the maximum {MAX_ITERATIONS} for {mechanism}")
    salt = None
    if "salt" in fields:
        import base64

        try:
            salt = base64.b64decode(fields["salt"].strip('"'), validate=True)
        except ValueError:
            raise UsageError("salt must be base64") from None
    return ScramUpsert(fields["name"], mechanism, iterations, fields["password"], salt)


def derive_keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802: SaltedPassword = Hi(password, salt, i),
    StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    digest = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return hashlib.new(digest, client_key).digest(), hmac.new(salted, b"Server Key", digest).digest()


def new_salt() -> bytes:
    """A random salt (32 bytes, as Kafka's ScramFormatter uses)."""
    return os.urandom(32)


def format_describe(user: str, credentials: list[tuple[str, int]]) -> str:
    """kafka-configs' line for a user's SCRAM credentials: (mechanism, iterations) pairs."""
    listed = ", ".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in sorted(credentials))
    return f"SCRAM credential configs for user-principal '{user}' are {listed}\n"
