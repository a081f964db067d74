"""`format("offsetd-offsets-log")`: `__consumer_offsets` as typed rows (schemas.OFFSETS_LOG_FIELDS).

Two ways in, one input partition each:
* `path`: segment files (a log.dirs directory, one `__consumer_offsets-N` directory, or `.log`
  files; backups and archives work the same) - one Spark task per segment file, the log
  partition taken from the directory name;
* `kafka.bootstrap.servers`: the live topic of any Kafka-compatible cluster - one task per
  `__consumer_offsets` partition, from its log start to the log end at planning time.
Option `partitions` (comma list) restricts either to some log partitions. A schema given with
`.schema("group string, offset bigint, ...")` (a subset of the columns) prunes columns: only
those are decoded and sent to Spark.

Records are decoded in chunks of about CHUNK_RECORDS into Arrow columns, never row by row:
* runs of plain batches go through the project's flat, CRC-checked `records.scan.scan_key_values`
  for keys and values;
* log offsets and record timestamps: coordinators write batches whose records all have
  timestamp delta 0 and consecutive offset deltas; `implied_stamps` proves that for a whole
  run by checking every framing byte column-wise with numpy, else `records.batch.record_timestamps`
  walks the records;
* keys are decoded column-wise (`_key_columns_vectorized`, the numpy twin of `decode_key` for
  key versions 0-2; anything else goes through `decode_key` once per distinct key);
* OffsetCommit values of the common layout (v3, empty metadata) are one numpy view, others
  `decode_offset_commit_value` each; GroupMetadata values `decode_group_metadata_value` each.
Compressed, transactional and idempotent batches take `records.offsets.iter_log_records`
(committed transactions only, as a read_committed consumer sees them). Records of key versions
other than 0-2 (KIP-848 / share groups) are skipped, as the broker's loader skips them.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

# _HEADER_UNPACK_FROM: the batch-header layout, shared as records/scan.py shares it
from offsetd.records.batch import (_COMPRESSION_MASK, _HEADER_UNPACK_FROM, BATCH_HEADER_SIZE, CONTROL_MASK,
                                   LOG_OVERHEAD, MIN_BATCH_LENGTH, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
                                   record_timestamps)
from offsetd.records.offsets import (OFFSETS_TOPIC, ControlMarker, GroupMetadataKey, OffsetCommitKey,
                                     RecordDecodeError,
                                     decode_group_metadata_value, decode_key, decode_offset_commit_value,
                                     iter_log_records, parse_subscription_topics)
from offsetd.records.scan import scan_key_values

from .kafka_client import EARLIEST, LATEST, Cluster, read_range
from .schemas import GROUP_METADATA, OFFSET_COMMIT, OFFSETS_LOG_ARROW, OFFSETS_LOG_DDL, OFFSETS_LOG_FIELDS

CHUNK_RECORDS = 65536  # records per Arrow batch
CHUNK_BYTES = 4 << 20  # bytes of segment scanned per scan_key_values call
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
    """Raw key bytes -> row in the table's key columns; each distinct key is decoded once."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[int] = []
        self.groups: list[str | None] = []
        self.topics: list[str | None] = []
        self.partitions: list[int] = []

    def __missing__(self, raw: bytes) -> int:
        """Decode a key seen for the first time and give it the next row."""
        key = decode_key(raw)
        row = len(self.kinds)
        if type(key) is OffsetCommitKey:
            entry = (COMMIT, key.group, key.topic, key.partition)
        elif type(key) is GroupMetadataKey:
            entry = (GROUP, key.group, None, -1)
        else:
            entry = (UNKNOWN, None, None, -1)
        self.kinds.append(entry[0])
        self.groups.append(entry[1])
        self.topics.append(entry[2])
        self.partitions.append(entry[3])
        self[raw] = row
        return row


