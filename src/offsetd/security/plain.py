"""SASL/PLAIN server (RFC 4616) as Kafka's (reference security.md §2.4): `[authzid] NUL user NUL
password` in UTF-8, checked in constant time against the JAAS `user_<name>` passwords."""

from __future__ import annotations

import hmac
from typing import Mapping

from .mechanism import AuthenticationFailed

INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


def plain_users(options: Mapping[str, str]) -> dict[str, str]:
    """The users of a PLAIN JAAS entry: each `user_<name>="<password>"` option."""
    return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}


class PlainServer:
    """One PLAIN exchange: a single client token, an empty reply on success."""

    name = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        return self._user or ""

    def evaluate(self, token: bytes) -> bytes:
        """Check `[authzid] NUL user NUL password`; b"" on success, AuthenticationFailed otherwise."""
        if self._user is not None:
            raise AuthenticationFailed("Authentication failed: PLAIN takes a single token")
        try:
            parts = token.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: the PLAIN token is not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Authentication failed: a PLAIN token has 3 NUL-separated fields, this one has {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compare even for an unknown user, so that the time taken does not tell whether it exists
        matches = hmac.compare_digest(password.encode("utf-8"),
                                      (expected if expected is not None else password + "\x00").encode("utf-8"))
        if expected is None or not matches:
            raise AuthenticationFailed(INVALID_CREDENTIALS)
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: the authorization id differs from the username")
        self._user = user
        return b""
