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
Options `recordTypes` (offset_commit, group_metadata) and `includeTombstones` (true/false)
select rows at the source (`Selection`).

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

Records are decoded in chunks of about CHUNK_RECORDS into Arrow columns, never row by row:
* plain batches go through the project's compiled, CRC-checked `records.scan.scan_columns`: key
  numbers, values, and (log offset, timestamp) runs - a coordinator's batch is one run;
* each distinct key is decoded once (`KeyTable`), column-wise with numpy where it can
  (`_key_columns_vectorized`, the numpy twin of `decode_key` for key versions 0-2; anything
  else through `decode_key`), and the key columns are taken from that table by key number;
* OffsetCommit values of the common layout (v3, empty metadata) are one numpy view, others
  `decode_offset_commit_value` each; GroupMetadata values `decode_group_metadata_value` each.
Compressed, transactional and control batches take `records.offsets.iter_log_records`
(committed transactions only, as a read_committed consumer sees them). Records of key versions
other than 0-2 (KIP-848 / share groups) and records without a key are skipped, as the broker's
loader skips them.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from itertools import compress, islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, EqualTo, Filter, In,
                                    InputPartition, Not)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from offsetd.records.batch import LOG_OVERHEAD, TRANSACTIONAL_MASK, iter_batches
from offsetd.records.offsets import (OFFSETS_TOPIC, ControlMarker, GroupMetadataKey, OffsetCommitKey,
                                     decode_group_metadata_value, decode_key, decode_offset_commit_value,
                                     iter_log_records, parse_subscription_topics, partition_for)
from offsetd.records.scan import scan_columns

from .kafka_client import (EARLIEST, LATEST, Cluster, TopicPartitionKey, from_json_offsets, read_range,
                           to_json_offsets)
from .options import AdmissionControl, TriggerOptions, option_bool, option_positive_int
from .schemas import GROUP_METADATA, OFFSET_COMMIT, OFFSETS_LOG_ARROW, OFFSETS_LOG_DDL, OFFSETS_LOG_FIELDS

CHUNK_RECORDS = 65536  # records per Arrow batch
KEY_TABLE_LIMIT = 1 << 18  # distinct keys a decoder remembers; it starts afresh between chunks past this
DEFAULT_MAX_PARTITION_BYTES = 1 << 30  # option maxPartitionBytes: segment bytes per task at most
DEFAULT_OPEN_COST_BYTES = 4 << 20  # option openCostInBytes: a file counts this much more (Spark's default)
_PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)$")

# Record kinds in a chunk's key table (index into KIND_NAMES).
COMMIT, GROUP, UNKNOWN = 0, 1, 2
KIND_NAMES = [OFFSET_COMMIT, GROUP_METADATA, None]

# OffsetCommitValue v3 with empty metadata, the layout Kafka and offsetd write for almost every
# commit: int16 version 3 | int64 offset | int32 leaderEpoch | int16 metadata length 0 |
# int64 commitTimestamp (24 bytes, big-endian).
_V3_EMPTY = np.dtype([("version", ">i2"), ("offset", ">i8"), ("epoch", ">i4"), ("md_len", ">i2"),
                      ("commit_ts", ">i8")])