def _masked(values: np.ndarray, valid: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """An Arrow array of `values` with nulls where `valid` is false."""
    return pa.array(values, dtype, mask=~valid)


def _commit_columns(raw: list[bytes]) -> tuple[np.ndarray, np.ndarray, list[str] | None, np.ndarray, np.ndarray]:
    """(offset, leader_epoch, metadata or None for all-empty, commit_ts, expire_ts) of values."""
    joined = b"".join(raw)
    n = len(raw)
    if len(joined) == _V3_EMPTY.itemsize * n:
        view = np.frombuffer(joined, _V3_EMPTY)
        if (view["version"] == 3).all() and (view["md_len"] == 0).all():
            return (view["offset"].astype(np.int64), view["epoch"].astype(np.int32), None,
                    view["commit_ts"].astype(np.int64), np.full(n, -1, np.int64))
    decoded = [decode_offset_commit_value(v) for v in raw]
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
    """(kinds, groups, topics, partitions) of a chunk's keys: column-wise when possible, else
    through decode_key once per distinct key."""
    fast = _key_columns_vectorized(keys)
    if fast is not None:
        return fast
    table = KeyTable()
    ids = np.fromiter(map(table.__getitem__, keys), np.int64, len(keys))
    ids_arrow = pa.array(ids)
    return (np.array(table.kinds, np.int8)[ids], pa.array(table.groups, pa.string()).take(ids_arrow),
            pa.array(table.topics, pa.string()).take(ids_arrow), np.array(table.partitions, np.int32)[ids])


GROUP_COLUMNS = ["protocol_type", "generation", "protocol", "leader", "state_timestamp", "members"]
ALL_COLUMNS = tuple(OFFSETS_LOG_ARROW.names)


def decode_chunk(keys: list[bytes], values: list[bytes | None], log_offsets: np.ndarray,
                 record_timestamps_ms: np.ndarray, log_partition: int,
                 columns: tuple[str, ...] = ALL_COLUMNS) -> pa.RecordBatch:
    """One Arrow batch of offsets-log rows from parallel lists of raw records, with only the
    requested `columns` (in the source's column order) built."""
    n = len(keys)
    kinds, groups, topics, partitions = _key_columns(keys)
    tomb = np.fromiter(map(operator.is_, values, repeat(None)), np.bool_, n)
    is_commit = kinds == COMMIT
    commit_rows = is_commit & ~tomb
    group_rows = (kinds == GROUP) & ~tomb

    offset = np.zeros(n, np.int64)
    epoch = np.zeros(n, np.int32)
    commit_ts = np.zeros(n, np.int64)
    expire_ts = np.zeros(n, np.int64)
    metadata: pa.Array = pa.nulls(n, pa.string())
    if commit_rows.any():
        o, e, md, c, x = _commit_columns(list(compress(values, commit_rows)))
        offset[commit_rows], epoch[commit_rows], commit_ts[commit_rows], expire_ts[commit_rows] = o, e, c, x
        if md is None:
            metadata = pc.if_else(pa.array(commit_rows), "", metadata)
        else:
            full: list[str | None] = [None] * n
            for i, m in zip(np.flatnonzero(commit_rows).tolist(), md):
                full[i] = m
            metadata = pa.array(full, pa.string())

    built: dict[str, pa.Array] = {name: pa.nulls(n, OFFSETS_LOG_ARROW.field(name).type) for name in GROUP_COLUMNS}
    if group_rows.any() and any(name in columns for name in GROUP_COLUMNS):
        rows = np.flatnonzero(group_rows).tolist()
        for name, col in zip(GROUP_COLUMNS, _group_columns(list(compress(values, group_rows)))):
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
        "log_offset": lambda: pa.array(log_offsets),
        "record_timestamp": lambda: pa.array(record_timestamps_ms),
    }
    batch = pa.RecordBatch.from_arrays([builders[name]() for name in columns],
                                       schema=pa.schema([OFFSETS_LOG_ARROW.field(name) for name in columns]))
    known = kinds != UNKNOWN
    return batch if known.all() else batch.filter(pa.array(known))


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
    """Parallel columns of raw records waiting to become one Arrow batch: keys and values as
    lists (filled by the scan callback `add`), log offsets and timestamps as numpy pieces."""

    def __init__(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[np.ndarray] = []
        self.timestamps: list[np.ndarray] = []

        # scan_key_values calls this once per record: bound appends, no attribute lookups
        def add(key: bytes, value: bytes | None, keys: Callable = self.keys.append,
                values: Callable = self.values.append) -> None:
            keys(key)
            values(value)
        self.add = add

    def __len__(self) -> int:
        return len(self.keys)


def _varint_size(v: np.ndarray) -> np.ndarray:
    """Bytes of the unsigned base-128 varint of each (non-negative) value."""
    return 1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21) + (v >= 1 << 28)


def _zigzag(v: np.ndarray) -> np.ndarray:
    """Zig-zag encoding of signed values (records use it for every varint)."""
    return np.where(v >= 0, 2 * v, -2 * v - 1)


