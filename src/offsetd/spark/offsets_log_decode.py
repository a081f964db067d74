"""Decoding `__consumer_offsets` segments and records into Arrow batches of offsets-log rows
(schemas.OFFSETS_LOG_FIELDS), for offsets_log_source's readers.

Records are decoded in chunks of about CHUNK_RECORDS into Arrow columns, never row by row:
* plain batches go through the project's compiled, CRC-checked `records.scan.scan_columns`: key
  numbers, values, and (log offset, timestamp) runs - a coordinator's batch is one run;
* each distinct key is decoded once (`KeyTable`), column-wise with numpy where it can
  (`_key_columns_vectorized`, the numpy twin of `decode_key` for key versions 0-2; anything
  else through `decode_key`), and the key columns are taken from that table by key number;
* OffsetCommit values of the common layout (v3, empty metadata) are one numpy view, others
  `decode_offset_commit_value` each; GroupMetadata values `decode_group_metadata_value` each.
* KIP-848 consumer groups' records (types 3-8, 16) are rare beside commits: their keys are
  decoded by `records.consumer_group_records` each (the commit keys of the same chunk still
  column-wise), their values record by record into the columns they fill (`_consumer_group_cells`).
Compressed, transactional and control batches take `records.log_walker.iter_log_records`
(committed transactions only, as a read_committed consumer sees them). Records of other key
versions (share groups, future versions) and records without a key are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, islice
from typing import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from offsetd.records import consumer_group_records as cgr
from offsetd.records.batch import LOG_OVERHEAD, TRANSACTIONAL_MASK, iter_batches
from offsetd.records.consumer_protocol import parse_subscription_topics
from offsetd.records.group_metadata_value import decode_group_metadata_value
from offsetd.records.log_walker import ControlMarker, iter_log_records
from offsetd.records.offset_commit_value import decode_offset_commit_value
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, UnknownRecordKey, decode_key
from offsetd.records.scan import scan_columns

from .options import option_bool
from .schemas import GROUP_METADATA, OFFSET_COMMIT, OFFSETS_LOG_ARROW, OFFSETS_LOG_DDL, OFFSETS_LOG_FIELDS

CHUNK_RECORDS = 65536  # records per Arrow batch
KEY_TABLE_LIMIT = 1 << 18  # distinct keys a decoder remembers; it starts afresh between chunks past this

# Record kinds in a chunk's key table (index into KIND_NAMES): the classic two, the consumer
# groups' seven (GROUP < kind < UNKNOWN), and UNKNOWN (never a row).
COMMIT, GROUP = 0, 1
CONSUMER_GROUP_KINDS: dict[type, int] = {cls: GROUP + 1 + i for i, cls in enumerate(cgr.RECORD_TYPE_NAMES)}
UNKNOWN = GROUP + 1 + len(CONSUMER_GROUP_KINDS)
KIND_NAMES = [OFFSET_COMMIT, GROUP_METADATA, *cgr.RECORD_TYPE_NAMES.values(), None]
# ConsumerGroupCurrentMemberAssignment's State, by Kafka's MemberState names.
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}

# OffsetCommitValue v3 with empty metadata, the layout Kafka and offsetd write for almost every
# commit: int16 version 3 | int64 offset | int32 leaderEpoch | int16 metadata length 0 |
# int64 commitTimestamp (24 bytes, big-endian).
_V3_EMPTY = np.dtype([("version", ">i2"), ("offset", ">i8"), ("epoch", ">i4"), ("md_len", ">i2"),
                      ("commit_ts", ">i8")])


class KeyTable(dict):
    """Raw key bytes -> key number, numbered in order of first appearance (records.scan.scan_columns
    fills it; `number` does the same from Python), and the numbered keys decoded once each into
    columns, so a chunk's key columns are a `take` by key number. Consumer groups' keys are also
    kept decoded (`consumer_keys`, by key number) for their values and member id columns."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded = 0  # keys decoded into the columns below
        self.consumer_keys: dict[int, cgr.ConsumerGroupKey] = {}
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
            kinds, groups, topics, partitions, consumer = _key_columns(list(islice(self, self.decoded, None)))
            self.consumer_keys.update((self.decoded + i, key) for i, key in consumer.items())
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


def _key_columns_vectorized(arrow: pa.BinaryArray) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray] | None:
    """(kinds, groups, topics, partitions) of a chunk's keys decoded column-wise with numpy, the
    columnar twin of records.offsets.decode_key for the layouts Kafka writes (§4.4, §4.6):

        OffsetCommit key v0/v1: int16 version | int16 len + group | int16 len + topic | int32 partition
        GroupMetadata key v2:   int16 version | int16 len + group

    None when any key is not exactly one of these (another key version, a null or truncated
    string): the caller then decodes row by row, which reports or skips such keys."""
    n = len(arrow)
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


