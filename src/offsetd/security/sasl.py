"""The per-connection SASL state machine (reference security.md §2.2-§2.3), sans-IO: handshake and
token steps in, error codes, reply tokens and what the shell must do (reply / close / close after
`connection.failed.authentication.delay.ms`) out. The shell holds no SASL logic."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Sequence

from .credentials import SCRAM_HASHES
from .jaas import parse_jaas_config
from .mechanism import AuthenticationFailed, Mechanism, MechanismFactory
from .plain import PlainServer, plain_users
from .scram import ScramLookup, ScramServer

NONE, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 0, 33, 34, 58
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
DEFAULT_MAX_RECEIVE_SIZE = 524288  # sasl.server.max.receive.size
REAUTH_MIN_INTERVAL_MS = 1000  # KIP-368: a re-authentication starts at least 1 s after the previous one
AFTER_SUCCESS = "SaslAuthenticate request received after successful authentication"
_SIZE = struct.Struct(">i")


class SaslState(Enum):
    """Where the connection is in the exchange."""

    NEED_HANDSHAKE = "need handshake"
    NEED_TOKEN = "need token"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Action(Enum):
    """What the shell does after answering a step."""

    REPLY = "send the response, keep the connection"
    CLOSE = "close at once, sending nothing"
    REPLY_THEN_CLOSE = "send the response, then close"
    REPLY_THEN_CLOSE_AFTER_DELAY = "send the response, close after connection.failed.authentication.delay.ms"


class Admission(Enum):
    """What happens to a non-SASL request in the current state."""

    PASS = "dispatch it"
    CLOSE = "close, no reply"  # before the handshake, and after the session expired
    ERROR_THEN_CLOSE = "its own error response with ILLEGAL_SASL_STATE, then close"  # mid-exchange


@dataclass(frozen=True, slots=True)
class SaslStep:
    """The answer to one SaslAuthenticate token (or raw v0 frame)."""

    error_code: int
    error_message: str | None
    reply_token: bytes
    session_lifetime_ms: int
    done: bool
    principal: str | None
    action: Action = Action.REPLY

    def frame(self) -> bytes:
        """The reply as a raw v0 frame: int32 length + token (a zero-length frame after PLAIN)."""
        return _SIZE.pack(len(self.reply_token)) + self.reply_token


class HandshakeResult(tuple):  # type: ignore[type-arg]
    """(error_code, enabled mechanisms), unpackable as a pair, with the shell's `action`."""

    action: Action

    def __new__(cls, error_code: int, mechanisms: list[str], action: Action) -> "HandshakeResult":
        result = super().__new__(cls, (error_code, mechanisms))
        result.action = action
        return result

    @property
    def error_code(self) -> int:
        return int(self[0])

    @property
    def mechanisms(self) -> list[str]:
        return list(self[1])


