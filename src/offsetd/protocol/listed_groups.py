"""ListGroups' groups array written straight to wire form, a slice at a time: at a million groups
the answer is built between turns of the event loop (server/group_listing.py), and a dict per
group through the generic writer was 1.3 s of CPU in one piece.

Each entry is ListedGroup of the response version: the group id, then what few distinct values
there are of protocol type, state (v4+) and group type (v5+) and the tagged-field section (v3+).
That tail is written once per distinct triple by the generic writer itself (so it is the schema's
layout by construction) and reused; per group only the id and its length prefix are new bytes.
The encoder writes the result as it is (protocol/encoder.py `EncodedArray`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from kio.serial._introspect import classify_field

from .codec import response_class
from .encoder import EncodedArray, entity_writer
from .primitives import INT16, INT32, write_uvarint

__all__ = ["ListedGroups"]

LIST_GROUPS = 16
# compact-string length prefixes of ids shorter than 127 bytes (uvarint of length + 1: one byte)
_COMPACT_PREFIX = [bytes((n + 1,)) for n in range(127)]


class ListedGroups:
    """The groups of one ListGroups answer of `version`, as wire bytes, in the order added."""

    def __init__(self, version: int) -> None:
        response = response_class(LIST_GROUPS, version)
        entry = classify_field(next(f for f in dataclasses.fields(response) if f.name == "groups")).type_
        self._write_entry = entity_writer(entry)
        self._flexible: bool = response.__flexible__
        self._tails: dict[tuple[str, str, str], bytes] = {}
        self._chunks: list[bytes] = []
        self.count = 0

    def add(self, group_type: str, rows: Iterable[tuple[str, str, str]]) -> None:
        """Append (group id, protocol type, state) rows of groups of one type."""
        tails = self._tails
        prefix = _COMPACT_PREFIX if self._flexible else None
        parts: list[bytes] = []
        append = parts.append
        for group_id, protocol_type, state in rows:
            tail = tails.get((protocol_type, state, group_type))
            if tail is None:
                tail = tails[(protocol_type, state, group_type)] = self._tail(protocol_type, state, group_type)
            data = group_id.encode("utf-8")
            size = len(data)
            if prefix is None:
                append(INT16.pack(size))
            elif size < 127:
                append(prefix[size])
            else:
                head = bytearray()
                write_uvarint(head, size + 1)
                append(bytes(head))
            append(data)
            append(tail)
        self.count += len(parts) // 3
        self._chunks.append(b"".join(parts))

    def _tail(self, protocol_type: str, state: str, group_type: str) -> bytes:
        """An entry's bytes after its group id: the generic writer's, less an empty id's prefix."""
        buf = bytearray()
        self._write_entry(buf, {"group_id": "", "protocol_type": protocol_type, "group_state": state,
                                "group_type": group_type})
        return bytes(buf[1 if self._flexible else 2:])

    def array(self) -> EncodedArray:
        """The groups array, count prefix included."""
        head = bytearray()
        if self._flexible:
            write_uvarint(head, self.count + 1)
        else:
            head += INT32.pack(self.count)
        return EncodedArray((bytes(head), *self._chunks))
