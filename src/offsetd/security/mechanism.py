"""What a SASL mechanism server is to the state machine (security/sasl.py): tokens in, challenges out,
an authorization id once complete; any failure is AuthenticationFailed (58 on the wire)."""

from __future__ import annotations

from typing import Callable, Protocol


class AuthenticationFailed(Exception):
    """The exchange failed; str(exc) is the message sent to the client (SASL_AUTHENTICATION_FAILED)."""


class Mechanism(Protocol):
    """One exchange of one mechanism (a new instance per authentication)."""

    name: str

    def evaluate(self, token: bytes) -> bytes:
        """The next challenge for a client token; AuthenticationFailed on any failure."""
        ...

    @property
    def complete(self) -> bool:
        """The exchange succeeded (the last evaluate() returned the final challenge)."""
        ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name (valid once complete)."""
        ...


MechanismFactory = Callable[[], Mechanism]
