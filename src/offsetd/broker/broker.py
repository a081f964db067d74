"""The data-plane broker: topics, partition logs and producer ids, with no I/O loop of its own.

Handlers (metadata, admin, produce, fetch modules) take a Broker and a decoded request and return
a response body dict. The server owns sockets and timers and tells the broker the time.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..config import BrokerConfig
from ..protocol.errors import Error
from ..storage.log_dir import StorageError
from .cluster_view import ClusterView, LocalView
from .group_configs import GroupConfigs
from .producer_ids import ProducerIdManager
from .topics import TopicRegistry


NONE = Error.NONE
UNKNOWN_TOPIC_OR_PARTITION = Error.UNKNOWN_TOPIC_OR_PARTITION
KAFKA_STORAGE_ERROR = Error.KAFKA_STORAGE_ERROR
NOT_LEADER_OR_FOLLOWER = Error.NOT_LEADER_OR_FOLLOWER
FENCED_LEADER_EPOCH = Error.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH = Error.UNKNOWN_LEADER_EPOCH
NO_LEADER_EPOCH = -1  # a request's current_leader_epoch when the client asks for no check


class Broker:
    """Shared state of the data-plane handlers. Cluster mode passes its own catalogue, view and
    producer id source (server/cluster_runtime.py); the defaults are the embedded single node."""

    def __init__(self, config: BrokerConfig, now_ms: int, *, topics: TopicRegistry | None = None,
                 cluster: ClusterView | None = None, producer_ids: Any = None,
                 group_configs: GroupConfigs | None = None) -> None:
        self.config = config
        self.node_id: int = config.get("node.id")
        self.topics = topics if topics is not None else TopicRegistry(config, now_ms)
        self.cluster: ClusterView = cluster if cluster is not None else LocalView(config)
        self.producer_ids = producer_ids if producer_ids is not None else ProducerIdManager(config.log_dir)
        self.group_configs = group_configs if group_configs is not None else GroupConfigs(config.log_dir)
        # Called with (topic, partition) after every append, so fetch long polls can wake up.
        self.on_append: Callable[[str, int], None] = lambda topic, partition: None
        # Called with (topic, partition count) after DeleteTopics, so the coordinator drops offsets.
        self.on_topic_deleted: Callable[[str, int], None] = lambda topic, partitions: None
        # Called with a group id after its configs change, so its coordinator shard follows.
        self.on_group_config_changed: Callable[[str], None] = lambda group_id: None
        # (transactional id, producer id, epoch, topic, partition) -> error code: is the partition
        # in the producer's open transaction? Asked before its first transactional batch (the
        # transaction coordinator's answer; None: not checked).
        self.txn_verifier: Callable[[str, int, int, str, int], int] | None = None
        # Per partition log, resolved once the last append waiting for a verification is decided:
        # appends to that partition arriving meanwhile are decided after it (broker/produce.py).
        self.verifying: dict[Any, asyncio.Future[None]] = {}
        # security/acl.py's Authorizer when authorizer.class.name is set (server/security_api.py
        # replaces it when the ACLs change); None: authorization off, everything allowed.
        self.authorizer: Any = None
        self.security: Any = None  # server/security_api.SecurityRuntime (the ACL and SCRAM APIs)

    def serving_partition(self, topic: str, index: int,
                          current_leader_epoch: int = NO_LEADER_EPOCH) -> "tuple[Any, int]":
        """(log, NONE) of a partition this broker can serve reads of, or (log or None, error):
        UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR (its log directory is offline),
        NOT_LEADER_OR_FOLLOWER (cluster mode: another broker leads it, or nobody, for a moment), or
        the client's `current_leader_epoch` judged against the leader's (KIP-320, -1: not checked):
        FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer. The checks Fetch,
        ListOffsets and OffsetForLeaderEpoch share."""
        plog = self.topics.partition(topic, index)
        if plog is None:
            return None, UNKNOWN_TOPIC_OR_PARTITION
        if plog.log_dir.offline or self.open_log(plog) != NONE:
            return plog, KAFKA_STORAGE_ERROR
        if not plog.leader:
            return plog, NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch != NO_LEADER_EPOCH:
            epoch = plog.leader_epoch
            if current_leader_epoch < epoch:
                return plog, FENCED_LEADER_EPOCH
            if current_leader_epoch > epoch:
                return plog, UNKNOWN_LEADER_EPOCH
        return plog, NONE

    @staticmethod
    def open_log(plog: Any) -> int:
        """NONE once the partition's log is open (a partition opens at its first use:
        storage/unopened_log.py), KAFKA_STORAGE_ERROR when its directory could not be read."""
        if plog.opened:
            return NONE
        try:
            plog.open_now()
        except StorageError:
            return KAFKA_STORAGE_ERROR
        return NONE

    def apply_retention(self, now_ms: int) -> int:
        """Delete expired segments of every delete-policy topic; returns segments removed."""
        return sum(log.apply_retention(now_ms) for topic in self.topics for log in topic.partitions)

    def flush_all(self) -> None:
        """fsync every data partition (log.flush.interval.ms timer); internal topics are flushed
        by their owner (the coordinator's write path), never concurrently with it."""
        for topic in self.topics:
            if not topic.internal:
                for index, log in enumerate(topic.partitions):
                    if log.log_dir.offline:
                        continue
                    try:
                        log.flush()
                    except OSError as exc:
                        # Acknowledged data whose fsync failed cannot be undone: the directory
                        # goes offline (storage/log_dir.py), even on a full disk.
                        log.log_dir.failed(exc, f"flush of {topic.name}-{index}", undone=False)

    def close(self) -> None:
        """Flush and close all logs."""
        self.topics.close()
