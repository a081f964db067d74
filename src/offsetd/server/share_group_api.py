"""KIP-932 share-group membership on the wire: ShareGroupHeartbeat (76) and ShareGroupDescribe (77),
routed to the group's shard like the consumer-group APIs (server/consumer_group_api.py).

Checks in the reference's order (share-groups.md §2): share groups off (`group.share.enable`) →
UNSUPPORTED_VERSION; READ on the group; the client-chosen member id; DESCRIBE on each subscribed
topic; then the shard's load state and the sans-IO heartbeat. ShareFetch (78) and
ShareAcknowledge (79) are advertised (librdkafka sends them without asking) and answered here
with UNSUPPORTED_VERSION until the share-fetch side serves them.
"""

from __future__ import annotations

from typing import Any

from ..coordinator.share_group_ops import ShareGroupHeartbeatRequest, member_id_error
from ..protocol.errors import Error
from ..security.authorization import Op, Res, access
from .consumer_group_api import ConsumerGroupApi, describe_failure, heartbeat_failure, shape_heartbeat
from .coordinator_runtime import new_token
from .group_api import Body, Reply, RequestContext, reply_when_durable


class ShareGroupApi:
    """The share-group half of the coordinator's APIs, beside ConsumerGroupApi (whose routing,
    load-state answers and topic view it shares)."""

    def __init__(self, consumer_groups: ConsumerGroupApi, enabled: bool) -> None:
        self.consumer_groups = consumer_groups
        self.groups = consumer_groups.groups
        self.broker = consumer_groups.broker
        self.enabled = enabled  # group.share.enable

    def heartbeat(self, ctx: RequestContext, req: Any) -> Reply:
        """ShareGroupHeartbeat v1: join, heartbeat or leave; the response once the group's
        records are durable."""
        if not self.enabled:
            return heartbeat_failure(Error.UNSUPPORTED_VERSION, "Share groups are not enabled (group.share.enable).")
        acc = access(self.broker, ctx)
        if acc is not None and not acc.allows(Op.READ, Res.GROUP, req.group_id or ""):
            return heartbeat_failure(Error.GROUP_AUTHORIZATION_FAILED)
        problem = member_id_error(req.member_id)
        if problem is not None:
            return heartbeat_failure(Error.INVALID_REQUEST, problem)
        if acc is not None and req.subscribed_topic_names:
            denied = acc.denied(Op.DESCRIBE, Res.TOPIC, set(req.subscribed_topic_names))
            if denied:
                return heartbeat_failure(Error.TOPIC_AUTHORIZATION_FAILED,
                                          f"Topics {', '.join(sorted(denied))} are not authorized.")
        runtime = self.groups.runtime_for(req.group_id)
        error = self.groups.state_error(runtime)
        if error:
            return heartbeat_failure(error)
        heartbeat = ShareGroupHeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
            subscribed_topic_names=None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
            client_id=ctx.client_id, client_host=ctx.client_host)
        token = new_token()
        runtime.submit(runtime.shard.share_group_heartbeat(token, heartbeat, runtime.clock(),
                                                           self.consumer_groups.topics_image()))
        return reply_when_durable(token, heartbeat_failure, shape_heartbeat)

    def describe(self, ctx: RequestContext, req: Any) -> Reply:
        """ShareGroupDescribe v1: per group, 30 without DESCRIBE, the shard's load-state error,
        69 for a missing group or one of another kind, else the group as it is now."""
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
            described = runtime.shard.describe_share_group(group_id, self.consumer_groups.topic_name)
            if acc is not None and req.include_authorized_operations:
                described["authorized_operations"] = acc.operations(Res.GROUP, group_id)
            groups.append(described)
        return {"throttle_time": 0, "groups": groups}
