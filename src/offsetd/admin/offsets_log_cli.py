"""`offsetd offsets-log dump`: decode `__consumer_offsets` for humans (Kafka's formatter lines)
and scripts (`--output json`, one object per line).

    offsetd offsets-log dump (--bootstrap-server HOST:PORT [--command-config FILE] [--group G]
                              | --files PATH... [--group G])
                             [--output text|json] [--timeout MS]

Text lines are what Kafka's `GroupMetadataManager$OffsetsMessageFormatter` and
`$GroupMetadataMessageFormatter` print (Kafka 3.x, Scala 2.13 collection names), both record types
in one stream, in log order:

    [group,topic,partition]::OffsetAndMetadata(offset=42, leaderEpoch=Optional[4], metadata=m,
        commitTimestamp=1700000000000, expireTimestamp=None)          (one line; Some(ts) for v1)
    group::GroupMetadata(groupId=group, generation=1, protocolType=Some(consumer),
        currentState=Stable, members=HashMap(id -> MemberMetadata(...)))
    [group,topic,partition]::NULL   /   group::NULL                      (tombstones)

Records Kafka's 3.x formatters do not know are printed too: the KIP-848 consumer groups' records
(types 3-8, 16) as `<Record>[<key fields>]::<Value>(field=value, ...)` (e.g.
`ConsumerGroupMetadata[g]::ConsumerGroupMetadataValue(epoch=3)`, topic ids as UUIDs),
`UnknownKey(version=N)::<hex>` for other key versions (share groups, future), and, from segment
files, `TransactionMarker(producerId=P)::COMMIT|ABORT`. In JSON, records of transactional batches
(TxnOffsetCommit: pending until their producer's marker) carry `producer_id` and
`producer_epoch`, and markers also `coordinator_epoch`.

Exit status: 0 done; 1 the log could not be read (corrupt file or record, broker error); 2 bad
arguments. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Callable, NoReturn, TextIO, get_args

from offsetd.admin.offsets_log import LogEntry, OffsetsLogError, read_cluster, read_files
from offsetd.config import parse_properties
from offsetd.records.consumer_group_records import ConsumerGroupKey
from offsetd.records.share_group_records import ShareGroupKey
from offsetd.records.consumer_protocol import parse_subscription_topics
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.log_walker import ControlMarker
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, UnknownRecordKey

__all__ = ["main", "format_text", "format_json"]

_CONSUMER_PROTOCOL = "consumer"


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line ("offsetd offsets-log dump: error: ...") and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The `offsets-log` parser and its `dump` sub-parser (for errors found after parsing)."""
    parser = _Parser(prog="offsetd offsets-log", description="Decode the __consumer_offsets log.")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=_Parser, metavar="dump")
    dump = actions.add_parser("dump", help="print the records of __consumer_offsets",
                              description="Print __consumer_offsets records, from a cluster or from segment files.")
    source = dump.add_mutually_exclusive_group(required=True)
    source.add_argument("--bootstrap-server", metavar="HOST:PORT", help="read the log from this cluster")
    source.add_argument("--files", nargs="+", metavar="PATH",
                        help="read segment files or __consumer_offsets-N directories instead")
    dump.add_argument("--command-config", metavar="FILE",
                      help="client properties (librdkafka names, e.g. security.protocol) for --bootstrap-server")
    dump.add_argument("--group", help="only this group's records (from the cluster: only its partition is read)")
    dump.add_argument("--output", choices=("text", "json"), default="text",
                      help="text (Kafka's formatter lines, the default) or json (one object per line)")
    dump.add_argument("--timeout", type=int, default=30000, metavar="MS",
                      help="give up reading from the cluster after this many ms (default 30000)")
    return parser, dump


# ---------------------------------------------------------------------------------------------
# Text: Kafka's formatter lines (Scala toString of the decoded objects)
# ---------------------------------------------------------------------------------------------


def _scala_option(value: object) -> str:
    """Scala `Option` toString: Some(x) or None."""
    return "None" if value is None else f"Some({value})"


def _offset_and_metadata(v: OffsetCommitValue) -> str:
    """Kafka's OffsetAndMetadata toString; leaderEpoch is a java.util.Optional (negative = empty),
    expireTimestamp a Scala Option (only value v1 carries one)."""
    epoch = f"Optional[{v.leader_epoch}]" if v.leader_epoch >= 0 else "Optional.empty"
    expire = _scala_option(v.expire_timestamp if v.expire_timestamp >= 0 else None)
    return (f"OffsetAndMetadata(offset={v.offset}, leaderEpoch={epoch}, metadata={v.metadata}, "
            f"commitTimestamp={v.commit_timestamp}, expireTimestamp={expire})")


