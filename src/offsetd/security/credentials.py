"""SCRAM credentials (reference security.md §2.5-§2.6): what the broker stores per user and mechanism
(salt, StoredKey, ServerKey, iterations; never the password), derived from a password or from the
SaltedPassword that AlterUserScramCredentials carries."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

# SCRAM mechanism -> hashlib name; the wire ids of APIs 50/51 (1 SHA-256, 2 SHA-512).
SCRAM_HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MECHANISM_IDS: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_MECHANISM_CODES: dict[str, int] = {name: code for code, name in SCRAM_MECHANISM_IDS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hash_name(mechanism: str) -> str:
    """The hashlib name of a SCRAM mechanism; ValueError for anything else."""
    try:
        return SCRAM_HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (expected one of {', '.join(SCRAM_HASHES)})") from None


def iterations_problem(iterations: int) -> str | None:
    """Why an iteration count is refused (Kafka accepts 4096..16384), or None."""
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: {iterations} < {MIN_ITERATIONS}"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: {iterations} > {MAX_ITERATIONS}"
    return None


def salted_password(mechanism: str, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802; the password is its UTF-8 bytes (Kafka applies no SASLprep)."""
    raw = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(hash_name(mechanism), raw, salt, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SP, "Client Key")), ServerKey = HMAC(SP, "Server Key")."""
    name = hash_name(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(bytes(salt), hashlib.new(name, client_key).digest(), server_key, iterations)


def credential_from_password(mechanism: str, password: str | bytes, salt: bytes | None = None,
                             iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """The credential of a password (a random salt unless given), as kafka-storage --add-scram stores it."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)
