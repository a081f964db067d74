"""Metadata: the live brokers, topics and their leaders (broker.cluster), topics auto-created
when allowed, as Kafka does."""

from __future__ import annotations

from inspect import isawaitable
from typing import Any

from ..protocol.errors import Error
from ..protocol.metadata_partitions import partitions_array
from ..security.acl import CLUSTER_NAME
from ..security.authorization import Access, Op, Res, access
from .broker import Broker
from .cluster_view import ClusterView
from .topics import Topic, TopicError
from .request_context import current_context


def _topic_body(topic: Topic, view: ClusterView, version: int) -> dict[str, Any]:
    return {
        "error_code": Error.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions_array(version, view.leaders(topic)),
    }


def handle_metadata(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Brokers, cluster id and the requested topics (all topics when the list is null, or empty at
    v0). In cluster mode creating a topic is a round trip to PostgreSQL: then a coroutine."""
    wanted = req.topics
    topics: list[Any] = []
    view = broker.cluster
    acc = access(broker, current_context())
    if wanted is None or (version == 0 and not wanted):
        # all topics: those the principal may not DESCRIBE are left out silently (§4)
        topics = [_topic_body(t, view, version) for t in broker.topics
                  if acc is None or acc.allows(Op.DESCRIBE, Res.TOPIC, t.name)]
    else:
        auto_create = broker.config.get("auto.create.topics.enable") and getattr(
            req, "allow_auto_topic_creation", True)
        for item in wanted:
            name = item.name
            topic = broker.topics.get(name) if name is not None else broker.topics.by_id(
                getattr(item, "topic_id", None))
            shown = name if topic is None else topic.name  # None: an unknown topic id (100 below)
            if acc is not None and shown is not None and not acc.allows(Op.DESCRIBE, Res.TOPIC, shown):
                # 29 whether it exists or not, with a zero id (a request by id keeps its id)
                topics.append({"error_code": Error.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "topic_id": getattr(item, "topic_id", None) if name is None else None,
                               "partitions": ()})
                continue
            if topic is None and name is not None and auto_create and acc is not None and not (
                    acc.cluster(Op.CREATE) or acc.allows(Op.CREATE, Res.TOPIC, name)):
                topics.append({"error_code": Error.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": ()})
                continue
            if topic is None and name is not None and auto_create:
                try:
                    created = broker.topics.create(name, broker.config.get("num.partitions"), {}, now_ms)
                except TopicError as exc:
                    topics.append({"error_code": exc.error_code, "name": name, "partitions": ()})
                    continue
                if isawaitable(created):
                    topics.append(_created_later(created, name, view, version))
                    continue
                topic = created
            if topic is None:
                error = Error.UNKNOWN_TOPIC_OR_PARTITION if name is not None else Error.UNKNOWN_TOPIC_ID
                topics.append({"error_code": error, "name": name,
                               "topic_id": getattr(item, "topic_id", None), "partitions": ()})
            else:
                topics.append(_topic_body(topic, view, version))
    if acc is not None:
        _authorized_operations(acc, req, version, topics)
    body = {
        "brokers": [{"node_id": node, "host": host, "port": port} for node, host, port in view.brokers()],
        "cluster_id": broker.topics.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
    }
    if acc is not None and getattr(req, "include_cluster_authorized_operations", False):  # v8-10
        body["cluster_authorized_operations"] = (acc.operations(Res.CLUSTER, CLUSTER_NAME)
                                                 if acc.cluster(Op.DESCRIBE) else 0)
    if any(isawaitable(t) for t in topics):
        return _finish(body)
    return body


def _authorized_operations(acc: Access, req: Any, version: int, topics: list[Any]) -> None:
    """v8+: each described topic's authorized_operations bit field, when asked for (§3 item 7)."""
    if version < 8 or not getattr(req, "include_topic_authorized_operations", False):
        return
    for topic in topics:
        if isinstance(topic, dict) and topic["error_code"] != Error.TOPIC_AUTHORIZATION_FAILED and topic.get("name"):
            topic["topic_authorized_operations"] = acc.operations(Res.TOPIC, topic["name"])


async def _created_later(created: Any, name: str, view: ClusterView, version: int) -> dict[str, Any]:
    try:
        topic = await created
    except TopicError as exc:
        return {"error_code": exc.error_code, "name": name, "partitions": ()}
    return _topic_body(topic, view, version)


async def _finish(body: dict[str, Any]) -> dict[str, Any]:
    body["topics"] = [await t if isawaitable(t) else t for t in body["topics"]]
    return body
