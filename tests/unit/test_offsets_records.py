"""`__consumer_offsets` codecs (records/offsets.py and beside it): hex vectors, hash, versions, log walking.

Hex and hash vectors come from the conformance reference §4.3 / §4.8. Older and flexible value
versions are checked against bytes assembled by hand here with struct, not only against our own
encoder, so a symmetric encoder/decoder mistake cannot hide.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from offsetd.records.batch import (
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    build_batch,
    decode_records,
)
from offsetd.records.consumer_protocol import encode_consumer_subscription, parse_subscription_topics
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.group_metadata_value import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
)
from offsetd.records.log_walker import ControlMarker, iter_log_records
from offsetd.records.offset_commit_value import OffsetCommitValue, decode_offset_commit_value
from offsetd.records.offsets import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)

TS = 1_700_000_000_000
CONTROL = 0x20


def s16(s: str | None) -> bytes:
    """Hand-made non-flexible string."""
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def b32(b: bytes) -> bytes:
    """Hand-made non-flexible bytes."""
    return struct.pack(">i", len(b)) + b


def cs(s: str | None) -> bytes:
    """Hand-made compact string (lengths < 127 only)."""
    if s is None:
        return b"\x00"
    b = s.encode()
    assert len(b) < 127
    return bytes([len(b) + 1]) + b


def cb(b: bytes) -> bytes:
    """Hand-made compact bytes (lengths < 127 only)."""
    assert len(b) < 127
    return bytes([len(b) + 1]) + b


# ------------------------------------------------------------------ hex vectors (§4.8)


def test_vector_offset_commit_key_v1() -> None:
    key = OffsetCommitKey("g", "t", 0)
    assert encode_key(key).hex() == "000100016700017400000000"
    assert decode_key(bytes.fromhex("000100016700017400000000")) == key


def test_vector_offset_commit_value_v3() -> None:
    value = OffsetCommitValue(offset=100, leader_epoch=-1, metadata="", commit_timestamp=TS)
    hexs = "00030000000000000064ffffffff00000000018bcfe56800"
    assert encode_value(value).hex() == hexs
    assert decode_offset_commit_value(bytes.fromhex(hexs)) == value


def test_vector_offset_commit_value_v1_when_expire_timestamp() -> None:
    value = OffsetCommitValue(100, -1, "", TS, 1_700_000_001_234)
    hexs = "0001000000000000006400000000018bcfe568000000018bcfe56cd2"
    assert encode_value(value).hex() == hexs
    assert decode_offset_commit_value(bytes.fromhex(hexs)) == value


def test_v1_drops_leader_epoch() -> None:
    value = OffsetCommitValue(100, 7, "m", TS, TS + 5)
    data = encode_value(value)
    assert data[:2] == b"\x00\x01"
    assert decode_offset_commit_value(data) == OffsetCommitValue(100, -1, "m", TS, TS + 5)


def test_vector_group_metadata_key_v2() -> None:
    assert encode_key(GroupMetadataKey("g")).hex() == "0002000167"
    assert decode_key(bytes.fromhex("0002000167")) == GroupMetadataKey("g")


def test_vector_group_metadata_value_v3_empty() -> None:
    value = GroupMetadataValue("", 0, None, None, TS, ())
    hexs = "0003000000000000ffffffff0000018bcfe5680000000000"
    assert encode_value(value).hex() == hexs
    assert decode_group_metadata_value(bytes.fromhex(hexs)) == value


def test_vector_consumer_subscription_v0() -> None:
    hexs = "0000000000020003666f6f0003626172ffffffff"
    assert encode_consumer_subscription(["foo", "bar"]).hex() == hexs
    assert struct.pack(">hi", 0, 2) + s16("foo") + s16("bar") + b"\xff\xff\xff\xff" == bytes.fromhex(hexs)
    assert parse_subscription_topics(bytes.fromhex(hexs)) == ["foo", "bar"]


def test_offsets_topic_name() -> None:
    assert OFFSETS_TOPIC == "__consumer_offsets"


# ------------------------------------------------------------------ group -> partition (§4.3)


@pytest.mark.parametrize(
    "group, hash_code, partition",
    [
        ("", 0, 0),
        ("my-group", -1906497762, 12),
        ("test-group", 627841412, 12),
        ("console-consumer-12345", 158455506, 6),
        ("polygenelubricants", -2147483648, 0),
        ("\U0001F600grp", 1276929186, 36),
    ],
)
def test_hash_vectors(group: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(group) == hash_code
    assert partition_for(group, 50) == partition


def test_hash_counts_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in Java; a BMP character is one unit.
    h = 0
    for unit in (0xD83D, 0xDE00):
        h = (31 * h + unit) & 0xFFFFFFFF
    assert java_string_hash("\U0001F600") == h - (1 << 32 if h >= 1 << 31 else 0)
    assert java_string_hash("\u00e9") == 0xE9
    assert java_string_hash("\ud800") == 0xD800  # lone surrogate: legal in Java strings


def test_partition_for_other_counts_and_validation() -> None:
    assert partition_for("my-group", 1) == 0
    assert partition_for("my-group", 7) == 1906497762 % 7
    assert partition_for("polygenelubricants", 7) == 0  # Utils.abs(MIN_VALUE) == 0
    with pytest.raises(ValueError):
        partition_for("g", 0)


# ------------------------------------------------------------------ keys


def test_offset_commit_key_v0_reads_like_v1() -> None:
    data = b"\x00\x00" + s16("grp") + s16("topic") + struct.pack(">i", 42)
    assert decode_key(data) == OffsetCommitKey("grp", "topic", 42)


def test_key_round_trip_unicode_and_negative_partition() -> None:
    key = OffsetCommitKey("gr\u00fcppe-\U0001F600", "t\u00f6pic", -1)
    assert decode_key(encode_key(key)) == key
    assert decode_key(memoryview(encode_key(key))) == key
    assert decode_key(bytearray(encode_key(GroupMetadataKey("")))) == GroupMetadataKey("")


@pytest.mark.parametrize("version", [3, 4, 8, 9, 15, 16, 0x7FFF, -1, -32768])
def test_unknown_key_versions_are_returned_not_raised(version: int) -> None:
    data = struct.pack(">h", version) + s16("whatever") + b"\x01\x02"
    assert decode_key(data) == UnknownRecordKey(version)


@pytest.mark.parametrize("data", [b"", b"\x00"])
def test_key_without_version_is_an_error(data: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_key(data)


def test_null_key_is_an_error() -> None:
    with pytest.raises(RecordDecodeError):
        decode_key(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [encode_key(OffsetCommitKey("group", "topic", 3)), encode_key(GroupMetadataKey("group"))],
)
def test_truncated_keys_raise(data: bytes) -> None:
    for cut in range(2, len(data)):
        with pytest.raises(RecordDecodeError):
            decode_key(data[:cut])
    with pytest.raises(RecordDecodeError):
        decode_key(data + b"\x00")  # trailing garbage



def test_key_invalid_utf8_raises() -> None:
    data = b"\x00\x01\x00\x02\xff\xfe" + s16("t") + b"\x00\x00\x00\x00"
    with pytest.raises(RecordDecodeError):
        decode_key(data)


def test_encode_rejects_wrong_types_and_oversized_strings() -> None:
    with pytest.raises(TypeError):
        encode_key("g")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_value(OffsetCommitKey("g", "t", 0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_key(GroupMetadataKey("x" * 40000))
    with pytest.raises(ValueError):
        encode_value(OffsetCommitValue(1), version=5)
    with pytest.raises(ValueError):
        encode_value(GroupMetadataValue("", 0, None, None, -1, ()), version=5)


# ------------------------------------------------------------------ OffsetCommit values, v0..v4

FULL = OffsetCommitValue(
    offset=12345678901, leader_epoch=17, metadata="meta \u00e9", commit_timestamp=TS, expire_timestamp=TS + 999
)


def hand_offset_value(version: int, v: OffsetCommitValue, tags: bytes = b"\x00") -> bytes:
    """OffsetCommitValue bytes written from the field table of §4.5."""
    if version in (0, 2):
        return struct.pack(">hq", version, v.offset) + s16(v.metadata) + struct.pack(">q", v.commit_timestamp)
    if version == 1:
        tail = struct.pack(">qq", v.commit_timestamp, v.expire_timestamp)
        return struct.pack(">hq", 1, v.offset) + s16(v.metadata) + tail
    if version == 3:
        head = struct.pack(">hqi", 3, v.offset, v.leader_epoch)
        return head + s16(v.metadata) + struct.pack(">q", v.commit_timestamp)
    assert version == 4
    head = struct.pack(">hqi", 4, v.offset, v.leader_epoch)
    return head + cs(v.metadata) + struct.pack(">q", v.commit_timestamp) + tags


# What each version keeps of FULL.
EXPECTED_BY_VERSION = {
    0: OffsetCommitValue(FULL.offset, -1, FULL.metadata, TS, -1),
    1: OffsetCommitValue(FULL.offset, -1, FULL.metadata, TS, TS + 999),
    2: OffsetCommitValue(FULL.offset, -1, FULL.metadata, TS, -1),
    3: OffsetCommitValue(FULL.offset, 17, FULL.metadata, TS, -1),
    4: OffsetCommitValue(FULL.offset, 17, FULL.metadata, TS, -1),
}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_value_versions(version: int) -> None:
    expected = EXPECTED_BY_VERSION[version]
    hand = hand_offset_value(version, FULL)
    assert encode_value(FULL, version=version) == hand
    assert decode_offset_commit_value(hand) == expected
    assert decode_offset_commit_value(memoryview(hand)) == expected
    assert decode_value(OffsetCommitKey("g", "t", 0), hand) == expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_value_truncations_raise(version: int) -> None:
    data = hand_offset_value(version, FULL)
    for cut in range(len(data)):
        with pytest.raises(RecordDecodeError):
            decode_offset_commit_value(data[:cut])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offset_commit_value_trailing_garbage_raises(version: int) -> None:
    data = hand_offset_value(version, FULL) + b"\x00"
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(data)


def test_offset_commit_value_v4_skips_unknown_tagged_fields() -> None:
    # two unknown tags: tag 0 with 3 bytes, tag 7 with a 130-byte payload (2-byte uvarint size)
    tags = b"\x02" + b"\x00\x03abc" + b"\x07\x82\x01" + bytes(130)
    data = hand_offset_value(4, FULL, tags)
    assert decode_offset_commit_value(data) == EXPECTED_BY_VERSION[4]
    with pytest.raises(RecordDecodeError):  # tag payload overruns the buffer
        decode_offset_commit_value(data[:-1])
    with pytest.raises(RecordDecodeError):  # bytes after the tag section
        decode_offset_commit_value(data + b"\x00")


def test_offset_commit_value_v4_long_metadata_uses_multibyte_uvarint() -> None:
    value = OffsetCommitValue(5, 1, "x" * 300, TS)
    data = encode_value(value, version=4)
    assert data[14:16] == bytes([(301 & 0x7F) | 0x80, 301 >> 7])
    assert decode_offset_commit_value(data) == value


@pytest.mark.parametrize("version", [5, 6, -1, 0x7FFF])
def test_unknown_offset_commit_value_versions_raise(version: int) -> None:
    data = struct.pack(">h", version) + bytes(40)
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(data)


def test_null_metadata_on_disk_is_an_error() -> None:
    data = struct.pack(">hqi", 3, 1, -1) + b"\xff\xff" + struct.pack(">q", TS)
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(data)
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(struct.pack(">hq", 0, 1) + b"\xff\xff" + struct.pack(">q", TS))


def test_offset_commit_value_invalid_utf8_raises() -> None:
    data = struct.pack(">hqi", 3, 1, -1) + b"\x00\x01\xff" + struct.pack(">q", TS)
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(data)


def test_offset_commit_defaults_and_negative_offset() -> None:
    value = OffsetCommitValue(-5)
    assert (value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp) == (-1, "", -1, -1)
    assert decode_offset_commit_value(encode_value(value)) == value


# ------------------------------------------------------------------ GroupMetadata values, v0..v4

M1 = MemberMetadata("consumer-1-aaaa", "static-1", "consumer-1", "/10.0.0.1", 45000, 10000,
                    encode_consumer_subscription(["foo", "bar"]), b"\x00\x00assignment")
M2 = MemberMetadata("consumer-2-bbbb", None, "consumer-2", "/10.0.0.2", 300000, 45000, b"", b"")
GROUP = GroupMetadataValue("consumer", 7, "range", "consumer-1-aaaa", TS, (M1, M2))


def hand_group_value(
    version: int, v: GroupMetadataValue, top_tags: bytes = b"\x00", member_tags: bytes = b"\x00"
) -> bytes:
    """GroupMetadataValue bytes written from the field table of §4.7."""
    flex = version >= 4
    st = cs if flex else s16
    by = cb if flex else b32
    out = struct.pack(">h", version) + st(v.protocol_type) + struct.pack(">i", v.generation)
    out += st(v.protocol) + st(v.leader)
    if version >= 2:
        out += struct.pack(">q", v.current_state_timestamp)
    out += bytes([len(v.members) + 1]) if flex else struct.pack(">i", len(v.members))
    for m in v.members:
        out += st(m.member_id)
        if version >= 3:
            out += st(m.group_instance_id)
        out += st(m.client_id) + st(m.client_host)
        if version >= 1:
            out += struct.pack(">i", m.rebalance_timeout)
        out += struct.pack(">i", m.session_timeout) + by(m.subscription) + by(m.assignment)
        if flex:
            out += member_tags
    if flex:
        out += top_tags
    return out


def expected_group(version: int) -> GroupMetadataValue:
    """GROUP as read back from `version` (absent fields take their defaults)."""
    members = []
    for m in GROUP.members:
        members.append(MemberMetadata(
            m.member_id,
            m.group_instance_id if version >= 3 else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout,  # absent -> session timeout
            m.session_timeout,
            m.subscription,
            m.assignment,
        ))
    return GroupMetadataValue(GROUP.protocol_type, GROUP.generation, GROUP.protocol, GROUP.leader,
                              GROUP.current_state_timestamp if version >= 2 else -1, tuple(members))


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_versions(version: int) -> None:
    hand = hand_group_value(version, GROUP)
    assert encode_value(GROUP, version=version) == hand
    assert decode_group_metadata_value(hand) == expected_group(version)
    assert decode_value(GroupMetadataKey("g"), bytearray(hand)) == expected_group(version)


def test_group_metadata_value_default_is_v3() -> None:
    assert encode_value(GROUP) == hand_group_value(3, GROUP)
    assert decode_group_metadata_value(encode_value(GROUP)) == GROUP


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_truncations_raise(version: int) -> None:
    data = hand_group_value(version, GROUP)
    for cut in range(len(data)):
        with pytest.raises(RecordDecodeError):
            decode_group_metadata_value(data[:cut])
    with pytest.raises(RecordDecodeError):
        decode_group_metadata_value(data + b"\x00")


def test_group_metadata_value_v4_skips_unknown_tagged_fields() -> None:
    data = hand_group_value(4, GROUP, top_tags=b"\x01\x05\x02hi", member_tags=b"\x01\x00\x01z")
    assert decode_group_metadata_value(data) == expected_group(4)


def test_group_metadata_rebalance_timeout_minus_one_means_session_timeout() -> None:
    member = MemberMetadata("m", None, "c", "h", -1, 10000, b"", b"")
    value = GroupMetadataValue("consumer", 1, "range", "m", TS, (member,))
    decoded = decode_group_metadata_value(encode_value(value))
    assert decoded.members[0].rebalance_timeout == 10000


def test_group_metadata_null_protocol_type_reads_as_empty() -> None:
    data = struct.pack(">h", 3) + b"\xff\xff" + struct.pack(">i", 0) + b"\xff\xff\xff\xff" + struct.pack(">qi", TS, 0)
    assert decode_group_metadata_value(data) == GroupMetadataValue("", 0, None, None, TS, ())
    flex = struct.pack(">h", 4) + b"\x00" + struct.pack(">i", 0) + b"\x00\x00" + struct.pack(">q", TS) + b"\x01\x00"
    assert decode_group_metadata_value(flex) == GroupMetadataValue("", 0, None, None, TS, ())


@pytest.mark.parametrize("version", [5, -1])
def test_unknown_group_metadata_value_versions_raise(version: int) -> None:
    with pytest.raises(RecordDecodeError):
        decode_group_metadata_value(struct.pack(">h", version) + hand_group_value(3, GROUP)[2:])


def test_group_metadata_garbage_raises() -> None:
    base = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m")
    base += struct.pack(">q", TS)
    with pytest.raises(RecordDecodeError):  # negative member count
        decode_group_metadata_value(base + struct.pack(">i", -1))
    with pytest.raises(RecordDecodeError):  # absurd member count
        decode_group_metadata_value(base + struct.pack(">i", 1 << 30))
    with pytest.raises(RecordDecodeError):  # null member id
        decode_group_metadata_value(base + struct.pack(">i", 1) + b"\xff\xff")
    member = s16("m") + s16(None) + s16("c") + s16("h") + struct.pack(">ii", 1, 1)
    with pytest.raises(RecordDecodeError):  # null subscription bytes
        decode_group_metadata_value(base + struct.pack(">i", 1) + member + b"\xff\xff\xff\xff" + b32(b""))
    with pytest.raises(RecordDecodeError):  # string length below -1
        decode_group_metadata_value(struct.pack(">h", 3) + b"\xff\xfe" + bytes(30))


def test_decode_value_dispatch() -> None:
    assert decode_value(OffsetCommitKey("g", "t", 0), None) is None
    with pytest.raises(TypeError):
        decode_value(UnknownRecordKey(9), b"\x00\x00")  # type: ignore[arg-type]


# ------------------------------------------------------------------ record helpers, tombstones


def test_tombstones_and_explicit_expiry_encoding() -> None:
    key = OffsetCommitKey("g", "t", 0)
    assert encode_key(key) == bytes.fromhex("000100016700017400000000")
    assert encode_key(GroupMetadataKey("g")) == bytes.fromhex("0002000167")
    # an explicit expire timestamp selects value v1
    assert encode_value(OffsetCommitValue(1, 3, "", TS, TS + 1))[:2] == b"\x00\x01"


# ------------------------------------------------------------------ subscriptions (§1.4)


def test_subscription_later_versions_ignore_extra_fields() -> None:
    # v1 adds ownedPartitions, v2 generationId, v3 rackId: all after userData, all ignored
    v3 = (struct.pack(">hi", 3, 1) + s16("orders") + b32(b"ud") + struct.pack(">i", 1) + s16("orders")
          + struct.pack(">ii", 1, 0) + struct.pack(">i", 5) + s16("rack-a"))
    assert parse_subscription_topics(v3) == ["orders"]
    assert parse_subscription_topics(encode_consumer_subscription([], b"x", version=1)) == []
    assert parse_subscription_topics(memoryview(encode_consumer_subscription(["\u00e9"]))) == ["\u00e9"]


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"",
        b"\x00",
        b"\x00\x00\x00\x00",
        struct.pack(">hi", -1, 0) + b"\xff\xff\xff\xff",  # negative version
        struct.pack(">hi", 0, -1) + b"\xff\xff\xff\xff",  # negative count
        struct.pack(">hi", 0, 1) + b"\xff\xff" + b"\xff\xff\xff\xff",  # null topic
        struct.pack(">hi", 0, 1) + s16("foo"),  # userData missing
        struct.pack(">hi", 0, 1) + s16("foo") + struct.pack(">i", 10) + b"abc",  # userData short
        struct.pack(">hi", 0, 1) + b"\x00\x02\xff\xfe" + b"\xff\xff\xff\xff",  # bad UTF-8
        struct.pack(">hi", 0, 2) + s16("foo"),  # second topic missing
        b"garbage that is not a subscription",
    ],
)
def test_unparsable_subscriptions_give_none(data: bytes | None) -> None:
    assert parse_subscription_topics(data) is None


def test_subscription_truncations_give_none() -> None:
    data = encode_consumer_subscription(["foo", "bar"], b"userdata")
    for cut in range(len(data)):
        assert parse_subscription_topics(data[:cut]) is None


# ------------------------------------------------------------------ iter_log_records


def offset_commit_record(key: OffsetCommitKey, value: OffsetCommitValue | None) -> tuple[bytes, bytes | None]:
    return encode_key(key), None if value is None else encode_value(value)


def commit_rec(group: str, topic: str, part: int, offset: int | None, ts: int = TS, metadata: str = "",
               epoch: int = -1, expire: int = -1, headers=()) -> tuple:
    key, value = offset_commit_record(
        OffsetCommitKey(group, topic, part),
        None if offset is None else OffsetCommitValue(offset, epoch, metadata, ts, expire),
    )
    return (key, value, ts, list(headers))


def control_batch(marker: int, base_offset: int, producer_id: int, ts: int = TS) -> bytes:
    """A transaction marker batch: key int16 version 0 | int16 type; value version + epoch."""
    key = struct.pack(">hh", 0, marker)
    value = struct.pack(">hi", 0, 3)
    return build_batch([(key, value, ts, [])], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=0, attributes=CONTROL | TRANSACTIONAL_MASK)


def test_iter_log_records_matches_decode_records() -> None:
    recs = [commit_rec("g", "t", i, 10 * i, ts=TS + i) for i in range(100)]
    recs += [(None, b"v", TS, []), (b"k", None, TS - 5, [("h", b"x"), ("h2", None)]), (b"", b"", TS, [])]
    recs += [(b"K" * 200, b"V" * 10000, TS + 100000, [])]  # multi-byte lengths and deltas
    batches = [build_batch(recs, base_offset=1000), build_batch(recs[:3], base_offset=2000)]
    got = list(iter_log_records(b"".join(batches)))
    want = [(r.offset, r.timestamp, r.key, r.value, -1) for b in batches for r in decode_records(b)]
    assert got == want
    assert all(type(k) in (bytes, type(None)) for _, _, k, _, _ in got)


def test_iter_log_records_accepts_memoryview_and_bytearray_and_start_pos() -> None:
    b1 = build_batch([commit_rec("g", "t", 0, 1)], base_offset=0)
    b2 = build_batch([commit_rec("g", "t", 0, 2)], base_offset=1)
    buf = b1 + b2
    expected = list(iter_log_records(buf))
    assert list(iter_log_records(memoryview(buf))) == expected
    assert list(iter_log_records(bytearray(buf))) == expected
    assert all(type(k) is bytes and type(v) is bytes for _, _, k, v, _ in iter_log_records(bytearray(buf)))
    assert list(iter_log_records(buf, len(b1))) == expected[1:]


def run_to_end(gen):
    """Drain a generator; return (items, return value)."""
    items = []
    while True:
        try:
            items.append(next(gen))
        except StopIteration as stop:
            return items, stop.value


def test_iter_log_records_stops_cleanly_at_a_torn_tail() -> None:
    b1 = build_batch([commit_rec("g", "t", 0, 1), commit_rec("g", "t", 1, 1)], base_offset=0)
    b2 = build_batch([commit_rec("g", "t", 0, 2)], base_offset=2)
    whole = b1 + b2
    for cut in range(len(b1), len(whole)):
        items, stop = run_to_end(iter_log_records(whole[:cut]))
        assert [r[0] for r in items] == [0, 1]
        assert stop == len(b1)
    items, stop = run_to_end(iter_log_records(whole))
    assert [r[0] for r in items] == [0, 1, 2] and stop == len(whole)
    items, stop = run_to_end(iter_log_records(whole + bytes(4096)))  # zero-filled preallocation
    assert len(items) == 3 and stop == len(whole)
    assert run_to_end(iter_log_records(b"")) == ([], 0)


def test_iter_log_records_transactions_and_markers() -> None:
    pid = 4242
    txn = build_batch([commit_rec("g", "t", 0, 7)], base_offset=0, producer_id=pid, producer_epoch=0,
                      attributes=TRANSACTIONAL_MASK)
    plain = build_batch([commit_rec("g", "t", 0, 8)], base_offset=3)
    buf = txn + control_batch(1, 1, pid) + control_batch(0, 2, pid) + plain
    got = list(iter_log_records(buf))
    assert [(o, k if isinstance(k, ControlMarker) else "data", p) for o, _, k, _, p in got] == [
        (0, "data", pid), (1, ControlMarker.COMMIT, pid), (2, ControlMarker.ABORT, pid), (3, "data", -1)]
    assert got[1][3] is None and type(got[1][2]) is not bytes
    assert [o for o, *_ in iter_log_records(buf, markers=False)] == [0, 3]


def test_iter_log_records_control_edge_cases() -> None:
    # unknown control type (e.g. KRaft's LEADER_CHANGE = 2) is skipped
    other = build_batch([(struct.pack(">hh", 0, 2), b"\x00\x00", TS, [])], attributes=CONTROL)
    assert list(iter_log_records(other)) == []
    short = build_batch([(b"\x00\x00", b"", TS, [])], attributes=CONTROL)
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(short))
    negative = build_batch([(struct.pack(">hh", -1, 1), b"", TS, [])], attributes=CONTROL)
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(negative))


def test_iter_log_records_log_append_time() -> None:
    batch = bytearray(build_batch([commit_rec("g", "t", 0, 1, ts=TS), commit_rec("g", "t", 1, 1, ts=TS + 50)],
                                  attributes=TIMESTAMP_TYPE_MASK))
    assert [ts for _, ts, *_ in iter_log_records(bytes(batch))] == [TS + 50, TS + 50]


def test_iter_log_records_errors() -> None:
    batch = bytearray(build_batch([commit_rec("g", "t", 0, 1)]))
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with pytest.raises(RecordDecodeError, match="magic"):
        list(iter_log_records(bytes(bad_magic)))
    bad_crc = bytearray(batch)
    bad_crc[-1] ^= 0xFF
    list(iter_log_records(bytes(bad_crc)))  # not verified by default
    with pytest.raises(RecordDecodeError, match="CRC"):
        list(iter_log_records(bytes(bad_crc), verify=True))
    assert len(list(iter_log_records(bytes(batch), verify=True))) == 1
    too_many = bytearray(batch)
    struct.pack_into(">i", too_many, 57, 2)  # recordsCount 2, only one record present
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(bytes(too_many) + bytes(batch)))
    too_few = bytearray(build_batch([commit_rec("g", "t", 0, 1), commit_rec("g", "t", 1, 1)]))
    struct.pack_into(">i", too_few, 57, 1)
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(bytes(too_few)))
    garbage = bytearray(batch)
    garbage[61] = 0xFF  # record length varint now runs on
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(bytes(garbage)))


def kp_gzip_batch(records: list[tuple], base_offset: int = 0) -> bytes:
    """A gzip batch written by kafka-python, an independent implementation."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for i, (k, v, ts, hdrs) in enumerate(records):
        b.append(i, timestamp=ts, key=k, value=v, headers=list(hdrs))
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def test_iter_log_records_gzip_and_other_codecs() -> None:
    recs = [commit_rec("g", "t", i, i) for i in range(50)]
    gz = kp_gzip_batch(recs, base_offset=10)
    plain = build_batch(recs, base_offset=10)
    assert list(iter_log_records(gz)) == list(iter_log_records(plain))
    assert list(iter_log_records(gz, verify=True)) == list(iter_log_records(plain))
    # another codec: a clear error unless a decompressor is supplied
    zstd = bytearray(gz)
    zstd[22] = (zstd[22] & ~0x07) | 4
    with pytest.raises(RecordDecodeError, match="zstd"):
        list(iter_log_records(bytes(zstd)))
    import gzip

    seen = []

    def decompress(codec: int, data: bytes) -> bytes:
        seen.append(codec)
        return gzip.decompress(data)

    assert list(iter_log_records(bytes(zstd), decompress=decompress)) == list(iter_log_records(plain))
    assert seen == [4]
    corrupt = bytearray(gz)
    corrupt[-5] ^= 0xFF  # gzip trailer CRC-32
    with pytest.raises(RecordDecodeError):
        list(iter_log_records(bytes(corrupt)))


