"""security/plain.py and security/jaas.py: PLAIN tokens per RFC 4616 with Kafka's checks, and
`sasl.jaas.config` values with quotes, comments and clear errors."""

import pytest

from offsetd.security.jaas import parse_jaas_config
from offsetd.security.mechanism import AuthenticationFailed
from offsetd.security.plain import INVALID_CREDENTIALS, PlainServer, plain_users

USERS = {"alice": "alice-secret", "bob": "pw\u00e9", "": "empty-name"}


@pytest.mark.parametrize("token,user", [
    (b"\x00alice\x00alice-secret", "alice"),
    (b"alice\x00alice\x00alice-secret", "alice"),                                  # authzid equal to the user
    ("\x00bob\x00pw\u00e9".encode(), "bob"),                                        # UTF-8 password
])
def test_plain_success(token: bytes, user: str) -> None:
    server = PlainServer(USERS)
    assert server.evaluate(token) == b""
    assert server.complete and server.authorization_id == user


@pytest.mark.parametrize("token,message", [
    (b"\x00alice\x00wrong", INVALID_CREDENTIALS),
    (b"\x00ghost\x00alice-secret", INVALID_CREDENTIALS),
    (b"\x00alice\x00alice-secretX", INVALID_CREDENTIALS),
    (b"\x00alice\x00alice-secre", INVALID_CREDENTIALS),
    (b"\x00Alice\x00alice-secret", INVALID_CREDENTIALS),          # user names are case-sensitive
    (b"\x00\x00empty-name", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"bob\x00alice\x00alice-secret", "authorization id"),
    (b"alice\x00alice-secret", "3 NUL-separated fields"),
    (b"\x00alice\x00alice-secret\x00", "3 NUL-separated fields"),
    (b"", "3 NUL-separated fields"),
    (b"\x00alice\x00\xff", "UTF-8"),
])
def test_plain_failure(token: bytes, message: str) -> None:
    server = PlainServer(USERS)
    with pytest.raises(AuthenticationFailed) as err:
        server.evaluate(token)
    assert message in str(err.value) and not server.complete


def test_plain_invalid_credentials_message_is_kafkas() -> None:
    with pytest.raises(AuthenticationFailed) as err:
        PlainServer(USERS).evaluate(b"\x00alice\x00nope")
    assert str(err.value) == "Authentication failed: Invalid username or password"


def test_plain_single_token() -> None:
    server = PlainServer(USERS)
    server.evaluate(b"\x00alice\x00alice-secret")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"\x00alice\x00alice-secret")


REFERENCE = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
             'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.mark.parametrize("text,module,options", [
    (REFERENCE, "org.apache.kafka.common.security.plain.PlainLoginModule",
     {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret", "user_alice": "alice-secret"}),
    ("a.B required;", "a.B", {}),
    ("a.B REQUIRED k=v;", "a.B", {"k": "v"}),
    ("a.B optional k=v x=y ;", "a.B", {"k": "v", "x": "y"}),
    ("  a.B\n  sufficient\n  k = \"v w\"\n ;  ", "a.B", {"k": "v w"}),
    ('a.B requisite k="with;semi=and\\"quote\\\\";', "a.B", {"k": 'with;semi=and"quote\\'}),
    ('a.B required k="";', "a.B", {"k": ""}),
    ("// leading comment\na.B required /* inline */ k=v; // trailing", "a.B", {"k": "v"}),
    ("a.B required k=\"// not a comment\" /* multi\nline */ j=\"/*x*/\";", "a.B",
     {"k": "// not a comment", "j": "/*x*/"}),
    ("a.B required k=1 k=2;", "a.B", {"k": "2"}),
    ("org.apache.kafka.common.security.scram.ScramLoginModule required;",
     "org.apache.kafka.common.security.scram.ScramLoginModule", {}),
])
def test_jaas_parse(text: str, module: str, options: dict) -> None:
    assert parse_jaas_config(text) == (module, options)


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    ("   ", "empty"),
    ("// only a comment", "only comments"),
    ("a.B", "control flag"),
    ("a.B mandatory k=v;", "control flag"),
    ("a.B required k=v", "must end with ';'"),
    ("a.B required k;", "needs '=value'"),
    ("a.B required k=;", "has no value"),
    ("a.B required =v;", "option name"),
    ('a.B required k="open;', "unterminated quoted"),
    ("a.B required /* open k=v;", "unterminated /*"),
    ("a.B required; c.D required;", "exactly one login module"),
    ('"a.B" required;', "login module class"),
])
def test_jaas_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_jaas_config(text)
    assert message in str(err.value)


def test_plain_users_from_jaas() -> None:
    assert plain_users(parse_jaas_config(REFERENCE)[1]) == {"admin": "admin-secret", "alice": "alice-secret"}
