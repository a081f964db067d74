"""Wire codec: encoders compiled from kio schemas must be byte-identical to kio's own writer;
the tolerant reader must skip unknown tagged fields (KIP-482) that kio's reader rejects."""

import io
import struct
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer as kio_writer

from offsetd.protocol.api_versions import SUPPORTED, api_keys_body
from offsetd.protocol.codec import decode_body, request_class, response_class
from offsetd.protocol.encoder import entity_writer
from offsetd.protocol.tolerant_reader import tolerant_reader

METADATA_BODY = {
    "brokers": [{"node_id": 1, "host": "localhost", "port": 9092}], "cluster_id": "abc", "controller_id": 1,
    "topics": [{"error_code": 0, "name": "t", "topic_id": uuid.UUID(int=5), "partitions": [
        {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}],
}
PRODUCE_BODY = {"responses": [{"name": "t", "partition_responses": [
    {"index": 0, "error_code": 2, "base_offset": -1, "error_message": "bad crc"}]}]}
FETCH_BODY = {"responses": [{"topic": "t", "topic_id": uuid.UUID(int=9), "partitions": [
    {"partition_index": 3, "error_code": 0, "high_watermark": 10, "records": b"\x01\x02\x03"}]}]}


@pytest.mark.parametrize("api_key,body", [(3, METADATA_BODY), (0, PRODUCE_BODY), (1, FETCH_BODY)])
def test_encoder_matches_kio_writer_for_every_served_version(api_key, body):
    lo, hi = SUPPORTED[api_key]
    for version in range(lo, hi + 1):
        cls = response_class(api_key, version)  # legacy_schemas for versions kio lacks
        mine = bytearray()
        entity_writer(cls)(mine, body)
        decoded, size = entity_reader(cls)(bytes(mine), 0)
        assert size == len(mine)
        reference = io.BytesIO()
        kio_writer(cls)(reference, decoded)
        assert reference.getvalue() == bytes(mine), f"api {api_key} v{version}"


def test_missing_fields_take_schema_defaults():
    cls = load_response_schema(3, 12)
    buf = bytearray()
    entity_writer(cls)(buf, {"brokers": [], "topics": []})
    decoded, _ = entity_reader(cls)(bytes(buf), 0)
    assert decoded.controller_id == -1 and decoded.cluster_id is None and decoded.topics == ()


def test_unknown_tagged_field_is_skipped_not_fatal():
    cls = load_request_schema(18, 3)  # ApiVersions v3: flexible, two compact strings
    body = b"\x05conf\x041.0"
    known = decode_body(cls, memoryview(body + b"\x00"), 0)
    assert known.client_software_name == "conf"
    extra_tag = body + b"\x01" + b"\x63" + b"\x02zz"  # one tagged field: tag 99, 2 bytes
    with pytest.raises(KeyError):
        entity_reader(cls)(extra_tag, 0)
    tolerant = decode_body(cls, memoryview(extra_tag), 0)
    assert (tolerant.client_software_name, tolerant.client_software_version) == ("conf", "1.0")


def test_tolerant_reader_agrees_with_kio_on_a_real_request():
    cls = load_request_schema(1, 12)
    req_cls = cls
    mod = __import__(req_cls.__module__, fromlist=["x"])
    request = req_cls(max_wait=__import__("datetime").timedelta(milliseconds=500), min_bytes=1, topics=(
        mod.FetchTopic(topic="t", partitions=(mod.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=100),)),
    ), forgotten_topics_data=())
    buf = io.BytesIO()
    kio_writer(req_cls)(buf, request)
    data = buf.getvalue()
    ours, size = tolerant_reader(req_cls)(memoryview(data), 0)
    assert size == len(data) and ours == entity_reader(req_cls)(data, 0)[0]


def test_api_versions_table_only_advertises_decodable_versions():
    body = api_keys_body()
    assert {entry["api_key"] for entry in body} == set(SUPPORTED)
    for entry in body:
        for version in range(entry["min_version"], entry["max_version"] + 1):
            request_class(entry["api_key"], version)  # raises if neither kio nor legacy_schemas has it
            response_class(entry["api_key"], version)
    # Kafka 3.9's floors (Produce/Fetch: formats v0/v1); WriteTxnMarkers v0 is gone (reference A7),
    # and so are the ACL APIs' v0 (KIP-896, security.md §3); the share-group APIs start at v1
    # (share-groups.md §0: v0 was Kafka 4.0's early access)
    assert {key: lo for key, (lo, hi) in SUPPORTED.items() if lo != 0} == {27: 1, 29: 1, 30: 1, 31: 1, 76: 1, 77: 1,
                                                                          78: 1, 79: 1}
