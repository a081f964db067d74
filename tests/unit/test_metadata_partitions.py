"""Metadata's partitions written straight to wire form (protocol/metadata_partitions.py) are byte
for byte what the generic writer makes of the same partitions as dicts, at every served version."""

from __future__ import annotations

import pytest

from offsetd.protocol.api_versions import ApiKey, is_supported
from offsetd.protocol.encoder import encode_response
from offsetd.protocol.metadata_partitions import led_partitions

NODE = 7
EPOCHS = [0, 3, 1, 2**31 - 1, 0]


def _body(partitions: object, no_partitions: object) -> dict:
    """A Metadata body of two topics: one with `partitions`, one with `no_partitions`."""
    topic = {"error_code": 0, "name": "t", "topic_id": None, "is_internal": False, "partitions": partitions}
    return {"brokers": [{"node_id": NODE, "host": "h", "port": 9092}], "cluster_id": "c", "controller_id": NODE,
            "topics": [topic, dict(topic, name="empty", partitions=no_partitions)]}


@pytest.mark.parametrize("version", [v for v in range(13) if is_supported(ApiKey.METADATA, v)])
def test_led_partitions_encode_as_the_generic_writer_does(version: int) -> None:
    dicts = [{"error_code": 0, "partition_index": i, "leader_id": NODE, "leader_epoch": e,
              "replica_nodes": (NODE,), "isr_nodes": (NODE,)} for i, e in enumerate(EPOCHS)]
    fast = _body(led_partitions(version, NODE, EPOCHS), led_partitions(version, NODE, []))
    assert encode_response(ApiKey.METADATA, version, 5, fast) == encode_response(ApiKey.METADATA, version, 5,
                                                                                  _body(dicts, []))
