"""KIP-848 `__consumer_offsets` record codecs (types 3-8, 16) against hand-derived bytes (B6)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offsetd.records.consumer_group_records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    PartitionRacks,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from offsetd.records.offsets import RecordDecodeError

H = bytes.fromhex
TID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TID_HEX = "00112233445566778899aabbccddeeff"

# (key, key bytes, value, value bytes): every vector below is derived by hand from the schema.
VECTORS = [
    # 3: type 3 | "g" ; version 0 | Epoch 5 | no tags
    (ConsumerGroupMetadataKey("g"), H("0003" "0001" "67"),
     ConsumerGroupMetadataValue(5), H("0000" "00000005" "00")),
    # 4: Topics [1 elem] {uuid, "t", 3 partitions, PartitionMetadata [] , tags} tags
    (ConsumerGroupPartitionMetadataKey("g"), H("0004" "0001" "67"),
     ConsumerGroupPartitionMetadataValue((TopicMetadata(TID, "t", 3),)),
     H("0000" "02" + TID_HEX + "0274" "00000003" "01" "00" "00")),
    # 4 with one PartitionMetadata {partition 0, racks ["r"], tags}
    (ConsumerGroupPartitionMetadataKey("g"), H("0004" "0001" "67"),
     ConsumerGroupPartitionMetadataValue((TopicMetadata(TID, "t", 1, (PartitionRacks(0, ("r",)),)),)),
     H("0000" "02" + TID_HEX + "0274" "00000001" "02" "00000000" "02" "0272" "00" "00" "00")),
    # 5: type 5 | "g" | "m" ; InstanceId null | RackId null | "c" | "h" | ["t"] | regex null |
    # RebalanceTimeoutMs 300000 | "uniform" | no tags
    (ConsumerGroupMemberMetadataKey("g", "m"), H("0005" "0001" "67" "0001" "6d"),
     ConsumerGroupMemberMetadataValue(None, None, "c", "h", ("t",), None, 300000, "uniform"),
     H("0000" "00" "00" "0263" "0268" "02" "0274" "00" "000493e0" "08" "756e69666f726d" "00")),
    # 5 static, regex, classic member metadata as tag 0 (15 bytes: session 45000 |
    # [{"range", b"\x01", tags}] | tags)
    (ConsumerGroupMemberMetadataKey("g", "m"), H("0005" "0001" "67" "0001" "6d"),
     ConsumerGroupMemberMetadataValue("i", "r", "c", "h", (), "t.*", 1000, None,
                                      ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x01"),))),
     H("0000" "0269" "0272" "0263" "0268" "01" "04742e2a" "000003e8" "00"
       "01" "00" "0f" "0000afc8" "02" "0672616e6765" "0201" "00" "00")),
    # 6: AssignmentEpoch 7
    (ConsumerGroupTargetAssignmentMetadataKey("g"), H("0006" "0001" "67"),
     ConsumerGroupTargetAssignmentMetadataValue(7), H("0000" "00000007" "00")),
    # 7: TopicPartitions [{uuid, [0, 2], tags}] tags
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), H("0007" "0001" "67" "0001" "6d"),
     ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TID, (0, 2)),)),
     H("0000" "02" + TID_HEX + "03" "00000000" "00000002" "00" "00")),
    # 8: epoch 4 | previous 3 | state 1 | assigned [{uuid,[1]}] | pending [{uuid,[0]}] | tags
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), H("0008" "0001" "67" "0001" "6d"),
     ConsumerGroupCurrentMemberAssignmentValue(4, 3, 1, (TopicPartitions(TID, (1,)),), (TopicPartitions(TID, (0,)),)),
     H("0000" "00000004" "00000003" "01" "02" + TID_HEX + "02" "00000001" "00"
       "02" + TID_HEX + "02" "00000000" "00" "00")),
    # 16: type 16 | "g" | "t.*" ; Topics ["t1"] | Version 2 | Timestamp 1000 | tags
    (ConsumerGroupRegularExpressionKey("g", "t.*"), H("0010" "0001" "67" "0003" "742e2a"),
     ConsumerGroupRegularExpressionValue(("t1",), 2, 1000),
     H("0000" "02" "037431" "0000000000000002" "00000000000003e8" "00")),
]


@pytest.mark.parametrize("key,key_bytes,value,value_bytes", VECTORS)
def test_hand_computed_vectors(key, key_bytes, value, value_bytes) -> None:
    assert encode_key(key) == key_bytes
    assert encode_value(value) == value_bytes
    decoded_key = decode_key(key_bytes)
    assert decoded_key == key
    assert decode_value(decoded_key, value_bytes) == value


def test_record_types() -> None:
    assert CONSUMER_GROUP_RECORD_TYPES == {3, 4, 5, 6, 7, 8, 16}


def test_tombstone_is_a_null_value() -> None:
    assert decode_value(ConsumerGroupMetadataKey("g"), None) is None


def test_keys_of_different_types_never_compare_equal() -> None:
    assert ConsumerGroupMetadataKey("g") != ConsumerGroupTargetAssignmentMetadataKey("g")
    assert len({ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupCurrentMemberAssignmentKey("g", "m")}) == 2


def test_other_record_types_are_not_ours() -> None:
    assert decode_key(H("0001" "0001" "67" "0001" "74" "00000000")) is None  # OffsetCommit
    assert decode_key(H("0002" "0001" "67")) is None  # GroupMetadata
    assert decode_key(H("0009" "0001" "67")) is None  # share group


def test_unknown_tags_are_skipped() -> None:
    # Kafka 4.1 writes MetadataHash as tag 0 (int64) of record 3.
    value = H("0000" "00000005" "01" "00" "08" "0000000000000abc")
    assert decode_value(ConsumerGroupMetadataKey("g"), value) == ConsumerGroupMetadataValue(5)
    # KIP-1251 AssignmentEpochs as tag 0 of a TopicPartitions element of record 8.
    value = H("0000" "00000004" "00000003" "00" "02" + TID_HEX + "02" "00000001" "01" "00" "06" "0200000004" "00"
              "01" "00")
    decoded = decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), value)
    assert decoded == ConsumerGroupCurrentMemberAssignmentValue(4, 3, 0, (TopicPartitions(TID, (1,)),), ())


@pytest.mark.parametrize("key,key_bytes,value,value_bytes", VECTORS)
def test_truncated_values_raise(key, key_bytes, value, value_bytes) -> None:
    for cut in range(len(value_bytes)):
        with pytest.raises(RecordDecodeError):
            decode_value(key, value_bytes[:cut])
    with pytest.raises(RecordDecodeError):
        decode_value(key, value_bytes + b"\x00")


def test_bad_keys_and_versions_raise() -> None:
    for bad in (H("00"), H("0003"), H("0003" "0002" "67"), H("0003" "ffff"), H("0003" "0001" "6700")):
        with pytest.raises(RecordDecodeError):
            decode_key(bad)
    with pytest.raises(RecordDecodeError):
        decode_value(ConsumerGroupMetadataKey("g"), H("0001" "00000005" "00"))
    with pytest.raises(RecordDecodeError):  # non-nullable ClientId as null
        decode_value(ConsumerGroupMemberMetadataKey("g", "m"),
                     H("0000" "00" "00" "00" "0268" "01" "00" "00000000" "00" "00"))
    with pytest.raises(TypeError):
        encode_key(("g",))  # type: ignore[arg-type]


_names = st.text(max_size=8)
_ids = st.uuids()
_tps = st.lists(st.builds(TopicPartitions, _ids, st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)),
                max_size=3).map(tuple)
_values = st.one_of(
    st.builds(ConsumerGroupMetadataValue, st.integers(-(2**31), 2**31 - 1)),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, st.integers(-(2**31), 2**31 - 1)),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, _tps),
    st.builds(ConsumerGroupCurrentMemberAssignmentValue, st.integers(-2, 2**31 - 1), st.integers(-2, 2**31 - 1),
              st.integers(0, 2), _tps, _tps),
    st.builds(ConsumerGroupRegularExpressionValue, st.lists(_names, max_size=3).map(tuple),
              st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
    st.builds(ConsumerGroupMemberMetadataValue, st.none() | _names, st.none() | _names, _names, _names,
              st.lists(_names, max_size=3).map(tuple), st.none() | _names, st.integers(-1, 2**31 - 1),
              st.none() | _names,
              st.none() | st.builds(ClassicMemberMetadata, st.integers(0, 2**31 - 1), st.lists(
                  st.builds(ClassicProtocol, _names, st.binary(max_size=200)), max_size=2).map(tuple))),
    st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
        TopicMetadata, _ids, _names, st.integers(0, 1000),
        st.lists(st.builds(PartitionRacks, st.integers(0, 9), st.lists(_names, max_size=2).map(tuple)),
                 max_size=2).map(tuple)), max_size=3).map(tuple)),
)
_KEY_FOR = {
    ConsumerGroupMetadataValue: ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataValue: ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataValue: ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMetadataValue: ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberValue: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentValue: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ConsumerGroupRegularExpressionValue: ConsumerGroupRegularExpressionKey("g", "r"),
}


@given(_values)
def test_values_round_trip(value) -> None:
    key = _KEY_FOR[type(value)]
    assert decode_value(key, encode_value(value)) == value


@given(_names, _names)
def test_keys_round_trip(group_id: str, member_id: str) -> None:
    for key in (ConsumerGroupMetadataKey(group_id), ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
                ConsumerGroupRegularExpressionKey(group_id, member_id)):
        assert decode_key(encode_key(key)) == key
