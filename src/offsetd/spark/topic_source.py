"""`format("offsetd")`: batch and streaming reads of Kafka topics, with optional commit-back.

Options follow Spark's Kafka source: `kafka.bootstrap.servers` (and any `kafka.*` client
setting), exactly one of `subscribe` (comma list) / `subscribePattern` (regex) / `assign`
(JSON {"topic": [0, 1]}), `startingOffsets` (`earliest`, `latest`, per-partition JSON with -2 =
earliest and -1 = latest, and `group` = the committed offsets of `kafka.group.id`, partitions
without a commit falling back to `kafka.auto.offset.reset`, default latest), `endingOffsets`
(batch: `latest` or JSON), the timestamp bounds `startingTimestamp` / `endingTimestamp` (epoch ms,
every partition) and `startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` (JSON of epoch ms
per partition), which take precedence over the offsets options in that order, with
`startingOffsetsByTimestampStrategy` (`error` or `latest`) for partitions without a record at or
after the timestamp (an ending timestamp without one reads to the log end),
`maxOffsetsPerTrigger` / `minOffsetsPerTrigger` + `maxTriggerDelay` (admission control),
`failOnDataLoss` (default true) and `includeHeaders` (default false: no `headers` column).
New: `commitToGroup=<group>` commits each finished micro-batch's end offsets to that group, so
Kafka tooling sees the query's lag; the checkpoint stays the source of truth.

Offsets passed through Spark's checkpoint are Spark's JSON shape {"topic": {"0": next offset}}.
Each input partition is one topic-partition range read by a confluent-kafka Consumer with
assign() and no group membership; rows leave the reader as Arrow record batches.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from .kafka_client import (EARLIEST, LATEST, Cluster, DataLossError, GroupCommitter, TopicPartitionKey,
                           from_json_offsets, parse_partition_json, read_range, to_json_offsets)
from .options import US_PER_MS, TriggerOptions, option_bool
from .schemas import TOPIC_ARROW, TOPIC_DDL, TOPIC_HEADERS_ARROW, TOPIC_HEADERS_DDL
from .streaming import OffsetStreamReader

# confluent-kafka timestamp types -> Kafka's TimestampType ids (Spark's timestampType column).
TIMESTAMP_TYPE_IDS = {0: -1, 1: 0, 2: 1}  # NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME

# includeHeaders -> (Spark DDL, Arrow schema) of the rows.
TOPIC_SCHEMAS: dict[bool, tuple[str, pa.Schema]] = {
    False: (TOPIC_DDL, TOPIC_ARROW),
    True: (TOPIC_HEADERS_DDL, TOPIC_HEADERS_ARROW),
}

# Where reading starts / ends: the first option set wins (Spark's precedence): one timestamp for
# every partition, then a timestamp per partition, then offsets.
STARTING_OPTIONS = ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
ENDING_OPTIONS = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
# A batch query may not start at latest nor end at earliest: (bound, word, JSON value) it rejects.
BATCH_FORBIDDEN = (("starting", "latest", LATEST), ("ending", "earliest", EARLIEST))
OFFSET_WORDS = ("earliest", "latest", "group")

# startingOffsetsByTimestampStrategy: what a starting timestamp with no record at or after it means.
NO_MATCH_ERROR, NO_MATCH_LATEST = "error", "latest"
BY_TIMESTAMP_STRATEGIES = (NO_MATCH_ERROR, NO_MATCH_LATEST)


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One topic-partition's [start, end) offsets: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def option_timestamp(name: str, text: str) -> int:
    """startingTimestamp / endingTimestamp: epoch milliseconds, >= 0."""
    if not text.strip().isdigit():
        raise ValueError(f"option {name} must be a timestamp in epoch milliseconds (an integer >= 0), got {text!r}")
    return int(text)


@dataclass(frozen=True)
class OffsetBound:
    """Where reading starts or ends, as the option that won gave it (Spark's
    KafkaOffsetRangeLimit). kind: earliest, latest, group, offsets (per-partition offsets),
    timestamps (per-partition epoch ms) or timestamp (one epoch ms for every partition);
    no_match: error or latest, for a timestamp with no record at or after it."""

    option: str
    kind: str
    values: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp: int = -1
    no_match: str = NO_MATCH_LATEST


def parse_bound(options: Mapping[str, str], names: tuple[str, str, str], default: str,
                no_match: str) -> OffsetBound:
    """The starting or ending bound from the first of (global timestamp, per-partition
    timestamps, offsets) options that is set; `default` is the offsets word when none is."""
    global_option, by_timestamp_option, offsets_option = names
    if options.get(global_option):
        timestamp = option_timestamp(global_option, options[global_option])
        return OffsetBound(global_option, "timestamp", timestamp=timestamp, no_match=no_match)
    if options.get(by_timestamp_option):
        timestamps = parse_partition_json(by_timestamp_option, options[by_timestamp_option], 0)
        return OffsetBound(by_timestamp_option, "timestamps", timestamps, no_match=no_match)
    spec = (options.get(offsets_option) or default).strip()
    if spec.lower() in OFFSET_WORDS:
        return OffsetBound(offsets_option, spec.lower())
    if spec.startswith("{"):
        return OffsetBound(offsets_option, "offsets", parse_partition_json(offsets_option, spec, EARLIEST))
    raise ValueError(f"option {offsets_option} must be earliest, latest, group or JSON, got {spec!r}")


class NoOffsetForTimestampError(RuntimeError):
    """A starting timestamp has no record at or after it (startingOffsetsByTimestampStrategy=error)."""

    def __init__(self, option: str, timestamps: Mapping[TopicPartitionKey, int]) -> None:
        where = ", ".join(f"{t}-{p} (timestamp {ts})" for (t, p), ts in sorted(timestamps.items()))
        super().__init__(f"{option}: no record at or after the timestamp in {where}. Set "
                         "startingOffsetsByTimestampStrategy=latest to start such partitions at their log end.")


class TopicOptions(TriggerOptions):
    """The parsed, validated source options (shared by the batch and stream readers); invalid
    values raise a ValueError that names the option."""

    def __init__(self, options: Mapping[str, str], streaming: bool) -> None:
        super().__init__(options)  # maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay
        self.options = options  # case-insensitive, as Spark passes it
        chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
        if len(chosen) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern, assign is required")
        self.subscribe = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        self.pattern = options.get("subscribePattern") or None
        self.assign = [(t, int(p)) for t, ps in json.loads(options["assign"]).items() for p in ps] \
            if options.get("assign") else []
        self.fail_on_data_loss = option_bool(options, "failOnDataLoss", True)
        self.include_headers = option_bool(options, "includeHeaders", False)
        self.arrow_schema = TOPIC_SCHEMAS[self.include_headers][1]
        strategy = (options.get("startingOffsetsByTimestampStrategy") or NO_MATCH_ERROR).strip().lower()
        if strategy not in BY_TIMESTAMP_STRATEGIES:
            raise ValueError(f"option startingOffsetsByTimestampStrategy must be one of "
                             f"{', '.join(BY_TIMESTAMP_STRATEGIES)}, got {strategy!r}")
        self.starting = parse_bound(options, STARTING_OPTIONS, "latest" if streaming else "earliest", strategy)
        self.ending = parse_bound(options, ENDING_OPTIONS, "latest", NO_MATCH_LATEST)
        if streaming:
            for name in ENDING_OPTIONS:
                if options.get(name):
                    raise ValueError(f"option {name} is for batch queries only")
        else:
            self._check_batch_bounds()
        self.commit_group = options.get("commitToGroup") or None
        self.group_id = options.get("kafka.group.id")
        # Readers join no group; the id only names the client in broker logs.
        self.reader_group = self.group_id or f"offsetd-spark-{uuid.uuid4()}"

    def _check_batch_bounds(self) -> None:
        """As Spark: a batch query can neither start at latest nor end at earliest."""
        for role, word, value in BATCH_FORBIDDEN:
            bound: OffsetBound = getattr(self, role)
            bad = [f"{t}-{p}" for (t, p), o in sorted(bound.values.items()) if o == value] \
                if bound.kind == "offsets" else []
            if bound.kind == word or bad:
                where = f" ({value} for {', '.join(bad)})" if bad else ""
                raise ValueError(f"option {bound.option} can't be {word}{where} for batch queries")

    def partitions(self, cluster: Cluster) -> list[TopicPartitionKey]:
        """The partitions the subscription names now (new partitions appear here)."""
        return cluster.partitions_of(self.subscribe, self.pattern, self.assign)

    def resolve(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                default: int) -> dict[TopicPartitionKey, int]:
        """A starting / ending bound -> concrete offsets for `partitions` (`default` for those a
        startingOffsets / endingOffsets JSON leaves out)."""
        return self.concrete(cluster, WANTED[bound.kind](self, cluster, bound, partitions, default))

    def _wanted_group(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                      default: int) -> dict[TopicPartitionKey, int]:
        """The committed offsets of kafka.group.id; kafka.auto.offset.reset where there is none."""
        if not self.group_id:
            raise ValueError(f"{bound.option}=group needs the option kafka.group.id")
        committed = cluster.group_offsets(self.group_id, partitions)
        fallback = EARLIEST if self.options.get("kafka.auto.offset.reset") in ("earliest", "smallest") else LATEST
        return {tp: committed.get(tp, fallback) for tp in partitions}

    def _wanted_word(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                     default: int) -> dict[TopicPartitionKey, int]:
        """earliest / latest for every partition."""
        return dict.fromkeys(partitions, EARLIEST if bound.kind == "earliest" else LATEST)

    def _wanted_offsets(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                        default: int) -> dict[TopicPartitionKey, int]:
        """Per-partition JSON offsets; partitions it leaves out get `default`."""
        return {tp: bound.values.get(tp, default) for tp in partitions}

    def _wanted_timestamps(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                           default: int) -> dict[TopicPartitionKey, int]:
        """Per-partition timestamps; as in Spark, the JSON must name exactly the partitions read."""
        missing = sorted(set(partitions) - set(bound.values))
        extra = sorted(set(bound.values) - set(partitions))
        if missing or extra:
            raise ValueError(f"option {bound.option} must name every partition the query reads and no other: "
                             f"missing {[f'{t}-{p}' for t, p in missing]}, not read {[f'{t}-{p}' for t, p in extra]}")
        return self._by_timestamp(cluster, bound, bound.values)

    def _wanted_timestamp(self, cluster: Cluster, bound: OffsetBound, partitions: list[TopicPartitionKey],
                          default: int) -> dict[TopicPartitionKey, int]:
        """One timestamp for every partition."""
        return self._by_timestamp(cluster, bound, dict.fromkeys(partitions, bound.timestamp))

    @staticmethod
    def _by_timestamp(cluster: Cluster, bound: OffsetBound,
                      timestamps: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The earliest offset at or after each timestamp (ListOffsets by timestamp); where there is
        none, latest or NoOffsetForTimestampError as bound.no_match says."""
        found = cluster.offsets_for_times(timestamps)
        unmatched = {tp: timestamps[tp] for tp, offset in found.items() if offset is None}
        if unmatched and bound.no_match == NO_MATCH_ERROR:
            raise NoOffsetForTimestampError(bound.option, unmatched)
        return {tp: LATEST if offset is None else offset for tp, offset in found.items()}

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