class SaslServer:
    """One connection's SASL exchange on a SASL listener, re-authentication (KIP-368) included."""

    def __init__(self, mechanisms: Mapping[str, MechanismFactory], now_ms: int,
                 reauth_ms: int | Mapping[str, int] = 0, max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE) -> None:
        """`reauth_ms`: connections.max.reauth.ms, one value or per mechanism (0: sessions never expire)."""
        self.factories = dict(mechanisms)
        self.enabled = list(self.factories)
        self.reauth_ms = reauth_ms
        self.max_receive_size = max_receive_size
        self.state = SaslState.NEED_HANDSHAKE
        self.principal: str | None = None
        self.mechanism_name: str | None = None
        self.expires_at_ms: int | None = None
        self.handshake_version: int | None = None
        self.created_ms = now_ms
        self._api_versions_seen = False
        self._mechanism: Mechanism | None = None
        self._started_ms: int | None = None  # when the current/last authentication began
        self._reauthenticating = False
        self._pending_failure: str | None = None  # re-authentication asked for another mechanism

    # ---------------------------------------------------------------- admission

    @property
    def raw_tokens(self) -> bool:
        """After a v0 handshake and until the exchange ends, frames are raw tokens, not requests."""
        return self.state == SaslState.NEED_TOKEN and self.handshake_version == 0

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms > self.expires_at_ms

    def admission(self, api_key: int, now_ms: int) -> Admission:
        """What happens to a request that is not SaslHandshake/SaslAuthenticate (those always go to
        handshake()/authenticate()). Before the handshake only ApiVersions, once; after expiry nothing."""
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return Admission.PASS
        state = self.state
        if state == SaslState.AUTHENTICATED:
            return Admission.CLOSE if self.expired(now_ms) else Admission.PASS
        if state == SaslState.NEED_HANDSHAKE and api_key == API_VERSIONS and not self._api_versions_seen:
            self._api_versions_seen = True
            return Admission.PASS
        if state == SaslState.NEED_TOKEN and self.handshake_version != 0:
            self.state = SaslState.FAILED
            return Admission.ERROR_THEN_CLOSE
        self.state = SaslState.FAILED
        return Admission.CLOSE

    def api_versions_retry(self) -> None:
        """An ApiVersions answered with UNSUPPORTED_VERSION (35) does not count: the client may retry."""
        if self.state == SaslState.NEED_HANDSHAKE:
            self._api_versions_seen = False

    def request_allowed(self, api_key: int, now_ms: int) -> bool:
        """Whether a request may be dispatched now (anything but PASS means the connection ends)."""
        return self.admission(api_key, now_ms) == Admission.PASS

    # ---------------------------------------------------------------- handshake

    def handshake(self, mechanism: str, version: int, now_ms: int) -> HandshakeResult:
        """SaslHandshake v0/v1: (error_code, enabled mechanisms) and the shell's action."""
        state = self.state
        if state == SaslState.AUTHENTICATED:
            if self.expires_at_ms is None or self._started_ms is None \
                    or now_ms - self._started_ms < REAUTH_MIN_INTERVAL_MS:
                # handled as any request on an authenticated connection: 34, the connection stays
                return HandshakeResult(ILLEGAL_SASL_STATE, self.enabled, Action.REPLY)
            return self._start(mechanism, version, now_ms, reauth=True)
        if state != SaslState.NEED_HANDSHAKE:  # mid-exchange or failed
            self.state = SaslState.FAILED
            return HandshakeResult(ILLEGAL_SASL_STATE, self.enabled, Action.REPLY_THEN_CLOSE)
        return self._start(mechanism, version, now_ms, reauth=False)

    def _start(self, mechanism: str, version: int, now_ms: int, reauth: bool) -> HandshakeResult:
        factory = self.factories.get(mechanism)
        if factory is None:
            self.state = SaslState.FAILED
            return HandshakeResult(UNSUPPORTED_SASL_MECHANISM, self.enabled, Action.REPLY_THEN_CLOSE_AFTER_DELAY)
        self._reauthenticating = reauth
        self._pending_failure = None
        if reauth and mechanism != self.mechanism_name:
            # the handshake itself succeeds; the next token fails (KIP-368: no change of mechanism)
            self._pending_failure = (f"Re-authentication must use the mechanism {self.mechanism_name}, "
                                     f"not {mechanism}")
        self.state = SaslState.NEED_TOKEN
        self.handshake_version = version
        self._started_ms = now_ms
        self._mechanism = factory()
        if not reauth:
            self.mechanism_name = mechanism
        return HandshakeResult(NONE, self.enabled, Action.REPLY)

    # ---------------------------------------------------------------- tokens

    def authenticate(self, token: bytes, now_ms: int) -> SaslStep:
        """One SaslAuthenticate token (or a raw frame after a v0 handshake)."""
        state = self.state
        if state == SaslState.AUTHENTICATED:
            return SaslStep(ILLEGAL_SASL_STATE, AFTER_SUCCESS, b"", 0, False, self.principal, Action.REPLY)
        if state == SaslState.NEED_HANDSHAKE:  # no raw tokens without a handshake in Kafka 4
            self.state = SaslState.FAILED
            return SaslStep(ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake", b"", 0, False, None,
                            Action.CLOSE)
        if state == SaslState.FAILED:
            return SaslStep(SASL_AUTHENTICATION_FAILED, "Authentication already failed", b"", 0, False, None,
                            Action.CLOSE)
        if len(token) > self.max_receive_size:
            return self._failed(f"SASL token of {len(token)} bytes exceeds sasl.server.max.receive.size "
                                f"({self.max_receive_size})")
        if self._pending_failure is not None:
            return self._failed(self._pending_failure)
        mechanism = self._mechanism
        assert mechanism is not None
        try:
            reply = mechanism.evaluate(token)
        except AuthenticationFailed as exc:
            return self._failed(str(exc))
        if not mechanism.complete:
            return SaslStep(NONE, None, reply, 0, False, None, Action.REPLY)
        principal = f"User:{mechanism.authorization_id}"
        if self._reauthenticating and principal != self.principal:
            return self._failed(f"Re-authentication cannot change the principal {self.principal} into {principal}")
        self.state = SaslState.AUTHENTICATED
        self.principal = principal
        self._mechanism = None
        self._reauthenticating = False
        lifetime = max(0, self.reauth_ms if isinstance(self.reauth_ms, int)
                       else self.reauth_ms.get(self.mechanism_name or "", 0))
        self.expires_at_ms = now_ms + lifetime if lifetime else None
        return SaslStep(NONE, None, reply, lifetime, True, principal, Action.REPLY)

    def _failed(self, message: str) -> SaslStep:
        self.state = SaslState.FAILED
        self._mechanism = None
        return SaslStep(SASL_AUTHENTICATION_FAILED, message, b"", 0, False, None, Action.REPLY_THEN_CLOSE_AFTER_DELAY)

    def raw_reply(self, frame: bytes, now_ms: int) -> bytes | None:
        """A raw v0 token in, the raw `int32 length + token` reply out; None means close (a v0 failure
        is a close, no reply)."""
        step = self.authenticate(frame, now_ms)
        if step.error_code != NONE:
            return None
        return step.frame()


def mechanism_factories(mechanisms: Sequence[str], jaas: Mapping[str, str | None],
                        lookup: ScramLookup) -> dict[str, MechanismFactory]:
    """The factories of a listener's enabled mechanisms: PLAIN with the `user_<name>` passwords of its
    JAAS config, SCRAM-SHA-256/512 verified through `lookup`; ValueError for anything else."""
    factories: dict[str, MechanismFactory] = {}
    for name in mechanisms:
        if name == "PLAIN":
            text = jaas.get(name)
            if not text:
                raise ValueError("SASL mechanism PLAIN needs listener.name.<listener>.plain.sasl.jaas.config "
                                 "with user_<name>=\"<password>\" options")
            users = plain_users(parse_jaas_config(text)[1])
            factories[name] = lambda users=users: PlainServer(users)  # type: ignore[misc]
        elif name in SCRAM_HASHES:
            factories[name] = lambda name=name: ScramServer(name, lookup)  # type: ignore[misc]
        else:
            raise ValueError(f"SASL mechanism {name!r} is not supported (offsetd serves PLAIN, SCRAM-SHA-256 "
                             f"and SCRAM-SHA-512; sasl.enabled.mechanisms defaults to GSSAPI: set it)")
    return factories
