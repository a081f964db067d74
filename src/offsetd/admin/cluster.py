"""The operator tools' only door to a cluster: a thin layer over confluent-kafka's AdminClient and
Consumer, and kafka-python's KafkaAdminClient for OffsetDelete and ConsumerGroupDescribe's epochs
(which confluent-kafka's binding lacks). Every call is bounded by `--timeout`; results come back as `model` types, and failures
as `ToolError` with Kafka's wording. Works against offsetd and any Kafka cluster."""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Iterable

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import OffsetSpec

from .client_config import kafka_python_config
from .connection import QUIET, AdminConnection
from .errors import ToolError, kafka_error_name, kafka_error_text
from .model import TP, Committed, Coordinator, GroupDescription, GroupListing, LogBounds, Member

# confluent-kafka enum names -> Kafka's display names (GroupState / GroupType toString()).
_STATE_NAMES = {"UNKNOWN": "Unknown", "PREPARING_REBALANCING": "PreparingRebalance",
                "COMPLETING_REBALANCING": "CompletingRebalance", "STABLE": "Stable", "DEAD": "Dead",
                "EMPTY": "Empty", "ASSIGNING": "Assigning", "RECONCILING": "Reconciling"}
_TYPE_NAMES = {"UNKNOWN": "Unknown", "CLASSIC": "Classic", "CONSUMER": "Consumer"}

# Group id of the assign()-only consumer that reads record timestamps: it never joins the group
# and never commits, but librdkafka wants a group.id configured.
_LAG_TIME_GROUP = "offsetd-groups-lag-time"


def error_text(exc: BaseException) -> str:
    """Kafka's message for a client exception (confluent-kafka or kafka-python)."""
    code, text = _error_code(exc)
    return kafka_error_text(code, text)


def error_name_and_text(exc: BaseException) -> str:
    """`NAME: message` for a client exception, e.g. `NON_EMPTY_GROUP: The group is not empty.`"""
    code, text = _error_code(exc)
    return f"{kafka_error_name(code, type(exc).__name__)}: {kafka_error_text(code, text)}"


