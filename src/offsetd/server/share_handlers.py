"""Which object answers each KIP-932 share-group API (reference share-groups.md): the dispatch
tables of server/share_server.py, which the server asks for every share API."""

from __future__ import annotations

from typing import Any, Callable

from ..protocol.api_versions import ApiKey
from .group_api import RequestContext
from .share_fetch_api import ShareFetchApi
from .share_group_api import ShareGroupApi
from .share_group_offsets import ShareGroupOffsetsApi
from .share_state_api import ShareStateApi

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

# The share coordinator's internal state APIs (other brokers ask them): ShareStateApi methods.
SHARE_STATE_HANDLERS: dict[int, Callable[[ShareStateApi, RequestContext, Any], Any]] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: ShareStateApi.initialize,
    ApiKey.READ_SHARE_GROUP_STATE: ShareStateApi.read,
    ApiKey.WRITE_SHARE_GROUP_STATE: ShareStateApi.write,
    ApiKey.DELETE_SHARE_GROUP_STATE: ShareStateApi.delete,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: ShareStateApi.read_summary,
}
