"""Fuzzing the `__consumer_offsets` key/value codecs (records/offsets.py and the value modules):
generated keys and values of every schema version round-trip, and random, truncated, bit-flipped
or extended bytes give a value or RecordDecodeError, never IndexError/struct.error/UnicodeDecodeError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_strategies import (
    bit_flips,
    group_metadata_as_decoded,
    group_metadata_keys,
    group_metadata_values,
    mutations,
    offset_commit_as_decoded,
    offset_commit_keys,
    offset_commit_values,
    truncations,
)
from fuzz_targets import check_offsets_codecs, no_hang
from offsetd.records.consumer_protocol import encode_consumer_subscription, parse_subscription_topics
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.group_metadata_value import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
)
from offsetd.records.offset_commit_value import OffsetCommitValue, decode_offset_commit_value
from offsetd.records.offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _refused(fn: object, data: bytes) -> bool:
    """True when the decoder raises RecordDecodeError (any other exception propagates)."""
    try:
        fn(data)  # type: ignore[operator]
    except RecordDecodeError:
        return True
    return False


@FAST
@given(offset_commit_keys | group_metadata_keys)
def test_keys_round_trip(key: OffsetCommitKey | GroupMetadataKey) -> None:
    """decode_key(encode_key(k)) == k for OffsetCommit (v1) and GroupMetadata (v2) keys."""
    assert decode_key(encode_key(key)) == key


@FAST
@given(offset_commit_values, st.sampled_from([None, 0, 1, 2, 3, 4]))
def test_offset_commit_values_round_trip_at_every_version(value: OffsetCommitValue, version: int | None) -> None:
    """OffsetCommit values round-trip at v0-v4 minus missing fields; the default is v1 iff expiring."""
    data = encode_value(value, version)
    written = int.from_bytes(data[:2], "big", signed=True)
    if version is None:
        assert written == (1 if value.expire_timestamp != -1 else 3)
    key = OffsetCommitKey("g", "t", 0)
    assert decode_value(key, data) == offset_commit_as_decoded(value, written)


@FAST
@given(group_metadata_values, st.sampled_from([None, 0, 1, 2, 3, 4]))
def test_group_metadata_values_round_trip_at_every_version(value: GroupMetadataValue, version: int | None) -> None:
    """Every GroupMetadata value version (v4 flexible) decodes to the value minus missing fields."""
    data = encode_value(value, version)
    written = 3 if version is None else version
    assert int.from_bytes(data[:2], "big") == written
    assert decode_value(GroupMetadataKey("g"), data) == group_metadata_as_decoded(value, written)


@st.composite
def encoded(draw: st.DrawFn) -> tuple[str, bytes]:
    """(which decoder, a valid encoding for it) of any record type and version."""
    which = draw(st.sampled_from(["key", "commit", "group"]))
    if which == "key":
        return which, encode_key(draw(offset_commit_keys | group_metadata_keys))
    if which == "commit":
        return which, encode_value(draw(offset_commit_values), draw(st.sampled_from([None, 0, 1, 2, 3, 4])))
    return which, encode_value(draw(group_metadata_values), draw(st.sampled_from([None, 0, 1, 2, 3, 4])))


DECODERS = {"key": decode_key, "commit": decode_offset_commit_value, "group": decode_group_metadata_value}


@FAST
@given(encoded(), st.data())
def test_truncated_or_extended_encodings_are_refused(sample: tuple[str, bytes], data: st.DataObject) -> None:
    """A strict prefix of a valid key/value, or one with bytes appended, is RecordDecodeError."""
    which, raw = sample
    decode = DECODERS[which]
    with no_hang():
        assert _refused(decode, data.draw(truncations(raw)))
        assert _refused(decode, raw + data.draw(st.binary(min_size=1, max_size=8)))


@FAST
@given(encoded(), st.data())
def test_mutated_encodings_decode_or_raise_record_decode_error(sample: tuple[str, bytes], data: st.DataObject) -> None:
    """Mutations of valid keys/values give a value or RecordDecodeError from every decoder."""
    _which, raw = sample
    with no_hang():
        check_offsets_codecs(data.draw(mutations(raw)))
        check_offsets_codecs(data.draw(bit_flips(raw)))


@FAST
@given(st.binary(max_size=80))
def test_random_bytes_decode_or_raise_record_decode_error(raw: bytes) -> None:
    """Random bytes: a value or RecordDecodeError from every decoder; subscriptions parse or give None."""
    with no_hang():
        assert check_offsets_codecs(raw).count("/") == 2


@FAST
@given(st.sampled_from([0, 1, 2, 3, 4]), st.binary(max_size=80))
def test_random_bodies_behind_a_known_version_decode_or_raise(version: int, body: bytes) -> None:
    """Random bytes behind each known version number: a value or RecordDecodeError only."""
    with no_hang():
        check_offsets_codecs(version.to_bytes(2, "big") + body)


@FAST
@given(st.lists(st.text(max_size=8), max_size=4), st.none() | st.binary(max_size=8), st.data())
def test_subscription_parser_reads_its_topics_and_never_raises(topics: list[str], user_data: bytes | None,
                                                               data: st.DataObject) -> None:
    """parse_subscription_topics reads back encoded topics and never raises on mutations of them."""
    raw = encode_consumer_subscription(topics, user_data)
    assert parse_subscription_topics(raw) == topics
    mutated = parse_subscription_topics(data.draw(mutations(raw)))
    assert mutated is None or isinstance(mutated, list)


def test_every_prefix_of_each_value_version_is_refused() -> None:
    """Every strict prefix of an OffsetCommit and a GroupMetadata value (v0-v4) is RecordDecodeError."""
    commit = OffsetCommitValue(42, 3, "meta", 1_700_000_000_000, 1_700_000_100_000)
    member = MemberMetadata("m", "i", "c", "/h", 300, 100, b"\x00\x01", b"\x02")
    group = GroupMetadataValue("consumer", 5, "range", "m", 1_700_000_000_000, (member, member))
    for version in range(5):
        for value, decode in ((commit, decode_offset_commit_value), (group, decode_group_metadata_value)):
            raw = encode_value(value, version)
            decode(raw)
            for n in range(len(raw)):
                assert _refused(decode, raw[:n]), (type(value).__name__, version, n)
