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

__all__ = ["parse_subscription_topics", "parse_subscription_owned_partitions", "parse_assignment_partitions",
           "encode_consumer_subscription", "encode_consumer_assignment"]

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


def parse_subscription_owned_partitions(metadata: bytes | bytearray | memoryview | None) -> list[tuple[str, int]] | None:
    """(topic, partition) pairs a "consumer" subscription v1+ says the member still owns ([] for
    v0, which has no such field); None if unparsable."""
    # v1 adds, after userData: int32 count | (int16 length + UTF-8, int32 count, int32 partition*)*
    if metadata is None or parse_subscription_topics(metadata) is None:
        return None
    d = as_bytes(metadata)
    if _h_unpack(d, 0)[0] < 1:
        return []
    try:
        p = 6
        for _ in range(_i_unpack(d, 2)[0]):
            _, p = read_string(d, p, False)
        (ud,) = _i_unpack(d, p)
        p += 4 + max(ud, 0)
        if p == len(d):
            return []
        return _read_topic_partitions(d, p)
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None


def _read_topic_partitions(d: bytes, p: int) -> list[tuple[str, int]] | None:
    """An int32-counted array of (topic, int32-counted partitions) at `p`, as sorted pairs."""
    (count,) = _i_unpack(d, p)
    if count < 0 or count > len(d):
        return None
    p += 4
    pairs: list[tuple[str, int]] = []
    for _ in range(count):
        topic, p = read_string(d, p, False)
        (n,) = _i_unpack(d, p)
        if topic is None or n < 0 or p + 4 + 4 * n > len(d):
            return None
        pairs.extend((topic, part) for part in struct.unpack_from(f">{n}i", d, p + 4))
        p += 4 + 4 * n
    return sorted(pairs)


def parse_assignment_partitions(assignment: bytes | bytearray | memoryview | None) -> list[tuple[str, int]] | None:
    """(topic, partition) pairs of a "consumer" SyncGroup assignment (v0 layout, later fields
    ignored), sorted; None if unparsable. Empty bytes: nothing assigned."""
    # int16 version | int32 topic count | (int16 length + UTF-8, int32 count, int32 partition*)*
    # | bytes userData
    if not assignment:
        return [] if assignment is not None else None
    d = as_bytes(assignment)
    try:
        if _consumer_protocol_count(d) is None:
            return None
        return _read_topic_partitions(d, 2)
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None


def encode_consumer_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """ConsumerProtocolSubscription v0 layout with an int16 version prefix (tests and tools)."""
    return b"".join((INT16.pack(version), INT32.pack(len(topics)), *(write_string(t) for t in topics),
                     write_bytes(user_data)))


def encode_consumer_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """ConsumerProtocolAssignment v0 layout (null userData): what SyncGroup hands a classic member
    of a consumer group, from its server-side assignment."""
    body = [INT16.pack(version), INT32.pack(len(partitions))]
    for topic in sorted(partitions):
        ps = sorted(partitions[topic])
        body += [write_string(topic), INT32.pack(len(ps)), struct.pack(f">{len(ps)}i", *ps)]
    body.append(write_bytes(None))
    return b"".join(body)
