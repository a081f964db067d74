"""security/sasl.py: the per-connection state machine of reference §2.2-§2.3 with a fake clock
(handshake v0/v1, wrong mechanism, out-of-order requests, success, failure, re-authentication and
its 1 s rule, expiry, oversize tokens), and the mechanism factories."""

import pytest
import scramp

from offsetd.security.credentials import credential_from_password
from offsetd.security.sasl import (
    AFTER_SUCCESS,
    Action,
    Admission,
    SaslServer,
    SaslState,
    mechanism_factories,
)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
CREDS = {("SCRAM-SHA-256", "alice"): credential_from_password("SCRAM-SHA-256", "alice-secret"),
         ("SCRAM-SHA-512", "alice"): credential_from_password("SCRAM-SHA-512", "alice-secret"),
         ("SCRAM-SHA-512", "bob"): credential_from_password("SCRAM-SHA-512", "bob-secret")}
ENABLED = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
API_VERSIONS, METADATA, HANDSHAKE, AUTHENTICATE = 18, 3, 17, 36
T0 = 1_000_000


def factories(mechanisms: list[str] = ENABLED) -> dict:
    return mechanism_factories(mechanisms, {"PLAIN": PLAIN_JAAS}, lambda mech, user: CREDS.get((mech, user)))


def server(reauth_ms: int = 0, max_receive_size: int = 524288, mechanisms: list[str] = ENABLED) -> SaslServer:
    return SaslServer(factories(mechanisms), T0, reauth_ms, max_receive_size)


def plain(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{user}\x00{password}".encode()


def scram_login(s: SaslServer, mechanism: str, user: str, password: str, now: int) -> list:
    """A whole SCRAM exchange through the state machine; the steps."""
    client = scramp.ScramClient([mechanism], user, password)
    first = s.authenticate(client.get_client_first().encode(), now)
    if first.error_code:
        return [first]
    client.set_server_first(first.reply_token.decode())
    final = s.authenticate(client.get_client_final().encode(), now)
    if final.error_code == 0:
        client.set_server_final(final.reply_token.decode())
    return [first, final]


def test_plain_v1_success() -> None:
    s = server()
    assert s.request_allowed(API_VERSIONS, T0)
    hs = s.handshake("PLAIN", 1, T0)
    error, mechanisms = hs
    assert (error, mechanisms, hs.action) == (0, ENABLED, Action.REPLY)
    assert s.state == SaslState.NEED_TOKEN and not s.raw_tokens
    step = s.authenticate(plain("alice", "alice-secret"), T0 + 1)
    assert (step.error_code, step.error_message, step.reply_token, step.done, step.principal) == \
        (0, None, b"", True, "User:alice")
    assert step.session_lifetime_ms == 0 and step.action == Action.REPLY
    assert s.state == SaslState.AUTHENTICATED and s.principal == "User:alice" and s.expires_at_ms is None
    assert s.request_allowed(METADATA, T0 + 2) and s.request_allowed(API_VERSIONS, T0 + 2)


def test_plain_bad_password_fails_with_58_then_delayed_close() -> None:
    s = server()
    s.handshake("PLAIN", 1, T0)
    step = s.authenticate(plain("alice", "wrong"), T0)
    assert (step.error_code, step.error_message, step.done, step.principal, step.action) == \
        (58, "Authentication failed: Invalid username or password", False, None,
         Action.REPLY_THEN_CLOSE_AFTER_DELAY)
    assert s.state == SaslState.FAILED and s.principal is None
    assert s.admission(METADATA, T0) == Admission.CLOSE
    assert s.authenticate(plain("alice", "alice-secret"), T0).action == Action.CLOSE  # never authenticates later


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_v1_success_and_failure(mechanism: str) -> None:
    s = server()
    s.handshake(mechanism, 1, T0)
    first, final = scram_login(s, mechanism, "alice", "alice-secret", T0)
    assert (first.error_code, first.done, first.reply_token[:2]) == (0, False, b"r=")
    assert (final.error_code, final.done, final.principal, final.reply_token[:2]) == (0, True, "User:alice", b"v=")
    bad = server()
    bad.handshake(mechanism, 1, T0)
    steps = scram_login(bad, mechanism, "alice", "nope", T0)
    assert steps[-1].error_code == 58 and steps[-1].action == Action.REPLY_THEN_CLOSE_AFTER_DELAY
    assert mechanism in (steps[-1].error_message or "")
    unknown = server()
    unknown.handshake(mechanism, 1, T0)
    assert scram_login(unknown, mechanism, "ghost", "x", T0)[0].error_code == 58  # at the first message


@pytest.mark.parametrize("mechanism,version", [("GSSAPI", 1), ("OAUTHBEARER", 0), ("plain", 1), ("", 1)])
def test_unknown_or_disabled_mechanism_gets_33_and_the_enabled_list(mechanism: str, version: int) -> None:
    s = server()
    hs = s.handshake(mechanism, version, T0)
    assert tuple(hs) == (33, ENABLED) and hs.action == Action.REPLY_THEN_CLOSE_AFTER_DELAY
    assert s.state == SaslState.FAILED


def test_disabled_mechanism_on_a_listener_with_fewer() -> None:
    s = server(mechanisms=["SCRAM-SHA-512"])
    assert tuple(s.handshake("PLAIN", 1, T0)) == (33, ["SCRAM-SHA-512"])


def test_v0_handshake_raw_tokens_plain_success_is_an_empty_frame() -> None:
    s = server()
    assert s.handshake("PLAIN", 0, T0).error_code == 0
    assert s.raw_tokens
    assert s.raw_reply(plain("admin", "admin-secret"), T0) == b"\x00\x00\x00\x00"
    assert not s.raw_tokens and s.principal == "User:admin"


def test_v0_handshake_raw_failure_is_close() -> None:
    s = server()
    s.handshake("PLAIN", 0, T0)
    assert s.raw_reply(plain("admin", "bad"), T0) is None
    assert s.state == SaslState.FAILED


def test_v0_handshake_scram_frames() -> None:
    s = server()
    s.handshake("SCRAM-SHA-512", 0, T0)
    client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "bob-secret")
    frame = s.raw_reply(client.get_client_first().encode(), T0)
    assert frame is not None and int.from_bytes(frame[:4], "big") == len(frame) - 4
    client.set_server_first(frame[4:].decode())
    assert s.raw_tokens
    final = s.raw_reply(client.get_client_final().encode(), T0)
    assert final is not None
    client.set_server_final(final[4:].decode())
    assert s.principal == "User:bob" and not s.raw_tokens


