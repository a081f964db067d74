"""Metadata: the live brokers, topics and their leaders (broker.cluster), topics auto-created
when allowed, as Kafka does."""

from __future__ import annotations

from inspect import isawaitable
from typing import Any

from ..protocol.errors import Error
from .broker import Broker
from .cluster_view import ClusterView
from .topics import Topic, TopicError


def _partition_body(view: ClusterView, topic: Topic, index: int) -> dict[str, Any]:
    node, epoch = view.leader(topic, index)
    if node < 0:  # being claimed, or its owner just died: clients retry (retriable error 5)
        return {"error_code": Error.LEADER_NOT_AVAILABLE, "partition_index": index, "leader_id": -1,
                "leader_epoch": -1, "replica_nodes": (), "isr_nodes": ()}
    replicas = (node,)
    return {"error_code": Error.NONE, "partition_index": index, "leader_id": node, "leader_epoch": epoch,
            "replica_nodes": replicas, "isr_nodes": replicas}


def _topic_body(topic: Topic, view: ClusterView) -> dict[str, Any]:
    return {
        "error_code": Error.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [_partition_body(view, topic, index) for index in range(len(topic.partitions))],
    }


def handle_metadata(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Brokers, cluster id and the requested topics (all topics when the list is null, or empty at
    v0). In cluster mode creating a topic is a round trip to PostgreSQL: then a coroutine."""
    wanted = req.topics
    topics: list[Any] = []
    view = broker.cluster
    if wanted is None or (version == 0 and not wanted):
        topics = [_topic_body(t, view) for t in broker.topics]
    else:
        auto_create = broker.config.get("auto.create.topics.enable") and getattr(
            req, "allow_auto_topic_creation", True)
        for item in wanted:
            name = item.name
            topic = broker.topics.get(name) if name is not None else broker.topics.by_id(
                getattr(item, "topic_id", None))
            if topic is None and name is not None and auto_create:
                try:
                    created = broker.topics.create(name, broker.config.get("num.partitions"), {}, now_ms)
                except TopicError as exc:
                    topics.append({"error_code": exc.error_code, "name": name, "partitions": ()})
                    continue
                if isawaitable(created):
                    topics.append(_created_later(created, name, view))
                    continue
                topic = created
            if topic is None:
                error = Error.UNKNOWN_TOPIC_OR_PARTITION if name is not None else Error.UNKNOWN_TOPIC_ID
                topics.append({"error_code": error, "name": name,
                               "topic_id": getattr(item, "topic_id", None), "partitions": ()})
            else:
                topics.append(_topic_body(topic, view))
    body = {
        "brokers": [{"node_id": node, "host": host, "port": port} for node, host, port in view.brokers()],
        "cluster_id": broker.topics.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
    }
    if any(isawaitable(t) for t in topics):
        return _finish(body)
    return body


async def _created_later(created: Any, name: str, view: ClusterView) -> dict[str, Any]:
    try:
        topic = await created
    except TopicError as exc:
        return {"error_code": exc.error_code, "name": name, "partitions": ()}
    return _topic_body(topic, view)


async def _finish(body: dict[str, Any]) -> dict[str, Any]:
    body["topics"] = [await t if isawaitable(t) else t for t in body["topics"]]
    return body
