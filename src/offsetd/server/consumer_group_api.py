"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69),
routed to the group's shard like the classic group APIs (server/group_api.py): served only when
`group.coordinator.rebalance.protocols` has `consumer` (else UNSUPPORTED_VERSION, reference B1),
authorization first (READ on the group and DESCRIBE on the subscribed topics; DESCRIBE to describe),
then the shard's load state, then the sans-IO heartbeat with the broker's topics as it sees them
(TopicsImage)."""

from __future__ import annotations

import uuid
from typing import Any

from ..coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from ..coordinator.group_heartbeat import GroupHeartbeatResponse
from ..protocol.errors import Error
from ..records.consumer_group_records import TopicPartitions
from ..security.authorization import Op, Res, access
from .coordinator_runtime import new_token
from .group_api import Body, GroupApi, Reply, RequestContext, reply_when_durable

_NO_TOPIC_ID = uuid.UUID(int=0)


class ConsumerGroupApi:
    """The consumer-protocol half of the coordinator's APIs, beside GroupApi (whose routing and
    load-state answers it shares)."""

    def __init__(self, groups: GroupApi, enabled: bool) -> None:
        self.groups = groups
        self.broker = groups.broker
        self.enabled = enabled  # group.coordinator.rebalance.protocols has consumer
        self._image = TopicsImage(version=-1)

    def topics_image(self) -> TopicsImage:
        """The broker's topics (not the internal ones) as the heartbeat sees them, rebuilt only
        when the topic registry changed."""
        topics = self.broker.topics
        if self._image.version != topics.version:
            self._image = TopicsImage({t.name: (t.topic_id, len(t.partitions)) for t in topics if not t.internal},
                                      topics.version)
        return self._image

    def heartbeat(self, ctx: RequestContext, req: Any) -> Reply:
        """ConsumerGroupHeartbeat v0-1 (reference B2): join, heartbeat or leave; the response
        once the group's records are durable."""
        if not self.enabled:
            return heartbeat_failure(Error.UNSUPPORTED_VERSION, "The consumer group protocol is not enabled "
                                                                 "(group.coordinator.rebalance.protocols).")
        acc = access(self.broker, ctx)
        if acc is not None:
            if not acc.allows(Op.READ, Res.GROUP, req.group_id or ""):
                return heartbeat_failure(Error.GROUP_AUTHORIZATION_FAILED)
            if req.subscribed_topic_names:
                denied = acc.denied(Op.DESCRIBE, Res.TOPIC, set(req.subscribed_topic_names))
                if denied:
                    return heartbeat_failure(Error.TOPIC_AUTHORIZATION_FAILED,
                                              f"Topics {', '.join(sorted(denied))} are not authorized.")
        runtime = self.groups.runtime_for(req.group_id)
        error = self.groups.state_error(runtime)
        if error:
            return heartbeat_failure(error)
        owned = req.topic_partitions
        heartbeat = ConsumerGroupHeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id,
            rebalance_timeout_ms=int(req.rebalance_timeout.total_seconds() * 1000),
            subscribed_topic_names=None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
            subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor,
            topic_partitions=None if owned is None else tuple(
                TopicPartitions(tp.topic_id or _NO_TOPIC_ID, tuple(tp.partitions)) for tp in owned),
            client_id=ctx.client_id, client_host=ctx.client_host)
        token = new_token()
        runtime.submit(runtime.shard.consumer_group_heartbeat(token, heartbeat, ctx.version, runtime.clock(),
                                                              self.topics_image()))
        return reply_when_durable(token, heartbeat_failure, shape_heartbeat)

    def describe(self, ctx: RequestContext, req: Any) -> Reply:
        """ConsumerGroupDescribe v0-1 (reference B8): per group, 30 without DESCRIBE, the shard's
        load-state error, 69 for a missing or classic group, else the group as it is now."""
        if not self.enabled:
            return {"throttle_time": 0, "groups": [describe_failure(g, Error.UNSUPPORTED_VERSION)
                                                   for g in req.group_ids]}
        acc = access(self.broker, ctx)
        groups: list[Body] = []
        for group_id in req.group_ids:
            if acc is not None and not acc.allows(Op.DESCRIBE, Res.GROUP, group_id):
                groups.append(describe_failure(group_id, Error.GROUP_AUTHORIZATION_FAILED))
                continue
            runtime = self.groups.runtime_for(group_id)
            error = self.groups.state_error(runtime)
            if error:
                groups.append(describe_failure(group_id, error))
                continue
            described = runtime.shard.describe_consumer_group(group_id, self.topic_name)
            if acc is not None and req.include_authorized_operations:
                described["authorized_operations"] = acc.operations(Res.GROUP, group_id)
            groups.append(described)
        return {"throttle_time": 0, "groups": groups}

    def topic_name(self, topic_id: uuid.UUID) -> str:
        """A topic's name by id ("" once deleted)."""
        topic = self.broker.topics.by_id(topic_id)
        return topic.name if topic is not None else ""


def describe_failure(group_id: str, code: int) -> Body:
    """A ConsumerGroupDescribe or ShareGroupDescribe entry carrying only an error."""
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": ()}


def shape_heartbeat(response: GroupHeartbeatResponse) -> Body:
    """The sans-IO response as the wire's body (ConsumerGroupHeartbeat's and ShareGroupHeartbeat's
    share these fields)."""
    assignment = None if response.assignment is None else {"topic_partitions": [
        {"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in response.assignment]}
    return {"throttle_time": 0, "error_code": response.error_code, "error_message": response.error_message,
            "member_id": response.member_id, "member_epoch": response.member_epoch,
            "heartbeat_interval": response.heartbeat_interval_ms, "assignment": assignment}


def heartbeat_failure(code: int, message: str | None = None) -> Body:
    """A heartbeat answered with an error only."""
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
