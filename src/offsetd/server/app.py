"""The broker process: listeners, request dispatch and periodic tasks (Fetch and its long polls are
fetch_polls.py's, the log cleaner's loop cleaner_loop.py's)."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time
from dataclasses import fields
from typing import Any, Callable

from ..broker.admin import (
    handle_create_partitions,
    handle_incremental_alter_configs,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
)
from ..broker.broker import Broker
from ..broker.topics import TopicError
from ..cluster.member import ClusterMember
from ..broker.group_configs import consumer_overrides, retention_ms as group_retention_ms, share_overrides
from ..broker.fetch_down_convert import fetch_old_version
from ..broker.fetch_sessions import FetchSessionCache
from ..broker.list_offsets import handle_list_offsets
from ..broker.log_ends import LogEnds
from ..broker.metadata import handle_metadata
from ..broker.offset_for_leader_epoch import handle_offset_for_leader_epoch
from ..broker.produce import handle_produce
from ..config import BrokerConfig
from ..protocol.api_versions import ApiKey, api_keys_body, is_supported
from ..protocol.codec import decode_body, request_class, response_class
from ..protocol.encoder import encode_response
from ..protocol.primitives import DecodeError
from ..protocol.errors import Error
from ..protocol.header import parse_header, peek_ids
from .coordinator_settings import coordinator_config
from ..coordinator.shard import GroupCoordinatorShard
from ..metrics.history import BrokerHistory
from ..metrics.http import MetricsHttpServer
from ..metrics.lag_view import BrokerLagSource
from ..records.offsets import OFFSETS_TOPIC
from ..storage.postgres_security import PostgresSecurityStore
from ..storage.postgres_store import PostgresStore
from .close_connection import CloseConnection
from .connection import Connection, ConnectionGuard, Pending
from .cluster_runtime import (
    ClusterGroupConfigs,
    ClusterRuntime,
    ClusterTopicRegistry,
    PostgresView,
    ProducerIdBlocks,
)
from .cleaner_loop import CleanerLoop
from .coordinator_runtime import ShardRuntime, ShardState
from .fetch_polls import FetchPolls
from .open_files import size_open_files
from .log_opening import open_in_background
from .futures import then
from .consumer_group_api import ConsumerGroupApi
from .group_api import GroupApi, RequestContext
from .group_commit import GroupCommit
from .listeners import ListenerRuntime, bind, listener_runtimes, peer_listener, peer_security, start_serving
from .tls import keystore_reloaders
from . import sasl_wire
from .sasl_wire import SASL_VERSIONS, SaslSession
from .peer_client import PeerClient
from .share_server import ShareServer
from .transaction_api import TRANSACTION_STATE_TOPIC, TransactionApi, state_topic_configs
from .transaction_markers import MarkerWriter
from . import security_api
from ..broker.request_context import REQUEST_CONTEXT
from .http_guard import http_guard
from .lag_alerts import LagAlerts

log = logging.getLogger("offsetd.server")

KEYSTORE_CHECK_MS = 2000  # how often TLS listeners look for a renewed keystore file

Handler = Callable[[Broker, Any, int, int], "dict[str, Any] | None"]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.CREATE_ACLS: security_api.handle_create_acls,
    ApiKey.DESCRIBE_ACLS: security_api.handle_describe_acls,
    ApiKey.DELETE_ACLS: security_api.handle_delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: security_api.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: security_api.handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: security_api.handle_describe_client_quotas,
}


# Coordinator APIs: handled by GroupApi methods, which may answer later (a coroutine).
GROUP_HANDLERS: dict[int, Callable[[GroupApi, RequestContext, Any], Any]] = {
    ApiKey.JOIN_GROUP: GroupApi.join_group,
    ApiKey.SYNC_GROUP: GroupApi.sync_group,
    ApiKey.HEARTBEAT: GroupApi.heartbeat,
    ApiKey.LEAVE_GROUP: GroupApi.leave_group,
    ApiKey.OFFSET_COMMIT: GroupApi.offset_commit,
    ApiKey.OFFSET_FETCH: GroupApi.offset_fetch,
    ApiKey.DESCRIBE_GROUPS: GroupApi.describe_groups,
    ApiKey.LIST_GROUPS: GroupApi.list_groups,
    ApiKey.DELETE_GROUPS: GroupApi.delete_groups,
    ApiKey.OFFSET_DELETE: GroupApi.offset_delete,
    ApiKey.TXN_OFFSET_COMMIT: GroupApi.txn_offset_commit,
}

# KIP-848 consumer-group APIs: ConsumerGroupApi methods, answering later like GroupApi's.
CONSUMER_GROUP_HANDLERS: dict[int, Callable[[ConsumerGroupApi, RequestContext, Any], Any]] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupApi.heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupApi.describe,
}

# Transaction coordinator APIs (FindCoordinator too: it routes group keys to GroupApi).
TXN_HANDLERS: dict[int, Callable[[TransactionApi, RequestContext, Any], Any]] = {
    ApiKey.FIND_COORDINATOR: TransactionApi.find_coordinator,
    ApiKey.INIT_PRODUCER_ID: TransactionApi.init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: TransactionApi.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: TransactionApi.add_offsets_to_txn,
    ApiKey.END_TXN: TransactionApi.end_txn,
    ApiKey.WRITE_TXN_MARKERS: TransactionApi.write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: TransactionApi.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: TransactionApi.list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: TransactionApi.describe_producers,
}


# KIP-511: what ApiVersions v3+ accepts as client_software_name / client_software_version.
_SOFTWARE_ID = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")


class ClusterJoinError(Exception):
    """Cluster mode could not start: PostgreSQL unreachable, refused, or the database missing."""


def _without_password(dsn: str) -> str:
    """A PostgreSQL URL fit for a log line (a password, if any, masked)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