# (what arrives first, in which state) -> what happens: the admission matrix of §2.2 item 1 and 3
ADMISSION_CASES = [
    ("metadata-first", [], METADATA, Admission.CLOSE),
    ("api-versions-first", [], API_VERSIONS, Admission.PASS),
    ("api-versions-twice", [("api", API_VERSIONS)], API_VERSIONS, Admission.CLOSE),
    ("api-versions-after-handshake", [("hs", 1)], API_VERSIONS, Admission.ERROR_THEN_CLOSE),
    ("metadata-mid-exchange-v1", [("hs", 1)], METADATA, Admission.ERROR_THEN_CLOSE),
    ("metadata-mid-exchange-v0", [("hs", 0)], METADATA, Admission.CLOSE),
    ("metadata-after-success", [("hs", 1), ("ok", 0)], METADATA, Admission.PASS),
    ("metadata-after-failure", [("hs", 1), ("bad", 0)], METADATA, Admission.CLOSE),
    ("metadata-after-33", [("hs-bad", 1)], METADATA, Admission.CLOSE),
    ("sasl-requests-always-answered", [], HANDSHAKE, Admission.PASS),
]


@pytest.mark.parametrize("id,before,api_key,expected", ADMISSION_CASES, ids=[c[0] for c in ADMISSION_CASES])
def test_admission(id: str, before: list, api_key: int, expected: Admission) -> None:
    s = server()
    for what, arg in before:
        if what == "api":
            assert s.admission(arg, T0) == Admission.PASS
        elif what == "hs":
            assert s.handshake("PLAIN", arg, T0).error_code == 0
        elif what == "hs-bad":
            s.handshake("GSSAPI", arg, T0)
        elif what == "ok":
            assert s.authenticate(plain("alice", "alice-secret"), T0).done
        elif what == "bad":
            s.authenticate(plain("alice", "x"), T0)
    assert s.admission(api_key, T0) == expected


def test_request_allowed_is_admission_pass() -> None:
    s = server()
    assert s.request_allowed(API_VERSIONS, T0) is True
    assert s.request_allowed(API_VERSIONS, T0) is False  # at most once, and the connection is done
    assert s.state == SaslState.FAILED


