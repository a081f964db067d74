"""security/scram.py + credentials.py: the RFC 7677 SCRAM-SHA-256 example byte for byte, SHA-512
against scramp's client, credentials equal to scramp's, and every failure as AuthenticationFailed."""

import base64
import hashlib

import pytest
import scramp

from offsetd.security.credentials import (
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
    hash_name,
    iterations_problem,
    salted_password,
)
from offsetd.security.mechanism import AuthenticationFailed
from offsetd.security.scram import ScramServer, sasl_name_to_user, user_to_sasl_name

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(credential: ScramCredential | None = None) -> ScramServer:
    cred = credential or credential_from_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)
    return ScramServer("SCRAM-SHA-256", lambda mech, user: cred if (mech, user) == ("SCRAM-SHA-256", "user") else None,
                       nonce_factory=lambda: RFC_SERVER_NONCE)


def test_rfc7677_example_byte_for_byte() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_rfc7677_wrong_password_fails_generic() -> None:
    server = rfc_server(credential_from_password("SCRAM-SHA-256", "pencil2", RFC_SALT, 4096))
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed) as err:
        server.evaluate(RFC_CLIENT_FINAL)
    assert str(err.value) == "Authentication failed due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    assert not server.complete


def scramp_exchange(mechanism: str, user: str, password: str, stored: ScramCredential | None,
                    client_password: str | None = None) -> ScramServer:
    """Drive our server with scramp's client; raises AuthenticationFailed where ours refuses."""
    client = scramp.ScramClient([mechanism], user, client_password if client_password is not None else password)
    server = ScramServer(mechanism, lambda mech, name: stored if (mech, name) == (mechanism, user) else None)
    server_first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # scramp verifies our ServerSignature
    return server


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "a=b,c", "=2C=3D", "ünïcode"])
def test_round_trip_with_scramp_client(mechanism: str, user: str) -> None:
    stored = credential_from_password(mechanism, "s3cret", iterations=4096)
    server = scramp_exchange(mechanism, user, "s3cret", stored)
    assert server.complete and server.authorization_id == user


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_bad_password(mechanism: str) -> None:
    stored = credential_from_password(mechanism, "s3cret")
    with pytest.raises(AuthenticationFailed):
        scramp_exchange(mechanism, "alice", "s3cret", stored, client_password="wrong")


def test_unknown_user_rejected_at_first_message() -> None:
    server = ScramServer("SCRAM-SHA-512", lambda mech, user: None)
    with pytest.raises(AuthenticationFailed) as err:
        server.evaluate(b"n,,n=ghost,r=abc")
    assert "SCRAM-SHA-512" in str(err.value) and not server.complete


def test_lookup_gets_mechanism_and_unescaped_name() -> None:
    seen = []
    server = ScramServer("SCRAM-SHA-256", lambda mech, user: seen.append((mech, user)))  # type: ignore[func-returns-value]
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"n,,n=a=3Db=2Cc,r=abc")
    assert seen == [("SCRAM-SHA-256", "a=b,c")]


def test_stored_iterations_below_4096_fail() -> None:
    weak = credential_from_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4095)
    with pytest.raises(AuthenticationFailed):
        rfc_server(weak).evaluate(RFC_CLIENT_FIRST)