# OffsetBound.kind -> how TopicOptions.resolve finds the wanted offsets.
WANTED: dict[str, Callable[..., dict[TopicPartitionKey, int]]] = {
    "group": TopicOptions._wanted_group,
    "earliest": TopicOptions._wanted_word,
    "latest": TopicOptions._wanted_word,
    "offsets": TopicOptions._wanted_offsets,
    "timestamps": TopicOptions._wanted_timestamps,
    "timestamp": TopicOptions._wanted_timestamp,
}


def read_arrow(opts: TopicOptions, part: TopicRange) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches of Spark's Kafka source schema (with the headers
    column only when includeHeaders is true)."""
    schema = opts.arrow_schema
    for messages in read_range(opts.options, part.topic, part.partition, part.start, part.end,
                               opts.fail_on_data_loss, opts.reader_group):
        keys, values, offsets, stamps, types = [], [], [], [], []
        for m in messages:
            keys.append(m.key())
            values.append(m.value())
            offsets.append(m.offset())
            kind, ts = m.timestamp()
            types.append(TIMESTAMP_TYPE_IDS.get(kind, -1))
            stamps.append(ts * US_PER_MS if kind else None)
        n = len(keys)
        columns = [
            pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
            pa.array([part.topic] * n, pa.string()), pa.array([part.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()), pa.array(stamps, schema.field("timestamp").type),
            pa.array(types, pa.int32()),
        ]
        if opts.include_headers:
            headers = [[{"key": k, "value": v} for k, v in m.headers() or ()] for m in messages]
            columns.append(pa.array(headers, schema.field("headers").type))
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


class TopicBatchReader(DataSourceReader):
    """spark.read: one task per topic-partition between startingOffsets and endingOffsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = TopicOptions(options, streaming=False)

    def partitions(self) -> list[TopicRange]:
        """Resolved on the driver when the query is planned."""
        cluster = Cluster(self.opts.options)
        parts = self.opts.partitions(cluster)
        start = self.opts.resolve(cluster, self.opts.starting, parts, EARLIEST)
        end = self.opts.resolve(cluster, self.opts.ending, parts, LATEST)
        return [TopicRange(t, p, start[(t, p)], end[(t, p)]) for t, p in parts if start[(t, p)] < end[(t, p)]]

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        """Runs in an executor's Python worker."""
        return read_arrow(self.opts, partition)