def wall_clock_ms() -> int:
    """The real clock, injected into everything below the server."""
    return time.time_ns() // 1_000_000


def _failure_body(api_key: int, version: int, exc: Exception) -> dict[str, Any] | None:
    """The answer to a handler that failed with an OSError (a file the OS would not open or write),
    as Kafka answers an unexpected error: UNKNOWN_SERVER_ERROR in the response's top-level error
    code, with the reason where the response has a message. None (the connection is closed) for
    other exceptions, and for responses without a top-level error code (their handlers answer
    storage failures per partition themselves)."""
    if not isinstance(exc, OSError):
        return None
    names = {f.name for f in fields(response_class(api_key, version))}
    if "error_code" not in names:
        return None
    body: dict[str, Any] = {"error_code": Error.UNKNOWN_SERVER_ERROR}
    if "error_message" in names:
        body["error_message"] = f"{exc.strerror or exc}"
    return body


class KafkaServer:
    """Owns the listening socket, the connections and the broker; all on one event loop."""

    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.clock = clock
        # first: a TLS setting ssl cannot use stops start-up (ConfigError) before any log is opened
        self.listeners = listener_runtimes(config)
        self.max_request_bytes: int = config.get("socket.request.max.bytes")
        self.runtimes: list[ShardRuntime] = []
        self.cluster: ClusterMember | None = None
        size_open_files(config)  # before any log is opened
        # The coordinators' fsyncs, off the event loop (cluster mode: PostgreSQL makes writes durable).
        self.group_commit: GroupCommit | None = None
        if config.get("storage.engine") == "local":
            self.broker = Broker(config, clock())  # restores the coordinators' journal into their logs
            if config.get("offsets.topic.fsync.enable"):
                journal = config.get("coordinator.journal.bytes")
                self.group_commit = GroupCommit(journal=config.log_dir if journal else None, journal_bytes=journal)
            self._add_runtimes(self._offsets_topic(), owned=True)
        else:  # cluster mode: topics, ownership and shards arrive in start() (_join_cluster)
            self._store = PostgresStore(config.get("storage.engine"), pool_size=config.get("storage.connections"),
                                        timeout_s=config.get("broker.session.timeout.ms") / 1000)
            self._topics = ClusterTopicRegistry(config, self._store, lambda: self.cluster is not None
                                                and self.cluster.serving())
            self._producer_ids = ProducerIdBlocks(self._store)
            self._group_configs = ClusterGroupConfigs(self._store)
            self.broker = Broker(config, clock(), topics=self._topics, producer_ids=self._producer_ids,
                                 group_configs=self._group_configs)
        sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.fetches = FetchPolls(self.broker, sessions, clock)  # Fetch and its long polls
        self.broker.on_append = self._appended
        self.cleaner = CleanerLoop(self.broker, self.runtimes, config, clock)
        self.security = security_api.install(self)  # ACLs (broker.authorizer) and SCRAM credentials
        self.group_api = GroupApi(self.broker, self.runtimes)
        self.consumer_group_api = ConsumerGroupApi(
            self.group_api, "consumer" in config.get("group.coordinator.rebalance.protocols"))
        self.group_api.topics_image = self.consumer_group_api.topics_image
        self.txn_api = TransactionApi(self.broker, config, self.group_api, clock,
                                      MarkerWriter(self.broker, self.runtimes, clock, self.group_commit),
                                      local=config.get("storage.engine") == "local", group_commit=self.group_commit)
        self.broker.txn_verifier = self.txn_api.verify
        self.group_api.txn_verifier = self.txn_api.verify_offsets
        # KIP-932 share groups: membership, the leaders' side and the share coordinator
        self.shares = ShareServer(self.broker, config, clock, self.group_api, self.consumer_group_api,
                                  local=self.txn_api.local, group_commit=self.group_commit)
        if self.txn_api.local:
            self.txn_api.open_existing()
        self.broker.on_topic_deleted = self._offsets_of_deleted_topic
        self.broker.on_group_config_changed = self._apply_group_config
        self._apply_group_configs()
        # Lag as the broker sees it (metrics, alerts, console): its shards and its logs, and in
        # cluster mode PostgreSQL for the partitions other brokers lead; never another broker.
        self.log_ends = LogEnds(self.broker.topics, store=None if config.get("storage.engine") == "local"
                                else self._store)
        self.lag_source = BrokerLagSource(self.runtimes, self.log_ends, clock, self.shares.offsets_api.share_states,
                                          config.get("metrics.group.filter"))
        self.lag_alerts = LagAlerts.from_config(config, self.lag_source, clock)  # None: no lag.alert rules
        self.connections: set[Connection] = set()
        self.guard = ConnectionGuard(config, self.connections)
        self._server: asyncio.base_events.Server | None = None  # the first listener's
        self._servers: list[asyncio.base_events.Server] = []
        # SCRAM credentials: (user, mechanism) -> credential. S3's credential store replaces
        # scram_lookup (one line); until then this dict is the store (tests fill it).
        self.scram_credentials: dict[tuple[str, str], Any] = {}
        self.scram_lookup: sasl_wire.ScramLookup = lambda mechanism, user: self.scram_credentials.get((user, mechanism))
        self.scram_lookup = self.security.scram_lookup  # the credential store (server/security_api.py)
        self._sasl_factories = {l.name: sasl_wire.mechanism_factories(config, l, self._lookup_scram)
                                for l in self.listeners if l.sasl}
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self.trace = log.isEnabledFor(logging.DEBUG)  # per-request log lines (--log-level DEBUG)
        self.metrics_server: MetricsHttpServer | None = None
        self._creating_topics: dict[str, asyncio.Future[None]] = {}

    def _add_runtimes(self, offsets_topic: Any, *, owned: bool) -> None:
        """One coordinator shard runtime per `__consumer_offsets` partition (in place: the group
        API and the metrics hold this list)."""
        group_config = coordinator_config(self.config)
        self.runtimes.extend(
            ShardRuntime(GroupCoordinatorShard(p, group_config), plog, fsync=self.config.get("offsets.topic.fsync.enable"),
                         clock=self.clock, owned=owned, group_commit=self.group_commit)
            for p, plog in enumerate(offsets_topic.partitions))

    def _appended(self, topic: str, partition: int) -> None:
        """Records were appended: Fetch and ShareFetch long polls on the partition look again."""
        self.fetches.wake(topic, partition)
        self.shares.appended(topic, partition)

    def connection_closed(self, conn: Connection) -> None:
        """A client connection is gone: the share sessions opened on it close."""
        self.shares.connection_closed(conn)

    def _apply_group_configs(self) -> None:
        if self.runtimes:  # cluster mode: not before __consumer_offsets is known
            for group_id, _ in self.broker.group_configs.items():
                self._apply_group_config(group_id)

    def _offsets_known(self, offsets_topic: Any) -> None:
        """Cluster mode: `__consumer_offsets` appeared in the catalogue; its shards start unloaded."""
        self._add_runtimes(offsets_topic, owned=False)
        self._apply_group_configs()

    @staticmethod
    def _offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
        # preallocate: every commit is fsynced, and an fdatasync that need not persist a new
        # file size is several times faster at the tail (README "Performance").
        return {"cleanup.policy": "compact", "compression.type": "producer", "preallocate": "true",
                "segment.bytes": str(config.get("offsets.topic.segment.bytes"))}

    def _offsets_topic(self) -> Any:
        """`__consumer_offsets`, created at start-up: internal, compacted (reference §4.1)."""
        topic = self.broker.topics.get(OFFSETS_TOPIC)
        wanted = self.config.get("offsets.topic.num.partitions")
        if topic is None:
            topic = self.broker.topics.create(OFFSETS_TOPIC, wanted, self._offsets_topic_configs(self.config),
                                              self.clock(), internal=True)
        elif len(topic.partitions) != wanted:
            log.warning("%s has %d partitions, not offsets.topic.num.partitions=%d; keeping %d "
                        "(group placement depends on it and must never change)",
                        OFFSETS_TOPIC, len(topic.partitions), wanted, len(topic.partitions))
        return topic

    async def _join_cluster(self) -> None:
        """Cluster mode: connect to PostgreSQL, register, follow the catalogue (creating
        `__consumer_offsets` if this is the first broker) and start claiming partitions."""
        self._topics.cluster_id = await self._store.open()
        await self.security.start_cluster(PostgresSecurityStore(self._store))
        await self._producer_ids.start()
        advertised = self.config.advertised_listener
        runtime = ClusterRuntime(self._topics, self._group_configs, self.runtimes, self.clock, self._offsets_known,
                                 self._apply_group_config, self.txn_api.runtimes,
                                 lambda topic: self.txn_api.add_runtimes(topic, owned=False),
                                 self.shares.coordinator.runtimes, self.shares.state_topic_known,
                                 self.shares.data_partition_lost)
        self.txn_api.create_state_topic = lambda: self._create_internal_topic(
            TRANSACTION_STATE_TOPIC, self.txn_api.txn_config.transaction_state_log_num_partitions,
            state_topic_configs(self.config))
        peers = peer_listener(self.config)  # brokers reach each other on this listener

        def peer_client() -> PeerClient:
            return PeerClient(lambda node: self.broker.cluster.endpoint(node, peers), peer_security(self.config, peers))
        self.txn_api.markers.remote = peer_client()
        self.shares.join_cluster(peer_client(), self._create_internal_topic)
        self._topics.on_deleted = lambda topic: self._offsets_of_deleted_topic(topic.name, len(topic.partitions))
        self.cluster = ClusterMember(self._store, self.config.get("node.id"), advertised.host, advertised.port,
                                     ttl_ms=self.config.get("broker.session.timeout.ms"),
                                     heartbeat_ms=self.config.get("broker.heartbeat.interval.ms"),
                                     callbacks=runtime, endpoints={
                                         l.name: (self.config.advertised_for(l.name).host,
                                                  self.config.advertised_for(l.name).port) for l in self.listeners})
        self._topics.on_fenced = lambda plog: self.cluster.fenced((plog.topic_id, plog.partition))  # type: ignore[union-attr]
        self._topics.on_cold_loaded = self._appended  # type: ignore[attr-defined]
        self.broker.cluster = PostgresView(self.cluster)
        await self.cluster.start(self._accept_clients)
        if self._topics.get(OFFSETS_TOPIC) is None:
            try:
                await self._topics.create(OFFSETS_TOPIC, self.config.get("offsets.topic.num.partitions"),
                                          self._offsets_topic_configs(self.config), self.clock(), internal=True)
            except TopicError:
                pass  # another broker created it first
            self.cluster.refresh_topics()
            await self.cluster.tick()

    async def _accept_clients(self) -> None:
        """Cluster mode: serve the listeners once the broker knows the live brokers (its first
        claims still running: peers name it as soon as it claims)."""
        for server in self._servers:
            await start_serving(server)

    def _create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        """`__transaction_state` or `__share_group_state` in the shared catalogue, once (the first
        FindCoordinator for one asks for it; COORDINATOR_NOT_AVAILABLE until its partitions are claimed)."""
        creating = self._creating_topics.get(name)
        if creating is not None and not creating.done():
            return

        async def create() -> None:
            try:
                await self._topics.create(name, partitions, configs, self.clock(), internal=True)
            except TopicError:
                pass  # another broker created it first
            except Exception as exc:
                log.warning("cannot create %s: %s", name, exc)
                return
            self.cluster.refresh_topics()  # type: ignore[union-attr]
            await self.cluster.tick()  # type: ignore[union-attr]
        self._creating_topics[name] = asyncio.ensure_future(create())

    async def _load_coordinator(self) -> None:
        """Replay every offsets partition; groups of a partition are served once it is loaded."""
        started = time.perf_counter()
        for runtime in self.runtimes:
            await runtime.load()
        records = sum(r.records_loaded for r in self.runtimes)
        failed = [r.shard.partition for r in self.runtimes if r.state is ShardState.FAILED]
        seconds = time.perf_counter() - started
        log.info("loaded %s: %d records in %.3f s (%.0f records/s)%s", OFFSETS_TOPIC, records, seconds,
                 records / seconds if seconds > 0 else 0.0,
                 f"; FAILED partitions: {failed}" if failed else "")
        await self.txn_api.load_all()
        # What the load built lives as long as the broker: out of the collector's sight, a full
        # collection no longer walks it (~1 s per million groups, the event loop stopped meanwhile).
        gc.freeze()

    # ------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind every listener and start the periodic tasks. In cluster mode the listeners accept
        clients only once the broker knows the live brokers: before, its answers (Metadata listing
        none, or itself alone) make librdkafka forget the brokers it knew, the controller among
        them, and wait for it (CreateTopics: "waiting for controller")."""
        joining = self.cluster is None and self.config.get("storage.engine") != "local"
        try:
            for listener in self.listeners:
                self._servers.append(await bind(listener, lambda l=listener: Connection(self, l), self.config,
                                                serving=not joining))
        except OSError:
            for server in self._servers:
                server.close()
            raise
        self._server = self._servers[0]
        self.port = self.listeners[0].port
        metrics_listener = self.config.get("metrics.listener")
        if metrics_listener is not None:  # Prometheus /metrics and /v1/groups on this loop
            self.metrics_server = MetricsHttpServer(self.runtimes, lag=self.lag_source, guard=http_guard(self),
                                                    collectors=[self.lag_alerts] if self.lag_alerts else [],
                                                    history=BrokerHistory(self.runtimes, self.log_ends, self.clock),
                                                    group_filter=self.config.get("metrics.group.filter"))
            await self.metrics_server.start(metrics_listener.host, metrics_listener.port)
        if joining:
            try:
                await self._join_cluster()
            except Exception as exc:
                for server in self._servers:
                    server.close()
                raise ClusterJoinError(f"cannot join the cluster in {_without_password(self.config.get('storage.engine'))}: "
                                       f"{type(exc).__name__}: {exc}") from exc
        else:
            self._tasks.append(asyncio.create_task(self._load_coordinator()))
            self._tasks.append(asyncio.create_task(open_in_background(self.broker.topics)))
        self._tasks.append(asyncio.create_task(self._every(
            self.config.get("log.retention.check.interval.ms"), self._retention)))
        if self.config.get("log.cleaner.enable"):
            self._tasks.append(asyncio.create_task(self.cleaner.run()))
        flush_ms = self.config.get("log.flush.interval.ms")
        if flush_ms:
            self._tasks.append(asyncio.create_task(self._every(flush_ms, self.broker.flush_all)))
        reloaders = keystore_reloaders(self.config, {l.name: l.ssl for l in self.listeners if l.ssl is not None})
        if reloaders:  # a renewed certificate file is picked up without a restart
            self._tasks.append(asyncio.create_task(self._every(
                KEYSTORE_CHECK_MS, lambda: [r.check() for r in reloaders])))
        if self.lag_alerts is not None:
            self._tasks.append(asyncio.create_task(self.lag_alerts.run()))
        sweep_ms = self.guard.sweep_interval_ms
        if sweep_ms is not None:  # connections.max.idle.ms, socket.request.receive.timeout.ms
            self._tasks.append(asyncio.create_task(self._every(sweep_ms, self.guard.sweep)))

    async def stop(self) -> None:
        """Hand partitions over (cluster mode; clients sent here by a peer's older view are still
        answered, not refused), stop accepting, drop connections, flush and close every log."""
        if self.cluster is not None:
            await self.cluster.stop()  # graceful handoff: peers claim at once, no lease wait
        for server in self._servers:
            server.close()
        if self.cluster is not None:
            await self.security.stop()
            await self._store.close()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        for task in self._tasks:
            task.cancel()
        for runtime in self.runtimes:
            runtime.stop()
        self.txn_api.stop()
        self.shares.stop()
        for conn in list(self.connections):
            conn.close("broker shutting down")
        self.cleaner.stop()
        if self.group_commit is not None:
            self.group_commit.stop()
        self.broker.close()

    async def _every(self, interval_ms: int, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()
            except Exception:
                log.exception("periodic task %s failed", getattr(action, "__name__", action))

    def _retention(self) -> None:
        removed = self.broker.apply_retention(self.clock())
        if removed:
            log.info("retention deleted %d segments", removed)

    # -------------------------------------------------------------------------- dispatch

    def _lookup_scram(self, mechanism: str, user: str) -> Any:
        return self.scram_lookup(mechanism, user)

    def sasl_session(self, conn: Connection, listener: ListenerRuntime) -> SaslSession:
        """The SASL state of a new connection on a SASL listener."""
        return SaslSession(conn, self._sasl_factories[listener.name], self.config, listener, self.clock())

    def dispatch(self, conn: Connection, frame: bytes) -> bytes | Pending | None:
        """Decode one request frame, run its handler and return the encoded response (or a
        coroutine producing it, or None for no response). CloseConnection for hopeless input."""
        view = memoryview(frame)
        try:
            api_key, version, correlation_id = peek_ids(view)
        except DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        if conn.sasl is not None:
            if conn.sasl.raw_tokens:  # after a v0 SaslHandshake: the frame is a bare token
                return conn.sasl.raw_token(frame, self.clock())
            if api_key in SASL_VERSIONS and not sasl_wire.supported(api_key, version):
                raise CloseConnection(f"unsupported SASL request: api_key={api_key} version={version}")
            reply = conn.sasl.gate(api_key, version, correlation_id, view, self.clock())
            if reply is not None:
                return reply
        elif api_key in SASL_VERSIONS:
            if not sasl_wire.supported(api_key, version):
                raise CloseConnection(f"unsupported SASL request: api_key={api_key} version={version}")
            return sasl_wire.outside_sasl(api_key, version, correlation_id)
        if api_key == ApiKey.API_VERSIONS:
            return self._api_versions(view, version, correlation_id)
        if not is_supported(api_key, version):
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else "unknown"
            raise CloseConnection(f"unsupported request: api_key={api_key} ({name}) version={version}")
        try:
            cls = request_class(api_key, version)
            header = parse_header(view, cls.__flexible__)
            request = decode_body(cls, view, header.body_offset)
        except DecodeError as exc:
            raise CloseConnection(f"malformed {ApiKey(api_key).name} v{version} request: {exc}") from None
        if self.trace:
            log.debug("%s %s v%d corr=%d client=%s", conn.peer, ApiKey(api_key).name, version, correlation_id,
                      header.client_id)
        # Who asks (authorization) and on which listener (the endpoints Metadata and FindCoordinator
        # give): broker/request_context.py.
        ctx = RequestContext(header.client_id or "", conn.client_host, version, conn.principal, conn.host or "",
                             conn.listener)
        REQUEST_CONTEXT.set(ctx)
        if api_key == ApiKey.FETCH:
            if version < 4:  # message formats v0/v1: the answer down-converted (fetch_down_convert)
                return fetch_old_version(self.fetches.fetch, request, version, correlation_id)
            return self.fetches.fetch(request, version, correlation_id)
        try:
            group_handler = GROUP_HANDLERS.get(api_key)
            txn_handler = TXN_HANDLERS.get(api_key)
            if group_handler is not None:
                body = group_handler(self.group_api, ctx, request)
            elif txn_handler is not None:
                body = txn_handler(self.txn_api, ctx, request)
            elif api_key in CONSUMER_GROUP_HANDLERS:
                body = CONSUMER_GROUP_HANDLERS[api_key](self.consumer_group_api, ctx, request)
            elif api_key in self.shares.handlers:
                body = self.shares.handlers[api_key](ctx, conn, request)
            else:
                body = HANDLERS[api_key](self.broker, request, version, self.clock())
        except Exception as exc:
            log.exception("%s v%d handler failed for %s", ApiKey(api_key).name, version, conn.peer)
            body = _failure_body(api_key, version, exc)
            if body is None:
                raise CloseConnection("internal error") from None
        if body is None:
            return None
        if isinstance(body, dict):
            return encode_response(api_key, version, correlation_id, body)
        if asyncio.isfuture(body):
            return then(body, lambda reply: encode_response(api_key, version, correlation_id, reply))
        return self._encode_later(api_key, version, correlation_id, body)

    async def _encode_later(self, api_key: int, version: int, correlation_id: int, pending: Any) -> bytes:
        try:
            body = await pending
        except OSError as exc:
            log.exception("%s v%d failed", ApiKey(api_key).name, version)
            body = _failure_body(api_key, version, exc)
            if body is None:
                raise
        return encode_response(api_key, version, correlation_id, body)

    def _api_versions(self, view: memoryview, version: int, correlation_id: int) -> bytes:
        """ApiVersions; an unsupported version is answered in v0 layout with UNSUPPORTED_VERSION
        and our ranges, so the client can retry with a version we speak (Kafka's rule). A
        supported version must parse like any request (bytes after the body are ignored, as
        Kafka's parser does); v3+ client software names outside KIP-511's pattern get
        INVALID_REQUEST, as Kafka answers them."""
        body = {"error_code": Error.NONE, "api_keys": api_keys_body(), "throttle_time": 0}
        if not is_supported(ApiKey.API_VERSIONS, version):
            body["error_code"] = Error.UNSUPPORTED_VERSION
            return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)
        cls = request_class(ApiKey.API_VERSIONS, version)
        try:
            request = decode_body(cls, view, parse_header(view, cls.__flexible__).body_offset)
        except DecodeError as exc:
            raise CloseConnection(f"malformed API_VERSIONS v{version} request: {exc}") from None
        if version >= 3 and not (_SOFTWARE_ID.fullmatch(request.client_software_name)
                                 and _SOFTWARE_ID.fullmatch(request.client_software_version)):
            body = {"error_code": Error.INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
        return encode_response(ApiKey.API_VERSIONS, version, correlation_id, body)

    def _apply_group_config(self, group_id: str) -> None:
        """Give the group's shard its own retention and consumer- and share-group timeouts (or the broker defaults again)."""
        shard = self.group_api.runtime_for(group_id).shard
        configs = self.broker.group_configs.get(group_id)
        retention = group_retention_ms(configs)
        if retention is None:
            shard.group_retention_ms.pop(group_id, None)
        else:
            shard.group_retention_ms[group_id] = retention
        for overrides, table in ((consumer_overrides(configs), shard.consumer_group_configs),
                                 (share_overrides(configs), shard.share_group_configs)):
            if overrides == (None, None):
                table.pop(group_id, None)
            else:
                table[group_id] = overrides

    def _offsets_of_deleted_topic(self, topic: str, partitions: int) -> None:
        """Deleting a topic removes every group's offsets for it at once (tombstones, §2)."""
        for runtime in self.runtimes:
            if runtime.state is ShardState.ACTIVE:
                result = runtime.shard.on_partitions_deleted(topic, range(partitions))
                if result.records:
                    runtime.submit(result)