def with_record_area(batch: bytes, area: bytes, codec: int) -> bytes:
    """`batch` with its records replaced by `area` (e.g. compressed) and a fresh length and CRC."""
    out = bytearray(batch[:61] + area)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, (struct.unpack_from(">h", out, 21)[0] & ~0x07) | codec)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_iter_log_records_gzip_multi_member_and_truncated() -> None:
    import gzip

    plain = build_batch([commit_rec("g", "t", i, i) for i in range(10)])
    area = plain[61:]
    two_members = gzip.compress(area[:100]) + gzip.compress(area[100:])
    assert list(iter_log_records(with_record_area(plain, two_members, 1), verify=True)) == list(iter_log_records(plain))
    one = gzip.compress(area)
    with pytest.raises(RecordDecodeError, match="gzip"):
        list(iter_log_records(with_record_area(plain, one[:-3], 1)))
    with pytest.raises(RecordDecodeError, match="gzip"):
        list(iter_log_records(with_record_area(plain, b"not gzip at all", 1)))
    with pytest.raises(RecordDecodeError, match="unknown codec 7"):
        list(iter_log_records(with_record_area(plain, one, 7)))


def test_iter_log_records_large_batches_use_multibyte_offset_deltas() -> None:
    recs = [commit_rec("g", "t", i % 7, i) for i in range(9000)]  # deltas up to 3 varint bytes
    buf = build_batch(recs, base_offset=5)
    assert [o for o, *_ in iter_log_records(buf)] == list(range(5, 9005))
