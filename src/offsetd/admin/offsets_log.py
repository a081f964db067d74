"""Read `__consumer_offsets` as typed entries, from a cluster or from segment files on disk.

* `read_cluster`: a confluent-kafka Consumer (assign only: it never joins a group or commits)
  reads every partition of `__consumer_offsets`, or only the one holding `--group`
  (`partition_for(group, partition count from Metadata)`), from the earliest offset up to the end
  offset captured before reading, then stops. One partition at a time, so entries come out in
  (partition, offset) order. It reads read_committed, as the coordinator applies the log, so
  aborted transactional offset commits are not shown and transaction markers are never delivered.
* `read_files`: Kafka's on-disk layout (`__consumer_offsets-N/00000000000000000000.log`); a
  path is a segment file, a partition directory (its `*.log` files in base-offset order) or a
  broker data dir (its `__consumer_offsets-N` directories in partition order). The partition
  number comes from the directory name. Every batch's CRC is checked; transaction
  markers (control records) are yielded as entries, because a file holds them, and records
  of transactional batches and markers carry their producer id and epoch (markers also the
  transaction coordinator's epoch).

Decoding reuses `offsetd.records.offsets`, and `offsetd.records.consumer_group_records` for the
KIP-848 consumer groups' records (types 3-8, 16). Other key versions (share-group records, future
versions) are entries of type "unknown", not errors; malformed records are errors
(`OffsetsLogError`) that name the file or partition and the offset.
"""

from __future__ import annotations

import re
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Generator, Iterable, Iterator, Union

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from offsetd.records import consumer_group_records, share_group_records
from offsetd.records.batch import InvalidBatch, iter_batches
from offsetd.records.control import parse_marker
from offsetd.records.coordinator_serde import RecordDecodeError
from offsetd.records.group_metadata_value import GroupMetadataValue
from offsetd.records.log_walker import ControlMarker, iter_log_records
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordKey,
    decode_key,
    decode_value,
    partition_for,
)

__all__ = ["OffsetsLogError", "LogEntry", "decode_entry", "read_cluster", "read_files"]

_PARTITION_DIR = re.compile(r"-(\d+)$")  # `__consumer_offsets-17` -> 17
_OFFSETS_DIR = re.compile(re.escape(OFFSETS_TOPIC) + r"-(\d+)")
_int16 = struct.Struct(">h")

EntryKey = Union[OffsetCommitKey, GroupMetadataKey, consumer_group_records.ConsumerGroupKey,
                 share_group_records.ShareGroupKey, UnknownRecordKey,
                 ControlMarker]
EntryValue = Union[OffsetCommitValue, GroupMetadataValue, consumer_group_records.ConsumerGroupValue,
                   share_group_records.ShareGroupValue, bytes, None]


class OffsetsLogError(Exception):
    """The log could not be read: a corrupt file or record, a missing topic, a broker error or timeout."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One decoded `__consumer_offsets` record with where it was found.

    `key` is the decoded key, or a ControlMarker for a transaction marker (files only). `value` is
    the decoded value, the raw bytes for an unknown key version, or None for a tombstone (and for
    markers). `key_version` / `value_version` are the int16 schema versions (None where absent).
    """

    log_partition: int | None
    log_offset: int
    timestamp: int
    key: EntryKey
    value: EntryValue
    key_version: int | None
    value_version: int | None
    producer_id: int = -1
    """The batch's producer id: set for transactional records and markers read from files."""
    producer_epoch: int = -1
    """The batch's producer epoch, with producer_id."""
    coordinator_epoch: int = -1
    """A marker's transaction coordinator epoch (-1 for records)."""

    @property
    def record_type(self) -> str:
        """"offset_commit", "group_metadata", a consumer group's ("consumer_group_metadata", ...,
        "consumer_group_regular_expression"), "unknown" (key version) or "txn_marker"."""
        return _RECORD_TYPES[type(self.key)]

    @property
    def tombstone(self) -> bool:
        """A null value: the offset or group was deleted or expired (never true for markers)."""
        return self.value is None and type(self.key) is not ControlMarker

    @property
    def group(self) -> str | None:
        """The group the record belongs to (None for unknown keys and markers)."""
        key = self.key
        if type(key) is OffsetCommitKey or type(key) is GroupMetadataKey:
            return key.group
        return getattr(key, "group_id", None)  # a consumer group's record


_RECORD_TYPES: dict[type, str] = {
    OffsetCommitKey: "offset_commit",
    GroupMetadataKey: "group_metadata",
    UnknownRecordKey: "unknown",
    ControlMarker: "txn_marker",
    **consumer_group_records.RECORD_TYPE_NAMES,
    **share_group_records.RECORD_TYPE_NAMES,
}