def _key_versions(arrow: pa.BinaryArray) -> np.ndarray:
    """The int16 version (record type) that starts each key, -1 for a key shorter than that."""
    ends = _value_ends(arrow)
    if not len(arrow) or ends[-1] < 2:
        return np.full(len(arrow), -1)
    data = np.frombuffer(arrow.buffers()[2], np.uint8)
    starts = ends[:-1].astype(np.int64)
    whole = ends[1:] - ends[:-1] >= 2
    return np.where(whole, _be16(data, np.where(whole, starts, 0)), -1)


KeyColumns = tuple[np.ndarray, pa.Array, pa.Array, np.ndarray, dict[int, cgr.ConsumerGroupKey]]


def _key_columns(keys: list[bytes]) -> KeyColumns:
    """(kinds, groups, topics, partitions, consumer groups' keys by index) of distinct keys:
    column-wise when possible; when some are not classic keys, those are decoded each and the
    others still column-wise; else all decoded each."""
    arrow = pa.array(keys, pa.binary())
    fast = _key_columns_vectorized(arrow)
    if fast is not None:
        return (*fast, {})
    versions = _key_versions(arrow) if not arrow.null_count else np.full(len(keys), -1)
    is_classic = (versions >= 0) & (versions <= 2)
    classic, others = np.flatnonzero(is_classic), np.flatnonzero(~is_classic)
    if len(classic) and len(others) and (fast := _key_columns_vectorized(arrow.take(pa.array(classic)))) is not None:
        kinds, groups, topics, partitions, consumer = _key_columns_by_row([keys[i] for i in others.tolist()])
        # position in the concatenation (classic keys first, then the others) of each key
        order = np.empty(len(keys), np.int64)
        order[classic], order[others] = np.arange(len(classic)), len(classic) + np.arange(len(others))
        merged_kinds = np.empty(len(keys), np.int8)
        merged_partitions = np.empty(len(keys), np.int32)
        merged_kinds[classic], merged_kinds[others] = fast[0], kinds
        merged_partitions[classic], merged_partitions[others] = fast[3], partitions
        take = pa.array(order)
        return (merged_kinds, pa.concat_arrays([fast[1], groups]).take(take),
                pa.concat_arrays([fast[2], topics]).take(take), merged_partitions,
                {int(others[i]): key for i, key in consumer.items()})
    return _key_columns_by_row(keys)


def _key_columns_by_row(keys: list[bytes]) -> KeyColumns:
    """_key_columns by decoding each key."""
    entries = [_key_entry(raw) for raw in keys]
    return (np.array([e[0] for e in entries], np.int8), pa.array([e[1] for e in entries], pa.string()),
            pa.array([e[2] for e in entries], pa.string()), np.array([e[3] for e in entries], np.int32),
            {i: e[4] for i, e in enumerate(entries) if e[4] is not None})


def _key_entry(raw: bytes) -> tuple[int, str | None, str | None, int, cgr.ConsumerGroupKey | None]:
    """(kind, group, topic, partition, the consumer group's key or None) of a raw key."""
    key = decode_key(raw)
    if type(key) is OffsetCommitKey:
        return COMMIT, key.group, key.topic, key.partition, None
    if type(key) is GroupMetadataKey:
        return GROUP, key.group, None, -1, None
    if type(key) is UnknownRecordKey and key.version in cgr.CONSUMER_GROUP_RECORD_TYPES:
        consumer = cgr.decode_key(raw)
        assert consumer is not None  # its type is one of CONSUMER_GROUP_RECORD_TYPES
        return CONSUMER_GROUP_KINDS[type(consumer)], consumer.group_id, None, -1, consumer
    return UNKNOWN, None, None, -1, None


def _topic_partitions(tps: tuple[cgr.TopicPartitions, ...]) -> list[dict]:
    """Assignment cells: topic id (as a UUID string) and partitions."""
    return [{"topic_id": str(tp.topic_id), "partitions": list(tp.partitions)} for tp in tps]


