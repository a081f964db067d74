"""Share-group records 10-15 of `__consumer_offsets`: byte-exact against hex written by hand from
Kafka 4.2's schemas, round trips, tombstones and unknown tags (share-groups.md §5)."""

from __future__ import annotations

import json
import uuid

import pytest

from offsetd.admin.offsets_log import decode_entry
from offsetd.admin.offsets_log_cli import format_json, format_text
from offsetd.records import offsets
from offsetd.records.consumer_group_records import TopicPartitions
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.share_group_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    TopicInfo,
    TopicPartitionsInfo,
    decode_key,
    decode_value,
)

TID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
TID_HEX = "000102030405060708090a0b0c0d0e0f"

# (key, key hex, value, value hex): the hex spelled out field by field from the JSON schemas.
VECTORS = [
    (ShareGroupMemberMetadataKey("g", "m"), "000a" "0001" "67" "0001" "6d",
     ShareGroupMemberMetadataValue(None, "c", "/h", ("t",)),
     "0000" "00" "0263" "032f68" "02" "0274" "00"),
    (ShareGroupMetadataKey("g"), "000b" "0001" "67",
     ShareGroupMetadataValue(3, 42), "0000" "00000003" "000000000000002a" "00"),
    (ShareGroupTargetAssignmentMetadataKey("g"), "000c" "0001" "67",
     ShareGroupTargetAssignmentMetadataValue(3), "0000" "00000003" "00"),
    (ShareGroupTargetAssignmentMemberKey("g", "m"), "000d" "0001" "67" "0001" "6d",
     ShareGroupTargetAssignmentMemberValue((TopicPartitions(TID, (0, 1)),)),
     "0000" "02" + TID_HEX + "03" "00000000" "00000001" "00" "00"),
    (ShareGroupCurrentMemberAssignmentKey("g", "m"), "000e" "0001" "67" "0001" "6d",
     ShareGroupCurrentMemberAssignmentValue(3, 2, 0, (TopicPartitions(TID, (1,)),)),
     "0000" "00000003" "00000002" "00" "02" + TID_HEX + "02" "00000001" "00" "00"),
    (ShareGroupStatePartitionMetadataKey("g"), "000f" "0001" "67",
     ShareGroupStatePartitionMetadataValue((), (TopicPartitionsInfo(TID, "t", (0,)),), (TopicInfo(TID, "t"),)),
     "0000" "01" "02" + TID_HEX + "0274" "02" "00000000" "00" "02" + TID_HEX + "0274" "00" "00"),
]


@pytest.mark.parametrize("key,key_hex,value,value_hex", VECTORS, ids=lambda v: type(v).__name__)
def test_records_are_byte_exact(key, key_hex, value, value_hex) -> None:
    assert offsets.encode_key(key).hex() == key_hex
    assert offsets.encode_value(value).hex() == value_hex
    assert decode_key(bytes.fromhex(key_hex)) == key
    assert decode_value(key, bytes.fromhex(value_hex)) == value
    assert decode_value(key, None) is None  # a tombstone


def test_unknown_tags_are_skipped() -> None:
    # Kafka 4.3 adds AssignmentTimestamp as tag 0 of record 12.
    value = bytes.fromhex("0000" "00000003" "01" "00" "08" "0000000000000005")
    assert decode_value(ShareGroupTargetAssignmentMetadataKey("g"), value) == ShareGroupTargetAssignmentMetadataValue(3)


def test_other_types_are_not_share_records_and_garbage_is_refused() -> None:
    assert decode_key(bytes.fromhex("0003" "0001" "67")) is None
    with pytest.raises(RecordDecodeError):
        decode_key(bytes.fromhex("000b" "0005" "67"))
    with pytest.raises(RecordDecodeError):
        decode_value(ShareGroupMetadataKey("g"), bytes.fromhex("0001" "00000003"))
    with pytest.raises(RecordDecodeError):
        decode_value(ShareGroupMetadataKey("g"), bytes.fromhex("0000" "00000003"))


@pytest.mark.parametrize("key,key_hex,value,value_hex", VECTORS, ids=lambda v: type(v).__name__)
def test_offsets_log_dump_decodes_them(key, key_hex, value, value_hex) -> None:
    entry = decode_entry(0, 7, 0, bytes.fromhex(key_hex), bytes.fromhex(value_hex))
    assert entry.key == key and entry.value == value
    assert entry.record_type.startswith("share_group_")
    assert format_text(entry).startswith(type(key).__name__.removesuffix("Key") + "[g")
    assert '"group_id": "g"' in json.dumps(format_json(entry))
    tombstone = decode_entry(0, 8, 0, bytes.fromhex(key_hex), None)
    assert tombstone.value is None and format_text(tombstone).endswith("::NULL")