def _varints_match(data: np.ndarray, at: np.ndarray, value: np.ndarray, size: np.ndarray) -> bool:
    """Whether data holds the varint of `value` (of `size` bytes) at each position `at`."""
    for k in range(int(size.max())):
        more = size > k
        expected = ((value >> (7 * k)) & 0x7F) | np.where(size > k + 1, 0x80, 0)
        if not np.array_equal(data[at[more] + k], expected[more]):
            return False
    return True


def _lengths(items: list[bytes | None]) -> np.ndarray:
    """len() of each item, -1 for None (a null key or value)."""
    arrow = pa.array(items, pa.binary())
    out = np.diff(_value_ends(arrow)).astype(np.int64)
    if arrow.null_count:
        out[~np.asarray(arrow.is_valid())] = -1
    return out


# Columns of a batch-header table: the fields of records.batch's 61-byte header, in order.
(H_BASE_OFFSET, H_BATCH_LENGTH, _H_EPOCH, H_MAGIC, _H_CRC, H_ATTRIBUTES, _H_LAST_DELTA, H_BASE_TIMESTAMP,
 H_MAX_TIMESTAMP, H_PRODUCER_ID, _H_PRODUCER_EPOCH, _H_BASE_SEQUENCE, H_COUNT) = range(13)


def implied_stamps(data: np.ndarray, positions: np.ndarray, headers: np.ndarray, keys: list[bytes | None],
                   values: list[bytes | None]) -> tuple[np.ndarray, np.ndarray] | None:
    """(log offsets, record timestamps) of a run of plain batches (byte `positions`, header
    table `headers`: one row of H_* fields per batch) whose records all have timestamp delta
    0 and offset delta = their index, as coordinators write this log - or None, and the
    caller walks the records (records.batch.record_timestamps).

    The claim is checked, not assumed: from the key and value lengths the scan returned, the
    position of every framing field follows (record length, attributes, timestampDelta,
    offsetDelta, key length, value length, header count: reference §4.2, records.offsets),
    and each of those bytes must hold exactly what the claim implies, with the records
    filling each batch exactly. That is the parse a record walker would make, done for all
    records at once with numpy."""
    counts = headers[:, H_COUNT]
    n = int(counts.sum())
    if n != len(keys) or n == 0 or counts.min() <= 0:
        return None
    first = np.cumsum(counts) - counts
    batch_of = np.repeat(np.arange(len(counts)), counts)
    index = np.arange(n) - first[batch_of]  # offset delta claimed
    klen, vlen = _lengths(keys), _lengths(values)
    s_off, s_key, s_value = _varint_size(2 * index), _varint_size(_zigzag(klen)), _varint_size(_zigzag(vlen))
    body = 3 + s_off + s_key + np.maximum(klen, 0) + s_value + np.maximum(vlen, 0)  # + attributes, ts, headers
    s_len = _varint_size(_zigzag(body))
    size = s_len + body
    if not np.array_equal(np.add.reduceat(size, first), headers[:, H_BATCH_LENGTH] + LOG_OVERHEAD - BATCH_HEADER_SIZE):
        return None
    ends = np.cumsum(size)
    start = (positions + BATCH_HEADER_SIZE)[batch_of] + ends - size - (ends - size)[first][batch_of]
    attr = start + s_len
    key_at = attr + 2 + s_off
    value_at = key_at + s_key + np.maximum(klen, 0)
    headers_at = value_at + s_value + np.maximum(vlen, 0)
    zero = np.zeros(n, np.int64)
    one = np.ones(n, np.int64)
    checks = [(start, _zigzag(body), s_len), (attr, zero, one), (attr + 1, zero, one),
              (attr + 2, 2 * index, s_off), (key_at, _zigzag(klen), s_key), (value_at, _zigzag(vlen), s_value),
              (headers_at, zero, one)]
    if not all(_varints_match(data, at, value, width) for at, value, width in checks):
        return None
    log_append = (headers[:, H_ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0
    stamp = np.where(log_append, headers[:, H_MAX_TIMESTAMP], headers[:, H_BASE_TIMESTAMP])
    return headers[:, H_BASE_OFFSET][batch_of] + index, stamp[batch_of]


def batch_table(data: bytes, pos: int = 0) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(position, header fields) of each complete batch from `pos`, as records.batch.iter_batches
    walks them (stops at a torn tail: a short header, a too-small length, a batch running past
    the end), as plain tuples: the header table's rows. A batch of another magic is an error."""
    n = len(data)
    while n - pos >= BATCH_HEADER_SIZE:
        header = _HEADER_UNPACK_FROM(data, pos)
        size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
        if header[H_BATCH_LENGTH] < MIN_BATCH_LENGTH or pos + size > n:
            return
        if header[H_MAGIC] != 2:
            raise RecordDecodeError(f"batch at byte {pos} has magic {header[H_MAGIC]}, not 2")
        yield pos, header
        pos += size


_NOT_PLAIN = CONTROL_MASK | TRANSACTIONAL_MASK | _COMPRESSION_MASK


class _SegmentDecoder:
    """Walks one segment's batches: runs of plain batches go to scan_key_values in one call,
    other batches through the general walker; full chunks come out as Arrow batches."""

    def __init__(self, data: bytes, log_partition: int, columns: tuple[str, ...]) -> None:
        self.data = data
        self.columns = columns
        self.bytes = np.frombuffer(data, np.uint8)
        self.log_partition = log_partition
        self.chunk = _Chunk()
        self.run: list[tuple[int, tuple[int, ...]]] = []  # plain batches not yet scanned
        self.pending: dict[int, list[tuple[int, int, bytes, bytes | None]]] = {}  # open transactions

    def flush_run(self) -> None:
        """Scan the pending run of plain batches into the chunk."""
        if not self.run:
            return
        chunk, run = self.chunk, self.run
        first = len(chunk)
        last_pos, last = run[-1]
        scan_key_values(self.data[run[0][0]:last_pos + last[H_BATCH_LENGTH] + LOG_OVERHEAD], chunk.add)
        positions = np.array([pos for pos, _ in run], np.int64)
        headers = np.array([h for _, h in run], np.int64)
        stamps = implied_stamps(self.bytes, positions, headers, chunk.keys[first:], chunk.values[first:])
        if stamps is None:
            pairs = [pair for pos, h in run
                     for pair in record_timestamps(self.data[pos:pos + h[H_BATCH_LENGTH] + LOG_OVERHEAD])]
            stamps = (np.array([o for o, _ in pairs], np.int64), np.array([t for _, t in pairs], np.int64))
        chunk.offsets.append(stamps[0])
        chunk.timestamps.append(stamps[1])
        self.run = []

    def take(self) -> pa.RecordBatch:
        """The chunk as an Arrow batch; a new chunk starts."""
        batch = _emit(self.chunk, self.log_partition, self.columns)
        self.chunk = _Chunk()
        return batch

    def general(self, batch: bytes, transactional: bool) -> None:
        """A compressed, transactional, idempotent or control batch; only committed
        transactional records are kept (read_committed)."""
        for offset, ts, key, value, producer in iter_log_records(batch, verify=True):
            if type(key) is ControlMarker:
                done = self.pending.pop(producer, [])
                if key is ControlMarker.COMMIT:
                    for record in done:
                        _append(self.chunk, *record)
            elif transactional:
                self.pending.setdefault(producer, []).append((offset, ts, key, value))
            else:
                _append(self.chunk, offset, ts, key, value)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Arrow batches of every record (a torn tail is ignored, as at load)."""
        run_bytes = 0
        for pos, header in batch_table(self.data):
            size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
            if not header[H_ATTRIBUTES] & _NOT_PLAIN and header[H_PRODUCER_ID] < 0:
                self.run.append((pos, header))
                run_bytes += size
                if run_bytes >= CHUNK_BYTES:
                    self.flush_run()
                    run_bytes = 0
            else:
                self.flush_run()
                run_bytes = 0
                self.general(self.data[pos:pos + size], bool(header[H_ATTRIBUTES] & TRANSACTIONAL_MASK))
            if len(self.chunk) >= CHUNK_RECORDS:
                yield self.take()
        self.flush_run()
        if len(self.chunk):
            yield self.take()


def decode_segment(data: bytes, log_partition: int,
                   columns: tuple[str, ...] = ALL_COLUMNS) -> Iterator[pa.RecordBatch]:
    """Arrow batches (with `columns`) of every record of one segment file's bytes."""
    return _SegmentDecoder(data, log_partition, columns).batches()


def _append(chunk: _Chunk, offset: int, ts: int, key: bytes, value: bytes | None) -> None:
    """Add one record decoded by the general walker (or read through the protocol)."""
    chunk.add(key, value)
    chunk.offsets.append(np.array([offset], np.int64))
    chunk.timestamps.append(np.array([ts], np.int64))


def _emit(chunk: _Chunk, log_partition: int, columns: tuple[str, ...]) -> pa.RecordBatch:
    """The chunk's records as one Arrow batch."""
    stamps = np.concatenate(chunk.timestamps) if chunk.timestamps else np.zeros(0, np.int64)
    offsets = np.concatenate(chunk.offsets) if chunk.offsets else np.zeros(0, np.int64)
    return decode_chunk(chunk.keys, chunk.values, offsets, stamps, log_partition, columns)


@dataclass(frozen=True)
class SegmentFile(InputPartition):
    """One segment file of one log partition."""

    path: str
    log_partition: int


@dataclass(frozen=True)
class LogRange(InputPartition):
    """[start, end) of one `__consumer_offsets` partition, read through the protocol."""

    log_partition: int
    start: int
    end: int


def segment_files(path: str) -> list[SegmentFile]:
    """Segment files under `path` (log.dirs, one partition directory, or a .log file), in order."""
    root = Path(path)
    if root.is_file():
        files = [root]
    elif _PARTITION_DIR.match(root.name):
        files = sorted(root.glob("*.log"))
    else:
        files = sorted(root.glob(f"{OFFSETS_TOPIC}-*/*.log"))
    out = []
    for f in files:
        match = _PARTITION_DIR.match(f.parent.name)
        out.append(SegmentFile(str(f), int(match.group(1)) if match else -1))
    return out


class OffsetsLogReader(DataSourceReader):
    """Plans one task per segment file or log partition; decodes in the executors."""

    def __init__(self, options: Mapping[str, str], columns: tuple[str, ...] = ALL_COLUMNS) -> None:
        self.options = options  # case-insensitive, as Spark passes it
        self.columns = columns
        wanted = options.get("partitions")
        self.only = {int(p) for p in wanted.split(",")} if wanted else None
        if bool(options.get("path")) == bool(options.get("kafka.bootstrap.servers")):
            raise ValueError("give exactly one of the options path (segment files) and kafka.bootstrap.servers")

    def partitions(self) -> list[InputPartition]:
        """Segment files, or log partitions with their current start and end offsets."""
        if self.options.get("path"):
            files = segment_files(self.options["path"])
            if not files:
                raise FileNotFoundError(f"no {OFFSETS_TOPIC} segment files under {self.options['path']}")
            return [f for f in files if (self.only is None or f.log_partition in self.only)
                    and Path(f.path).stat().st_size > 0]
        cluster = Cluster(self.options)
        parts = [tp for tp in cluster.partitions_of([OFFSETS_TOPIC])
                 if self.only is None or tp[1] in self.only]
        low, high = cluster.list_offsets(parts, EARLIEST), cluster.list_offsets(parts, LATEST)
        return [LogRange(p, low[(t, p)], high[(t, p)]) for t, p in parts if low[(t, p)] < high[(t, p)]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Decode one segment file or one log partition's range."""
        if isinstance(partition, SegmentFile):
            yield from decode_segment(Path(partition.path).read_bytes(), partition.log_partition, self.columns)
            return
        assert isinstance(partition, LogRange)
        for messages in read_range(self.options, OFFSETS_TOPIC, partition.log_partition, partition.start,
                                   partition.end, fail_on_data_loss=False, group_id="offsetd-spark-offsets-log"):
            chunk = _Chunk()
            kept = [m for m in messages if m.key() is not None]
            chunk.keys.extend(m.key() for m in kept)
            chunk.values.extend(m.value() for m in kept)
            chunk.offsets.append(np.array([m.offset() for m in kept], np.int64))
            chunk.timestamps.append(np.array([m.timestamp()[1] for m in kept], np.int64))
            if kept:
                yield _emit(chunk, partition.log_partition, self.columns)


class OffsetsLogSource(DataSource):
    """`spark.read.format("offsetd-offsets-log")`: the offsets log as typed rows."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "offsetd-offsets-log"

    def schema(self) -> str:
        """All columns (schemas.OFFSETS_LOG_FIELDS)."""
        return OFFSETS_LOG_DDL

    def reader(self, schema: StructType) -> OffsetsLogReader:
        """A reader building the columns of `schema` (the full schema unless the user gave a subset)."""
        return OffsetsLogReader(self.options, requested_columns(schema))
