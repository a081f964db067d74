"""SCRAM-SHA-256/512 server (RFC 5802/7677) with Kafka's semantics (reference security.md §2.5): gs2
flag `n` only, no SASLprep, unknown users rejected at the first message, and every failure is
AuthenticationFailed (58), never an `e=` server-final message."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from typing import Callable

from .credentials import MIN_ITERATIONS, ScramCredential, hash_name
from .mechanism import AuthenticationFailed

# lookup(mechanism, username) -> the user's credential for that mechanism, or None (unknown user)
ScramLookup = Callable[[str, str], ScramCredential | None]

_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # RFC 5802 `printable`: no comma
_EXTENSION = re.compile(r"[A-Za-z0-9]+=[^,]*")  # Kafka accepts multi-letter names (tokenauth=true)


def sasl_name_to_user(sasl_name: str) -> str:
    """Undo RFC 5802 saslname escaping (`=2C` -> `,`, `=3D` -> `=`); ValueError for any other `=` or a `,`."""
    out: list[str] = []
    i = 0
    while i < len(sasl_name):
        ch = sasl_name[i]
        if ch == ",":
            raise ValueError("unescaped ',' in saslname")
        if ch == "=":
            code = sasl_name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError(f"invalid escape in saslname {sasl_name!r}")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def user_to_sasl_name(user: str) -> str:
    """RFC 5802 saslname escaping of a user name (the client side; used by tests and tools)."""
    return user.replace("=", "=3D").replace(",", "=2C")


def _b64decode(value: str) -> bytes:
    return base64.b64decode(value.encode("ascii"), validate=True)


def _attribute(part: str, name: str) -> str:
    """The value of a `name=value` message part; ValueError if the part is another attribute."""
    if not part.startswith(name + "="):
        raise ValueError(f"expected {name}= in {part!r}")
    return part[len(name) + 1:]


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: ScramLookup,
                 nonce_factory: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.name = mechanism
        self._hash = hash_name(mechanism)
        self._lookup = lookup
        self._nonce_factory = nonce_factory
        self._step = 0  # 0: expects client-first, 1: client-final, 2: complete
        self._user = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._step == 2

    @property
    def authorization_id(self) -> str:
        return self._user

    def _fail(self, why: str) -> AuthenticationFailed:
        # Kafka sends the same generic text whatever went wrong (why is for logs).
        exc = AuthenticationFailed(
            f"Authentication failed due to invalid credentials with SASL mechanism {self.name}")
        exc.reason = why  # type: ignore[attr-defined]
        return exc

    def evaluate(self, token: bytes) -> bytes:
        """The next server message for a client message."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("message is not UTF-8") from None
        try:
            if self._step == 0:
                return self._client_first(text).encode("utf-8")
            if self._step == 1:
                return self._client_final(text).encode("utf-8")
        except (ValueError, binascii.Error) as exc:
            raise self._fail(f"malformed message: {exc}") from None
        raise self._fail("unexpected message after the exchange completed")

    def _client_first(self, text: str) -> str:
        parts = text.split(",")
        if len(parts) < 4 or parts[0] != "n":  # only gs2 flag `n`: no channel binding
            raise self._fail("client-first needs gs2 flag n (no channel binding)")
        authzid = sasl_name_to_user(_attribute(parts[1], "a")) if parts[1] else ""
        user = sasl_name_to_user(_attribute(parts[2], "n"))
        client_nonce = _attribute(parts[3], "r")
        if not _PRINTABLE_NONCE.fullmatch(client_nonce):
            raise ValueError("invalid client nonce")
        for extension in parts[4:]:  # ignored (tokenauth=true is for delegation tokens, not served)
            if not _EXTENSION.fullmatch(extension):
                raise ValueError(f"invalid extension {extension!r}")
        credential = self._lookup(self.name, user)
        if credential is None:
            raise self._fail(f"unknown user {user!r}")
        if authzid and authzid != user:  # the one failure whose message is specific
            raise AuthenticationFailed("Authentication failed: the authorization id differs from the username")
        if credential.iterations < MIN_ITERATIONS:
            raise self._fail(f"stored iterations {credential.iterations} < {MIN_ITERATIONS}")
        server_nonce = self._nonce_factory()
        self._user, self._credential = user, credential
        self._client_first_bare = ",".join(parts[2:])
        self._nonce = client_nonce + server_nonce
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._step = 1
        return self._server_first

    def _client_final(self, text: str) -> str:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ValueError("client-final has no proof")
        parts = without_proof.split(",")
        if len(parts) < 2:
            raise ValueError("client-final needs c= and r=")
        _b64decode(_attribute(parts[0], "c"))  # the channel binding is covered by the proof
        nonce = _attribute(parts[1], "r")
        # Kafka accepts a final nonce that ends with the combined one (reference §2.5); librdkafka
        # 2.0 (Debian's kcat) sends its own nonce in front once more. The proof covers it anyway.
        if not nonce.endswith(self._nonce):
            raise self._fail("nonce mismatch")
        proof = _b64decode(proof_b64)
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise self._fail("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise self._fail("invalid proof")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self._step = 2
        return "v=" + base64.b64encode(server_signature).decode("ascii")