def _member_metadata(m: MemberMetadata, protocol: str | None) -> str:
    """Kafka's MemberMetadata toString (with its trailing ", " before the parenthesis); a loaded
    member supports exactly the group's protocol."""
    return (f"MemberMetadata(memberId={m.member_id}, groupInstanceId={_scala_option(m.group_instance_id)}, "
            f"clientId={m.client_id}, clientHost={m.client_host}, sessionTimeoutMs={m.session_timeout}, "
            f"rebalanceTimeoutMs={m.rebalance_timeout}, supportedProtocols=List({protocol}), )")


def _group_metadata(group: str, v: GroupMetadataValue) -> str:
    """Kafka's GroupMetadata toString as the loader builds it: state Empty without members, else
    Stable; protocolType "" is None; members a Scala mutable HashMap (here in record order)."""
    members = ", ".join(f"{m.member_id} -> {_member_metadata(m, v.protocol)}" for m in v.members)
    return (f"GroupMetadata(groupId={group}, generation={v.generation}, "
            f"protocolType={_scala_option(v.protocol_type or None)}, "
            f"currentState={'Stable' if v.members else 'Empty'}, members=HashMap({members}))")


def _unknown_text(e: LogEntry) -> str:
    key: UnknownRecordKey = e.key  # type: ignore[assignment]
    value = "NULL" if e.value is None else e.value.hex()  # type: ignore[union-attr]
    return f"UnknownKey(version={key.version})::{value}"


def _offset_commit_text(e: LogEntry) -> str:
    key: OffsetCommitKey = e.key  # type: ignore[assignment]
    value = "NULL" if e.value is None else _offset_and_metadata(e.value)  # type: ignore[arg-type]
    return f"[{key.group},{key.topic},{key.partition}]::{value}"


def _group_metadata_text(e: LogEntry) -> str:
    key: GroupMetadataKey = e.key  # type: ignore[assignment]
    value = "NULL" if e.value is None else _group_metadata(key.group, e.value)  # type: ignore[arg-type]
    return f"{key.group}::{value}"