def _error_code(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code or -1, the client's text) of a confluent-kafka or kafka-python error."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        return err.code(), err.str()
    errno = getattr(exc, "errno", None)
    if isinstance(errno, int):
        return errno, getattr(exc, "description", None) or str(exc)
    return -1, str(exc) or type(exc).__name__


@dataclass
class OffsetDeleteResult:
    """OffsetDelete outcome: Kafka's top-level error name and message (None when it succeeded)
    and, per partition, None on success or Kafka's message for its error."""

    error: str | None
    message: str | None
    partitions: dict[TP, str | None]


class Cluster:
    """A connection to one cluster for one command run; `close()` releases the clients."""

    def __init__(self, client_config: dict[str, str], timeout_s: float) -> None:
        self.client_config = dict(client_config)
        self.timeout_s = timeout_s
        self.connection = AdminConnection(self.client_config, timeout_s)  # fails fast on a bad login
        self.admin = self.connection.admin
        self._consumer: Consumer | None = None

    def close(self) -> None:
        """Close the timestamp consumer if one was opened (AdminClient needs no close)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _result(self, future: Future, what: str) -> Any:
        """The result of an admin future within the timeout, or ToolError naming `what`."""
        try:
            return self.connection.result(future, self.timeout_s + 1)
        except KafkaException as exc:
            raise ToolError(f"{what} failed: {error_text(exc)}") from None
        except TimeoutError:
            raise ToolError(f"{what} timed out after {self.timeout_s:g} s") from None

    # --- groups -----------------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        """Every consumer group (classic and KIP-848), sorted by id."""
        result = self._result(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "ListGroups")
        if result.errors:
            raise ToolError(f"ListGroups failed: {error_text(KafkaException(result.errors[0]))}")
        listings = [GroupListing(g.group_id, _name(_STATE_NAMES, g.state), _name(_TYPE_NAMES, g.type))
                    for g in result.valid]
        return sorted(listings, key=lambda g: g.group)

    def describe_groups(self, groups: Iterable[str], epochs: bool = False) -> dict[str, GroupDescription]:
        """DescribeGroups for each group; a group that does not exist comes back as `Dead`. With
        `epochs`, consumer groups also get their epochs and target assignments (with_epochs)."""
        groups = list(dict.fromkeys(groups))
        if not groups:
            return {}
        futures = self.admin.describe_consumer_groups(groups, request_timeout=self.timeout_s)
        result = {}
        for group in groups:
            try:
                d = self.connection.result(futures[group], self.timeout_s + 1)
            except KafkaException as exc:
                if _error_code(exc)[0] == 69:  # GROUP_ID_NOT_FOUND (KIP-848 brokers): Dead, as Kafka's tool treats it
                    result[group] = GroupDescription(group, "Dead", "Unknown", "", None)
                    continue
                raise ToolError(f"Describing group '{group}' failed: {error_text(exc)}") from None
            except TimeoutError:
                raise ToolError(f"Describing group '{group}' timed out after {self.timeout_s:g} s") from None
            coordinator = Coordinator(d.coordinator.id, d.coordinator.host, d.coordinator.port) if d.coordinator else None
            members = tuple(
                Member(m.member_id, m.group_instance_id, m.client_id, m.host,
                       tuple(TP(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])))
                for m in d.members)
            result[group] = GroupDescription(group, _name(_STATE_NAMES, d.state), _name(_TYPE_NAMES, d.type),
                                             d.partition_assignor or "", coordinator, members)
        return self.with_epochs(result) if epochs else result

    def with_epochs(self, descriptions: dict[str, GroupDescription]) -> dict[str, GroupDescription]:
        """The consumer groups among `descriptions` with their group and target assignment epochs
        and their members' epochs and target assignments, from ConsumerGroupDescribe through
        kafka-python (confluent-kafka's describe has no epochs). Unchanged when there is no
        consumer group or the cluster does not serve API 69."""
        from .consumer_group_describe import describe_epochs
        from .kafka_python_admin import ToolAdminClient

        consumer = sorted(g for g, d in descriptions.items() if d.type == "Consumer")
        if not consumer:
            return descriptions
        timeout_ms = int(self.timeout_s * 1000)
        try:
            admin = ToolAdminClient(**kafka_python_config(self.client_config), request_timeout_ms=timeout_ms,
                                    bootstrap_timeout_ms=timeout_ms)
        except Exception as exc:  # kafka-python raises a family of errors on connect
            raise ToolError(f"Connecting for ConsumerGroupDescribe failed: {error_name_and_text(exc)}") from None
        try:
            found = describe_epochs(admin, consumer)
        except Exception as exc:
            raise ToolError(f"ConsumerGroupDescribe failed: {error_name_and_text(exc)}") from None
        finally:
            admin.close()
        result = dict(descriptions)
        for group, epochs in found.items():
            d = descriptions[group]
            members = []
            for m in d.members:
                e = epochs.members.get(m.consumer_id)
                members.append(m if e is None else replace(
                    m, member_epoch=e.member_epoch, target_assignment=e.target_assignment,
                    upgraded=None if e.member_type < 0 else e.member_type == 1))
            result[group] = replace(d, members=tuple(members), group_epoch=epochs.group_epoch,
                                    target_assignment_epoch=epochs.assignment_epoch)
        return result

    def committed_offsets(self, group: str) -> dict[TP, Committed]:
        """The group's committed offsets (OffsetFetch for all partitions)."""
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                         request_timeout=self.timeout_s)
        result = self._result(futures[group], f"Fetching committed offsets of group '{group}'")
        committed = {}
        for tp in result.topic_partitions:
            if tp.error is None and tp.offset >= 0:
                committed[TP(tp.topic, tp.partition)] = Committed(tp.offset, tp.leader_epoch)
        return committed

    def alter_offsets(self, group: str, offsets: dict[TP, int]) -> None:
        """Commit `offsets` for the (inactive) group, as Kafka's alterConsumerGroupOffsets does."""
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self._result(futures[group], f"Committing offsets of group '{group}'")
        failed = [f"{tp.topic}-{tp.partition}: {error_text(KafkaException(tp.error))}"
                  for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise ToolError(f"Committing offsets of group '{group}' failed: " + "; ".join(failed))

    def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        """DeleteGroups: group -> None when deleted, else `NAME: message`."""
        futures = self.admin.delete_consumer_groups(groups, request_timeout=self.timeout_s)
        outcome: dict[str, str | None] = {}
        for group in groups:
            try:
                self.connection.result(futures[group], self.timeout_s + 1)
                outcome[group] = None
            except KafkaException as exc:
                outcome[group] = error_name_and_text(exc)
            except TimeoutError:
                outcome[group] = f"REQUEST_TIMED_OUT: no answer within {self.timeout_s:g} s"
        return outcome

    def delete_offsets(self, group: str, partitions: Iterable[TP]) -> OffsetDeleteResult:
        """OffsetDelete (KIP-496) through kafka-python. A top-level error fails every partition,
        and a partition error becomes the top-level error, as in Kafka's admin client."""
        from kafka import TopicPartition as KpTopicPartition

        from .kafka_python_admin import ToolAdminClient

        partitions = sorted(set(partitions))
        timeout_ms = int(self.timeout_s * 1000)
        try:
            admin = ToolAdminClient(**kafka_python_config(self.client_config), request_timeout_ms=timeout_ms,
                                    bootstrap_timeout_ms=timeout_ms)
        except Exception as exc:  # kafka-python raises a family of errors on connect
            raise ToolError(f"Connecting for OffsetDelete failed: {error_name_and_text(exc)}") from None
        try:
            results = admin.delete_group_offsets(group, [KpTopicPartition(tp.topic, tp.partition) for tp in partitions])
        except Exception as exc:  # kafka-python raises the top-level error
            code, _ = _error_code(exc)
            text = error_text(exc)
            return OffsetDeleteResult(kafka_error_name(code, type(exc).__name__), text, {tp: text for tp in partitions})
        finally:
            admin.close()
        outcome = OffsetDeleteResult(None, None, {})
        for tp in partitions:
            err = results.get(KpTopicPartition(tp.topic, tp.partition))
            if err is None or err.errno == 0:
                outcome.partitions[tp] = None
                continue
            outcome.partitions[tp] = kafka_error_text(err.errno, err.description)
            if outcome.error is None:
                outcome.error, outcome.message = kafka_error_name(err.errno, err.message), outcome.partitions[tp]
        return outcome

    # --- topics and log offsets ---------------------------------------------------------------

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, list[int] | str]:
        """Partition ids of each topic, or Kafka's error message for a topic that cannot be
        described (e.g. it does not exist)."""
        topics = sorted(set(topics))
        if not topics:
            return {}
        futures = self.admin.describe_topics(TopicCollection(topics), request_timeout=self.timeout_s)
        result: dict[str, list[int] | str] = {}
        for topic in topics:
            try:
                description = self.connection.result(futures[topic], self.timeout_s + 1)
                result[topic] = sorted(p.id for p in description.partitions)
            except KafkaException as exc:
                result[topic] = error_text(exc)
            except TimeoutError:
                raise ToolError(f"Describing topic '{topic}' timed out after {self.timeout_s:g} s") from None
        return result

    def log_bounds(self, partitions: Iterable[TP]) -> dict[TP, LogBounds | None]:
        """Log start and log end offsets; the end is the latest stable offset (read_committed),
        so transaction markers and open transactions never count as lag. None where ListOffsets
        failed (e.g. the topic was deleted)."""
        partitions = sorted(set(partitions))
        starts = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions})
        ends = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions})
        return {tp: LogBounds(starts[tp][0], ends[tp][0]) if starts[tp] and ends[tp] else None
                for tp in partitions}

    def offsets_for_timestamp(self, partitions: Iterable[TP], timestamp_ms: int) -> dict[TP, int | None]:
        """The first offset whose record timestamp is >= `timestamp_ms`, per partition; None where
        no such record exists (Kafka then falls back to the log end)."""
        return {tp: None if found is None else found[0]
                for tp, found in self.list_offsets_by_time(partitions, timestamp_ms).items()}

    def list_offsets_by_time(self, partitions: Iterable[TP], timestamp_ms: int) -> dict[TP, tuple[int, int] | None]:
        """ListOffsets by time: (the first offset whose record timestamp is >= `timestamp_ms`, that
        record's timestamp) per partition; None where no such record exists."""
        partitions = sorted(set(partitions))
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(timestamp_ms) for tp in partitions})
        result: dict[TP, tuple[int, int] | None] = {}
        for tp in partitions:
            answer = found[tp]
            if answer is None:
                raise ToolError(f"Error getting offset by timestamp of topic partition: {tp}")
            result[tp] = answer if answer[0] >= 0 else None
        return result

    def _list_offsets(self, specs: dict[TP, OffsetSpec]) -> dict[TP, tuple[int, int] | None]:
        """ListOffsets (read_committed): partition -> (offset, timestamp), or None on error."""
        if not specs:
            return {}
        futures = self.admin.list_offsets({TopicPartition(tp.topic, tp.partition): spec for tp, spec in specs.items()},
                                          isolation_level=IsolationLevel.READ_COMMITTED,
                                          request_timeout=self.timeout_s)
        result: dict[TP, tuple[int, int] | None] = {}
        for ctp, future in futures.items():
            tp = TP(ctp.topic, ctp.partition)
            try:
                info = self.connection.result(future, self.timeout_s + 1)
                result[tp] = (info.offset, info.timestamp)
            except KafkaException:
                result[tp] = None
            except TimeoutError:
                raise ToolError(f"ListOffsets timed out after {self.timeout_s:g} s") from None
        return result

    # --- records ----------------------------------------------------------------------------

    def first_record_timestamps(self, wanted: Iterable[tuple[TP, int]]) -> dict[tuple[TP, int], int | None]:
        """Timestamp of the first record at or after each (partition, offset): one assign()-only
        read_committed consumer, all partitions at once (a partition wanted at several offsets,
        by several groups, takes one round per offset). None where no record arrived in time."""
        by_partition: dict[TP, list[int]] = defaultdict(list)
        for tp, offset in set(wanted):
            by_partition[tp].append(offset)
        for offsets in by_partition.values():
            offsets.sort()
        result: dict[tuple[TP, int], int | None] = {}
        deadline = time.monotonic() + self.timeout_s
        round_index = 0
        while True:
            targets = {tp: offsets[round_index] for tp, offsets in by_partition.items() if round_index < len(offsets)}
            if not targets:
                return result
            found = self._read_first_records(targets, deadline)
            result.update({(tp, offset): found.get(tp) for tp, offset in targets.items()})
            round_index += 1

    def _read_first_records(self, targets: dict[TP, int], deadline: float) -> dict[TP, int]:
        """Assign each partition at its offset and keep the timestamp of its first record."""
        consumer = self._timestamp_consumer()
        consumer.assign([TopicPartition(tp.topic, tp.partition, offset) for tp, offset in targets.items()])
        found: dict[TP, int] = {}
        pending = set(targets)
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
                tp = TP(msg.topic(), msg.partition())
                if tp not in pending:
                    continue
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(tp)  # nothing at or after the offset: time lag unknown
                    continue
                # A fetch may start at the batch holding the offset, so skip records before it.
                if msg.offset() >= targets[tp]:
                    found[tp] = msg.timestamp()[1]
                    pending.discard(tp)
                    consumer.pause([TopicPartition(tp.topic, tp.partition)])
        # Un-pause before the next round: a pause would outlive unassign() and a new assign().
        consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in targets])
        consumer.unassign()
        return found

    def _timestamp_consumer(self) -> Consumer:
        """The one consumer used to read record timestamps (created on first use)."""
        if self._consumer is None:
            self._consumer = Consumer({
                **self.client_config, "logger": QUIET, "group.id": _LAG_TIME_GROUP,
                "enable.auto.commit": False, "enable.partition.eof": True,
                "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            })
        return self._consumer


def _name(names: dict[str, str], enum_value: Any) -> str:
    """Kafka's display name for a confluent-kafka enum member (Unknown when absent)."""
    return names.get(getattr(enum_value, "name", ""), "Unknown")