class TopicStreamReader(OffsetStreamReader):
    """spark.readStream: micro-batches bounded by maxOffsetsPerTrigger and delayed by
    minOffsetsPerTrigger / maxTriggerDelay, committed back on commit()."""

    DRIVER_ONLY = ("_cluster", "committer")

    def __init__(self, options: Mapping[str, str], clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = TopicOptions(options, streaming=True)
        super().__init__(self.opts.options, self.opts, clock)
        self.committer: GroupCommitter | None = None
        self.committed: dict | None = None  # last offsets committed to commitToGroup

    def initialOffset(self) -> dict:
        """Where a query with a fresh checkpoint starts (default latest, as Spark's Kafka source)."""
        parts = self.opts.partitions(self.cluster)
        return to_json_offsets(self.opts.resolve(self.cluster, self.opts.starting, parts, LATEST))

    def log_ends(self, begin: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Log end offsets of every subscribed partition, new ones included. A partition of
        `begin` that no longer exists (topic deleted) is data loss: an error when failOnDataLoss,
        else it is dropped. A topic deleted between the metadata and ListOffsets is gone too."""
        ends = self.cluster.list_offsets(self.opts.partitions(self.cluster), LATEST, skip_unknown=True)
        gone = sorted(set(begin) - set(ends))
        if gone and self.opts.fail_on_data_loss:
            raise RuntimeError(f"partitions {gone} no longer exist; some data may have been lost. "
                               "Set failOnDataLoss=false to continue without them.")
        return ends

    def complete(self, begin: dict[TopicPartitionKey, int], partitions: Mapping[TopicPartitionKey, int]) -> None:
        """Add the `partitions` missing from `begin` (new ones) to it at their log start offsets."""
        new = [tp for tp in partitions if tp not in begin]
        begin.update(self.opts.concrete(self.cluster, dict.fromkeys(new, EARLIEST)))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """OffsetStreamReader.latestOffset (new partitions start from their log start), after
        committing `start` to commitToGroup.

        Spark calls commit(end) only when it plans the batch after the one that ended at `end`,
        so an idle query would never commit its last batch. latestOffset(start) is called after
        the batch ending at `start` is recorded in the commit log (or, for a new query, with the
        initial offsets), so `start` is committed here too: the group's lag is exact whenever the
        query is idle."""
        self._commit_to_group(start)
        return super().latestOffset(start, limit)

    def partitions(self, start: dict, end: dict) -> list[TopicRange]:
        """One range per partition that has new records; a partition missing from `start` is
        new and starts from its log start offset."""
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        self.complete(begin, stop)
        return [TopicRange(t, p, begin[(t, p)], o) for (t, p), o in sorted(stop.items()) if begin[(t, p)] < o]

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        """Runs in an executor's Python worker; stateless."""
        return read_arrow(self.opts, partition)

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


class OffsetdTopicSource(DataSource):
    """`spark.read(Stream).format("offsetd")`: Kafka topics with Spark's Kafka source schema."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "offsetd"

    def schema(self) -> str:
        """Spark's Kafka source schema; the headers column only with includeHeaders=true."""
        return TOPIC_SCHEMAS[option_bool(self.options, "includeHeaders", False)][0]

    def reader(self, schema: StructType) -> TopicBatchReader:
        """spark.read."""
        return TopicBatchReader(self.options)

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        """spark.readStream (the ending* options are for batch queries, as in Spark's Kafka source)."""
        return TopicStreamReader(self.options)
