"""The `offsetd transactions` tool's door to a cluster: kafka-python's KafkaAdminClient, which
speaks the KIP-664 APIs (ListTransactions, DescribeTransactions after FindCoordinator key type 1,
DescribeProducers to the partition leader or a chosen broker, WriteTxnMarkers v1 ABORT to the
leader: what Kafka's Admin.abortTransaction sends). confluent-kafka's binding has none of these.
Results come back as `transactions` model types; failures as ToolError in Kafka's words."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, TypeVar

import kafka.errors as kafka_errors
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import AbortTransactionSpec

from .client_config import kafka_python_config
from .connection import AdminConnection
from .errors import ToolError
from .kafka_python_admin import ToolAdminClient
from .transactions import ProducerState, TopicPartition, TransactionDescription, TransactionListing

# kafka-python logs connection trouble itself; the tool reports a failure once (a NullHandler
# keeps Python's last-resort handler from printing kafka-python's warnings).
logging.getLogger("kafka").addHandler(logging.NullHandler())

RETRY_BACKOFF_S = 0.1
# Retriable in kafka-python's eyes, but for a tool an unknown topic or partition is an answer.
NOT_RETRIED = (kafka_errors.UnknownTopicOrPartitionError,)

T = TypeVar("T")

# API key -> Kafka's API name, for the "broker does not support" message.
API_NAMES: dict[int, str] = {27: "WriteTxnMarkers", 61: "DescribeProducers", 65: "DescribeTransactions",
                             66: "ListTransactions"}


def describe_error(exc: BaseException) -> str:
    """`NAME: description` for a kafka-python error (Kafka's error name and text); for a version
    the broker lacks, kafka-python's own sentence, which names the version needed."""
    name = getattr(exc, "message", None)
    description = getattr(exc, "description", None)
    if isinstance(exc, kafka_errors.UnsupportedVersionError) and exc.args:
        return f"UNSUPPORTED_VERSION: {exc.args[0]}"
    if isinstance(name, str) and isinstance(description, str):
        return f"{name}: {description}"
    return str(exc) or type(exc).__name__


class TxnCluster:
    """One admin connection for one command run; `close()` releases it."""

    def __init__(self, client_config: dict[str, str], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        timeout_ms = int(timeout_s * 1000)
        AdminConnection(client_config, timeout_s).check_login()
        try:
            settings = {"client_id": "offsetd-transactions", **kafka_python_config(client_config),
                        "request_timeout_ms": timeout_ms, "bootstrap_timeout_ms": timeout_ms}
            self.admin = ToolAdminClient(**settings)
        except Exception as exc:  # kafka-python raises a family of errors on connect
            raise ToolError(f"Connecting to {client_config.get('bootstrap.servers')} failed: "
                            f"{describe_error(exc)}") from None
        self._versions = {int(key): value for key, value in self.admin.api_versions().items()}

    def close(self) -> None:
        """Close the admin client's connections and its network thread."""
        self.admin.close()

    def require(self, api_key: int) -> None:
        """ToolError unless the broker advertises API `api_key` (checked before calling it, so the
        message names the API rather than a symptom such as FindCoordinator's key type error)."""
        if api_key not in self._versions:
            raise ToolError(f"The broker does not support {API_NAMES[api_key]} (API key {api_key}); "
                            "it needs Kafka 3.0 or later (KIP-664) or an offsetd with transactions")

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a kafka-python call, again after a retriable error (a coordinator loading, a
        leader moving) until the timeout, as Kafka's admin client does; errors become ToolError
        naming `what`."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return fn(*args, **kwargs)
            except kafka_errors.KafkaError as exc:
                retry = exc.retriable and not isinstance(exc, NOT_RETRIED)
                if not (retry and time.monotonic() + RETRY_BACKOFF_S < deadline):
                    raise ToolError(f"{what} failed: {describe_error(exc)}") from None
            time.sleep(RETRY_BACKOFF_S)

    # --- coordinators ----------------------------------------------------------------------------

    def list_transactions(self, duration_ms: int | None = None, pattern: str | None = None,
                          producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """ListTransactions on every broker (each coordinates a slice of the ids)."""
        self.require(66)
        found = self._call("ListTransactions", self.admin.list_transactions, duration_filter_ms=duration_ms,
                           transactional_id_pattern=pattern, producer_id_filters=list(producer_ids) or None)
        return [TransactionListing(t.transactional_id, broker, t.producer_id, t.state.value)
                for broker, listings in found.items() for t in listings]

    def describe_transaction(self, transactional_id: str) -> TransactionDescription | None:
        """DescribeTransactions at the id's coordinator; None for TRANSACTIONAL_ID_NOT_FOUND."""
        self.require(65)

        def describe() -> Any:
            try:
                return self.admin.describe_transactions([transactional_id])[transactional_id]
            except kafka_errors.TransactionalIdNotFoundError:
                return None

        d = self._call(f"Describing transactional id '{transactional_id}'", describe)
        if d is None:
            return None
        return TransactionDescription(d.coordinator_id, transactional_id, d.producer_id, d.producer_epoch,
                                      d.state.value, d.transaction_timeout_ms, d.transaction_start_time_ms,
                                      tuple(sorted(TopicPartition(tp.topic, tp.partition) for tp in d.topic_partitions)))

    # --- partition leaders -------------------------------------------------------------------------

    def describe_producers(self, partitions: Iterable[TopicPartition],
                           broker_id: int | None = None) -> dict[TopicPartition, list[ProducerState]]:
        """DescribeProducers: the active producers of each partition, asked of its leader or of
        `broker_id` (any replica)."""
        self.require(61)
        partitions = sorted(set(partitions))
        if not partitions:
            return {}
        where = f" on broker {broker_id}" if broker_id is not None else ""
        found = self._call(f"Describing producers{where}", self.admin.describe_producers,
                           [KpTopicPartition(tp.topic, tp.partition) for tp in partitions], broker_id=broker_id)
        return {TopicPartition(tp.topic, tp.partition): [
            ProducerState(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
                          p.current_transaction_start_offset) for p in state.active_producers]
            for tp, state in found.items()}

    def abort(self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """WriteTxnMarkers ABORT for one producer on one partition, sent to its leader."""
        self.require(27)
        spec = AbortTransactionSpec(KpTopicPartition(tp.topic, tp.partition), producer_id, producer_epoch,
                                    coordinator_epoch)
        self._call(f"Aborting the transaction of producer {producer_id} on {tp}", self.admin.abort_transaction, spec)

    # --- topics ------------------------------------------------------------------------------------

    def _metadata(self, topics: list[str] | None) -> list[dict[str, Any]]:
        """Metadata of `topics` (None: every topic, internal ones included)."""
        return self._call("Metadata", self.admin.describe_topics, topics)

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        """The partitions of `topic`; ToolError when the cluster does not know it."""
        for described in self._metadata([topic]):
            if described["name"] == topic:
                if described["error_code"]:
                    error = kafka_errors.for_code(described["error_code"])
                    raise ToolError(f"Describing topic '{topic}' failed: {describe_error(error())}")
                return sorted(TopicPartition(topic, p["partition_index"]) for p in described["partitions"])
        raise ToolError(f"Topic '{topic}' does not exist")

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        """Every partition (internal topics included) that `broker_id` holds a replica of."""
        held: dict[str, list[int]] = defaultdict(list)
        for described in self._metadata(None):
            for p in described["partitions"]:
                if broker_id in (p.get("replica_nodes") or [p["leader_id"]]):
                    held[described["name"]].append(p["partition_index"])
        return sorted(TopicPartition(topic, p) for topic, ps in held.items() for p in ps)

    def broker_ids(self) -> list[int]:
        """The ids of the cluster's brokers (from metadata)."""
        described = self._call("DescribeCluster", self.admin.describe_cluster)
        return sorted(b["broker_id"] for b in described["brokers"])
