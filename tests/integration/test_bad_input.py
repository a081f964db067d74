"""Bad input gets a precise error or a closed connection with a log line; the broker keeps
serving everyone else and loses nothing it acknowledged."""

from __future__ import annotations

import datetime
import random
import socket
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema

from clients import consume_all, create_topic, produce
from raw_client import RawClient, decode_response

API_VERSIONS, PRODUCE, FETCH, METADATA = 18, 0, 1, 3


def _batch(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce_request(topic: str, records: bytes, version: int = 9):
    cls = load_request_schema(PRODUCE, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    return cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=records),)),))


def _metadata_request(names: list[str], version: int = 12, auto_create: bool = True):
    cls = load_request_schema(METADATA, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    extra = {"topic_id": None} if version >= 10 else {}
    flags = {"allow_auto_topic_creation": auto_create} if version >= 4 else {}
    if version >= 8:
        flags["include_topic_authorized_operations"] = False
    return cls(topics=tuple(mod.MetadataRequestTopic(name=n, **extra) for n in names), **flags)


def _still_serves(broker) -> None:
    produce(broker.bootstrap, "alive", [{"value": b"ok"}])


def test_garbage_bytes_close_only_that_connection(broker):
    create_topic(broker.bootstrap, "alive")
    with RawClient(broker.bootstrap) as bystander:
        with RawClient(broker.bootstrap) as bad:
            bad.send_raw(b"\xff\xff\xff\xf0garbage that is not kafka")
            assert bad.is_closed_by_peer()
        response = bystander.call(API_VERSIONS, 3, load_request_schema(API_VERSIONS, 3)(
            client_software_name="t", client_software_version="1"))
        assert response.error_code.value == 0
    assert "negative frame size" in broker.log()
    _still_serves(broker)


def test_frame_over_socket_request_max_bytes(broker_factory):
    broker = broker_factory({"socket.request.max.bytes": "1000"})
    with RawClient(broker.bootstrap) as client:
        client.send_raw(struct.pack(">i", 5000) + b"\0" * 100)
        assert client.is_closed_by_peer()
    assert "exceeds socket.request.max.bytes=1000" in broker.log()


def test_unknown_api_key_and_version_close_with_log(broker):
    with RawClient(broker.bootstrap) as client:
        client.send_frame(struct.pack(">hhih", 999, 0, 1, -1))
        assert client.is_closed_by_peer()
    with RawClient(broker.bootstrap) as client:
        client.send_frame(struct.pack(">hhih", PRODUCE, 12, 1, -1) + b"\0" * 20)  # Produce v12: not served
        assert client.is_closed_by_peer()
    log = broker.log()
    assert "api_key=999" in log and "api_key=0 (PRODUCE) version=12" in log


def test_api_versions_unsupported_version_answers_v0_with_ranges(broker):
    with RawClient(broker.bootstrap) as client:
        client.correlation_id = 41
        client.send_frame(struct.pack(">hhih", API_VERSIONS, 99, 42, 1) + b"x" + b"\0\0\0")
        frame = client.read_frame()
        response = decode_response(API_VERSIONS, 0, frame, 42)
    assert response.error_code.value == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[API_VERSIONS] == (0, 4) and ranges[PRODUCE] == (0, 11) and ranges[FETCH] == (0, 16)


def test_truncated_request_body_closes_connection(broker):
    with RawClient(broker.bootstrap) as client:
        payload = client.encode_request(METADATA, 12, _metadata_request(["t"]))
        client.send_frame(payload[:-3])
        assert client.is_closed_by_peer()
    assert "malformed METADATA v12 request" in broker.log()
    _still_serves(broker)


def test_crc_mismatch_is_corrupt_message_and_nothing_appended(broker):
    create_topic(broker.bootstrap, "crc")
    good = _batch([b"a", b"b"])
    bad = bytearray(good)
    bad[-1] ^= 0x01
    with RawClient(broker.bootstrap) as client:
        ok = client.call(PRODUCE, 9, _produce_request("crc", good))
        assert ok.responses[0].partition_responses[0].error_code.value == 0
        response = client.call(PRODUCE, 9, _produce_request("crc", bytes(bad)))
        part = response.responses[0].partition_responses[0]
        assert part.error_code.value == 2 and "CRC" in (part.error_message or "")
        after = client.call(PRODUCE, 9, _produce_request("crc", good))
        assert after.responses[0].partition_responses[0].base_offset == 2
    assert [m.value() for m in consume_all(broker.bootstrap, "crc", [0], 4)] == [b"a", b"b", b"a", b"b"]


def test_oversized_batch_is_message_too_large(broker_factory):
    broker = broker_factory({"message.max.bytes": "2000"})
    create_topic(broker.bootstrap, "big")
    with RawClient(broker.bootstrap) as client:
        response = client.call(PRODUCE, 9, _produce_request("big", _batch([b"x" * 5000])))
    assert response.responses[0].partition_responses[0].error_code.value == 10


def test_unknown_topic_without_auto_create_and_invalid_names(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    with RawClient(broker.bootstrap) as client:
        produce_resp = client.call(PRODUCE, 9, _produce_request("nope", _batch([b"a"])))
        assert produce_resp.responses[0].partition_responses[0].error_code.value == 3
        meta = client.call(METADATA, 12, _metadata_request(["nope"]))
        assert meta.topics[0].error_code.value == 3
    auto = broker_factory({}, name="auto")
    with RawClient(auto.bootstrap) as client:
        meta = client.call(METADATA, 12, _metadata_request(["bad/name", "x" * 250, "good"]))
        codes = {t.name: t.error_code.value for t in meta.topics}
        assert codes == {"bad/name": 17, "x" * 250: 17, "good": 0}


def test_unknown_tagged_field_in_request_is_skipped(broker):
    with RawClient(broker.bootstrap) as client:
        body = b"\x02t\x021" + b"\x01\x63\x02zz"  # ApiVersions v3 body + unknown tag 99
        client.correlation_id = 7
        client.send_frame(struct.pack(">hhih", API_VERSIONS, 3, 7, 1) + b"c" + b"\x00" + body)
        response = decode_response(API_VERSIONS, 3, client.read_frame(), 7)
    assert response.error_code.value == 0


def test_fuzzed_frames_never_stop_the_broker(broker):
    create_topic(broker.bootstrap, "alive")
    acked = produce(broker.bootstrap, "alive", [{"value": str(i).encode()} for i in range(100)])
    rng = random.Random(1234)
    outcomes: dict = {True: 0, False: 0, None: 0}
    with RawClient(broker.bootstrap) as seed_client:
        templates = [
            seed_client.encode_request(PRODUCE, 9, _produce_request("alive", _batch([b"p", b"q"]))),
            seed_client.encode_request(PRODUCE, 3, _produce_request("alive", _batch([b"r"]), version=3)),
            seed_client.encode_request(METADATA, 12, _metadata_request(["alive", "fz"])),
            seed_client.encode_request(METADATA, 1, _metadata_request(["alive"], version=1)),
            seed_client.encode_request(API_VERSIONS, 3, load_request_schema(API_VERSIONS, 3)(
                client_software_name="f", client_software_version="1")),
        ]
    for round_ in range(300):
        payload = bytearray(rng.choice(templates))
        kind = round_ % 4
        if kind == 0:  # bit flips
            for _ in range(rng.randint(1, 8)):
                payload[rng.randrange(len(payload))] ^= 1 << rng.randrange(8)
        elif kind == 1:  # truncation
            payload = payload[: rng.randrange(len(payload))]
        elif kind == 2:  # random body after a valid header prefix
            payload = payload[:10] + bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        else:  # pure noise
            payload = bytearray(rng.randbytes(rng.randrange(1, 300)))
        with RawClient(broker.bootstrap, timeout=0.5) as client:
            client.send_frame(bytes(payload))
            try:  # a response, a close, or (acks=0, a long poll) nothing yet: all legitimate
                outcomes[client.read_frame() is not None] += 1
            except socket.timeout:
                outcomes[None] += 1
    assert broker.alive()
    assert outcomes[True] > 0 and outcomes[False] > 0, outcomes
    received = consume_all(broker.bootstrap, "alive", [0], len(acked))
    assert [m.value() for m in received[:100]] == [str(i).encode() for i in range(100)]
    _still_serves(broker)
