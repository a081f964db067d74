"""`__share_group_state` records (records/share_state_records.py) against hex written out by hand
from Kafka 4.2's ShareSnapshot/ShareUpdate schemas (reference share-groups.md §5)."""

from __future__ import annotations

import uuid

import pytest

from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.share_state_records import (
    SHARE_SNAPSHOT, SHARE_UPDATE, ShareSnapshotValue, ShareStateKey, ShareUpdateValue, StateBatch, decode_key,
    decode_value, encode_key, encode_value,
)

TOPIC = uuid.UUID(int=1)
SNAPSHOT_KEY = ShareStateKey(SHARE_SNAPSHOT, "g", TOPIC, 3)
UPDATE_KEY = ShareStateKey(SHARE_UPDATE, "g", TOPIC, 3)

VECTORS = [
    (SNAPSHOT_KEY, "0000" "0001" "67" "00000000000000000000000000000001" "00000003"),
    (UPDATE_KEY, "0001" "0001" "67" "00000000000000000000000000000001" "00000003"),
]

SNAPSHOT = ShareSnapshotValue(0, 1, 2, 10, 1_700_000_000_000, 1_700_000_000_000, (StateBatch(10, 12, 2, 1),), 3)
SNAPSHOT_HEX = ("0000"                  # value version 0
                "00000000" "00000001" "00000002"          # snapshot, state, leader epochs
                "000000000000000a"                         # start offset 10
                "0000018bcfe56800" "0000018bcfe56800"      # create, write timestamps
                "02"                                       # one state batch (compact count 1 + 1)
                "000000000000000a" "000000000000000c" "02" "0001" "00"  # 10..12 acknowledged, count 1
                "01" "00" "04" "00000003")                 # tag 0: DeliveryCompleteCount 3
UPDATE = ShareUpdateValue(0, 2, -1, ())
UPDATE_HEX = "0000" "00000000" "00000002" "ffffffffffffffff" "01" "00"  # no batches, no tagged field


@pytest.mark.parametrize(("key", "hex_"), VECTORS)
def test_keys_byte_for_byte(key: ShareStateKey, hex_: str) -> None:
    assert encode_key(key).hex() == hex_
    assert decode_key(bytes.fromhex(hex_)) == key


@pytest.mark.parametrize(("key", "value", "hex_"), [(SNAPSHOT_KEY, SNAPSHOT, SNAPSHOT_HEX),
                                                    (UPDATE_KEY, UPDATE, UPDATE_HEX)])
def test_values_byte_for_byte(key: ShareStateKey, value: ShareSnapshotValue | ShareUpdateValue, hex_: str) -> None:
    assert encode_value(value).hex() == hex_
    assert decode_value(key, bytes.fromhex(hex_)) == value


def test_a_tombstone_decodes_to_none() -> None:
    assert decode_value(SNAPSHOT_KEY, None) is None


@pytest.mark.parametrize("hex_", [
    "0002" "0001" "67" "00000000000000000000000000000001" "00000003",    # record type 2 is not share state
    "0000" "0001" "67" "000000000000000000000000000000",                  # cut in the topic id
    "0000" "0001" "67" "00000000000000000000000000000001" "0000000300",  # trailing byte
])
def test_bad_keys_are_decode_errors(hex_: str) -> None:
    with pytest.raises(RecordDecodeError):
        decode_key(bytes.fromhex(hex_))


@pytest.mark.parametrize("hex_", [UPDATE_HEX[:-2], "0001" + UPDATE_HEX[4:], UPDATE_HEX + "00",
                                  UPDATE_HEX[:-2] + "01" "00" "02" "0003"])  # a 2-byte count for an int32
def test_bad_values_are_decode_errors(hex_: str) -> None:
    with pytest.raises(RecordDecodeError):
        decode_value(UPDATE_KEY, bytes.fromhex(hex_))
