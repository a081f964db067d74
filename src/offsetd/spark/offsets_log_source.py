"""`format("offsetd-offsets-log")`: `__consumer_offsets` as typed rows (schemas.OFFSETS_LOG_FIELDS).

Two ways in:
* `path`: segment files (a log.dirs directory, one `__consumer_offsets-N` directory, or `.log`
  files; backups and archives work the same), the log partition taken from the directory name;
* `kafka.bootstrap.servers`: the live topic of any Kafka-compatible cluster, each partition from
  its log start to the log end at planning time.
Work is packed into about `minPartitions` tasks (the session's parallelism when loaded through
pipelines.load_offsets_log) in log order; for files as Spark packs them (`maxPartitionBytes`,
default 1 GiB, `openCostInBytes`, default 4 MiB). Option `partitions` (comma list) restricts
either way to some log partitions. A schema given with `.schema("group string, offset bigint,
...")` (a subset of the columns) prunes columns: only those are decoded and sent to Spark.
Options `recordTypes` (offset_commit, group_metadata, the consumer groups' consumer_group_metadata,
...) and `includeTombstones` (true/false) select rows at the source (`Selection`).

With option `filterPushdown=true` (opt-in: PushdownOffsetsLogReader says why) the reader takes
filters Spark pushes: `log_partition` = / IN plans only those partitions; `record_type` and
`tombstone` = / IN / NOT narrow the Selection; all three are then done. `group` = / IN plans only
the log partitions partition_for maps the groups to - when the partition count is known: the
cluster's metadata, option `offsetsTopicPartitions`, or offsetd's topics.json beside the files
(never guessed from the directories present) - and Spark still filters the rows (other groups
share partitions).

`spark.readStream` (OffsetsLogStreamReader) tails a cluster's log, never files: offsets per log
partition as Spark's Kafka source writes them, {"__consumer_offsets": {"0": 12}};
`startingOffsets` earliest (default: the whole history) or latest; maxOffsetsPerTrigger,
minOffsetsPerTrigger + maxTriggerDelay and Trigger.AvailableNow as in the topic source
(options.AdmissionControl). A micro-batch is log ranges planned and decoded as a batch read;
a range whose start retention has removed reads from the log start.

Decoding is offsets_log_decode's.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, Filter, In,
                                    InputPartition, Not)
from pyspark.sql.types import StructType

from offsetd.records.offsets import OFFSETS_TOPIC, partition_for

from .kafka_client import (EARLIEST, LATEST, Cluster, TopicPartitionKey, from_json_offsets, read_range,
                           to_json_offsets)
from .offsets_log_decode import (ALL_COLUMNS, KIND_NAMES, UNKNOWN, Selection, PartitionDecoder,
                                 requested_columns)
from .options import TriggerOptions, option_bool, option_positive_int
from .schemas import OFFSETS_LOG_DDL
from .streaming import OffsetStreamReader

DEFAULT_MAX_PARTITION_BYTES = 1 << 30  # option maxPartitionBytes: segment bytes per task at most
DEFAULT_OPEN_COST_BYTES = 4 << 20  # option openCostInBytes: a file counts this much more (Spark's default)
_PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)$")


@dataclass(frozen=True)
class SegmentFile:
    """One segment file of one log partition (-1 when the directory does not say)."""

    path: str
    log_partition: int
    size: int


@dataclass(frozen=True)
class LogRange:
    """[start, end) of one `__consumer_offsets` partition, read through the protocol."""

    log_partition: int
    start: int
    end: int


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """One Spark task: segment files or log ranges, in log order."""

    items: tuple[SegmentFile, ...] | tuple[LogRange, ...]


def segment_files(path: str) -> list[SegmentFile]:
    """The non-empty segment files under `path` (log.dirs, one partition directory, or a .log
    file), in log order."""
    root = Path(path)
    if root.is_file():
        files = [root]
    elif _PARTITION_DIR.match(root.name):
        files = sorted(root.glob("*.log"))
    else:
        files = sorted(root.glob(f"{OFFSETS_TOPIC}-*/*.log"), key=lambda f: (_log_partition(f), f.name))
    out = [SegmentFile(str(f), _log_partition(f), f.stat().st_size) for f in files]
    return [f for f in out if f.size > 0]


def _log_partition(f: Path) -> int:
    """The log partition a segment file's directory names (-1 when it names none)."""
    match = _PARTITION_DIR.match(f.parent.name)
    return int(match.group(1)) if match else -1


