"""Metadata: the single broker, and topics (auto-created when allowed, as Kafka does)."""

from __future__ import annotations

from typing import Any

from ..protocol.errors import Error
from .broker import Broker
from .topics import Topic, TopicError


def _topic_body(topic: Topic, node_id: int) -> dict[str, Any]:
    replicas = (node_id,)
    return {
        "error_code": Error.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {"error_code": Error.NONE, "partition_index": index, "leader_id": node_id,
             "leader_epoch": -1, "replica_nodes": replicas, "isr_nodes": replicas}
            for index in range(len(topic.partitions))
        ],
    }


def handle_metadata(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any]:
    """Brokers, cluster id and the requested topics (all topics when the list is null, or empty at v0)."""
    advertised = broker.config.advertised_listener
    wanted = req.topics
    topics: list[dict[str, Any]] = []
    if wanted is None or (version == 0 and not wanted):
        topics = [_topic_body(t, broker.node_id) for t in broker.topics]
    else:
        auto_create = broker.config.get("auto.create.topics.enable") and getattr(
            req, "allow_auto_topic_creation", True)
        for item in wanted:
            name = item.name
            topic = broker.topics.get(name) if name is not None else broker.topics.by_id(
                getattr(item, "topic_id", None))
            if topic is None and name is not None and auto_create:
                try:
                    topic = broker.topics.create(name, broker.config.get("num.partitions"), {}, now_ms)
                except TopicError as exc:
                    topics.append({"error_code": exc.error_code, "name": name, "partitions": ()})
                    continue
            if topic is None:
                error = Error.UNKNOWN_TOPIC_OR_PARTITION if name is not None else Error.UNKNOWN_TOPIC_ID
                topics.append({"error_code": error, "name": name,
                               "topic_id": getattr(item, "topic_id", None), "partitions": ()})
            else:
                topics.append(_topic_body(topic, broker.node_id))
    return {
        "brokers": [{"node_id": broker.node_id, "host": advertised.host, "port": advertised.port}],
        "cluster_id": broker.topics.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
    }
