"""OffsetsTable: one shard's committed offsets, as the compacted log would hold them.

Each group maps OffsetCommit key bytes to value bytes exactly as stored (decoded only when read),
so replaying a record costs a slice and two dict operations. Start-up replays millions of
records through `replay`, so the build compiles this module with mypyc (setup.py); it stays
plain typed Python and runs uncompiled too.
"""

from __future__ import annotations

from typing import Callable, Optional

# OffsetCommit key v0 and v1 share one layout (§4.2); the table stores every key as v1 so both
# versions of one (group, topic, partition) address one entry.
_KEY_V1 = b"\x00\x01"


def _ignore(key: bytes, value: Optional[bytes]) -> None:
    """The default on_pending_key: nothing is pending without a transaction store."""


class OffsetsTable:
    """group -> {OffsetCommit key bytes: value bytes}, changed only by `replay` (and `drop_group`
    for a group tombstone, `store` for a transactional offset its COMMIT marker promotes).
    Records that are not offset commits go to `on_other_record`. A plain commit or tombstone of
    a key in `pending_keys` (keys with a pending transactional offset, kept by the caller's
    transaction store) is told to `on_pending_key` first; for every other record that costs one
    test of an empty dict."""

    def __init__(self, on_other_record: Callable[[bytes, Optional[bytes]], None],
                 on_new_group: Callable[[str], None],
                 pending_keys: Optional[dict[bytes, int]] = None,
                 on_pending_key: Callable[[bytes, Optional[bytes]], None] = _ignore) -> None:
        self.by_group: dict[str, dict[bytes, bytes]] = {}
        self._by_raw: dict[bytes, dict[bytes, bytes]] = {}  # the same dicts, by UTF-8 group id
        # OffsetCommit keys written but not replayed yet (count per key): the retention sweep
        # must not expire an offset whose fresh commit is on its way to the log (§5.3).
        self.in_flight: dict[bytes, int] = {}
        self._on_other_record = on_other_record
        self._on_new_group = on_new_group
        self.pending_keys: dict[bytes, int] = {} if pending_keys is None else pending_keys
        self._on_pending_key = on_pending_key

    def replay(self, key: bytes, value: Optional[bytes]) -> None:
        """Apply one record of the offsets log, as stored (§5.1): an OffsetCommit record sets or
        (tombstone) removes one entry; any other key goes to on_other_record, in log order."""
        if key[0] != 0 or key[1] > 1:  # not an OffsetCommit key (int16 version 0 or 1)
            self._on_other_record(key, value)
            return
        if key[1] == 0:
            key = _KEY_V1 + key[2:]
        if self.in_flight:
            pending = self.in_flight.get(key)
            if pending is not None:
                if pending > 1:
                    self.in_flight[key] = pending - 1
                else:
                    del self.in_flight[key]
        if self.pending_keys:
            if key in self.pending_keys:
                self._on_pending_key(key, value)
        self.store(key, value)

    def replay_all(self, records: list[tuple[bytes, Optional[bytes]]]) -> None:
        """replay() of each record in order (the commit path's batch: the loop compiled too)."""
        for key, value in records:
            self.replay(key, value)

    def store(self, key: bytes, value: Optional[bytes]) -> None:
        """Set (or, for None, remove) one OffsetCommit entry; `key` is a version-1 key."""
        raw_group = key[4 : 4 + (key[2] << 8 | key[3])]  # int16 length, then the group id
        group_offsets = self._by_raw.get(raw_group)
        if value is not None:
            if group_offsets is None:
                group_id = raw_group.decode("utf-8")
                group_offsets = {}
                self._by_raw[raw_group] = group_offsets
                self.by_group[group_id] = group_offsets
                self._on_new_group(group_id)
            group_offsets[key] = value
        elif group_offsets is not None:
            group_offsets.pop(key, None)
            if not group_offsets:
                del self._by_raw[raw_group]
                del self.by_group[raw_group.decode("utf-8")]

    def drop_group(self, group_id: str) -> None:
        """Forget every offset of a group (its GroupMetadata tombstone was replayed)."""
        if self.by_group.pop(group_id, None) is not None:
            del self._by_raw[group_id.encode("utf-8")]

    def written(self, key: bytes) -> None:
        """An OffsetCommit record for `key` is on its way to the log."""
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
