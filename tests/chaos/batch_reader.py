"""The producer identity (producer id and epoch) of every record of a partition, read from the batch
headers of raw Fetch responses (clients do not expose it). It tells an idempotent producer's
duplicate that the broker should have refused (both copies under one producer id and epoch) from a
re-send under a bumped epoch, which no broker can recognise: librdkafka bumps the epoch of an
idempotent producer after some errors and sends again messages that may already be stored
(confluentinc/librdkafka#4953)."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: raw_client

from raw_client import RawClient, build  # noqa: E402

from offsetd.records.batch import iter_batches  # noqa: E402

FETCH, FETCH_VERSION = 1, 4
Producer = tuple[int, int]  # (producer id, producer epoch); (-1, -1) for a plain producer


def leader_address(bootstrap: str, topic: str, partition: int) -> str:
    """host:port of the partition's leader, from Metadata."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[partition].leader
    broker = md.brokers[leader]
    return f"{broker.host}:{broker.port}"


def producers_by_offset(bootstrap: str, topic: str, partition: int, high: int,
                        max_bytes: int = 8 << 20) -> dict[int, Producer]:
    """offset -> (producer id, epoch) of every record below `high`, fetched from the leader."""
    found: dict[int, Producer] = {}
    offset = 0
    with RawClient(leader_address(bootstrap, topic, partition), timeout=30) as raw:
        while offset < high:
            request = build(load_request_schema(FETCH, FETCH_VERSION), {
                "replica_id": -1, "max_wait": timedelta(milliseconds=100), "min_bytes": 1, "max_bytes": max_bytes,
                "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]})
            data = raw.call(FETCH, FETCH_VERSION, request).responses[0].partitions[0]
            if int(data.error_code) != 0:
                raise RuntimeError(f"Fetch of {topic}-{partition} at {offset}: error {int(data.error_code)}")
            records = bytes(data.records or b"")
            end = offset
            for _, header in iter_batches(records):
                last = header.base_offset + header.last_offset_delta
                for at in range(header.base_offset, last + 1):
                    found[at] = (header.producer_id, header.producer_epoch)
                end = max(end, last + 1)
            if end == offset:
                raise RuntimeError(f"Fetch of {topic}-{partition} at {offset} returned no whole batch")
            offset = end
    return found