def _consumer_group_cells(key: cgr.ConsumerGroupKey, raw: bytes | None) -> dict[str, object]:
    """The cells one consumer group's record fills, by column (schemas.OFFSETS_LOG_FIELDS says
    which columns each type reuses); a tombstone fills only its key's."""
    cells: dict[str, object] = {}
    if hasattr(key, "member_id"):
        cells["member_id"] = key.member_id
    if type(key) is cgr.ConsumerGroupRegularExpressionKey:
        cells["regular_expression"] = key.regular_expression
    value = cgr.decode_value(key, raw)
    t = type(value)
    if t is cgr.ConsumerGroupMetadataValue:
        cells["generation"] = value.epoch  # type: ignore[union-attr]
    elif t is cgr.ConsumerGroupTargetAssignmentMetadataValue:
        cells["generation"] = value.assignment_epoch  # type: ignore[union-attr]
    elif t is cgr.ConsumerGroupPartitionMetadataValue:
        cells["topics"] = [{"topic_id": str(m.topic_id), "topic": m.topic_name, "num_partitions": m.num_partitions}
                           for m in value.topics]  # type: ignore[union-attr]
    elif t is cgr.ConsumerGroupMemberMetadataValue:
        m: cgr.ConsumerGroupMemberMetadataValue = value  # type: ignore[assignment]
        classic = m.classic_member_metadata
        cells["members"] = [{
            "member_id": key.member_id, "group_instance_id": m.instance_id,  # type: ignore[union-attr]
            "client_id": m.client_id, "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout_ms,
            "session_timeout": classic.session_timeout_ms if classic is not None else None,
            "subscribed_topics": list(m.subscribed_topic_names), "subscription": None, "assignment": None,
        }]
        cells.update(protocol=m.server_assignor, rack_id=m.rack_id, regular_expression=m.subscribed_topic_regex)
    elif t is cgr.ConsumerGroupTargetAssignmentMemberValue:
        cells["assigned_partitions"] = _topic_partitions(value.topic_partitions)  # type: ignore[union-attr]
    elif t is cgr.ConsumerGroupCurrentMemberAssignmentValue:
        a: cgr.ConsumerGroupCurrentMemberAssignmentValue = value  # type: ignore[assignment]
        cells.update(member_epoch=a.member_epoch, previous_member_epoch=a.previous_member_epoch,
                     member_state=MEMBER_STATES.get(a.state, str(a.state)),
                     assigned_partitions=_topic_partitions(a.assigned_partitions),
                     partitions_pending_revocation=_topic_partitions(a.partitions_pending_revocation))
    elif t is cgr.ConsumerGroupRegularExpressionValue:
        r: cgr.ConsumerGroupRegularExpressionValue = value  # type: ignore[assignment]
        cells["topics"] = [{"topic_id": None, "topic": topic, "num_partitions": None} for topic in r.topics]
        cells["state_timestamp"] = r.timestamp
    return cells


GROUP_COLUMNS = ["protocol_type", "generation", "protocol", "leader", "state_timestamp", "members"]
CONSUMER_GROUP_COLUMNS = ["member_id", "member_epoch", "previous_member_epoch", "member_state", "assigned_partitions",
                          "partitions_pending_revocation", "rack_id", "regular_expression", "topics"]
SPARSE_COLUMNS = GROUP_COLUMNS + CONSUMER_GROUP_COLUMNS  # filled record by record, where a record has them
ALL_COLUMNS = tuple(OFFSETS_LOG_ARROW.names)


@dataclass(frozen=True)
class Selection:
    """What a read returns: `columns` (in the source's order; a user-given schema prunes them)
    and which records become rows - source options `recordTypes` (comma list of offset_commit,
    group_metadata and the consumer groups' record types; default all) and `includeTombstones`
    (default true), narrowed further by pushed record_type and tombstone filters (`live` false: tombstones only). A pipeline that
    needs only live commits reads just those, without the columns it would filter on."""

    columns: tuple[str, ...] = ALL_COLUMNS
    kinds: frozenset[int] = frozenset(range(UNKNOWN))
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
                                 f"give some of {', '.join(KIND_NAMES[:UNKNOWN])}")
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

    cells: dict[str, dict[int, object]] = {name: {} for name in SPARSE_COLUMNS}  # column -> row -> cell
    columns = selection.columns
    if group_rows.any() and any(name in columns for name in GROUP_COLUMNS):
        rows = np.flatnonzero(group_rows).tolist()
        for name, col in zip(GROUP_COLUMNS, _group_columns(list(compress(chunk.values, group_rows)))):
            cells[name] = dict(zip(rows, col))
    consumer_rows = (kinds > GROUP) & (kinds < UNKNOWN) & selected
    if consumer_rows.any() and any(name in columns for name in SPARSE_COLUMNS):
        keys = table.consumer_keys
        for i in np.flatnonzero(consumer_rows).tolist():
            for name, cell in _consumer_group_cells(keys[chunk.ids[i]], chunk.values[i]).items():
                cells[name][i] = cell

    def sparse(name: str) -> pa.Array:
        """A column filled record by record: nulls but where a record gave a cell."""
        kind, filled = OFFSETS_LOG_ARROW.field(name).type, cells[name]
        if not filled:
            return pa.nulls(n, kind)
        full: list[object] = [None] * n
        for i, cell in filled.items():
            full[i] = cell
        return pa.array(full, kind)

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
        **{name: (lambda name=name: sparse(name)) for name in SPARSE_COLUMNS},
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


class PartitionDecoder:
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
    return PartitionDecoder(log_partition, selection).segment(data)
