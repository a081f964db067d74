"""`sasl.jaas.config` values (reference security.md §2.4): `<login module class> <flag> (key=value)* ;`,
with quoted values and `//` / `/* */` comments. Exactly one login module per value, as Kafka requires."""

from __future__ import annotations

FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_SPECIAL = "=;\""


class _Tokens:
    """The tokens of a JAAS entry: words, quoted strings, and the characters `=` and `;`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip_blank(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise ValueError(f"sasl.jaas.config: unterminated /* comment at offset {self.pos}")
                self.pos = end + 2
            else:
                return

    def next(self) -> tuple[str, str] | None:
        """(kind, value): kind "word", "quoted" or the character itself; None at the end."""
        self._skip_blank()
        text = self.text
        if self.pos >= len(text):
            return None
        ch = text[self.pos]
        if ch in "=;":
            self.pos += 1
            return ch, ch
        if ch == '"':
            return "quoted", self._quoted()
        start = self.pos
        while self.pos < len(text) and not text[self.pos].isspace() and text[self.pos] not in _SPECIAL \
                and not text.startswith("//", self.pos) and not text.startswith("/*", self.pos):
            self.pos += 1
        return "word", text[start:self.pos]

    def _quoted(self) -> str:
        text = self.text
        start = self.pos
        self.pos += 1
        out: list[str] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "\\" and self.pos + 1 < len(text):
                nxt = text[self.pos + 1]
                out.append(_ESCAPES.get(nxt, nxt))
                self.pos += 2
                continue
            out.append(ch)
            self.pos += 1
        raise ValueError(f"sasl.jaas.config: unterminated quoted value starting at offset {start}")


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of a `sasl.jaas.config` value; ValueError naming what is wrong."""
    if text is None or not text.strip():
        raise ValueError("sasl.jaas.config is empty: expected '<LoginModule class> required key=\"value\" ... ;'")
    tokens = _Tokens(text)
    first = tokens.next()
    if first is None:
        raise ValueError("sasl.jaas.config has only comments: expected '<LoginModule class> <flag> ... ;'")
    if first[0] != "word":
        raise ValueError(f"sasl.jaas.config must start with a login module class name, not {first[1]!r}")
    module = first[1]
    flag = tokens.next()
    if flag is None or flag[0] != "word" or flag[1].lower() not in FLAGS:
        got = "nothing" if flag is None else repr(flag[1])
        raise ValueError(f"sasl.jaas.config: login module {module} needs a control flag "
                         f"({', '.join(FLAGS)}), got {got}")
    options: dict[str, str] = {}
    while True:
        token = tokens.next()
        if token is None:
            raise ValueError(f"sasl.jaas.config: the entry of {module} must end with ';'")
        if token[0] == ";":
            break
        if token[0] != "word":
            raise ValueError(f"sasl.jaas.config: expected an option name, got {token[1]!r}")
        key = token[1]
        equals = tokens.next()
        if equals is None or equals[0] != "=":
            raise ValueError(f"sasl.jaas.config: option {key!r} needs '=value'")
        value = tokens.next()
        if value is None or value[0] not in ("word", "quoted"):
            raise ValueError(f"sasl.jaas.config: option {key!r} has no value")
        options[key] = value[1]
    rest = tokens.next()
    if rest is not None:
        raise ValueError(f"sasl.jaas.config must hold exactly one login module; found more after ';' ({rest[1]!r})")
    return module, options
