"""The versions kio lacks (protocol/legacy_schemas.py), checked against hex vectors written by hand
from the field layouts of Kafka 3.9's message JSON schemas; plus OffsetCommit v1's commit
timestamp and ListOffsets v0's offsets array."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from offsetd.broker.list_offsets_v0 import offsets_before
from offsetd.protocol.api_versions import SUPPORTED
from offsetd.protocol.codec import decode_body, request_class, response_class
from offsetd.protocol.encoder import encode_response
from offsetd.protocol.primitives import DecodeError
from offsetd.records.offset_commit_value import OffsetCommitValue

sys.path.insert(0, str(Path(__file__).parent))
from coordinator_helpers import Harness  # noqa: E402

G, T = "000167", "000174"  # the strings "g" and "t" (int16 length, bytes)


def decode(api_key: int, version: int, hex_body: str):
    return decode_body(request_class(api_key, version), memoryview(bytes.fromhex(hex_body)), 0)


def body_hex(api_key: int, version: int, body: dict) -> str:
    """The encoded response body (after size and correlation id; none of these has a header tag)."""
    return encode_response(api_key, version, 7, body)[8:].hex()


# ----------------------------------------------------------------------------------- requests


def test_offset_commit_v0_request():
    # group_id, [topics: name, [partitions: partition_index int32, committed_offset int64, metadata nullable]]
    req = decode(8, 0, G + "00000001" + T + "00000001" + "00000000" + "0000000000000005" + "00016d")
    assert req.group_id == "g"
    (topic,) = req.topics
    (p,) = topic.partitions
    assert (topic.name, p.partition_index, p.committed_offset, p.committed_metadata) == ("t", 0, 5, "m")
    assert not hasattr(req, "generation_id_or_member_epoch") and not hasattr(p, "commit_timestamp")


def test_offset_commit_v1_request_has_generation_member_and_commit_timestamp():
    # group_id, generation int32, member_id, [topics: name, [partition, offset, commit_timestamp int64, metadata]]
    req = decode(8, 1, G + "00000003" + "00016d" + "00000001" + T + "00000001" + "00000002"
                 + "000000000000000a" + "0000018bcfe56800" + "ffff")
    assert (req.group_id, req.generation_id_or_member_epoch, req.member_id) == ("g", 3, "m")
    (p,) = req.topics[0].partitions
    assert (p.partition_index, p.committed_offset, p.commit_timestamp, p.committed_metadata) == (
        2, 10, 1_700_000_000_000, None)


def test_offset_fetch_v0_request():
    req = decode(9, 0, G + "00000001" + T + "00000002" + "00000000" + "00000001")
    assert req.group_id == "g" and [(t.name, tuple(t.partition_indexes)) for t in req.topics] == [("t", (0, 1))]


def test_list_offsets_v0_request_has_max_num_offsets():
    # replica_id, [topics: name, [partitions: partition_index, timestamp int64, max_num_offsets int32]]
    req = decode(2, 0, "ffffffff" + "00000001" + T + "00000001" + "00000000" + "ffffffffffffffff" + "00000003")
    (p,) = req.topics[0].partitions
    assert (req.replica_id, p.partition_index, p.timestamp, p.max_num_offsets) == (-1, 0, -1, 3)


@pytest.mark.parametrize("version,tail,validate_only", [(0, "", False), (1, "01", True)])
def test_create_topics_v0_v1_requests(version, tail, validate_only):
    # [topics: name, num_partitions int32, replication_factor int16, [assignments], [configs: name, value]],
    # timeout_ms int32 (v1: validate_only bool)
    req = decode(19, version, "00000001" + T + "00000003" + "0001" + "00000000" + "00000001" + "000161" + "ffff"
                 + "00007530" + tail)
    (topic,) = req.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor, topic.assignments) == ("t", 3, 1, ())
    assert [(c.name, c.value) for c in topic.configs] == [("a", None)]
    assert getattr(req, "validate_only", False) is validate_only


def test_delete_topics_v0_request():
    req = decode(20, 0, "00000002" + "000161" + "000162" + "00001388")
    assert tuple(req.topic_names) == ("a", "b")


def test_describe_configs_v0_request_null_keys():
    req = decode(32, 0, "00000001" + "02" + T + "ffffffff")
    (res,) = req.resources
    assert (res.resource_type, res.resource_name, res.configuration_keys) == (2, "t", None)
    assert not hasattr(req, "include_synonyms")


@pytest.mark.parametrize("api_key,version,hex_body", [
    (8, 0, G + "00000001" + T + "00000001" + "00000000" + "00000000000000"),  # offset cut short
    (8, 1, G + "00000003"),  # member id and topics missing
    (2, 0, "ffffffff" + "7fffffff"),  # array count far beyond the frame
    (20, 0, "00000001" + "0005" + "61"),  # string longer than the frame
])
def test_truncated_or_oversized_legacy_requests_are_decode_errors(api_key, version, hex_body):
    with pytest.raises(DecodeError):
        decode(api_key, version, hex_body)


# ---------------------------------------------------------------------------------- responses


def test_offset_commit_v0_v1_responses_have_no_throttle_time():
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}],
            "throttle_time": 0}
    for version in (0, 1):
        assert body_hex(8, version, body) == "00000001" + T + "00000001" + "00000000" + "0000"
    assert body_hex(8, 3, body).startswith("00000000")  # v3 starts with the throttle time


def test_list_offsets_v0_response_carries_the_offsets_array():
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [7, 0]}]}]}
    assert body_hex(2, 0, body) == ("00000001" + T + "00000001" + "00000000" + "0000" + "00000002"
                                    + "0000000000000007" + "0000000000000000")


def test_offset_fetch_v0_response():
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "committed_offset": 9, "metadata": "", "error_code": 0}]}]}
    assert body_hex(9, 0, body) == "00000001" + T + "00000001" + "00000001" + "0000000000000009" + "0000" + "0000"


def test_create_and_delete_topics_old_responses():
    created = {"topics": [{"name": "t", "error_code": 0, "error_message": None}], "throttle_time": 0}
    assert body_hex(19, 0, created) == "00000001" + T + "0000"
    assert body_hex(19, 1, created) == "00000001" + T + "0000" + "ffff"
    deleted = {"responses": [{"name": "a", "error_code": 41}], "throttle_time": 0}
    assert body_hex(20, 0, deleted) == "00000001" + "000161" + "0029"


def test_describe_configs_v0_response_has_is_default_not_a_source():
    body = {"throttle_time": 0, "results": [{
        "error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t",
        "configs": [{"name": "a", "value": "1", "read_only": False, "config_source": 5, "is_default": True,
                     "is_sensitive": False, "synonyms": ()}]}]}
    assert body_hex(32, 0, body) == ("00000000" + "00000001" + "0000" + "ffff" + "02" + T + "00000001"
                                     + "000161" + "000131" + "00" + "01" + "00")


def test_every_advertised_version_has_a_request_and_response_class():
    for key, (lo, hi) in SUPPORTED.items():
        for version in range(lo, hi + 1):
            assert request_class(key, version) is not None and response_class(key, version) is not None


# ------------------------------------------------------------------- OffsetCommit v1 timestamp


def _stored(h: Harness) -> dict[int, OffsetCommitValue]:
    return {key.partition: value for key, value in h.log if isinstance(value, OffsetCommitValue)}


def test_offset_commit_v1_commit_timestamp_is_stored_and_minus_one_means_now():
    h = Harness.new()
    errors, _, _ = h.commit("g", [("t", 0, 5, -1, "", 1_600_000_000_000), ("t", 1, 6, -1, "", -1)], version=1)
    assert errors == {("t", 0): 0, ("t", 1): 0}
    stored = _stored(h)
    assert stored[0].commit_timestamp == 1_600_000_000_000 and stored[1].commit_timestamp == h.now
    assert stored[0].expire_timestamp == -1


# ------------------------------------------------------------------------ ListOffsets v0 array


def _log(bases: list[tuple[int, int, int]], log_start: int, log_end: int, active_size: int):
    """A stand-in partition log: segments (base offset, last modified ms, size)."""
    segments = [SimpleNamespace(base_offset=base, size=size, last_modified_ms=lambda mtime=mtime: mtime)
                for base, mtime, size in bases]
    segments[-1].size = active_size
    return SimpleNamespace(segments=segments, log_start_offset=log_start, log_end_offset=log_end)


def test_list_offsets_v0_offsets_array():
    plog = _log([(0, 1_000_000, 10), (100, 2_000_000, 10), (200, 3_000_000, 0)],
                log_start=40, log_end=250, active_size=10)
    now = 9_000_000
    assert offsets_before(plog, -1, 1, now) == [250]  # latest: the log end
    assert offsets_before(plog, -1, 10, now) == [250, 200, 100, 40]  # then segment starts, newest first
    assert offsets_before(plog, -2, 10, now) == [40]  # earliest: the log start only
    assert offsets_before(plog, 2_500_000, 10, now) == [100, 40]  # segments last modified by then
    assert offsets_before(plog, 500_000, 10, now) == []  # before every segment
    assert offsets_before(plog, -1, 0, now) == []


def test_list_offsets_v0_empty_active_segment_has_no_log_end_row():
    plog = _log([(0, 1_000_000, 0)], log_start=0, log_end=0, active_size=0)
    assert offsets_before(plog, -1, 5, 9_000_000) == [0]