def test_api_versions_with_an_unsupported_version_may_be_retried() -> None:
    s = server()
    assert s.admission(API_VERSIONS, T0) == Admission.PASS
    s.api_versions_retry()
    assert s.admission(API_VERSIONS, T0) == Admission.PASS
    assert s.handshake("PLAIN", 1, T0).error_code == 0


def test_authenticate_before_handshake_closes() -> None:
    s = server()
    step = s.authenticate(plain("alice", "alice-secret"), T0)
    assert (step.error_code, step.done, step.action) == (34, False, Action.CLOSE)
    assert s.state == SaslState.FAILED


def test_second_handshake_mid_exchange_is_34_then_close() -> None:
    s = server()
    s.handshake("SCRAM-SHA-256", 1, T0)
    hs = s.handshake("PLAIN", 1, T0)
    assert hs.error_code == 34 and hs.action == Action.REPLY_THEN_CLOSE


def test_second_authenticate_after_success_is_34_and_keeps_connection() -> None:
    s = server()
    s.handshake("PLAIN", 1, T0)
    s.authenticate(plain("alice", "alice-secret"), T0)
    step = s.authenticate(plain("alice", "alice-secret"), T0 + 5)
    assert (step.error_code, step.error_message, step.done, step.action) == (34, AFTER_SUCCESS, False, Action.REPLY)
    assert s.state == SaslState.AUTHENTICATED and s.principal == "User:alice"


def test_handshake_after_success_without_expiry_is_34() -> None:
    s = server(reauth_ms=0)
    s.handshake("PLAIN", 1, T0)
    s.authenticate(plain("alice", "alice-secret"), T0)
    hs = s.handshake("PLAIN", 1, T0 + 10_000)
    assert hs.error_code == 34 and hs.action == Action.REPLY and s.state == SaslState.AUTHENTICATED


def test_oversize_token_fails_authentication() -> None:
    s = server(max_receive_size=100)
    s.handshake("PLAIN", 1, T0)
    step = s.authenticate(plain("alice", "a" * 200), T0)
    assert step.error_code == 58 and step.action == Action.REPLY_THEN_CLOSE_AFTER_DELAY
    assert "sasl.server.max.receive.size" in (step.error_message or "")
    exact = server(max_receive_size=len(plain("alice", "alice-secret")))
    exact.handshake("PLAIN", 1, T0)
    assert exact.authenticate(plain("alice", "alice-secret"), T0).done


def authenticated(reauth_ms: int, mechanism: str = "PLAIN", user: str = "alice", at: int = T0) -> SaslServer:
    s = server(reauth_ms=reauth_ms)
    s.handshake(mechanism, 1, at)
    if mechanism == "PLAIN":
        step = s.authenticate(plain(user, f"{user}-secret"), at)
    else:
        step = scram_login(s, mechanism, user, f"{user}-secret", at)[-1]
    assert step.done
    return s


def test_session_lifetime_and_expiry() -> None:
    s = server(reauth_ms=60_000)
    s.handshake("PLAIN", 1, T0)
    step = s.authenticate(plain("alice", "alice-secret"), T0 + 7)
    assert step.session_lifetime_ms == 60_000 and s.expires_at_ms == T0 + 60_007
    assert s.admission(METADATA, T0 + 60_007) == Admission.PASS
    assert s.admission(METADATA, T0 + 60_008) == Admission.CLOSE  # expired: anything but SaslHandshake closes


@pytest.mark.parametrize("mechanism,lifetime", [("PLAIN", 5_000), ("SCRAM-SHA-512", 0)])
def test_session_lifetime_per_mechanism(mechanism: str, lifetime: int) -> None:
    s = SaslServer(factories(), T0, {"PLAIN": 5_000, "SCRAM-SHA-256": 7_000})
    s.handshake(mechanism, 1, T0)
    if mechanism == "PLAIN":
        step = s.authenticate(plain("alice", "alice-secret"), T0)
    else:
        step = scram_login(s, mechanism, "alice", "alice-secret", T0)[-1]
    assert step.done and step.session_lifetime_ms == lifetime
    assert s.expires_at_ms == (T0 + lifetime if lifetime else None)


