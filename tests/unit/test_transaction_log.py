"""`__transaction_state` codecs against hand-derived byte vectors (reference A9)."""

from __future__ import annotations

import pytest

from offsetd.records.offsets import partition_for as group_partition_for
from offsetd.records.transaction_log import (
    RecordDecodeError,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)

H = bytes.fromhex

# Key v0 of "tx": version 0, length 2, "tx".
KEY_TX = H("0000" "0002" "7478")

ONGOING = TransactionLogValue(
    producer_id=1000, producer_epoch=2, transaction_timeout_ms=60000, transaction_status=1,
    partitions=(("a", (0, 3)), ("bc", (7,))), last_update_timestamp_ms=7, start_timestamp_ms=5)

# Value v0: version | pid 1000 | epoch 2 | timeout 60000 | status 1 | 2 topics:
# "a" [0, 3], "bc" [7] | last update 7 | start 5.
ONGOING_V0 = H(
    "0000" "00000000000003e8" "0002" "0000ea60" "01"
    "00000002" "0001" "61" "00000002" "00000000" "00000003"
    "0002" "6263" "00000001" "00000007"
    "0000000000000007" "0000000000000005")

EMPTY = TransactionLogValue(1000, 0, 60000, 0, None, 9, -1)
# Empty: partitions null (int32 -1), start -1.
EMPTY_V0 = H("0000" "00000000000003e8" "0000" "0000ea60" "00" "ffffffff"
             "0000000000000009" "ffffffffffffffff")

# Value v1 of ONGOING: compact array count 3 (= 2 + 1), compact strings, compact partition
# arrays, an empty tag section after each partition entry and one (count 0) at the end.
ONGOING_V1 = H(
    "0001" "00000000000003e8" "0002" "0000ea60" "01"
    "03" "02" "61" "03" "00000000" "00000003" "00"
    "03" "6263" "02" "00000007" "00"
    "0000000000000007" "0000000000000005" "00")

# Value v1, Empty (null compact array = 0) with the tags: 0 PreviousProducerId 999,
# 2 ClientTransactionVersion 2.
TAGGED = TransactionLogValue(1000, 0, 60000, 0, None, 9, -1, previous_producer_id=999,
                             client_transaction_version=2)
TAGGED_V1 = H(
    "0001" "00000000000003e8" "0000" "0000ea60" "00" "00"
    "0000000000000009" "ffffffffffffffff"
    "02" "00" "08" "00000000000003e7" "02" "02" "0002")


def test_key_v0_bytes_and_round_trip() -> None:
    assert encode_key("tx") == KEY_TX
    assert decode_key(KEY_TX) == "tx"
    assert decode_key(encode_key("é")) == "é"


def test_unknown_key_version_is_skipped() -> None:
    assert decode_key(H("0001" "0002" "7478")) is None


@pytest.mark.parametrize("raw", [H("00"), H("0000" "0005" "7478"), H("0000" "0001" "747878")])
def test_bad_key_raises(raw: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_key(raw)


@pytest.mark.parametrize(("value", "version", "raw"), [
    (ONGOING, 0, ONGOING_V0),
    (EMPTY, 0, EMPTY_V0),
    (ONGOING, 1, ONGOING_V1),
    (TAGGED, 1, TAGGED_V1),
])
def test_value_bytes_and_round_trip(value: TransactionLogValue, version: int, raw: bytes) -> None:
    assert encode_value(value, version) == raw
    assert decode_value(raw) == value


def test_value_v0_is_the_default_and_sorts_partitions() -> None:
    shuffled = TransactionLogValue(1000, 2, 60000, 1, (("bc", (7,)), ("a", (3, 0))), 7, 5)
    assert encode_value(shuffled) == ONGOING_V0


def test_v0_drops_the_tagged_fields() -> None:
    assert decode_value(encode_value(TAGGED, 0)) == TransactionLogValue(1000, 0, 60000, 0, None, 9, -1)


def test_v1_unknown_tag_is_skipped() -> None:
    raw = ONGOING_V1[:-1] + H("01" "07" "02" "abcd")
    assert decode_value(raw) == ONGOING


def test_v1_next_producer_id_tag() -> None:
    raw = H("0001" "00000000000003e8" "0000" "0000ea60" "00" "00"
            "0000000000000009" "ffffffffffffffff" "01" "01" "08" "0000000000000457")
    assert decode_value(raw) == TransactionLogValue(1000, 0, 60000, 0, None, 9, -1, next_producer_id=0x457)


@pytest.mark.parametrize("raw", [
    H("0002") + ONGOING_V0[2:],  # unknown value version
    ONGOING_V0[:-3],  # truncated
    ONGOING_V0 + H("00"),  # trailing byte
    ONGOING_V0[:17] + H("fffffffe") + ONGOING_V0[21:],  # partition count -2
])
def test_bad_value_raises(raw: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_value(raw)


def test_encode_rejects_unknown_version() -> None:
    with pytest.raises(ValueError):
        encode_value(ONGOING, 2)


def test_partition_for_is_the_group_hash() -> None:
    # Java "hello".hashCode() == 99162322; 99162322 % 50 == 22.
    assert partition_for("hello") == 22
    assert partition_for("hello", 7) == 99162322 % 7
    for txn_id in ("", "tx-1", "ünïcode", "a" * 40):
        assert partition_for(txn_id) == group_partition_for(txn_id)
