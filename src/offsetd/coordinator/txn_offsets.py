"""Pending transactional offsets of one shard: TxnOffsetCommit records waiting for their marker.

KOC §5.4 / reference A10. An OffsetCommit value in a batch with a producer id is not committed:
it waits under (producer id, key) until a COMMIT or ABORT marker for that producer id. COMMIT
copies it into the committed table only if its log offset is greater than the committed value's
(the latest record in log order wins, transactional or plain); ABORT drops it; a marker for a
producer id with nothing pending changes nothing. A plain tombstone of a key drops its pending
offsets too. A group with pending offsets "has an open transaction".

Log offsets of committed values are tracked only for keys that have pending offsets: a plain
commit replayed while a key is pending is later in the log than every pending record replayed
so far, so it is stamped with the highest pending offset seen (`_high`); an older pending
offset then loses to it and a newer one wins, exactly as comparing the real offsets would.
Plain records therefore need no offset, and the loader's hot loop stays as it was.
"""

from __future__ import annotations

from typing import Callable

# OffsetCommit key v0 and v1 share one layout (KOC §4.4); pending entries use v1 keys, as the table.
_KEY_V1 = b"\x00\x01"

Store = Callable[[bytes, "bytes | None"], None]


def is_offset_commit_key(key: bytes) -> bool:
    """An OffsetCommit key (int16 version 0 or 1)."""
    return len(key) >= 2 and key[0] == 0 and key[1] <= 1


def group_of(key: bytes) -> str:
    """The group id of an OffsetCommit key (int16 version, int16 length, UTF-8 group id, ...)."""
    return key[4 : 4 + (key[2] << 8 | key[3])].decode("utf-8")


class PendingTxnOffsets:
    """producer id -> {OffsetCommit key (v1): (value bytes, log offset)}, with the indexes the
    shard asks: which keys are pending (shared with OffsetsTable as its `pending_keys`) and which
    groups have open transactions."""

    def __init__(self, on_group: Callable[[str], None]) -> None:
        self.by_producer: dict[int, dict[bytes, tuple[bytes, int]]] = {}
        self.keys: dict[bytes, int] = {}  # key -> how many producers have it pending
        self.groups: dict[str, set[bytes]] = {}  # group -> its pending keys (present = open txn)
        self._committed_at: dict[bytes, int] = {}  # pending key -> log offset of its committed value
        self._high = -1  # highest log offset of a pending record replayed so far
        self._on_group = on_group
        self.store: Store = lambda key, value: None  # OffsetsTable.store, set by the shard

    # -------------------------------------------------------------------------- replay

    def replay_pending(self, producer_id: int, key: bytes, value: bytes, offset: int) -> None:
        """An OffsetCommit value (v0 or v1 key) at log `offset` in a batch of `producer_id`."""
        if key[1] == 0:
            key = _KEY_V1 + key[2:]
        entries = self.by_producer.setdefault(producer_id, {})
        if key not in entries:
            self.keys[key] = self.keys.get(key, 0) + 1
            group_id = group_of(key)
            self.groups.setdefault(group_id, set()).add(key)
            self._on_group(group_id)  # an offsets-only group exists from its first pending offset
        entries[key] = (value, offset)
        self._high = max(self._high, offset)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` (no producer epoch check: the log made it)."""
        entries = self.by_producer.pop(producer_id, None)
        if entries is None:
            return
        for key, (value, offset) in entries.items():
            if commit and offset > self._committed_at.get(key, -1):
                self.store(key, value)
                self._committed_at[key] = offset
            self._release(key)

    def plain_record(self, key: bytes, value: bytes | None) -> None:
        """A plain commit or tombstone of a pending key (OffsetsTable's on_pending_key hook)."""
        if value is not None:
            self._committed_at[key] = self._high
            return
        for producer_id in list(self.by_producer):
            entries = self.by_producer[producer_id]
            if entries.pop(key, None) is not None:
                self._release(key)
                if not entries:
                    del self.by_producer[producer_id]

    def _release(self, key: bytes) -> None:
        """One producer's pending offset of `key` is gone."""
        left = self.keys[key] - 1
        if left:
            self.keys[key] = left
            return
        del self.keys[key]
        self._committed_at.pop(key, None)
        group_id = group_of(key)
        pending = self.groups[group_id]
        pending.discard(key)
        if not pending:
            del self.groups[group_id]

    # ------------------------------------------------------------------------- queries

    def has_open_transaction(self, group_id: str) -> bool:
        """Whether the group has a pending transactional offset."""
        return group_id in self.groups

    def pending_keys(self, group_id: str) -> set[bytes]:
        """The group's OffsetCommit keys (v1) with a pending transactional offset."""
        return self.groups.get(group_id, set())

    def producers(self) -> dict[int, int]:
        """producer id -> how many offsets it has pending (tools and tests)."""
        return {pid: len(entries) for pid, entries in self.by_producer.items()}
