"""Which object answers each KIP-932 share-group API (reference share-groups.md), and the share
groups' settings from the broker's Kafka keys: the server's dispatch tables for share groups,
kept beside it (server/app.py) so the server stays one screenful of wiring."""

from __future__ import annotations

from typing import Any, Callable

from ..config import BrokerConfig
from ..coordinator.config import ShareGroupConfig
from ..protocol.api_versions import ApiKey
from .group_api import RequestContext
from .share_fetch_api import ShareFetchApi
from .share_group_api import ShareGroupApi
from .share_group_offsets import ShareGroupOffsetsApi

# Membership: ShareGroupApi methods, answering later like GroupApi's.
SHARE_GROUP_HANDLERS: dict[int, Callable[[ShareGroupApi, RequestContext, Any], Any]] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: ShareGroupApi.heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: ShareGroupApi.describe,
}

# The partition leader's side: ShareFetchApi methods, given the connection (a share session
# closes with it).
SHARE_HANDLERS: dict[int, Callable[[ShareFetchApi, RequestContext, Any, Any], Any]] = {
    ApiKey.SHARE_FETCH: ShareFetchApi.share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: ShareFetchApi.share_acknowledge,
}

# The admins' offsets: ShareGroupOffsetsApi methods.
SHARE_OFFSETS_HANDLERS: dict[int, Callable[[ShareGroupOffsetsApi, RequestContext, Any], Any]] = {
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ShareGroupOffsetsApi.describe,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: ShareGroupOffsetsApi.alter,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: ShareGroupOffsetsApi.delete,
}


def share_group_config(config: BrokerConfig) -> ShareGroupConfig:
    """Share groups' settings from the broker's Kafka keys (the coordinator's and the fetch side's)."""
    return ShareGroupConfig(
        enabled=config.get("group.share.enable"),
        session_timeout_ms=config.get("group.share.session.timeout.ms"),
        heartbeat_interval_ms=config.get("group.share.heartbeat.interval.ms"),
        max_size=config.get("group.share.max.size"),
        assignor=config.get("group.share.assignors"),
        record_lock_duration_ms=config.get("group.share.record.lock.duration.ms"),
        delivery_count_limit=config.get("group.share.delivery.count.limit"),
        partition_max_record_locks=config.get("group.share.partition.max.record.locks"),
        max_share_sessions=config.get("group.share.max.share.sessions"))