@pytest.mark.parametrize("first", [
    b"y,,n=user,r=abc",              # channel binding flags other than n
    b"p=tls-unique,,n=user,r=abc",
    b"n,a=other,n=user,r=abc",       # authzid differs from the user
    b"n,,n=user",                    # no nonce
    b"n,,r=abc,n=user",              # attributes out of order
    b"n,,n=us=4Er,r=abc",            # bad saslname escape
    b"n,,n=user,r=a b\x01",          # non-printable nonce
    b"n,,n=user,r=",                 # empty nonce
    b"n,,n=user,r=abc,!bad",         # malformed extension
    b"\xff\xfe",                     # not UTF-8
    b"",
    b"n,x=y,n=user,r=abc",           # authzid slot holds another attribute
])
def test_bad_client_first(first: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        rfc_server().evaluate(first)


def test_authzid_mismatch_message_is_specific() -> None:
    with pytest.raises(AuthenticationFailed, match="authorization id differs"):
        rfc_server().evaluate(b"n,a=other,n=user,r=abc")


def test_authzid_equal_to_user_and_extensions_are_accepted() -> None:
    server = rfc_server()
    reply = server.evaluate(b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO,tokenauth=true,x=1")
    assert reply.startswith(b"r=rOprNGfwEbeRWgbNEkqO" + RFC_SERVER_NONCE.encode())


@pytest.mark.parametrize("final", [
    RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"),                       # wrong proof
    RFC_CLIENT_FINAL.replace(b"r=rOprNGfwEbeRWgbNEkqO%hvY", b"r=rOprNGfwEbeRWgbNEkqO%hvZ"),  # wrong nonce
    RFC_CLIENT_FINAL.split(b",p=")[0],                                     # no proof
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # short proof
    RFC_CLIENT_FINAL.replace(b"r=", b"r=x"),                             # nonce with a prefix
    b"c=!!!,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"garbage",
])
def test_bad_client_final(final: bytes) -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final)
    assert not server.complete


def test_no_message_after_completion() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"n,,n=user,r=x")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("iterations", [4096, 8192])
def test_credentials_equal_scramp(mechanism: str, iterations: int) -> None:
    salt = bytes(range(16))
    expected = scramp.ScramMechanism(mechanism).make_auth_info("alice-secret", iteration_count=iterations, salt=salt)
    ours = credential_from_password(mechanism, "alice-secret", salt, iterations)
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == tuple(expected)


def test_credential_from_salted_password_matches_password_derivation() -> None:
    salt = b"0123456789abcdef"
    sp = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 8192)
    assert salted_password("SCRAM-SHA-512", "pw", salt, 8192) == sp
    assert credential_from_salted_password("SCRAM-SHA-512", salt, sp, 8192) == \
        credential_from_password("SCRAM-SHA-512", "pw", salt, 8192)


def test_random_salt_and_unknown_mechanism() -> None:
    a = credential_from_password("SCRAM-SHA-256", "pw")
    b = credential_from_password("SCRAM-SHA-256", "pw")
    assert a.salt != b.salt and len(a.salt) == 32 and a.iterations == 4096
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        hash_name("SCRAM-SHA-1")


@pytest.mark.parametrize("iterations,problem", [(4095, "Too few"), (4096, None), (16384, None), (16385, "Too many")])
def test_iteration_bounds(iterations: int, problem: str | None) -> None:
    got = iterations_problem(iterations)
    assert got is None if problem is None else (got is not None and got.startswith(problem))


@pytest.mark.parametrize("user,escaped", [("alice", "alice"), ("a=b", "a=3Db"), ("a,b", "a=2Cb"), ("=,", "=3D=2C")])
def test_saslname_escaping(user: str, escaped: str) -> None:
    assert user_to_sasl_name(user) == escaped and sasl_name_to_user(escaped) == user


@pytest.mark.parametrize("bad", ["a=b", "a=2", "a,b", "=3d"])
def test_saslname_invalid(bad: str) -> None:
    with pytest.raises(ValueError):
        sasl_name_to_user(bad)


def test_final_nonce_with_the_client_nonce_repeated_in_front_is_accepted() -> None:
    """librdkafka 2.0 (Debian's kcat) sends r=<client nonce><client nonce + server nonce>; Kafka
    only asks that the final nonce end with the combined one (reference §2.5). Its proof covers
    the nonce as sent."""
    import hmac

    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    nonce = "rOprNGfwEbeRWgbNEkqO" + "rOprNGfwEbeRWgbNEkqO" + RFC_SERVER_NONCE
    without_proof = f"c=biws,r={nonce}"
    auth_message = ",".join((RFC_CLIENT_FIRST.decode()[3:], RFC_SERVER_FIRST.decode(), without_proof)).encode()
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", RFC_SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature)))
    assert server.evaluate(without_proof.encode() + b",p=" + proof).startswith(b"v=")
    assert server.complete