def catalogued_partition_count(path: str) -> int | None:
    """The number of `__consumer_offsets` partitions the offsetd catalogue (`topics.json`) of the
    log.dirs that `path` is or lies in records; None without one (Kafka's log dirs keep no
    partition count: its metadata log does)."""
    from offsetd.broker.topics import CATALOGUE  # the broker's modules only for file reads

    root = Path(path)
    log_dirs = root.parent.parent if root.is_file() else root.parent if _PARTITION_DIR.match(root.name) else root
    catalogue = log_dirs / CATALOGUE
    if not catalogue.is_file():
        return None
    try:
        entries = json.loads(catalogue.read_text(encoding="utf-8"))
        return next((int(e["partitions"]) for e in entries if e.get("name") == OFFSETS_TOPIC), None)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # not a catalogue this reader understands: no pruning by group


def option_partitions(options: Mapping[str, str]) -> frozenset[int] | None:
    """Option `partitions`: a comma list of log partitions to read (None: all)."""
    text = options.get("partitions")
    if not text:
        return None
    names = [name.strip() for name in text.split(",")]
    if not all(name.isdigit() for name in names):
        raise ValueError(f"option partitions must be a comma list of partition numbers, got {text!r}")
    return frozenset(int(name) for name in names)


def pack(sizes: list[int], target: int) -> list[range]:
    """Consecutive items in groups of about `target` total size: a group closes before the item
    that would take it past the target, and every group has at least one item. Spark packs
    files into tasks the same way; keeping log order puts the consecutive segments of a log
    partition in one task, where transactions can span them."""
    groups: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > target:
            groups.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        groups.append(range(start, len(sizes)))
    return groups


