"""SASL on the wire (reference security.md §2.1-§2.3): SaslHandshake (17) v0-1 and SaslAuthenticate
(36) v0-2 answered by the server shell, the gate that lets only ApiVersions and SaslHandshake through
before authentication, and the raw `int32 length + token` frames that follow a v0 handshake.

The exchange itself is security/sasl.py's SaslServer (sans-IO); this module turns its answers into
responses, closes, and the connection's principal. Handlers never see credentials.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..protocol.codec import decode_body, request_class
from ..protocol.encoder import encode_response
from ..protocol.primitives import DecodeError
from ..protocol.errors import Error
from ..protocol.header import parse_header
from ..security.sasl import Action, Admission, SaslServer
from ..security.sasl import mechanism_factories as build_factories
from .close_connection import CloseConnection

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .listeners import ListenerRuntime

log = logging.getLogger("offsetd.sasl")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_VERSIONS = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}

# lookup(mechanism, username) -> the user's SCRAM credential for that mechanism, or None
ScramLookup = Callable[[str, str], Any]


def mechanism_factories(config: "BrokerConfig", listener: "ListenerRuntime", lookup: ScramLookup) -> dict[str, Any]:
    """security/sasl.py's mechanism factories for a SASL listener's enabled mechanisms."""
    return build_factories(listener.mechanisms, {m: config.jaas_config(listener.name, m) for m in listener.mechanisms},
                 lookup)


class SaslConnection(Protocol):
    """What the SASL exchange does to its connection (server/connection.py's Connection)."""

    peer: str

    def authenticated(self, principal: str) -> None:
        """SASL succeeded: the principal of every later request."""

    def close_after(self, delay_ms: int, reason: str) -> None:
        """Answer nothing more and close after `delay_ms`."""


class SaslSession:
    """The SASL state of one connection on a SASL listener: security/sasl.py's SaslServer decides,
    this turns its answers into responses, closes and the connection's principal."""

    def __init__(self, conn: SaslConnection, factories: dict[str, Any], config: "BrokerConfig",
                 listener: "ListenerRuntime", now_ms: int) -> None:
        self.conn = conn
        self.listener = listener
        self.config = config
        self.max_token = int(config.listener_value(listener.name, "sasl.server.max.receive.size"))
        self.fail_delay_ms = int(config.listener_value(listener.name, "connection.failed.authentication.delay.ms"))
        # the session lifetime is set again per mechanism at the handshake
        self.server = SaslServer(factories, now_ms, config.reauth_ms(listener.name, listener.mechanisms[0]),
                                 self.max_token)

    @property
    def raw_tokens(self) -> bool:
        """After a v0 handshake, until the exchange ends: frames are bare tokens, not requests."""
        return self.server.raw_tokens

    def gate(self, api_key: int, version: int, correlation_id: int, view: memoryview, now_ms: int) -> bytes | None:
        """SASL requests answered here; None lets any other allowed request through to dispatch;
        CloseConnection (no reply) for a request the state does not allow (§2.2 item 1, §2.3)."""
        if api_key == SASL_HANDSHAKE:
            return self._handshake(version, correlation_id, view, now_ms)
        if api_key == SASL_AUTHENTICATE:
            return self._authenticate(version, correlation_id, view, now_ms)
        admission = self.server.admission(api_key, now_ms)
        if admission is not Admission.PASS:
            # ERROR_THEN_CLOSE (a request between handshake v1 and success) is closed without the
            # API's own error response too: building one per API is not worth it for a broken client.
            raise CloseConnection("SASL authentication required first" if self.server.principal is None
                                  else "SASL session expired (connections.max.reauth.ms)")
        return None

    def _handshake(self, version: int, correlation_id: int, view: memoryview, now_ms: int) -> bytes:
        request = _decode(SASL_HANDSHAKE, version, view)
        if request.mechanism in self.listener.mechanisms:  # listener.name.<l>.<mech>.connections.max.reauth.ms
            self.server.reauth_ms = self.config.reauth_ms(self.listener.name, request.mechanism)
        result = self.server.handshake(request.mechanism, version, now_ms)
        reply = encode_response(SASL_HANDSHAKE, version, correlation_id,
                                {"error_code": result.error_code, "mechanisms": result.mechanisms})
        if result.error_code != Error.NONE:
            log.info("%s: SASL handshake refused (%s, error %d)", self.conn.peer, request.mechanism, result.error_code)
        self._act(result.action, f"SASL handshake failed with error {result.error_code}")
        return reply  # type: ignore[return-value]

    def _authenticate(self, version: int, correlation_id: int, view: memoryview, now_ms: int) -> bytes:
        request = _decode(SASL_AUTHENTICATE, version, view)
        step = self._step(bytes(request.auth_bytes), now_ms)
        body = {"error_code": step.error_code, "error_message": step.error_message,
                "auth_bytes": step.reply_token, "session_lifetime": step.session_lifetime_ms}
        if step.action is Action.CLOSE:
            raise CloseConnection(f"SaslAuthenticate out of order: {step.error_message}")
        self._act(step.action, f"SASL authentication failed: {step.error_message}")
        return encode_response(SASL_AUTHENTICATE, version, correlation_id, body)  # type: ignore[return-value]

    def raw_token(self, frame: bytes, now_ms: int) -> bytes:
        """A token framed as `int32 length + bytes` after a v0 handshake: the reply token the same
        way (a zero-length frame after PLAIN succeeds); a failure closes the connection."""
        step = self._step(frame, now_ms)
        if step.error_code != Error.NONE:
            raise CloseConnection(f"SASL authentication failed (v0 handshake): {step.error_message}")
        return step.frame()

    def _step(self, token: bytes, now_ms: int) -> Any:
        step = self.server.authenticate(token, now_ms)
        if step.done and step.principal is not None:
            log.info("%s on %s: authenticated as %s (session lifetime %d ms)", self.conn.peer, self.listener.name,
                     step.principal, step.session_lifetime_ms)
            self.conn.authenticated(step.principal)
        return step

    def _act(self, action: Action, reason: str) -> None:
        """The connection's fate after the response is written."""
        if action is Action.REPLY_THEN_CLOSE:
            self.conn.close_after(0, reason)
        elif action is Action.REPLY_THEN_CLOSE_AFTER_DELAY:
            self.conn.close_after(self.fail_delay_ms, reason)
        elif action is Action.CLOSE:
            raise CloseConnection(reason)


def _decode(api_key: int, version: int, view: memoryview) -> Any:
    try:
        cls = request_class(api_key, version)
        return decode_body(cls, view, parse_header(view, cls.__flexible__).body_offset)
    except DecodeError as exc:
        raise CloseConnection(f"malformed SASL request (api {api_key} v{version}): {exc}") from None


def outside_sasl(api_key: int, version: int, correlation_id: int) -> bytes:
    """SaslHandshake / SaslAuthenticate on a listener without SASL (or after authentication
    without one): ILLEGAL_SASL_STATE, as Kafka's request handler answers them."""
    body: dict[str, Any] = {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": [], "error_message": None,
                            "auth_bytes": b"", "session_lifetime": 0}
    return encode_response(api_key, version, correlation_id, body)  # type: ignore[return-value]


def supported(api_key: int, version: int) -> bool:
    """Whether a SASL request's version is one Kafka 4 accepts."""
    low, high = SASL_VERSIONS[api_key]
    return low <= version <= high
