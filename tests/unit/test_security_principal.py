"""security/principal.py: `ssl.principal.mapping.rules` parsing and DN -> principal mapping."""

import pytest

from offsetd.security.principal import PrincipalMapper, parse_rules, principal_from_dn

DN = "CN=Alice,OU=ServiceUsers,O=Example,L=Paris,ST=IDF,C=FR"
DOCS_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
              "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")


@pytest.mark.parametrize("rules,dn,expected", [
    (None, DN, DN),
    ("", DN, DN),
    ("DEFAULT", DN, DN),
    (DOCS_RULES, DN, "Alice"),
    (DOCS_RULES, "CN=Bob,OU=Staff,O=Example,L=Paris,ST=IDF,C=FR", "bob@staff"),
    (DOCS_RULES, "O=Example,cn=carol.x,C=FR", "CAROL.X"),
    (DOCS_RULES, "O=Example", "O=Example"),                       # falls through to DEFAULT
    ("RULE:^CN=([^,]*),.*$/$1/L", DN, "alice"),
    ("RULE:^CN=([^,]*),.*$/$1/U", DN, "ALICE"),
    ("RULE:^CN=([^,]*),.*$/user-$1/", DN, "user-Alice"),
    ("RULE:CN=([^,]*),.*/$1/", DN, "Alice"),                        # the regex must match the whole DN
    ("RULE:^CN=(?<name>[^,]*),.*$/${name}/", DN, "Alice"),
    ("RULE:^CN=([^,]*),OU=([^,]*),.*$/$2\\/$1/", DN, "ServiceUsers/Alice"),  # escaped slash in the replacement
    ("RULE:^CN=([^,]*),.*$/\\$1/", DN, "$1"),                       # escaped dollar is literal
    ("RULE:^CN=Alice\\\\,with\\\\,commas,O=A$/commas/", "CN=Alice\\,with\\,commas,O=A", "commas"),  # RFC 2253 escapes
    ("RULE:^CN=(?<n>[^,]*),O=(?<o>[^,]*)$/${o}-${n}/", "CN=a,O=b", "b-a"),
    ("RULE:^CN=([^,]*)\\,x,O=A$/$1/", "CN=a,x,O=A", "a"),      # `\,` in the regex is a plain comma
    ("RULE:^OU=.*$/nope/, DEFAULT", DN, DN),                        # spaces after the comma
    ("RULE:^OU=.*$/nope/\nRULE:^CN=([^,]*).*$/$1/", DN, "Alice"),   # newline separated
    ("RULE:^CN=([^,]*),.*$/$1/,RULE:^.*$/second/", DN, "Alice"),   # first match wins
])
def test_mapping(rules: str | None, dn: str, expected: str) -> None:
    assert PrincipalMapper.parse(rules).map(dn) == expected
    assert principal_from_dn(dn, rules) == f"User:{expected}"


def test_no_rule_matches() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=admin,.*$/admin/")
    assert mapper.map(DN) is None
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule matches"):
        principal_from_dn(DN, "RULE:^CN=admin,.*$/admin/")


@pytest.mark.parametrize("rules,message", [
    ("RULE:^CN=.*$", "missing '/'"),
    ("RULE:^CN=.*$/x", "missing '/'"),
    ("RULE:^CN=(.*$/x/", "invalid regex"),
    ("RULE:^CN=.*$/x/Q", "expected ','"),
    ("DEFAULTS", "expected ','"),
    ("SOMETHING", "expected RULE"),
    ("DEFAULT,,DEFAULT", "expected RULE"),
])
def test_bad_rules(rules: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rules(rules)


def test_parsed_rules() -> None:
    rules = parse_rules(DOCS_RULES)
    assert len(rules) == 4 and rules[-1].pattern is None
    assert [r.case for r in rules] == ["", "L", "U", ""]