def task_target(total: int, options: Mapping[str, str], cap: int | None) -> int:
    """The size a task should read: the total spread over `minPartitions` tasks (default: this
    machine's cores - the planner has no SparkContext to ask; load_offsets_log passes the
    session's parallelism), at most `cap`. Starting a task costs tens of milliseconds of
    Python and JVM work, so one task per segment is far slower on a many-segment log."""
    tasks = option_positive_int(options, "minPartitions") or os.cpu_count() or 1
    target = -(-total // tasks)  # ceiling: never more groups than tasks from rounding
    return max(1, min(target, cap) if cap else target)


def plan_tasks(items: Sequence[SegmentFile] | Sequence[LogRange], sizes: list[int], options: Mapping[str, str],
               cap: int | None) -> list[ReadTask]:
    """Items (in log order) packed into tasks of about task_target's size each."""
    target = task_target(sum(sizes), options, cap)
    return [ReadTask(tuple(items[i] for i in group)) for group in pack(sizes, target)]


def range_tasks(ranges: list[LogRange], options: Mapping[str, str]) -> list[ReadTask]:
    """Log ranges packed into tasks by offsets."""
    return plan_tasks(ranges, [r.end - r.start for r in ranges], options, None)


def read_task(options: Mapping[str, str], selection: Selection, task: InputPartition) -> Iterator[pa.RecordBatch]:
    """Decode a task's segment files or log ranges, one decoder per log partition (in an
    executor). Spark plans one InputPartition(None) when there is no ReadTask: it reads nothing."""
    decoder = None
    for item in task.items if isinstance(task, ReadTask) else ():
        if decoder is None or decoder.log_partition != item.log_partition:
            decoder = PartitionDecoder(item.log_partition, selection)
        if isinstance(item, SegmentFile):
            yield from decoder.segment(Path(item.path).read_bytes())
        else:
            yield from _read_range(options, decoder, item)


def _read_range(options: Mapping[str, str], decoder: PartitionDecoder,
                log_range: LogRange) -> Iterator[pa.RecordBatch]:
    """One log partition's range through the protocol (the consumer reads read_committed). A
    range starting below the log start (records removed since planning) reads from the log
    start instead of failing."""
    for messages in read_range(options, OFFSETS_TOPIC, log_range.log_partition, log_range.start,
                               log_range.end, fail_on_data_loss=False, group_id="offsetd-spark-offsets-log"):
        for m in messages:
            if m.key() is not None:
                decoder.chunk.append(decoder.table, m.offset(), m.timestamp()[1], m.key(), m.value())
        if len(decoder.chunk):
            yield decoder.take()


def filter_values(pushed: Filter) -> tuple[str, frozenset] | None:
    """(column, the values a row's column may have) of a pushed `column = v`, `column IN (...)`
    or, on a column of PUSHDOWN_DOMAINS, their negation; None for any other filter. A null
    among IN's values matches nothing, so it is dropped (and a negated IN holding one is not
    pushed: it keeps no row)."""
    negated = isinstance(pushed, Not)
    inner = pushed.child if negated else pushed
    if not isinstance(inner, (EqualTo, In)) or len(inner.attribute) != 1 \
            or inner.attribute[0] not in PUSHDOWN:
        return None
    column = inner.attribute[0]
    values = (inner.value,) if isinstance(inner, EqualTo) else tuple(inner.value)
    if not negated:
        return column, frozenset(v for v in values if v is not None)
    if column not in PUSHDOWN_DOMAINS or None in values:
        return None
    return column, PUSHDOWN_DOMAINS[column] - frozenset(values)


def _all_of(values: frozenset, kind: type) -> bool:
    """Every value is of exactly this type (bool is not an int here)."""
    return all(type(v) is kind for v in values)


class OffsetsLogReader(DataSourceReader):
    """Plans tasks of segment files or log partition ranges; decodes in the executors. It has
    no pushFilters (see PushdownOffsetsLogReader): Spark applies every filter itself."""

    def __init__(self, options: Mapping[str, str], columns: tuple[str, ...] = ALL_COLUMNS) -> None:
        self.options = options  # case-insensitive, as Spark passes it
        self.selection = Selection.from_options(options, columns)
        self.only = option_partitions(options)  # option partitions (and pushed log_partition filters)
        self.groups: frozenset[str] | None = None  # pushed group filters
        if bool(options.get("path")) == bool(options.get("kafka.bootstrap.servers")):
            raise ValueError("give exactly one of the options path (segment files) and kafka.bootstrap.servers")
        self.max_partition_bytes = option_positive_int(options, "maxPartitionBytes") or DEFAULT_MAX_PARTITION_BYTES
        self.open_cost = option_positive_int(options, "openCostInBytes") or DEFAULT_OPEN_COST_BYTES
        self.partition_count = option_positive_int(options, "offsetsTopicPartitions")

    def _planned(self, log_partitions: Iterable[int], count: int | None) -> frozenset[int]:
        """Which of `log_partitions` are read: those the option partitions and log_partition
        filters allow, and, with group filters and the partition count `count` known, only those
        the groups map to (partition_for; -1, a file outside a partition directory, stays)."""
        planned = frozenset(log_partitions) if self.only is None else frozenset(log_partitions) & self.only
        if self.groups is None or count is None:
            return planned
        return planned & frozenset([-1, *(partition_for(group, count) for group in self.groups)])

    def partitions(self) -> list[InputPartition]:
        """Tasks of segment files (packed by bytes, each file costing openCostInBytes more, up to
        maxPartitionBytes a task), or of log partitions from their current start to end offset
        (packed by offsets)."""
        if self.options.get("path"):
            files = segment_files(self.options["path"])
            if not files:
                raise FileNotFoundError(f"no {OFFSETS_TOPIC} segment files under {self.options['path']}")
            count = self.partition_count or catalogued_partition_count(self.options["path"])
            if count is not None and any(f.log_partition >= count for f in files):
                count = None  # the files do not fit that count: no pruning by group
            planned = self._planned((f.log_partition for f in files), count)
            files = [f for f in files if f.log_partition in planned]
            return plan_tasks(files, [f.size + self.open_cost for f in files], self.options,
                              self.max_partition_bytes)
        cluster = Cluster(self.options)
        every = cluster.partitions_of([OFFSETS_TOPIC])
        planned = self._planned((p for _, p in every), len(every) or None)  # none: no commit yet
        parts = [tp for tp in every if tp[1] in planned]
        low, high = cluster.list_offsets(parts, EARLIEST), cluster.list_offsets(parts, LATEST)
        return range_tasks([LogRange(p, low[(t, p)], high[(t, p)]) for t, p in sorted(parts)
                            if low[(t, p)] < high[(t, p)]], self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Decode a task's segment files or log ranges (read_task)."""
        return read_task(self.options, self.selection, partition)


class PushdownOffsetsLogReader(OffsetsLogReader):
    """The reader of option filterPushdown=true: filters Spark pushes (PUSHDOWN) narrow the log
    partitions planned and the Selection.

    Opt-in, because pyspark 4.3 keeps ONE planned read per loaded DataFrame
    (PythonDataSourceV2.readInfo on the JVM, replaced by each pushdown): every scan of that
    DataFrame in a plan (a self-join, a union) uses the pushdown of the last one planned, and a
    later action whose scan has no filter to push reuses the previous one's. Such a DataFrame
    would silently lose rows, so pushdown is for a DataFrame loaded for one filtered query.
    pyspark also refuses to plan a reader defining pushFilters while
    spark.sql.python.filterPushdown.enabled is off; offsetd.spark.register turns it on."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take what PUSHDOWN handles; yield the filters Spark must still apply: those it does
        not handle, and group filters, which only prune log partitions (other groups' rows
        share them)."""
        for pushed in filters:
            found = filter_values(pushed)
            if found is None or not PUSHDOWN[found[0]](self, found[1]):
                yield pushed

    def _push_log_partitions(self, values: frozenset) -> bool:
        """log_partition = / IN: plan only those (fully handled)."""
        if not _all_of(values, int):
            return False
        self.only = values if self.only is None else self.only & values
        return True

    def _push_groups(self, values: frozenset) -> bool:
        """group = / IN: plan only those groups' log partitions when the partition count is
        known (see partitions); Spark still filters the rows."""
        if _all_of(values, str):
            self.groups = values if self.groups is None else self.groups & values
        return False

    def _push_record_types(self, values: frozenset) -> bool:
        """record_type = / IN / NOT: select those kinds of rows (fully handled)."""
        if not _all_of(values, str):
            return False
        kinds = frozenset(KIND_NAMES.index(v) for v in values if v in KIND_NAMES[:UNKNOWN])
        self.selection = replace(self.selection, kinds=self.selection.kinds & kinds)
        return True

    def _push_tombstones(self, values: frozenset) -> bool:
        """tombstone = / NOT: select tombstones or live records (fully handled)."""
        if not _all_of(values, bool):
            return False
        self.selection = replace(self.selection, tombstones=self.selection.tombstones and True in values,
                                 live=self.selection.live and False in values)
        return True


# Filters PushdownOffsetsLogReader.pushFilters takes: column -> the method that applies its values
# (returning whether the source fully handles the filter).
PUSHDOWN: dict[str, Callable[[PushdownOffsetsLogReader, frozenset], bool]] = {
    "group": PushdownOffsetsLogReader._push_groups,
    "log_partition": PushdownOffsetsLogReader._push_log_partitions,
    "record_type": PushdownOffsetsLogReader._push_record_types,
    "tombstone": PushdownOffsetsLogReader._push_tombstones,
}
# Columns whose every value is known (never null), so a negated filter on them is pushed too.
PUSHDOWN_DOMAINS: dict[str, frozenset] = {
    "record_type": frozenset(KIND_NAMES[:UNKNOWN]),
    "tombstone": frozenset((True, False)),
}

# startingOffsets of a stream -> where each log partition starts (default: the whole history).
STARTING_OFFSETS = {"earliest": EARLIEST, "latest": LATEST}
DEFAULT_STARTING_OFFSETS = "earliest"
# Where a log partition that a stream's offsets do not hold yet starts: read_range skips to its
# log start.
NEW_PARTITION_START = 0


class OffsetsLogStreamReader(OffsetStreamReader):
    """spark.readStream: tails `__consumer_offsets` through the protocol. Offsets are Spark's
    Kafka JSON per log partition, {"__consumer_offsets": {"0": next offset}}; each micro-batch
    is log ranges packed into tasks as the batch reader packs them and decoded the same way
    (Selection, column pruning), with admission control as the topic source's."""

    def __init__(self, options: Mapping[str, str], columns: tuple[str, ...] = ALL_COLUMNS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if options.get("path") or not options.get("kafka.bootstrap.servers"):
            raise ValueError("streaming reads of offsetd-offsets-log need the option kafka.bootstrap.servers "
                             "(path, segment files, is for batch reads only)")
        super().__init__(options, TriggerOptions(options), clock)
        self.options = options
        self.selection = Selection.from_options(options, columns)
        self.only = option_partitions(options)
        spec = (options.get("startingOffsets") or DEFAULT_STARTING_OFFSETS).strip().lower()
        if spec not in STARTING_OFFSETS:
            raise ValueError(f"option startingOffsets must be one of {', '.join(STARTING_OFFSETS)}, got {spec!r}")
        self.starting = STARTING_OFFSETS[spec]
        self._parts: list[TopicPartitionKey] | None = None

    def log_ends(self, begin: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The log end offset of every log partition read. The partition list is asked until
        the topic exists (a cluster creates it at the first commit), then kept: the partition
        count of `__consumer_offsets` never changes in practice."""
        if not self._parts:
            self._parts = [tp for tp in self.cluster.partitions_of([OFFSETS_TOPIC])
                           if self.only is None or tp[1] in self.only]
        return self.cluster.list_offsets(self._parts, LATEST)

    def complete(self, begin: dict[TopicPartitionKey, int], partitions: Mapping[TopicPartitionKey, int]) -> None:
        """Log partitions new to `begin` start at NEW_PARTITION_START (read_range skips to the log start)."""
        for tp in partitions:
            begin.setdefault(tp, NEW_PARTITION_START)

    def initialOffset(self) -> dict:
        """Where a query with a fresh checkpoint starts: every log partition's start (earliest,
        the default) or end (latest)."""
        ends = self.log_ends({})
        return to_json_offsets(ends if self.starting == LATEST else self.cluster.list_offsets(ends, EARLIEST))

    def partitions(self, start: dict, end: dict) -> list[ReadTask]:
        """The log ranges [start, end) with records, packed into tasks by offsets (range_tasks).
        A range whose start retention has since removed reads from the log start (_read_range)."""
        begin, stop = from_json_offsets(start), from_json_offsets(end)
        ranges = [LogRange(p, begin.get((t, p), NEW_PARTITION_START), o) for (t, p), o in sorted(stop.items())]
        return range_tasks([r for r in ranges if r.start < r.end], self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Decode a task's log ranges (read_task), in an executor."""
        return read_task(self.options, self.selection, partition)


class OffsetsLogSource(DataSource):
    """`spark.read(Stream).format("offsetd-offsets-log")`: the offsets log as typed rows."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "offsetd-offsets-log"

    def schema(self) -> str:
        """All columns (schemas.OFFSETS_LOG_FIELDS)."""
        return OFFSETS_LOG_DDL

    def reader(self, schema: StructType) -> OffsetsLogReader:
        """A reader building the columns of `schema` (the full schema unless the user gave a
        subset); with option filterPushdown=true, one that takes pushed filters."""
        pushdown = option_bool(self.options, "filterPushdown", False)
        return (PushdownOffsetsLogReader if pushdown else OffsetsLogReader)(self.options, requested_columns(schema))

    def streamReader(self, schema: StructType) -> OffsetsLogStreamReader:
        """spark.readStream: tails the log of a cluster (kafka.bootstrap.servers), building the
        columns of `schema`."""
        return OffsetsLogStreamReader(self.options, requested_columns(schema))
