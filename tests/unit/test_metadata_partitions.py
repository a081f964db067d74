"""Metadata's partitions written straight to wire form (protocol/metadata_partitions.py) are byte
for byte what the generic writer makes of the same partitions as dicts, at every served version,
led by several brokers or by none (cluster mode)."""

from __future__ import annotations

import pytest

from offsetd.protocol.api_versions import ApiKey, is_supported
from offsetd.protocol.encoder import encode_response
from offsetd.protocol.metadata_partitions import partitions_array

NODE = 7


def _body(partitions: object, no_partitions: object) -> dict:
    """A Metadata body of two topics: one with `partitions`, one with `no_partitions`."""
    topic = {"error_code": 0, "name": "t", "topic_id": None, "is_internal": False, "partitions": partitions}
    return {"brokers": [{"node_id": NODE, "host": "h", "port": 9092}], "cluster_id": "c", "controller_id": NODE,
            "topics": [topic, dict(topic, name="empty", partitions=no_partitions)]}


LEADERS = [(NODE, 0), (-1, -1), (NODE + 1, 3), (NODE, 2**31 - 1), (-1, -1), (NODE + 2, 0)]  # -1: no leader


def _dict(index: int, node: int, epoch: int) -> dict:
    """A partition as the generic writer takes it (LEADER_NOT_AVAILABLE without a leader)."""
    if node < 0:
        return {"error_code": 5, "partition_index": index, "leader_id": -1, "leader_epoch": -1,
                "replica_nodes": (), "isr_nodes": ()}
    return {"error_code": 0, "partition_index": index, "leader_id": node, "leader_epoch": epoch,
            "replica_nodes": (node,), "isr_nodes": (node,)}


@pytest.mark.parametrize("version", [v for v in range(13) if is_supported(ApiKey.METADATA, v)])
def test_partitions_encode_as_the_generic_writer_does(version: int) -> None:
    dicts = [_dict(i, node, epoch) for i, (node, epoch) in enumerate(LEADERS)]
    fast = _body(partitions_array(version, LEADERS), partitions_array(version, []))
    assert encode_response(ApiKey.METADATA, version, 5, fast) == encode_response(ApiKey.METADATA, version, 5,
                                                                                  _body(dicts, []))
