"""The "consumer" protocol's embedded bytes (reference §1.4): the topics of a JoinGroup member's
subscription and the partitions of a SyncGroup assignment, as classic groups store them opaquely."""

from __future__ import annotations

import struct

from offsetd.records.coordinator_serde import (
    INT16,
    INT32,
    RecordDecodeError,
    as_bytes,
    read_string,
    write_bytes,
    write_string,
)

__all__ = ["parse_subscription_topics", "parse_assignment_partitions", "encode_consumer_subscription"]

_h_unpack = INT16.unpack_from
_i_unpack = INT32.unpack_from


def _consumer_protocol_count(d: bytes) -> int | None:
    """The topic count after the int16 version of a "consumer" protocol subscription or
    assignment (None: a negative version or an impossible count). Raises struct.error if short."""
    version, = _h_unpack(d, 0)
    (count,) = _i_unpack(d, 2)
    return None if version < 0 or count < 0 or count > len(d) else count


def parse_subscription_topics(metadata: bytes | bytearray | memoryview | None) -> list[str] | None:
    """Topics of "consumer" JoinGroup member metadata (v0 layout, later fields ignored); None if unparsable."""
    # int16 version | int32 topic count | (int16 length + UTF-8)* | bytes userData (int32 length,
    # -1 = null) | fields of later versions (ignored)
    if metadata is None:
        return None
    d = as_bytes(metadata)
    try:
        count = _consumer_protocol_count(d)
        if count is None:
            return None
        p = 6
        topics: list[str] = []
        for _ in range(count):
            topic, p = read_string(d, p, False)
            if topic is None:
                return None
            topics.append(topic)
        (ud,) = _i_unpack(d, p)
        if ud < -1 or p + 4 + max(ud, 0) > len(d):
            return None
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None
    return topics


def parse_assignment_partitions(assignment: bytes | bytearray | memoryview | None) -> list[tuple[str, int]] | None:
    """(topic, partition) pairs of a "consumer" SyncGroup assignment (v0 layout, later fields
    ignored), sorted; None if unparsable. Empty bytes: nothing assigned."""
    # int16 version | int32 topic count | (int16 length + UTF-8, int32 count, int32 partition*)*
    # | bytes userData
    if not assignment:
        return [] if assignment is not None else None
    d = as_bytes(assignment)
    try:
        count = _consumer_protocol_count(d)
        if count is None:
            return None
        p = 6
        pairs: list[tuple[str, int]] = []
        for _ in range(count):
            topic, p = read_string(d, p, False)
            (n,) = _i_unpack(d, p)
            if topic is None or n < 0 or p + 4 + 4 * n > len(d):
                return None
            pairs.extend((topic, part) for part in struct.unpack_from(f">{n}i", d, p + 4))
            p += 4 + 4 * n
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None
    return sorted(pairs)


def encode_consumer_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """ConsumerProtocolSubscription v0 layout with an int16 version prefix (tests and tools)."""
    return b"".join((INT16.pack(version), INT32.pack(len(topics)), *(write_string(t) for t in topics),
                     write_bytes(user_data)))