def _version(data: bytes | None) -> int | None:
    """The int16 schema version that starts a key or value (None for null or too short)."""
    return _int16.unpack_from(data)[0] if data is not None and len(data) >= 2 else None


def decode_entry(
    log_partition: int | None,
    log_offset: int,
    timestamp: int,
    key: bytes | ControlMarker | None,
    value: bytes | None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    coordinator_epoch: int = -1,
) -> LogEntry:
    """Decode one record (as `iter_log_records` or a Consumer yields it) into a LogEntry.

    Raises RecordDecodeError for a null key or a malformed / unknown-version value of a known key.
    """
    if type(key) is ControlMarker:
        return LogEntry(log_partition, log_offset, timestamp, key, None, None, None, producer_id, producer_epoch,
                        coordinator_epoch)
    decoded: EntryKey = decode_key(key)  # type: ignore[arg-type]
    if type(decoded) is UnknownRecordKey and decoded.version in consumer_group_records.CONSUMER_GROUP_RECORD_TYPES:
        decoded = consumer_group_records.decode_key(key)  # type: ignore[arg-type, assignment]
        return LogEntry(log_partition, log_offset, timestamp, decoded,
                        consumer_group_records.decode_value(decoded, value),  # type: ignore[arg-type]
                        _version(key), _version(value), producer_id, producer_epoch)  # type: ignore[arg-type]
    if type(decoded) is UnknownRecordKey and decoded.version in share_group_records.SHARE_GROUP_RECORD_TYPES:
        decoded = share_group_records.decode_key(key)  # type: ignore[arg-type, assignment]
        return LogEntry(log_partition, log_offset, timestamp, decoded,
                        share_group_records.decode_value(decoded, value),  # type: ignore[arg-type]
                        _version(key), _version(value), producer_id, producer_epoch)  # type: ignore[arg-type]
    if type(decoded) is UnknownRecordKey:
        decoded_value: EntryValue = bytes(value) if value is not None else None
    else:
        decoded_value = decode_value(decoded, value)
    return LogEntry(log_partition, log_offset, timestamp, decoded, decoded_value,
                    _version(key), _version(value), producer_id, producer_epoch)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# From a cluster
# ---------------------------------------------------------------------------------------------


def _reader(client_config: dict[str, str]) -> Consumer:
    """An assign-only consumer: a throwaway group id (required by the client, never joined or
    committed to), read_committed unless the caller's config says otherwise."""
    return Consumer({
        "isolation.level": "read_committed",
        **client_config,
        "group.id": f"offsetd-offsets-log-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })


def _partition_count(consumer: Consumer, timeout_s: float) -> int:
    """Partitions of `__consumer_offsets` from Metadata; OffsetsLogError if the topic is missing."""
    try:
        metadata = consumer.list_topics(OFFSETS_TOPIC, timeout=timeout_s)
    except KafkaException as exc:
        raise OffsetsLogError(f"cannot read metadata of {OFFSETS_TOPIC}: {exc.args[0]}") from exc
    topic = metadata.topics.get(OFFSETS_TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        reason = topic.error if topic is not None and topic.error is not None else "no partitions"
        raise OffsetsLogError(f"cluster has no readable {OFFSETS_TOPIC} topic ({reason})")
    return len(topic.partitions)


def _read_partition(consumer: Consumer, partition: int, deadline: float) -> Iterator[LogEntry]:
    """Entries of one partition from its start to the end offset seen now (then stop)."""
    tp = TopicPartition(OFFSETS_TOPIC, partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=max(deadline - time.monotonic(), 0.1))
    except KafkaException as exc:
        raise OffsetsLogError(f"cannot list offsets of {OFFSETS_TOPIC}-{partition}: {exc.args[0]}") from exc
    if high <= low:
        return
    consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, OFFSET_BEGINNING)])
    try:
        while True:
            if time.monotonic() > deadline:
                raise OffsetsLogError(f"timed out reading {OFFSETS_TOPIC}-{partition} (end offset {high})")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                # EOF: the position reached the end; the last offsets may be compacted away or be
                # transaction markers, which are never delivered.
                if error.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high:
                        return
                    continue
                raise OffsetsLogError(f"error reading {OFFSETS_TOPIC}-{partition}: {error.str()}")
            if msg.offset() >= high:
                return
            try:
                yield decode_entry(partition, msg.offset(), msg.timestamp()[1], msg.key(), msg.value())
            except RecordDecodeError as exc:
                raise OffsetsLogError(f"{OFFSETS_TOPIC}-{partition} offset {msg.offset()}: {exc}") from exc
            if msg.offset() >= high - 1:
                return
    finally:
        consumer.unassign()