def test_expiry_is_tracked_after_a_v0_handshake() -> None:
    s = server(reauth_ms=1000)
    s.handshake("PLAIN", 0, T0)
    assert s.raw_reply(plain("alice", "alice-secret"), T0) == b"\x00\x00\x00\x00"
    assert s.expires_at_ms == T0 + 1000 and not s.request_allowed(METADATA, T0 + 1001)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_reauthentication_same_principal(mechanism: str) -> None:
    s = authenticated(10_000, mechanism)
    hs = s.handshake(mechanism, 1, T0 + 9_000)
    assert hs.error_code == 0 and s.state == SaslState.NEED_TOKEN and s.principal == "User:alice"
    assert s.admission(METADATA, T0 + 9_000) == Admission.ERROR_THEN_CLOSE  # mid re-authentication
    s2 = authenticated(10_000, mechanism)
    s2.handshake(mechanism, 1, T0 + 9_000)
    if mechanism == "PLAIN":
        step = s2.authenticate(plain("alice", "alice-secret"), T0 + 9_001)
    else:
        step = scram_login(s2, mechanism, "alice", "alice-secret", T0 + 9_001)[-1]
    assert (step.error_code, step.done, step.principal, step.session_lifetime_ms) == (0, True, "User:alice", 10_000)
    assert s2.expires_at_ms == T0 + 19_001 and s2.request_allowed(METADATA, T0 + 15_000)


def test_reauthentication_after_expiry_is_allowed() -> None:
    s = authenticated(2_000)
    assert not s.request_allowed(METADATA, T0 + 5_000)
    assert s.handshake("PLAIN", 1, T0 + 5_000).error_code == 0
    assert s.authenticate(plain("alice", "alice-secret"), T0 + 5_001).done
    assert s.request_allowed(METADATA, T0 + 6_000)


@pytest.mark.parametrize("elapsed,expected", [(0, 34), (999, 34), (1000, 0), (1500, 0)])
def test_reauthentication_needs_one_second_since_the_last_start(elapsed: int, expected: int) -> None:
    s = authenticated(60_000)
    assert s.handshake("PLAIN", 1, T0 + elapsed).error_code == expected


def test_reauthentication_one_second_counts_from_the_previous_reauthentication() -> None:
    s = authenticated(60_000)
    s.handshake("PLAIN", 1, T0 + 2_000)
    assert s.authenticate(plain("alice", "alice-secret"), T0 + 2_100).done
    assert s.handshake("PLAIN", 1, T0 + 2_500).error_code == 34
    assert s.handshake("PLAIN", 1, T0 + 3_000).error_code == 0


def test_reauthentication_with_another_principal_fails() -> None:
    s = authenticated(60_000)
    s.handshake("PLAIN", 1, T0 + 2_000)
    step = s.authenticate(plain("admin", "admin-secret"), T0 + 2_000)
    assert step.error_code == 58 and step.action == Action.REPLY_THEN_CLOSE_AFTER_DELAY and not step.done
    assert s.state == SaslState.FAILED


def test_reauthentication_with_another_mechanism_fails_at_the_token() -> None:
    s = authenticated(60_000, "PLAIN")
    hs = s.handshake("SCRAM-SHA-512", 1, T0 + 2_000)
    assert hs.error_code == 0  # the handshake itself succeeds
    step = s.authenticate(b"n,,n=alice,r=abc", T0 + 2_000)
    assert step.error_code == 58 and "mechanism" in (step.error_message or "")


def test_reauthentication_with_wrong_password_fails() -> None:
    s = authenticated(60_000, "SCRAM-SHA-256")
    s.handshake("SCRAM-SHA-256", 1, T0 + 2_000)
    assert scram_login(s, "SCRAM-SHA-256", "alice", "bad", T0 + 2_000)[-1].error_code == 58


def test_reauthentication_with_an_unknown_mechanism_is_33() -> None:
    s = authenticated(60_000)
    assert s.handshake("GSSAPI", 1, T0 + 2_000).error_code == 33


def test_mechanism_factories() -> None:
    built = factories()
    assert list(built) == ENABLED
    assert built["PLAIN"]() is not built["PLAIN"]()  # one instance per exchange
    with pytest.raises(ValueError, match="GSSAPI"):
        mechanism_factories(["GSSAPI"], {}, lambda m, u: None)
    with pytest.raises(ValueError, match="plain.sasl.jaas.config"):
        mechanism_factories(["PLAIN"], {"PLAIN": None}, lambda m, u: None)
    with pytest.raises(ValueError, match="sasl.jaas.config"):
        mechanism_factories(["PLAIN"], {"PLAIN": "org.Foo required user_a=\"b\""}, lambda m, u: None)