class KeyTable(dict):
    """Raw key bytes -> key number, numbered in order of first appearance (records.scan.scan_columns
    fills it; `number` does the same from Python), and the numbered keys decoded once each into
    columns, so a chunk's key columns are a `take` by key number."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded = 0  # keys decoded into the columns below
        self.kinds = np.zeros(0, np.int8)
        self.groups: pa.Array = pa.array([], pa.string())
        self.topics: pa.Array = pa.array([], pa.string())
        self.partitions = np.zeros(0, np.int32)

    def number(self, raw: bytes) -> int:
        """The number of a key, given the next one when it is new."""
        found = self.get(raw)
        if found is None:
            found = self[raw] = len(self)
        return found

    def columns(self, ids: np.ndarray) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray]:
        """(kinds, groups, topics, partitions) of the keys numbered `ids`; new keys are decoded first."""
        if self.decoded < len(self):
            kinds, groups, topics, partitions = _key_columns(list(islice(self, self.decoded, None)))
            self.kinds = np.concatenate([self.kinds, kinds])
            self.groups = pa.concat_arrays([self.groups, groups])
            self.topics = pa.concat_arrays([self.topics, topics])
            self.partitions = np.concatenate([self.partitions, partitions])
            self.decoded = len(self)
        take = pa.array(ids)
        return self.kinds[ids], self.groups.take(take), self.topics.take(take), self.partitions[ids]


def _masked(values: np.ndarray, valid: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """An Arrow array of `values` with nulls where `valid` is false."""
    return pa.array(values, dtype, mask=~valid)


def _commit_columns(raw: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray, list[str] | None, np.ndarray, np.ndarray]:
    """(offset, leader_epoch, metadata or None for all-empty, commit_ts, expire_ts) of values (no nulls)."""
    n = len(raw)
    ends = _value_ends(raw)
    if n and (np.diff(ends) == _V3_EMPTY.itemsize).all():
        view = np.frombuffer(raw.buffers()[2], _V3_EMPTY, n, int(ends[0]))
        if (view["version"] == 3).all() and (view["md_len"] == 0).all():
            return (view["offset"].astype(np.int64), view["epoch"].astype(np.int32), None,
                    view["commit_ts"].astype(np.int64), np.full(n, -1, np.int64))
    decoded = [decode_offset_commit_value(v) for v in raw.to_pylist()]
    return (np.fromiter((v.offset for v in decoded), np.int64, n),
            np.fromiter((v.leader_epoch for v in decoded), np.int32, n),
            [v.metadata for v in decoded],
            np.fromiter((v.commit_timestamp for v in decoded), np.int64, n),
            np.fromiter((v.expire_timestamp for v in decoded), np.int64, n))


def _group_columns(raw: list[bytes]) -> list[list]:
    """protocol_type, generation, protocol, leader, state_timestamp, members of GroupMetadata values."""
    cols: list[list] = [[], [], [], [], [], []]
    for data in raw:
        v = decode_group_metadata_value(data)
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout,
                    "session_timeout": m.session_timeout,
                    "subscribed_topics": parse_subscription_topics(m.subscription)
                    if v.protocol_type == "consumer" else None,
                    "subscription": m.subscription, "assignment": m.assignment} for m in v.members]
        for col, value in zip(cols, (v.protocol_type, v.generation, v.protocol, v.leader,
                                     v.current_state_timestamp, members)):
            col.append(value)
    return cols


def _be16(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Signed big-endian int16 at each position."""
    v = (data[pos].astype(np.int32) << 8) | data[pos + 1]
    return np.where(v >= 0x8000, v - 0x10000, v)


def _value_ends(arrow: pa.BinaryArray) -> np.ndarray:
    """The int32 value offsets of a binary array (one more than its length), as a numpy view."""
    return np.frombuffer(arrow.buffers()[1], np.int32, len(arrow) + 1, arrow.offset * 4)


