"""confluent-kafka clients for the Spark sources, configured from `kafka.*` source options.

Spark's Kafka source passes every option that starts with `kafka.` to the Kafka client with
the prefix removed (`kafka.bootstrap.servers`, `kafka.security.protocol`, ...); so do these
helpers, so the same option set works here. Everything is per call and short-lived except the
`Cluster` a stream reader keeps on the driver between micro-batches.
"""

from __future__ import annotations

import json
import re
import time
from typing import Iterable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

TIMEOUT_S = 30.0
EARLIEST = -2  # Spark's JSON offsets: -2 earliest, -1 latest (Kafka's ListOffsets timestamps)
LATEST = -1
INTERNAL_TOPIC_PREFIX = "__"
FETCH_BATCH = 10_000  # messages per Consumer.consume call in a reader

TopicPartitionKey = tuple[str, int]


def client_conf(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.`-prefixed options without the prefix; kafka.bootstrap.servers is required."""
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ValueError("option kafka.bootstrap.servers is required")
    return conf


def reader_conf(options: Mapping[str, str], group_id: str) -> dict[str, str]:
    """Consumer settings for bounded assign() reads: no auto commit, no group membership."""
    conf = client_conf(options)
    conf.pop("group.id", None)
    return {"enable.auto.commit": "false", "enable.partition.eof": "true", "auto.offset.reset": "error",
            "isolation.level": "read_committed", **conf, "group.id": group_id}


def from_json_offsets(parsed: Mapping[str, Mapping[str, int]]) -> dict[TopicPartitionKey, int]:
    """Spark's per-partition offsets, {"topic": {"0": 23, "1": -2}} -> {(topic, 0): 23, ...}."""
    return {(topic, int(p)): int(o) for topic, parts in parsed.items() for p, o in parts.items()}


def parse_partition_json(option: str, text: str, minimum: int) -> dict[TopicPartitionKey, int]:
    """A source option's per-partition JSON, {"topic": {"0": 23}}, validated: every value an
    integer >= minimum (-2 for offsets, where -2/-1 mean earliest/latest; 0 for timestamps).
    Anything else raises a ValueError that names the option."""
    example = '{"topicA": {"0": 23, "1": -2}}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"option {option} is not valid JSON ({e.msg}): {text!r}; expected e.g. {example}") from None
    if not isinstance(parsed, dict) or not all(isinstance(parts, dict) for parts in parsed.values()):
        raise ValueError(f"option {option} must be a JSON object of topics to objects of partitions, "
                         f"e.g. {example}; got {text!r}")
    out: dict[TopicPartitionKey, int] = {}
    for topic, parts in parsed.items():
        for partition, value in parts.items():
            if not partition.isdigit():
                raise ValueError(f"option {option}: partition {partition!r} of topic {topic!r} is not a "
                                 "partition number")
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"option {option}: {topic}-{partition} has {value!r}, expected an integer "
                                 f">= {minimum}")
            out[(topic, int(partition))] = value
    return out


def to_json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """The inverse of from_json_offsets: the dict a stream reader returns as its offset."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


class Cluster:
    """Metadata, log start/end offsets and group offsets of one cluster (driver side)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.conf = client_conf(options)
        self.admin = AdminClient(self.conf)

    def topics(self) -> dict[str, int]:
        """{topic: partition count} of every topic the cluster lists."""
        meta = self.admin.list_topics(timeout=TIMEOUT_S)
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def partitions_of(self, subscribe: Iterable[str] = (), pattern: str | None = None,
                      assign: Iterable[TopicPartitionKey] = ()) -> list[TopicPartitionKey]:
        """The partitions a subscribe list / pattern / assign set names right now."""
        if assign:
            return sorted(assign)
        topics = self.topics()
        if pattern is not None:
            regex = re.compile(pattern)
            names = [t for t in topics if regex.fullmatch(t) and not t.startswith(INTERNAL_TOPIC_PREFIX)]
        else:
            names = [t for t in subscribe if t in topics]
        return sorted((t, p) for t in names for p in range(topics[t]))

    def list_offsets(self, partitions: Iterable[TopicPartitionKey], spec: int, *,
                     skip_unknown: bool = False) -> dict[TopicPartitionKey, int]:
        """Log start (EARLIEST) or log end (LATEST) offsets, one ListOffsets round. With
        `skip_unknown`, a partition the broker no longer knows (its topic deleted since the
        metadata named it) is left out of the answer instead of failing it."""
        offset_spec = OffsetSpec.earliest() if spec == EARLIEST else OffsetSpec.latest()
        return self._list_offsets({tp: offset_spec for tp in partitions}, skip_unknown=skip_unknown)

    def offsets_for_times(self, timestamps: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        """Per partition, the earliest offset whose record timestamp is >= the given epoch
        milliseconds (ListOffsets by timestamp, as KafkaConsumer.offsetsForTimes); None where no
        record qualifies. One ListOffsets round."""
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()})
        return {tp: offset if offset >= 0 else None for tp, offset in found.items()}

    def _list_offsets(self, specs: Mapping[TopicPartitionKey, OffsetSpec], *,
                      skip_unknown: bool = False) -> dict[TopicPartitionKey, int]:
        """One ListOffsets round: the offset each partition's OffsetSpec names."""
        if not specs:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): s for (t, p), s in specs.items()},
                                          request_timeout=TIMEOUT_S)
        found: dict[TopicPartitionKey, int] = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                if not (skip_unknown and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                    raise
        return found

    def group_offsets(self, group: str, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """A group's committed offsets for the given partitions; partitions without one are left out."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        consumer = Consumer({**self.conf, "group.id": group, "enable.auto.commit": "false"})
        try:
            committed = consumer.committed(tps, timeout=TIMEOUT_S)
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.error is None and tp.offset >= 0}


class GroupCommitter:
    """Commits offsets to one group as a standalone consumer: assign-free, member-less, so the
    group has no protocol type and its offsets expire by commit time (KIP-211 standalone rule)."""

    def __init__(self, options: Mapping[str, str], group: str) -> None:
        self.group = group
        self.consumer = Consumer({**client_conf(options), "group.id": group, "enable.auto.commit": "false"})

    def commit(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Synchronous commit; raises KafkaException when any partition fails."""
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        if not tps:
            return
        result = self.consumer.commit(offsets=tps, asynchronous=False)
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise KafkaException(failed[0].error)

    def close(self) -> None:
        """Leave nothing behind (a standalone consumer never joined, so close sends no LeaveGroup)."""
        self.consumer.close()


def read_range(options: Mapping[str, str], topic: str, partition: int, start: int, end: int,
               fail_on_data_loss: bool, group_id: str) -> Iterator[list]:
    """Messages of [start, end) of one partition, in lists of up to FETCH_BATCH, via assign().

    Stops once the consumer's position reaches `end` (offsets may have gaps: compaction,
    transaction markers). A `start` below the log start (records deleted by retention since
    planning) is an error when fail_on_data_loss, else reading skips to the log start, as
    Spark's Kafka source does.
    """
    if start >= end:
        return
    consumer = Consumer(reader_conf(options, group_id))
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while position < end:
            out = []
            # ask for no more than the range holds, so consume() returns as soon as it is read
            wanted = min(FETCH_BATCH, end - max(position, start))
            for msg in consumer.consume(wanted, 1.0):
                err = msg.error()
                if err is None:
                    if msg.offset() < end:
                        out.append(msg)
                elif err.code() == KafkaError._AUTO_OFFSET_RESET:  # start is below the log start
                    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
                    if fail_on_data_loss:
                        raise DataLossError(topic, partition, start, low)
                    if low >= end:  # the whole range is gone
                        return
                    # a partition in this error state can't seek: assign it anew at the log start
                    consumer.assign([TopicPartition(topic, partition, low)])
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
            if out:
                deadline = time.monotonic() + TIMEOUT_S
                yield out
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position < end and time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: no progress from offset {position} to {end} "
                                   f"in {TIMEOUT_S:.0f}s")
    finally:
        consumer.close()


class DataLossError(RuntimeError):
    """Offsets the query still needs are gone from the log (failOnDataLoss=true)."""

    def __init__(self, topic: str, partition: int, wanted: int, available: int) -> None:
        super().__init__(
            f"{topic}-{partition}: offsets {wanted}..{available - 1} are no longer available (log start is "
            f"{available}); some data may have been lost. Set failOnDataLoss=false to skip ahead.")
