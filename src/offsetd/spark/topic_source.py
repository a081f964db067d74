"""`format("offsetd")`: batch and streaming reads of Kafka topics, with optional commit-back.

Options follow Spark's Kafka source: `kafka.bootstrap.servers` (and any `kafka.*` client
setting), exactly one of `subscribe` (comma list) / `subscribePattern` (regex) / `assign`
(JSON {"topic": [0, 1]}), `startingOffsets` (`earliest`, `latest`, per-partition JSON with -2 =
earliest and -1 = latest, and `group` = the committed offsets of `kafka.group.id`, partitions
without a commit falling back to `kafka.auto.offset.reset`, default latest), `endingOffsets`
(batch: `latest` or JSON), `maxOffsetsPerTrigger` (admission control), `failOnDataLoss`
(default true). New: `commitToGroup=<group>` commits each finished micro-batch's end offsets
to that group, so Kafka tooling sees the query's lag; the checkpoint stays the source of truth.

Offsets passed through Spark's checkpoint are Spark's JSON shape {"topic": {"0": next offset}}.
Each input partition is one topic-partition range read by a confluent-kafka Consumer with
assign() and no group membership; rows leave the reader as Arrow record batches.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from .kafka_client import (EARLIEST, LATEST, Cluster, DataLossError, GroupCommitter, TopicPartitionKey,
                           from_json_offsets, parse_json_offsets, read_range, to_json_offsets)
from .schemas import TOPIC_ARROW, TOPIC_DDL

# confluent-kafka timestamp types -> Kafka's TimestampType ids (Spark's timestampType column).
TIMESTAMP_TYPE_IDS = {0: -1, 1: 0, 2: 1}  # NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME
US_PER_MS = 1000


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One topic-partition's [start, end) offsets: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


class TopicOptions:
    """The parsed, validated source options (shared by the batch and stream readers)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options  # case-insensitive, as Spark passes it
        chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
        if len(chosen) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern, assign is required")
        self.subscribe = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        self.pattern = options.get("subscribePattern") or None
        self.assign = [(t, int(p)) for t, ps in json.loads(options["assign"]).items() for p in ps] \
            if options.get("assign") else []
        self.fail_on_data_loss = options.get("failOnDataLoss", "true").lower() != "false"
        self.max_per_trigger = int(options["maxOffsetsPerTrigger"]) if options.get("maxOffsetsPerTrigger") else None
        self.commit_group = options.get("commitToGroup") or None
        self.group_id = options.get("kafka.group.id")
        # Readers join no group; the id only names the client in broker logs.
        self.reader_group = self.group_id or f"offsetd-spark-{uuid.uuid4()}"

    def partitions(self, cluster: Cluster) -> list[TopicPartitionKey]:
        """The partitions the subscription names now (new partitions appear here)."""
        return cluster.partitions_of(self.subscribe, self.pattern, self.assign)

    def resolve(self, cluster: Cluster, spec: str, partitions: list[TopicPartitionKey],
                default: int) -> dict[TopicPartitionKey, int]:
        """startingOffsets / endingOffsets -> concrete offsets for `partitions`."""
        spec = spec.strip()
        if spec == "group":
            if not self.group_id:
                raise ValueError("startingOffsets=group needs the option kafka.group.id")
            committed = cluster.group_offsets(self.group_id, partitions)
            fallback = EARLIEST if self.options.get("kafka.auto.offset.reset") in ("earliest", "smallest") \
                else LATEST
            wanted = {tp: committed.get(tp, fallback) for tp in partitions}
        elif spec in ("earliest", "latest"):
            wanted = dict.fromkeys(partitions, EARLIEST if spec == "earliest" else LATEST)
        elif spec.startswith("{"):
            given = parse_json_offsets(spec)
            wanted = {tp: given.get(tp, default) for tp in partitions}
        else:
            raise ValueError(f"offsets must be earliest, latest, group or JSON, got {spec!r}")
        return self.concrete(cluster, wanted)

    def concrete(self, cluster: Cluster, wanted: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Replace -2/-1 by the log start/end offsets; clamp (or fail on) offsets below the log start."""
        low = cluster.list_offsets(wanted, EARLIEST)
        high = cluster.list_offsets([tp for tp, o in wanted.items() if o == LATEST], LATEST)
        out = {}
        for tp, offset in wanted.items():
            if offset == EARLIEST:
                offset = low[tp]
            elif offset == LATEST:
                offset = high[tp]
            elif offset < low[tp]:
                if self.fail_on_data_loss:
                    raise DataLossError(tp[0], tp[1], offset, low[tp])
                offset = low[tp]
            out[tp] = offset
        return out


def read_arrow(options: Mapping[str, str], part: TopicRange, fail_on_data_loss: bool,
               group_id: str) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches of Spark's Kafka source schema."""
    for messages in read_range(options, part.topic, part.partition, part.start, part.end,
                               fail_on_data_loss, group_id):
        keys, values, offsets, stamps, types, headers = [], [], [], [], [], []
        for m in messages:
            keys.append(m.key())
            values.append(m.value())
            offsets.append(m.offset())
            kind, ts = m.timestamp()
            types.append(TIMESTAMP_TYPE_IDS.get(kind, -1))
            stamps.append(ts * US_PER_MS if kind else None)
            h = m.headers()
            headers.append([{"key": k, "value": v} for k, v in h] if h else [])
        n = len(keys)
        yield pa.RecordBatch.from_arrays([
            pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
            pa.array([part.topic] * n, pa.string()), pa.array([part.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()), pa.array(stamps, TOPIC_ARROW.field("timestamp").type),
            pa.array(types, pa.int32()), pa.array(headers, TOPIC_ARROW.field("headers").type),
        ], schema=TOPIC_ARROW)


class TopicBatchReader(DataSourceReader):
    """spark.read: one task per topic-partition between startingOffsets and endingOffsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = TopicOptions(options)

    def partitions(self) -> list[TopicRange]:
        """Resolved on the driver when the query is planned."""
        cluster = Cluster(self.opts.options)
        parts = self.opts.partitions(cluster)
        start = self.opts.resolve(cluster, self.opts.options.get("startingOffsets", "earliest"), parts, EARLIEST)
        end = self.opts.resolve(cluster, self.opts.options.get("endingOffsets", "latest"), parts, LATEST)
        return [TopicRange(t, p, start[(t, p)], end[(t, p)]) for t, p in parts if start[(t, p)] < end[(t, p)]]

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        """Runs in an executor's Python worker."""
        return read_arrow(self.opts.options, partition, self.opts.fail_on_data_loss, self.opts.reader_group)


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches bounded by maxOffsetsPerTrigger, committed back on commit()."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = TopicOptions(options)
        self._cluster: Cluster | None = None
        self.committer: GroupCommitter | None = None
        self.target: dict[TopicPartitionKey, int] | None = None  # Trigger.AvailableNow bound
        self.committed: dict | None = None  # last offsets committed to commitToGroup

    def __getstate__(self) -> dict:
        """Spark pickles the reader to ship `read` to executors: leave the clients behind."""
        return {**self.__dict__, "_cluster": None, "committer": None}

    @property
    def cluster(self) -> Cluster:
        """The driver's metadata client, created on first use."""
        if self._cluster is None:
            self._cluster = Cluster(self.opts.options)
        return self._cluster

    def initialOffset(self) -> dict:
        """Where a query with a fresh checkpoint starts (default latest, as Spark's Kafka source)."""
        parts = self.opts.partitions(self.cluster)
        spec = self.opts.options.get("startingOffsets", "latest")
        return to_json_offsets(self.opts.resolve(self.cluster, spec, parts, LATEST))

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as Spark's ReadMaxRows admission control."""
        if self.opts.max_per_trigger is not None:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def _available(self, start: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Log end offsets of every subscribed partition, new ones included. A partition of
        `start` that no longer exists (topic deleted) is data loss: an error when failOnDataLoss,
        else it is dropped."""
        now = self.opts.partitions(self.cluster)
        gone = sorted(set(start) - set(now))
        if gone and self.opts.fail_on_data_loss:
            raise RuntimeError(f"partitions {gone} no longer exist; some data may have been lost. "
                               "Set failOnDataLoss=false to continue without them.")
        return self.cluster.list_offsets(now, LATEST)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: never read past what exists now."""
        self.target = self._available({})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offset of the next micro-batch: everything available, or at most
        ReadMaxRows rows split over partitions in proportion to their backlog (as Spark's Kafka
        source does); new partitions start from their log start.

        Spark calls commit(end) only when it plans the batch after the one that ended at `end`,
        so an idle query would never commit its last batch. latestOffset(start) is called after
        the batch ending at `start` is recorded in the commit log (or, for a new query, with the
        initial offsets), so `start` is committed to commitToGroup here too: the group's lag is
        exact whenever the query is idle."""
        self._commit_to_group(start)
        begin = from_json_offsets(start)
        latest = self._available(begin)
        if self.target is not None:
            latest = {tp: min(o, self.target.get(tp, o)) for tp, o in latest.items()}
        self._start_new_partitions(begin, latest)
        end = {tp: max(latest[tp], begin[tp]) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            end = cap_rows(begin, end, limit.max_rows)
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict:
        """Log end offsets, for Spark's progress report (latestOffset / offsets behind)."""
        return to_json_offsets(self._available({}))

    def partitions(self, start: dict, end: dict) -> list[TopicRange]:
        """One range per partition that has new records; a partition missing from `start` is
        new and starts from its log start offset."""
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        self._start_new_partitions(begin, stop)
        return [TopicRange(t, p, begin[(t, p)], o) for (t, p), o in sorted(stop.items()) if begin[(t, p)] < o]

    def _start_new_partitions(self, begin: dict[TopicPartitionKey, int],
                              partitions: Iterable[TopicPartitionKey]) -> None:
        """Add the `partitions` missing from `begin` (new ones) to it at their log start offsets."""
        new = [tp for tp in partitions if tp not in begin]
        begin.update(self.opts.concrete(self.cluster, dict.fromkeys(new, EARLIEST)))

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        """Runs in an executor's Python worker; stateless."""
        return read_arrow(self.opts.options, partition, self.opts.fail_on_data_loss, self.opts.reader_group)

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to `end`: commit it to commitToGroup, if set."""
        self._commit_to_group(end)

    def _commit_to_group(self, done: dict) -> None:
        """Commit `done` (offsets whose batches the sink has committed) unless already committed."""
        if self.opts.commit_group is None or done == self.committed:
            return
        if self.committer is None:
            self.committer = GroupCommitter(self.opts.options, self.opts.commit_group)
        self.committer.commit(from_json_offsets(done))
        self.committed = done

    def stop(self) -> None:
        """Close the commit consumer when the query stops."""
        if self.committer is not None:
            self.committer.close()
            self.committer = None


def cap_rows(begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
             max_rows: int) -> dict[TopicPartitionKey, int]:
    """End offsets holding at most max_rows records in total, shared in proportion to each
    partition's backlog (rounded down; the remainder goes to the largest backlogs first, so a
    limit smaller than the number of partitions still makes progress)."""
    backlog = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    share = {tp: backlog[tp] * max_rows // total for tp in backlog}
    left = max_rows - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: backlog[tp] - share[tp], reverse=True)[:left]:
        share[tp] += 1
    return {tp: begin[tp] + share[tp] for tp in end}


class OffsetdTopicSource(DataSource):
    """`spark.read(Stream).format("offsetd")`: Kafka topics with Spark's Kafka source schema."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "offsetd"

    def schema(self) -> str:
        """Spark's Kafka source schema."""
        return TOPIC_DDL

    def reader(self, schema: StructType) -> TopicBatchReader:
        """spark.read."""
        return TopicBatchReader(self.options)

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        """spark.readStream (endingOffsets is a batch option, as in Spark's Kafka source)."""
        if self.options.get("endingOffsets"):
            raise ValueError("endingOffsets is for batch queries only")
        return TopicStreamReader(self.options)