def _gather_strings(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A UTF-8-checked Arrow string array of data[starts[i] : starts[i] + lengths[i]]."""
    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    out = pa.StringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data[index]))
    out.validate(full=True)  # raises on invalid UTF-8, as the row decoder would
    return out


def _key_columns_vectorized(keys: list[bytes]) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray] | None:
    """(kinds, groups, topics, partitions) of a chunk's keys decoded column-wise with numpy, the
    columnar twin of records.offsets.decode_key for the layouts Kafka writes (§4.4, §4.6):

        OffsetCommit key v0/v1: int16 version | int16 len + group | int16 len + topic | int32 partition
        GroupMetadata key v2:   int16 version | int16 len + group

    None when any key is not exactly one of these (another key version, a null or truncated
    string): the caller then decodes row by row, which reports or skips such keys."""
    n = len(keys)
    arrow = pa.array(keys, pa.binary())
    if arrow.null_count:
        return None
    ends = _value_ends(arrow)
    data = np.frombuffer(arrow.buffers()[2], np.uint8)
    starts = ends[:-1].astype(np.int64)
    sizes = ends[1:] - ends[:-1]
    if n == 0 or sizes.min() < 4:
        return None
    version = _be16(data, starts)
    group_len = _be16(data, starts + 2)
    commit = version <= 1
    if (version < 0).any() or (version > 2).any() or (group_len < 0).any():
        return None
    group_end = starts + 4 + group_len
    # a commit key continues with topic length, topic and partition; a group key ends here
    if (np.where(commit, sizes - 4 - group_len - 6, sizes - 4 - group_len) < 0).any():
        return None
    topic_len = np.where(commit, _be16(data, np.where(commit, group_end, starts)), 0)
    if (topic_len < 0).any() or (np.where(commit, sizes - 4 - group_len - 2 - topic_len - 4,
                                          sizes - 4 - group_len) != 0).any():
        return None
    part_at = np.where(commit, group_end + 2 + topic_len, starts)
    partition = ((data[part_at].astype(np.int64) << 24) | (data[part_at + 1].astype(np.int64) << 16)
                 | (data[part_at + 2].astype(np.int64) << 8) | data[part_at + 3]).astype(np.uint32).view(np.int32)
    groups = _gather_strings(data, starts + 4, group_len)
    topics = pc.if_else(pa.array(commit), _gather_strings(data, group_end + 2, topic_len), None)
    kinds = np.where(commit, COMMIT, GROUP).astype(np.int8)
    return kinds, groups, topics, np.where(commit, partition, -1).astype(np.int32)


def _key_columns(keys: list[bytes]) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray]:
    """(kinds, groups, topics, partitions) of distinct keys: column-wise when possible, else
    decode_key each."""
    fast = _key_columns_vectorized(keys)
    if fast is not None:
        return fast
    entries = [_key_entry(decode_key(raw)) for raw in keys]
    return (np.array([e[0] for e in entries], np.int8), pa.array([e[1] for e in entries], pa.string()),
            pa.array([e[2] for e in entries], pa.string()), np.array([e[3] for e in entries], np.int32))


def _key_entry(key: object) -> tuple[int, str | None, str | None, int]:
    """(kind, group, topic, partition) of a decoded key."""
    if type(key) is OffsetCommitKey:
        return COMMIT, key.group, key.topic, key.partition
    if type(key) is GroupMetadataKey:
        return GROUP, key.group, None, -1
    return UNKNOWN, None, None, -1


GROUP_COLUMNS = ["protocol_type", "generation", "protocol", "leader", "state_timestamp", "members"]
ALL_COLUMNS = tuple(OFFSETS_LOG_ARROW.names)


@dataclass(frozen=True)
class Selection:
    """What a read returns: `columns` (in the source's order; a user-given schema prunes them)
    and which records become rows - source options `recordTypes` (comma list of offset_commit,
    group_metadata; default both) and `includeTombstones` (default true), narrowed further by
    pushed record_type and tombstone filters (`live` false: tombstones only). A pipeline that
    needs only live commits reads just those, without the columns it would filter on."""

    columns: tuple[str, ...] = ALL_COLUMNS
    kinds: frozenset[int] = frozenset((COMMIT, GROUP))
    tombstones: bool = True
    live: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, str], columns: tuple[str, ...]) -> Selection:
        """The selection the options ask for (ValueError naming the option when invalid)."""
        kinds = cls.kinds
        if options.get("recordTypes"):
            names = [name.strip() for name in options["recordTypes"].split(",")]
            unknown = [name for name in names if name not in KIND_NAMES[:UNKNOWN]]
            if unknown:
                raise ValueError(f"option recordTypes: unknown record type {unknown[0]!r}; "
                                 f"give {OFFSET_COMMIT} and/or {GROUP_METADATA}")
            kinds = frozenset(KIND_NAMES.index(name) for name in names)
        return cls(columns, kinds, option_bool(options, "includeTombstones", True))

    def rows(self, kinds: np.ndarray, tombstone: np.ndarray) -> np.ndarray:
        """Which records of a chunk become rows (never records of unknown key versions)."""
        keep = np.isin(kinds, list(self.kinds))
        if not self.tombstones:
            keep &= ~tombstone
        if not self.live:
            keep &= tombstone
        return keep


def decode_chunk(chunk: _Chunk, table: KeyTable, log_partition: int,
                 selection: Selection = Selection()) -> pa.RecordBatch:
    """One Arrow batch of the selected rows of a chunk of raw records (key numbers into `table`),
    with only the selected columns built."""
    n = len(chunk)
    kinds, groups, topics, partitions = table.columns(np.array(chunk.ids, np.int64))
    values = pa.array(chunk.values, pa.binary())
    tomb = np.asarray(values.is_null()) if values.null_count else np.zeros(n, np.bool_)
    selected = selection.rows(kinds, tomb)
    is_commit = kinds == COMMIT
    commit_rows = is_commit & ~tomb
    group_rows = (kinds == GROUP) & ~tomb & selected  # values of GroupMetadata records not selected stay undecoded

    offset = np.zeros(n, np.int64)
    epoch = np.zeros(n, np.int32)
    commit_ts = np.zeros(n, np.int64)
    expire_ts = np.zeros(n, np.int64)
    metadata: pa.Array = pa.nulls(n, pa.string())
    if commit_rows.all():  # the common chunk: commits only, no scatter needed
        offset, epoch, md, commit_ts, expire_ts = _commit_columns(values)
        metadata = pa.array(md, pa.string()) if md is not None else pc.if_else(pa.array(commit_rows), "", metadata)
    elif commit_rows.any():
        o, e, md, c, x = _commit_columns(values.filter(pa.array(commit_rows)))
        offset[commit_rows], epoch[commit_rows], commit_ts[commit_rows], expire_ts[commit_rows] = o, e, c, x
        if md is None:
            metadata = pc.if_else(pa.array(commit_rows), "", metadata)
        else:
            full: list[str | None] = [None] * n
            for i, m in zip(np.flatnonzero(commit_rows).tolist(), md):
                full[i] = m
            metadata = pa.array(full, pa.string())

    built: dict[str, pa.Array] = {name: pa.nulls(n, OFFSETS_LOG_ARROW.field(name).type) for name in GROUP_COLUMNS}
    columns = selection.columns
    if group_rows.any() and any(name in columns for name in GROUP_COLUMNS):
        rows = np.flatnonzero(group_rows).tolist()
        for name, col in zip(GROUP_COLUMNS, _group_columns(list(compress(chunk.values, group_rows)))):
            full = [None] * n
            for i, v in zip(rows, col):
                full[i] = v
            built[name] = pa.array(full, OFFSETS_LOG_ARROW.field(name).type)
    builders: dict[str, Callable[[], pa.Array]] = {
        "record_type": lambda: pa.array(KIND_NAMES, pa.string()).take(pa.array(kinds.astype(np.int64))),
        "group": lambda: groups,
        "topic": lambda: topics,
        "partition": lambda: _masked(partitions, is_commit, pa.int32()),
        "offset": lambda: _masked(offset, commit_rows, pa.int64()),
        "leader_epoch": lambda: _masked(epoch, commit_rows, pa.int32()),
        "metadata": lambda: metadata,
        "commit_timestamp": lambda: _masked(commit_ts, commit_rows, pa.int64()),
        "expire_timestamp": lambda: _masked(expire_ts, commit_rows, pa.int64()),
        "tombstone": lambda: pa.array(tomb),
        **{name: (lambda name=name: built[name]) for name in GROUP_COLUMNS},
        "log_partition": lambda: pa.array(np.full(n, log_partition, np.int32)),
        "log_offset": lambda: pa.array(chunk.log_offsets()),
        "record_timestamp": lambda: pa.array(chunk.timestamps()),
    }
    batch = pa.RecordBatch.from_arrays([builders[name]() for name in columns],
                                       schema=pa.schema([OFFSETS_LOG_ARROW.field(name) for name in columns]))
    return batch if selected.all() else batch.filter(pa.array(selected))


def requested_columns(schema: StructType) -> tuple[str, ...]:
    """The source's columns a user-given schema asks for (a subset, same names and types):
    the readers build only those - column pruning, which Python data sources otherwise lack."""
    full = {name: ddl.replace(" ", "") for name, _, ddl in OFFSETS_LOG_FIELDS}
    for field in schema.fields:
        if full.get(field.name) != field.dataType.simpleString().replace(" ", ""):
            raise ValueError(f"offsetd-offsets-log has no column {field.name} {field.dataType.simpleString()}; "
                             f"its columns: {OFFSETS_LOG_DDL}")
    wanted = set(schema.fieldNames())
    return tuple(name for name in ALL_COLUMNS if name in wanted)


class _Chunk:
    """Parallel columns of raw records waiting to become one Arrow batch: key numbers (into the
    decoder's KeyTable) and values, filled by records.scan.scan_columns or `append`, and the
    records' (log offset, timestamp) as flat runs (first offset, records, timestamp)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.values: list[bytes | None] = []
        self.runs: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, table: KeyTable, offset: int, timestamp: int, key: bytes, value: bytes | None) -> None:
        """Add one record decoded by the general walker (or read through the protocol)."""
        self.ids.append(table.number(key))
        self.values.append(value)
        self.runs.extend((offset, 1, timestamp))

    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(runs as rows of first offset, records, timestamp; each record's index in its run)."""
        runs = np.array(self.runs, np.int64).reshape(-1, 3)
        counts = runs[:, 1]
        return runs, np.arange(len(self)) - np.repeat(np.cumsum(counts) - counts, counts)

    def log_offsets(self) -> np.ndarray:
        """Each record's log offset."""
        runs, index = self._runs()
        return np.repeat(runs[:, 0], runs[:, 1]) + index

    def timestamps(self) -> np.ndarray:
        """Each record's timestamp (ms)."""
        runs = np.array(self.runs, np.int64).reshape(-1, 3)
        return np.repeat(runs[:, 2], runs[:, 1])


class _PartitionDecoder:
    """Decodes the segments of one log partition, in log order: plain batches through the
    compiled scan, others through the general walker; full chunks come out as Arrow batches.
    Open transactions and the key table carry over from one segment to the next (a segment
    may roll in the middle of a transaction)."""

    def __init__(self, log_partition: int, selection: Selection) -> None:
        self.selection = selection
        self.log_partition = log_partition
        self.table = KeyTable()
        self.chunk = _Chunk()
        self.pending: dict[int, list[tuple[int, int, bytes, bytes | None]]] = {}  # open transactions

    def take(self) -> pa.RecordBatch:
        """The chunk as an Arrow batch; a new chunk starts."""
        batch = decode_chunk(self.chunk, self.table, self.log_partition, self.selection)
        self.chunk = _Chunk()
        if len(self.table) > KEY_TABLE_LIMIT:  # a compacted log is mostly distinct keys: bound the memory
            self.table = KeyTable()
        return batch

    def general(self, batch: bytes, transactional: bool) -> None:
        """A compressed, transactional or control batch; only committed transactional records
        are kept (read_committed)."""
        for offset, ts, key, value, producer in iter_log_records(batch, verify=True):
            if type(key) is ControlMarker:
                done = self.pending.pop(producer, [])
                if key is ControlMarker.COMMIT:
                    for record in done:
                        self.chunk.append(self.table, *record)
            elif key is None:
                continue
            elif transactional:
                self.pending.setdefault(producer, []).append((offset, ts, key, value))
            else:
                self.chunk.append(self.table, offset, ts, key, value)

    def segment(self, data: bytes) -> Iterator[pa.RecordBatch]:
        """Arrow batches of every record of the next segment (a torn tail is ignored, as at load)."""
        pos = 0
        while True:
            chunk = self.chunk
            pos = scan_columns(data, pos, CHUNK_RECORDS - len(chunk), self.table, chunk.ids, chunk.values,
                               chunk.runs)
            if len(chunk) >= CHUNK_RECORDS:
                yield self.take()
                continue
            other = next(iter_batches(data, pos), None)  # the scan stopped at this batch, or at the end
            if other is None:
                break
            size = other[1].batch_length + LOG_OVERHEAD
            self.general(data[pos:pos + size], bool(other[1].attributes & TRANSACTIONAL_MASK))
            pos += size
        if len(self.chunk):
            yield self.take()


def decode_segment(data: bytes, log_partition: int, selection: Selection = Selection()) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the selected rows and columns of one segment file's bytes."""
    return _PartitionDecoder(log_partition, selection).segment(data)


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
            decoder = _PartitionDecoder(item.log_partition, selection)
        if isinstance(item, SegmentFile):
            yield from decoder.segment(Path(item.path).read_bytes())
        else:
            yield from _read_range(options, decoder, item)


def _read_range(options: Mapping[str, str], decoder: _PartitionDecoder,
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


class OffsetsLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: tails `__consumer_offsets` through the protocol. Offsets are Spark's
    Kafka JSON per log partition, {"__consumer_offsets": {"0": next offset}}; each micro-batch
    is log ranges packed into tasks as the batch reader packs them and decoded the same way
    (Selection, column pruning), with admission control as the topic source's."""

    def __init__(self, options: Mapping[str, str], columns: tuple[str, ...] = ALL_COLUMNS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if options.get("path") or not options.get("kafka.bootstrap.servers"):
            raise ValueError("streaming reads of offsetd-offsets-log need the option kafka.bootstrap.servers "
                             "(path, segment files, is for batch reads only)")
        self.options = options
        self.selection = Selection.from_options(options, columns)
        self.only = option_partitions(options)
        spec = (options.get("startingOffsets") or DEFAULT_STARTING_OFFSETS).strip().lower()
        if spec not in STARTING_OFFSETS:
            raise ValueError(f"option startingOffsets must be one of {', '.join(STARTING_OFFSETS)}, got {spec!r}")
        self.starting = STARTING_OFFSETS[spec]
        self.admission = AdmissionControl(TriggerOptions(options), clock)
        self._cluster: Cluster | None = None
        self._parts: list[TopicPartitionKey] | None = None

    def __getstate__(self) -> dict:
        """Spark pickles the reader to ship `read` to executors: leave the client behind."""
        return {**self.__dict__, "_cluster": None}

    @property
    def cluster(self) -> Cluster:
        """The driver's metadata client, created on first use."""
        if self._cluster is None:
            self._cluster = Cluster(self.options)
        return self._cluster

    def _log_ends(self) -> dict[TopicPartitionKey, int]:
        """The log end offset of every log partition read. The partition list is asked until
        the topic exists (a cluster creates it at the first commit), then kept: the partition
        count of `__consumer_offsets` never changes in practice."""
        if not self._parts:
            self._parts = [tp for tp in self.cluster.partitions_of([OFFSETS_TOPIC])
                           if self.only is None or tp[1] in self.only]
        return self.cluster.list_offsets(self._parts, LATEST)

    def initialOffset(self) -> dict:
        """Where a query with a fresh checkpoint starts: every log partition's start (earliest,
        the default) or end (latest)."""
        ends = self._log_ends()
        return to_json_offsets(ends if self.starting == LATEST else self.cluster.list_offsets(ends, EARLIEST))

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger / minOffsetsPerTrigger (AdmissionControl.read_limit)."""
        return self.admission.read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: never read past what exists now."""
        self.admission.target = self._log_ends()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offsets of the next micro-batch as AdmissionControl.end decides; `start` when
        the trigger is skipped (no batch). A log end below `start` (a log truncated) keeps `start`."""
        latest = self._log_ends()
        begin = from_json_offsets(start)
        begin = {tp: begin.get(tp, NEW_PARTITION_START) for tp in latest}
        end = self.admission.end(begin, latest, limit)
        return start if end is None else to_json_offsets(end)

    def reportLatestOffset(self) -> dict:
        """Log end offsets, for Spark's progress report (latestOffset / offsets behind)."""
        return to_json_offsets(self._log_ends())

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