def read_cluster(client_config: dict[str, str], group: str | None = None, timeout_s: float = 30.0) -> Iterator[LogEntry]:
    """Entries of `__consumer_offsets` read through the Kafka protocol, partition by partition.

    With `group`, only that group's partition is read and only its records are yielded.
    `client_config` is a librdkafka config (`bootstrap.servers` plus security settings).
    Raises OffsetsLogError on broker errors, malformed records, or when `timeout_s` runs out.
    """
    deadline = time.monotonic() + timeout_s
    consumer = _reader(client_config)
    try:
        count = _partition_count(consumer, timeout_s)
        partitions = [partition_for(group, count)] if group is not None else range(count)
        for partition in partitions:
            for entry in _read_partition(consumer, partition, deadline):
                if group is None or entry.group == group:
                    yield entry
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------
# From segment files
# ---------------------------------------------------------------------------------------------


def _expand_log_dirs(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Each path as given, except a broker data dir (`log.dirs`: it holds `__consumer_offsets-N`
    directories), which becomes those directories in partition order."""
    for raw in paths:
        path = Path(raw)
        found = sorted(
            (int(m.group(1)), child) for child in (path.iterdir() if path.is_dir() else ())
            if child.is_dir() and (m := _OFFSETS_DIR.fullmatch(child.name))
        )
        yield from ([child for _, child in found] if found else [path])


def _segment_files(paths: Iterable[str | Path]) -> Iterator[tuple[Path, int | None]]:
    """(segment file, partition from its directory name) for each path; a partition directory is
    expanded to its `*.log` files in base-offset order (the file name is the base offset), a data
    dir to its `__consumer_offsets-N` directories."""
    for path in _expand_log_dirs(paths):
        if path.is_dir():
            files = sorted(path.glob("*.log"), key=lambda f: (len(f.stem), f.stem))
            directory = path
        elif path.is_file():
            files, directory = [path], path.parent
        else:
            raise OffsetsLogError(f"{path}: no such file or directory")
        match = _PARTITION_DIR.search(directory.resolve().name)
        partition = int(match.group(1)) if match else None
        for file in files:
            yield file, partition


def _producer_epochs(buf: bytes) -> dict[int, tuple[int, int]]:
    """log offset -> (producer epoch, coordinator epoch or -1) for every record of the batches
    with a producer id (transactional records and markers: few, so a dict is cheap)."""
    epochs: dict[int, tuple[int, int]] = {}
    for pos, h in iter_batches(buf):
        if h.producer_id < 0:
            continue
        coordinator_epoch = -1
        if h.is_control:
            try:
                coordinator_epoch = parse_marker(buf, pos)[1]
            except InvalidBatch:
                pass  # not a version-0 marker: iter_log_records judges the batch itself
        for offset in range(h.base_offset, h.base_offset + h.last_offset_delta + 1):
            epochs[offset] = (h.producer_epoch, coordinator_epoch)
    return epochs


def _read_segment(path: Path, partition: int | None) -> Generator[LogEntry, None, None]:
    """Entries of one segment file; OffsetsLogError names the file and the byte or log offset."""
    try:
        buf = path.read_bytes()
    except OSError as exc:
        raise OffsetsLogError(f"{path}: {exc.strerror}") from exc
    records = iter_log_records(buf, verify=True, markers=True)
    epochs = _producer_epochs(buf)
    try:
        while True:
            try:
                offset, timestamp, key, value, producer_id = next(records)
            except StopIteration as stop:
                end = stop.value
                break
            try:
                yield decode_entry(partition, offset, timestamp, key, value, producer_id,
                                   *epochs.get(offset, (-1, -1)))
            except RecordDecodeError as exc:
                raise OffsetsLogError(f"{path}: record at offset {offset}: {exc}") from exc
    except RecordDecodeError as exc:
        raise OffsetsLogError(f"{path}: {exc}") from exc
    # iter_log_records stops quietly at an incomplete batch (a torn tail); zero fill is harmless,
    # anything else is a batch cut short, which a dump must not pass over in silence.
    if buf[end:].strip(b"\x00"):
        raise OffsetsLogError(f"{path}: incomplete batch at byte {end} ({len(buf) - end} trailing bytes)")


def read_files(paths: Iterable[str | Path], group: str | None = None) -> Iterator[LogEntry]:
    """Entries of segment files or partition directories, in the order given (with `group`, only
    that group's records). Raises OffsetsLogError for a missing path or a corrupt file."""
    for path, partition in _segment_files(paths):
        for entry in _read_segment(path, partition):
            if group is None or entry.group == group:
                yield entry
