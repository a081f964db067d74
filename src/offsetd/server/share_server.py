"""KIP-932 share groups on this broker, wired in one place so the server (server/app.py) only
asks it for a handler: membership at the group coordinator (server/share_group_api.py), ShareFetch
and ShareAcknowledge at the partition leader (server/share_fetch_api.py), the admins' offsets
(server/share_group_offsets.py), the share coordinator over `__share_group_state`
(server/share_state.py) with its internal state APIs (server/share_state_api.py), and the
persister that finds the share coordinator of a share-partition (server/share_persister.py).

In cluster mode the share coordinator follows ownership of `__share_group_state`'s partitions
(server/cluster_runtime.py loads and unloads its runtimes), FindCoordinator key type 2 names the
owner of a share-partition's state, and partition leaders reach the owners over peer connections."""

from __future__ import annotations

from typing import Any, Callable

from ..broker.broker import Broker
from ..cluster.member import Key
from ..config import BrokerConfig
from ..protocol.errors import Error
from ..records.offsets import partition_for
from .consumer_group_api import ConsumerGroupApi
from .coordinator_settings import share_group_config
from .group_api import GroupApi
from .group_commit import GroupCommit
from .peer_client import PeerClient
from .share_fetch_api import ShareFetchApi
from .share_group_api import ShareGroupApi
from .share_group_offsets import ShareGroupOffsetsApi
from .share_handlers import SHARE_GROUP_HANDLERS, SHARE_HANDLERS, SHARE_OFFSETS_HANDLERS, SHARE_STATE_HANDLERS
from .share_persister import RETRY_DEADLINE_S, SharePersister
from .share_state import SHARE_STATE_TOPIC, SHARE_STATE_TOPIC_CONFIGS, ShareStatePersister
from .share_state_api import ShareStateApi

Body = dict[str, Any]
Handler = Callable[[Any, Any, Any], Any]  # (request context, connection, request) -> body


class ShareServer:
    """The share-group APIs of this broker and what they share."""

    def __init__(self, broker: Broker, config: BrokerConfig, clock: Callable[[], int], group_api: GroupApi,
                 consumer_group_api: ConsumerGroupApi, *, local: bool, group_commit: GroupCommit | None = None) -> None:
        self.broker = broker
        self.coordinator = ShareStatePersister(
            broker, config, clock, num_partitions=config.get("share.coordinator.state.topic.num.partitions"),
            snapshot_update_records=config.get("share.coordinator.snapshot.update.records.per.snapshot"), local=local,
            group_commit=group_commit)
        # a dead owner's partitions are claimed after its lease: callers retry at least twice that long
        self.persister = SharePersister(broker, self.coordinator, config.get("node.id"), deadline_s=max(
            RETRY_DEADLINE_S, 2 * config.get("broker.session.timeout.ms") / 1000))
        self.group_api = ShareGroupApi(consumer_group_api, config.get("group.share.enable"))
        self.fetch_api = ShareFetchApi(broker, self.persister, clock, share_group_config(config))
        self.offsets_api = ShareGroupOffsetsApi(broker, self.persister, group_api, self.fetch_api)
        self.state_api = ShareStateApi(broker, self.coordinator)
        group_api.on_groups_deleted = self.offsets_api.groups_deleting  # their share state goes too
        group_api.find_share_coordinator = self.find_coordinator
        self.handlers: dict[int, Handler] = {
            **{k: (lambda f: lambda ctx, conn, req: f(self.fetch_api, ctx, conn, req))(f)
               for k, f in SHARE_HANDLERS.items()},
            **{k: (lambda f: lambda ctx, conn, req: f(self.group_api, ctx, req))(f)
               for k, f in SHARE_GROUP_HANDLERS.items()},
            **{k: (lambda f: lambda ctx, conn, req: f(self.offsets_api, ctx, req))(f)
               for k, f in SHARE_OFFSETS_HANDLERS.items()},
            **{k: (lambda f: lambda ctx, conn, req: f(self.state_api, ctx, req))(f)
               for k, f in SHARE_STATE_HANDLERS.items()}}
        if local:
            self.coordinator.open_existing()

    def join_cluster(self, peers: PeerClient, create_topic: Callable[[str, int, dict[str, str]], None]) -> None:
        """Cluster mode: share state of partitions owned elsewhere is asked of their owners over
        `peers`; `__share_group_state` is created in the catalogue on first need."""
        self.persister.remote = peers
        self.coordinator.create_state_topic = lambda: create_topic(
            SHARE_STATE_TOPIC, self.coordinator.num_partitions, dict(SHARE_STATE_TOPIC_CONFIGS))

    def state_topic_known(self, topic: Any) -> None:
        """Cluster mode: `__share_group_state` appeared in the catalogue; its runtimes start unloaded."""
        self.coordinator.add_runtimes(topic, owned=False)

    def data_partition_lost(self, key: Key) -> None:
        """Cluster mode: another broker leads this data partition now."""
        self.fetch_api.leadership_lost(key[0], key[1])

    def find_coordinator(self, key: str) -> Body:
        """FindCoordinator key type 2: the owner of the `__share_group_state` partition of
        "group:topicId:partition" (COORDINATOR_NOT_AVAILABLE until the topic and its owner exist)."""
        group, _, rest = key.partition(":")
        topic_id, _, partition = rest.partition(":")
        if not group or not topic_id or not partition.isdigit():
            return _entry(key, Error.INVALID_REQUEST, message="A share coordinator key is group:topicId:partition.")
        if not self.coordinator.ready():
            return _entry(key, Error.COORDINATOR_NOT_AVAILABLE)
        view = self.broker.cluster
        node, _ = view.leader(self.broker.topics.get(SHARE_STATE_TOPIC),
                              partition_for(key, len(self.coordinator.runtimes)))
        endpoint = view.endpoint(node) if node >= 0 else None
        if endpoint is None:
            return _entry(key, Error.COORDINATOR_NOT_AVAILABLE)
        return _entry(key, Error.NONE, node, *endpoint)

    def appended(self, topic: str, partition: int) -> None:
        """Records were appended: share fetches waiting on the partition look again."""
        self.fetch_api.appended(topic, partition)

    def connection_closed(self, connection: Any) -> None:
        """A client connection is gone: its share sessions close and their records go back."""
        self.fetch_api.connection_closed(connection)

    def stop(self) -> None:
        self.fetch_api.stop()


def _entry(key: str, error: int, node: int = -1, host: str = "", port: int = -1, message: str | None = None) -> Body:
    """A FindCoordinator coordinator entry."""
    if error and message is None:
        message = "The coordinator is not available."
    return {"key": key, "error_code": error, "node_id": node, "host": host, "port": port, "error_message": message}
