"""Property test of security/sasl.py (bounded): random sequences of requests, handshakes and tokens
never raise, only give the documented codes and actions, and never authenticate a connection
without a valid credential in that exchange."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offsetd.security.credentials import credential_from_password
from offsetd.security.sasl import Action, Admission, SaslServer, SaslState, mechanism_factories

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
CRED = credential_from_password("SCRAM-SHA-256", "alice-secret", b"salt" * 4, 4096)
VALID_PLAIN = b"\x00alice\x00alice-secret"
VALID = {VALID_PLAIN, b"alice\x00alice\x00alice-secret"}  # with and without an equal authzid
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "plain", ""]

tokens = st.one_of(
    st.binary(max_size=64),
    st.just(VALID_PLAIN),
    st.sampled_from([b"\x00alice\x00wrong", b"alice\x00alice\x00alice-secret", b"bob\x00alice\x00alice-secret",
                     b"n,,n=alice,r=abc", b"n,,n=ghost,r=abc", b"y,,n=alice,r=abc", b"c=biws,r=abc,p=AAAA",
                     b"\x00" * 3, b""]),
    st.builds(lambda a, b: b"\x00" + a + b"\x00" + b, st.binary(max_size=8), st.binary(max_size=8)),
)
operations = st.lists(st.one_of(
    st.tuples(st.just("request"), st.sampled_from([0, 3, 8, 17, 18, 36])),
    st.tuples(st.just("handshake"), st.sampled_from(MECHANISMS), st.sampled_from([0, 1])),
    st.tuples(st.just("token"), tokens),
    st.tuples(st.just("raw"), tokens),
    st.tuples(st.just("wait"), st.integers(min_value=0, max_value=5_000)),
), max_size=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opening=st.sampled_from(MECHANISMS[:2]), version=st.sampled_from([0, 1]), ops=operations,
       reauth_ms=st.sampled_from([0, 1_500, 10_000]), max_size=st.sampled_from([8, 524288]))
def test_sasl_server_random_sequences(opening: str, version: int, ops: list, reauth_ms: int, max_size: int) -> None:
    lookup = lambda mech, user: CRED if (mech, user) == ("SCRAM-SHA-256", "alice") else None  # noqa: E731
    server = SaslServer(mechanism_factories(["PLAIN", "SCRAM-SHA-256"], {"PLAIN": JAAS}, lookup), 0, reauth_ms,
                        max_size)
    now = 0
    valid_sent = False  # a valid PLAIN token went into the current exchange
    for op in [("handshake", opening, version), *ops]:  # most sequences start with a good handshake
        before = server.state
        if op[0] == "wait":
            now += op[1]
        elif op[0] == "request":
            admission = server.admission(op[1], now)
            assert isinstance(admission, Admission)
            if admission == Admission.PASS and op[1] not in (17, 36):
                assert before == SaslState.AUTHENTICATED or (before == SaslState.NEED_HANDSHAKE and op[1] == 18)
        elif op[0] == "handshake":
            result = server.handshake(op[1], op[2], now)
            error, enabled = result
            assert error in (0, 33, 34) and enabled == ["PLAIN", "SCRAM-SHA-256"]
            assert isinstance(result.action, Action)
            if error == 0:
                valid_sent = False
                assert server.state == SaslState.NEED_TOKEN
            if error == 33:
                assert op[1] not in ("PLAIN", "SCRAM-SHA-256") and server.state == SaslState.FAILED
        else:
            token = op[1]
            if server.state == SaslState.NEED_TOKEN and token in VALID and len(token) <= max_size:
                valid_sent = True
            if op[0] == "raw":
                reply = server.raw_reply(token, now)
                assert reply is None or int.from_bytes(reply[:4], "big") == len(reply) - 4
            else:
                step = server.authenticate(token, now)
                assert step.error_code in (0, 34, 58) and isinstance(step.action, Action)
                assert step.done == (step.error_code == 0 and server.state == SaslState.AUTHENTICATED
                                     and before == SaslState.NEED_TOKEN)
                if step.error_code == 58:
                    assert step.action in (Action.REPLY_THEN_CLOSE_AFTER_DELAY, Action.CLOSE)
        if before == SaslState.FAILED:
            assert server.state == SaslState.FAILED  # a failed connection never recovers
        if server.state == SaslState.AUTHENTICATED and before != SaslState.AUTHENTICATED:
            # only the PLAIN path can complete with these tokens (a random SCRAM proof never verifies)
            assert valid_sent and server.principal == "User:alice"
        if server.state == SaslState.AUTHENTICATED:
            assert server.principal == "User:alice"