def _fields_text(value: object) -> str:
    """A consumer-group record's value as `Name(field=value, ...)`: uuids as UUIDs, tuples as [...]."""
    if dataclasses.is_dataclass(value):
        fields = ", ".join(f"{f.name}={_fields_text(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    if isinstance(value, tuple):
        return "[" + ", ".join(_fields_text(v) for v in value) + "]"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _consumer_group_text(e: LogEntry) -> str:
    key = e.key
    ids = ",".join(getattr(key, f.name) for f in dataclasses.fields(key))  # type: ignore[arg-type]
    value = "NULL" if e.value is None else _fields_text(e.value)
    return f"{type(key).__name__.removesuffix('Key')}[{ids}]::{value}"


def _marker_text(e: LogEntry) -> str:
    return f"TransactionMarker(producerId={e.producer_id})::{e.key.name}"  # type: ignore[union-attr]


_TEXT: dict[type, Callable[[LogEntry], str]] = {
    OffsetCommitKey: _offset_commit_text,
    GroupMetadataKey: _group_metadata_text,
    UnknownRecordKey: _unknown_text,
    ControlMarker: _marker_text,
    **dict.fromkeys(get_args(ConsumerGroupKey) + get_args(ShareGroupKey), _consumer_group_text),
}


def format_text(entry: LogEntry) -> str:
    """One entry as a Kafka formatter line (see the module docstring)."""
    return _TEXT[type(entry.key)](entry)


# ---------------------------------------------------------------------------------------------
# JSON: every field, names in snake_case; absent values (-1 on disk) are null
# ---------------------------------------------------------------------------------------------


def _absent(n: int) -> int | None:
    """-1 (or any negative) stored for "absent" -> None."""
    return n if n >= 0 else None


def _offset_commit_json(e: LogEntry) -> dict:
    key: OffsetCommitKey = e.key  # type: ignore[assignment]
    v: OffsetCommitValue | None = e.value  # type: ignore[assignment]
    return {
        "group": key.group, "topic": key.topic, "partition": key.partition,
        "offset": v.offset if v else None,
        "leader_epoch": _absent(v.leader_epoch) if v else None,
        "metadata": v.metadata if v else None,
        "commit_timestamp": v.commit_timestamp if v else None,
        "expire_timestamp": _absent(v.expire_timestamp) if v else None,
    }


def _member_json(m: MemberMetadata, protocol_type: str) -> dict:
    return {
        "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
        "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout,
        "session_timeout": m.session_timeout,
        # Subscribed topics only mean something for the "consumer" embedded protocol.
        "subscribed_topics": parse_subscription_topics(m.subscription) if protocol_type == _CONSUMER_PROTOCOL else None,
        "subscription": m.subscription.hex(), "assignment": m.assignment.hex(),
    }


def _group_metadata_json(e: LogEntry) -> dict:
    key: GroupMetadataKey = e.key  # type: ignore[assignment]
    v: GroupMetadataValue | None = e.value  # type: ignore[assignment]
    if v is None:
        return {"group": key.group}
    return {
        "group": key.group, "protocol_type": v.protocol_type, "generation": v.generation,
        "protocol": v.protocol, "leader": v.leader,
        "current_state_timestamp": _absent(v.current_state_timestamp),
        "members": [_member_json(m, v.protocol_type) for m in v.members],
    }


def _unknown_json(e: LogEntry) -> dict:
    return {"value": e.value.hex() if e.value is not None else None}  # type: ignore[union-attr]


def _plain(value: object) -> object:
    """A consumer-group record's field as JSON data: structs as objects, uuids as strings."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _consumer_group_json(e: LogEntry) -> dict:
    return {**_plain(e.key), "value": _plain(e.value)}  # type: ignore[dict-item]


def _marker_json(e: LogEntry) -> dict:
    return {"marker": e.key.name, "producer_id": e.producer_id,  # type: ignore[union-attr]
            "producer_epoch": e.producer_epoch, "coordinator_epoch": _absent(e.coordinator_epoch)}


_JSON: dict[type, Callable[[LogEntry], dict]] = {
    OffsetCommitKey: _offset_commit_json,
    GroupMetadataKey: _group_metadata_json,
    UnknownRecordKey: _unknown_json,
    ControlMarker: _marker_json,
    **dict.fromkeys(get_args(ConsumerGroupKey) + get_args(ShareGroupKey), _consumer_group_json),
}


def format_json(entry: LogEntry) -> dict:
    """One entry as a JSON object: where it is in the log, what it is, and every decoded field."""
    return {
        "log_partition": entry.log_partition,
        "log_offset": entry.log_offset,
        "timestamp": entry.timestamp,
        "record_type": entry.record_type,
        "key_version": entry.key_version,
        "value_version": entry.value_version,
        "tombstone": entry.tombstone,
        # a transactional record (files only): its producer; pending until that producer's marker
        **({"producer_id": entry.producer_id, "producer_epoch": entry.producer_epoch}
           if entry.producer_id >= 0 else {}),
        **_JSON[type(entry.key)](entry),
    }


# ---------------------------------------------------------------------------------------------
# Command
# ---------------------------------------------------------------------------------------------


def _client_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, str]:
    """librdkafka config from --bootstrap-server and --command-config (exit 2 when unreadable)."""
    config: dict[str, str] = {}
    if args.command_config:
        try:
            config.update(parse_properties(Path(args.command_config).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"cannot read --command-config {args.command_config}: {getattr(exc, 'strerror', None) or exc}")
    config["bootstrap.servers"] = args.bootstrap_server
    return config


def _dump(args: argparse.Namespace, parser: argparse.ArgumentParser, out: TextIO) -> int:
    if args.command_config and not args.bootstrap_server:
        parser.error("--command-config requires --bootstrap-server")
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of ms, got {args.timeout}")
    missing = [path for path in args.files or [] if not Path(path).exists()]
    if missing:
        parser.error(f"--files: no such file or directory: {missing[0]}")
    if args.files:
        entries = read_files(args.files, args.group)
    else:
        entries = read_cluster(_client_config(args, parser), args.group, args.timeout / 1000)
    render = format_text if args.output == "text" else (lambda e: json.dumps(format_json(e), ensure_ascii=False))
    try:
        for entry in entries:
            out.write(render(entry) + "\n")
    except OffsetsLogError as exc:
        out.flush()
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """Entry point of `offsetd offsets-log` (dispatched from offsetd.cli)."""
    parser, dump = _build_parser()
    args = parser.parse_args(argv)
    try:
        return _dump(args, dump, sys.stdout)
    except BrokenPipeError:  # `offsetd offsets-log dump ... | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
