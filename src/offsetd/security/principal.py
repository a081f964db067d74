"""`ssl.principal.mapping.rules` (reference security.md §1): a client certificate's RFC 2253 DN ->
the principal name. Rules are `RULE:regex/replacement/[L|U]` or `DEFAULT`, comma (or newline)
separated; the first rule whose regex matches the whole DN wins; no match fails the connection."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"
_JAVA_NAMED_GROUP = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")  # Java (?<name>...) is Python (?P<name>...)


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule: DEFAULT (pattern None: the DN as it is) or a regex with a Java-style replacement."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "", "L" (lower-case the result) or "U" (upper-case it)

    def apply(self, dn: str) -> str | None:
        """The mapped name, or None when this rule does not match the whole DN."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # like Java's replaceAll on a whole-string match (an empty match at the end is replaced too)
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java replacement syntax: `$n` / `${name}` insert a group, `\\x` is a literal x."""
    out: list[str] = []
    i = 0
    groups = match.re.groups
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and replacement.startswith("{", i + 1):
            end = replacement.index("}", i + 2)
            out.append(match.group(replacement[i + 2:end]) or "")
            i = end + 1
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            number = int(replacement[i + 1])
            i += 2
            # Java takes more digits while the group number stays valid
            while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= groups:
                number = number * 10 + int(replacement[i])
                i += 1
            if number > groups:
                raise IndexError(f"no group {number} in {match.re.pattern!r}")
            out.append(match.group(number) or "")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _until_slash(text: str, pos: int) -> tuple[str, int]:
    """The text up to the next unescaped `/` (escapes kept), and the position after that `/`."""
    start = pos
    while pos < len(text):
        if text[pos] == "\\":
            pos += 2
            continue
        if text[pos] == "/":
            return text[start:pos], pos + 1
        pos += 1
    raise ValueError(f"ssl.principal.mapping.rules: missing '/' in rule starting {text[start - 5:start + 20]!r}")


def parse_rules(text: str | None) -> list[MappingRule]:
    """Parse the rules (None or blank means DEFAULT); ValueError naming the offending rule."""
    if text is None or not text.strip():
        text = DEFAULT_RULES
    rules: list[MappingRule] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            break
        if text.startswith("DEFAULT", pos):
            rules.append(MappingRule(None))
            pos += len("DEFAULT")
        elif text.startswith("RULE:", pos):
            regex, pos = _until_slash(text, pos + len("RULE:"))
            replacement, pos = _until_slash(text, pos)
            case = ""
            if pos < n and text[pos] in "LU":
                case, pos = text[pos], pos + 1
            try:
                pattern = re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", regex))
            except re.error as exc:
                raise ValueError(f"ssl.principal.mapping.rules: invalid regex {regex!r}: {exc}") from None
            rules.append(MappingRule(pattern, replacement, case))
        else:
            raise ValueError(f"ssl.principal.mapping.rules: expected RULE:regex/replacement/[L|U] or DEFAULT at "
                             f"{text[pos:pos + 30]!r}")
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n:
            if text[pos] not in ",\n":
                raise ValueError(f"ssl.principal.mapping.rules: expected ',' between rules at {text[pos:pos + 30]!r}")
            pos += 1
    if not rules:
        raise ValueError("ssl.principal.mapping.rules has no rule")
    return rules


class PrincipalMapper:
    """Parsed `ssl.principal.mapping.rules`."""

    def __init__(self, rules: list[MappingRule]) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str | None) -> "PrincipalMapper":
        return cls(parse_rules(text))

    def map(self, dn: str) -> str | None:
        """The principal name for a DN (without `User:`), or None when no rule matches."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        return None


def principal_from_dn(dn: str, rules: str | None) -> str:
    """`User:<mapped DN>`; ValueError when no rule matches (the connection must fail)."""
    name = PrincipalMapper.parse(rules).map(dn)
    if name is None:
        raise ValueError(f"no ssl.principal.mapping.rules rule matches the certificate DN {dn!r}")
    return f"User:{name}"
