"""The offsets-log dump (`offsetd offsets-log dump --files ... --output json`) shows TxnOffsetCommit
records with their producer id and epoch, and markers with the transaction coordinator's epoch."""

from __future__ import annotations

from pathlib import Path

from offsetd.admin.offsets_log import read_files
from offsetd.admin.offsets_log_cli import format_json, format_text
from offsetd.records.batch import TRANSACTIONAL_MASK, build_batch, patch_base_offset
from offsetd.records.control import build_marker_batch
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import OffsetCommitKey, encode_key, encode_value


def _at(batch: bytes, offset: int) -> bytes:
    data = bytearray(batch)
    patch_base_offset(data, 0, offset)
    return bytes(data)


def test_dump_shows_transactional_records_and_markers_with_their_epochs(tmp_path: Path) -> None:
    commit = (encode_key(OffsetCommitKey("g", "t", 0)), encode_value(OffsetCommitValue(offset=9, commit_timestamp=5)))
    directory = tmp_path / "__consumer_offsets-3"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(
        _at(build_batch([(*commit, 5, [])]), 0)
        + _at(build_batch([(*commit, 6, [])], producer_id=77, producer_epoch=4, base_sequence=-1,
                          attributes=TRANSACTIONAL_MASK), 1)
        + _at(build_marker_batch(77, 4, False, 12, 7), 2))
    entries = list(read_files([directory]))
    docs = [format_json(e) for e in entries]
    assert "producer_id" not in docs[0] and docs[0]["offset"] == 9
    assert (docs[1]["record_type"], docs[1]["producer_id"], docs[1]["producer_epoch"], docs[1]["offset"]) == (
        "offset_commit", 77, 4, 9)
    assert {k: docs[2][k] for k in ("log_offset", "record_type", "marker", "producer_id", "producer_epoch",
                                    "coordinator_epoch")} == {
        "log_offset": 2, "record_type": "txn_marker", "marker": "ABORT", "producer_id": 77, "producer_epoch": 4,
        "coordinator_epoch": 12}
    assert format_text(entries[2]) == "TransactionMarker(producerId=77)::ABORT"
