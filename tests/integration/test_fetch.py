"""Fetch semantics with exact requests: long poll (max_wait / min_bytes, woken by appends),
per-partition and per-response byte limits, stored batch bytes returned as they are."""

from __future__ import annotations

import datetime
import time

from kio.index import load_request_schema

from clients import create_topic, produce
from raw_client import RawClient

FETCH = 1


def _fetch_request(topic: str, offsets: dict[int, int], max_wait_ms: int, min_bytes: int = 1,
                   partition_max: int = 1 << 20, max_bytes: int = 50 << 20, version: int = 12):
    cls = load_request_schema(FETCH, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(mod.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max)
                  for p, o in offsets.items())
    return cls(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
               topics=(mod.FetchTopic(topic=topic, partitions=parts),), forgotten_topics_data=())


def _batches(records: bytes) -> list[int]:
    """Base offsets of the whole batches in a records blob."""
    bases, pos = [], 0
    while pos < len(records):
        bases.append(int.from_bytes(records[pos:pos + 8], "big"))
        pos += 12 + int.from_bytes(records[pos + 8:pos + 12], "big")
    assert pos == len(records), "records blob must hold whole batches only"
    return bases


def test_long_poll_times_out_empty_then_wakes_on_append(shared_broker):
    create_topic(shared_broker.bootstrap, "poll")
    with RawClient(shared_broker.bootstrap) as client:
        start = time.monotonic()
        response = client.call(FETCH, 12, _fetch_request("poll", {0: 0}, max_wait_ms=400))
        waited = time.monotonic() - start
        part = response.responses[0].partitions[0]
        assert part.error_code.value == 0 and part.records in (b"", None) and part.high_watermark == 0
        assert waited >= 0.35, f"returned after {waited:.3f}s, should have waited for max_wait"

        client.send_frame(client.encode_request(FETCH, 12, _fetch_request("poll", {0: 0}, max_wait_ms=20000)))
        start = time.monotonic()
        produce(shared_broker.bootstrap, "poll", [{"value": b"wake"}])
        from raw_client import decode_response
        response = decode_response(FETCH, 12, client.read_frame(), client.correlation_id)
        assert time.monotonic() - start < 10, "append must wake the parked fetch long before max_wait"
        part = response.responses[0].partitions[0]
        assert part.high_watermark == 1 and _batches(part.records) == [0]


def test_min_bytes_waits_for_max_wait_then_returns_what_exists(shared_broker):
    create_topic(shared_broker.bootstrap, "minbytes")
    produce(shared_broker.bootstrap, "minbytes", [{"value": b"x" * 100}])
    with RawClient(shared_broker.bootstrap) as client:
        start = time.monotonic()
        response = client.call(FETCH, 12, _fetch_request("minbytes", {0: 0}, max_wait_ms=300, min_bytes=1 << 20))
        assert time.monotonic() - start >= 0.25
        assert _batches(response.responses[0].partitions[0].records) == [0]


def test_partition_and_response_byte_limits_keep_whole_batches(shared_broker):
    create_topic(shared_broker.bootstrap, "limits", partitions=2)
    for i in range(3):  # three separate batches per partition
        produce(shared_broker.bootstrap, "limits", [{"value": bytes([i]) * 500, "partition": p} for p in (0, 1)])
    with RawClient(shared_broker.bootstrap) as client:
        # a partition limit smaller than one batch still returns that first batch whole
        tiny = client.call(FETCH, 12, _fetch_request("limits", {0: 0}, max_wait_ms=0, partition_max=10))
        assert _batches(tiny.responses[0].partitions[0].records) == [0]
        # from the middle: the batch holding offset 1 onwards
        middle = client.call(FETCH, 12, _fetch_request("limits", {0: 1}, max_wait_ms=0))
        assert _batches(middle.responses[0].partitions[0].records) == [1, 2]
        # response limit: the first partition fills it, the second gets nothing
        capped = client.call(FETCH, 12, _fetch_request("limits", {0: 0, 1: 0}, max_wait_ms=0, max_bytes=1200))
        first, second = capped.responses[0].partitions
        assert _batches(first.records) == [0, 1] and second.records in (b"", None)
        # out of range offsets are refused with OFFSET_OUT_OF_RANGE and the watermarks
        beyond = client.call(FETCH, 12, _fetch_request("limits", {0: 99}, max_wait_ms=0))
        part = beyond.responses[0].partitions[0]
        assert part.error_code.value == 1 and part.high_watermark == 3 and part.log_start_offset == 0
