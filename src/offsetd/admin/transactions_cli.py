"""`offsetd transactions`: kafka-transactions.sh compatible tool (KIP-664) to list, describe and
abort transactions, show a partition's producers and find hanging transactions. This module parses
and validates the options (every input error is one line on stderr and exit status 2, before
anything touches the cluster) and runs the action. Exit status 1 means the cluster refused or
failed (an unknown transactional id, a broker without the API, no open transaction at an offset)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from .client_config import build_client_config
from .errors import ToolError, ToolParser, UsageError
from .output import Output
from .transactions import (DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, TopicPartition, description_json, find_open_transaction,
                           format_describe, format_hanging, format_list, format_producers, hanging_json,
                           hanging_transactions, listing_json, open_transactions, producer_json)
from .transactions_client import TxnCluster

ACTIONS = ("list", "describe", "describe-producers", "abort", "find-hanging")
ABORT_BY_PRODUCER = ("producer-id", "producer-epoch", "coordinator-epoch")


def _add_common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """The connection options; accepted before and after the action (`suppress`: an option left
    out after the action keeps the value given before it)."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--bootstrap-server", metavar="HOST:PORT", default=default(None),
                   help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", default=default(None),
                   help="properties file with client configs (security etc.)")
    p.add_argument("--timeout", type=int, metavar="MS", default=default(5000),
                   help="timeout of each request (default 5000)")
    p.add_argument("--output", choices=("text", "json"), default=default("text"),
                   help="json: one JSON document on stdout")


def build_parser() -> argparse.ArgumentParser:
    """Kafka's kafka-transactions.sh actions and options, plus --timeout and --output."""
    p = ToolParser(prog="offsetd transactions", description="List, describe and abort transactions and find "
                "hanging ones (kafka-transactions.sh compatible; works against any Kafka cluster).")
    _add_common(p, suppress=False)
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=ToolParser)
    sub = {name: actions.add_parser(name, help=text) for name, text in (
        ("list", "list transactions (ListTransactions on every broker)"),
        ("describe", "describe the state of one transactional id"),
        ("describe-producers", "describe the active producers of a partition"),
        ("abort", "abort an open transaction on a partition (writes an ABORT marker)"),
        ("find-hanging", "find open transactions their coordinator does not know about"))}
    for parser in sub.values():
        _add_common(parser, suppress=True)
    sub["list"].add_argument("--duration-filter", type=int, metavar="MS",
                             help="only transactions running longer than MS (ListTransactions v1)")
    sub["list"].add_argument("--transactional-id-pattern", metavar="REGEX",
                             help="only transactional ids matching REGEX (ListTransactions v2)")
    sub["describe"].add_argument("--transactional-id", help="REQUIRED: the transactional id")
    for name in ("describe-producers", "abort", "find-hanging"):
        sub[name].add_argument("--topic", help="the topic" + ("" if name == "find-hanging" else " (REQUIRED)"))
        sub[name].add_argument("--partition", type=int, help="the partition" + (
            " (with --topic; default all)" if name == "find-hanging" else " (REQUIRED)"))
    sub["describe-producers"].add_argument("--broker-id", type=int,
                                           help="ask this replica instead of the partition leader")
    sub["abort"].add_argument("--start-offset", type=int, help="the first offset of the open transaction")
    sub["abort"].add_argument("--producer-id", type=int, help="the producer id of the transaction")
    sub["abort"].add_argument("--producer-epoch", type=int, help="the producer epoch of the transaction")
    sub["abort"].add_argument("--coordinator-epoch", type=int, help="the coordinator epoch of the transaction")
    sub["find-hanging"].add_argument("--broker-id", type=int, help="search every partition this broker holds")
    sub["find-hanging"].add_argument("--max-transaction-timeout", type=int, metavar="MS",
                                     default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                                     help="the brokers' transaction.max.timeout.ms (default 900000); an open "
                                          "transaction whose producer wrote nothing for longer is a candidate")
    return p


def _missing(name: str, action: str) -> UsageError:
    """The message for a required option left out."""
    return UsageError(f"Missing required argument --{name} for {action}")


def _given(args: argparse.Namespace, name: str) -> bool:
    """Whether option `name` (dashed spelling) was given (absent for other actions: not given)."""
    return getattr(args, name.replace("-", "_"), None) is not None


def validate(args: argparse.Namespace) -> None:
    """The option rules of each action; UsageError with one line."""
    if args.action is None:
        raise UsageError("Command must include exactly one action: " + ", ".join(ACTIONS))
    if not args.bootstrap_server:
        raise UsageError("Missing required argument --bootstrap-server")
    if args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of milliseconds")
    action = args.action
    if action == "list" and args.duration_filter is not None and args.duration_filter < 0:
        raise UsageError("--duration-filter must not be negative")
    if action == "describe" and not args.transactional_id:
        raise _missing("transactional-id", action)
    if action in ("describe-producers", "abort"):
        for name in ("topic", "partition"):
            if not _given(args, name):
                raise _missing(name, action)
    if _given(args, "partition") and args.partition < 0:
        raise UsageError("--partition must not be negative")
    if action == "abort":
        _validate_abort(args)
    if action == "find-hanging":
        if _given(args, "broker-id") == _given(args, "topic"):
            raise UsageError("find-hanging takes exactly one of --broker-id and --topic")
        if _given(args, "partition") and not _given(args, "topic"):
            raise UsageError("--partition can only be used with --topic")
        if args.max_transaction_timeout <= 0:
            raise UsageError("--max-transaction-timeout must be a positive number of milliseconds")


def _validate_abort(args: argparse.Namespace) -> None:
    """abort takes --start-offset, or all of --producer-id, --producer-epoch, --coordinator-epoch."""
    by_producer = [name for name in ABORT_BY_PRODUCER if _given(args, name)]
    if _given(args, "start-offset"):
        if by_producer:
            raise UsageError(f"--start-offset cannot be used with --{by_producer[0]}")
        if args.start_offset < 0:
            raise UsageError("--start-offset must not be negative")
        return
    if not by_producer:
        raise UsageError("abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
    for name in ABORT_BY_PRODUCER:
        if name not in by_producer:
            raise _missing(name, "abort (with --producer-id)")


def main(argv: list[str]) -> int:
    """Run `offsetd transactions ARGV`; returns the exit status (0 ok, 1 failed, 2 bad input)."""
    out = Output()
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.output == "json")
        validate(args)
        client_config = build_client_config(args.bootstrap_server, args.command_config)
        cluster = TxnCluster(client_config, args.timeout / 1000)
        try:
            return ACTION_RUNNERS[args.action](cluster, args, out)
        finally:
            cluster.close()
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd transactions: {exc}\n")
        return 2
    except ToolError as exc:
        out.message(f"Error: {exc}\n")
        out.document({"error": str(exc)})
        return 1


def _now_ms() -> int:
    """Wall-clock milliseconds, the clock the brokers' timestamps use."""
    return int(time.time() * 1000)


def run_list(cluster: TxnCluster, args: argparse.Namespace, out: Output) -> int:
    """`list`: every transactional id the coordinators know (Dead ones excepted)."""
    listings = cluster.list_transactions(args.duration_filter, args.transactional_id_pattern)
    out.text(format_list(listings))
    out.document({"transactions": [listing_json(t) for t in sorted(listings, key=lambda t: t.transactional_id)]})
    return 0


def run_describe(cluster: TxnCluster, args: argparse.Namespace, out: Output) -> int:
    """`describe --transactional-id X`."""
    description = cluster.describe_transaction(args.transactional_id)
    if description is None:
        raise ToolError(f"Transactional id '{args.transactional_id}' not found: TRANSACTIONAL_ID_NOT_FOUND: "
                        "The transactionalId could not be found.")
    now = _now_ms()
    out.text(format_describe(description, now))
    out.document(description_json(description, now))
    return 0


def _check_broker(cluster: TxnCluster, broker_id: int | None) -> None:
    """ToolError unless `broker_id` (when given) is one of the cluster's brokers."""
    if broker_id is None:
        return
    brokers = cluster.broker_ids()
    if broker_id not in brokers:
        raise ToolError(f"Broker {broker_id} is not in the cluster (brokers: {', '.join(map(str, brokers))})")


def run_describe_producers(cluster: TxnCluster, args: argparse.Namespace, out: Output) -> int:
    """`describe-producers --topic T --partition P [--broker-id N]`."""
    _check_broker(cluster, args.broker_id)
    tp = TopicPartition(args.topic, args.partition)
    producers = cluster.describe_producers([tp], args.broker_id).get(tp, [])
    out.text(format_producers(producers))
    out.document({"topic": tp.topic, "partition": tp.partition,
                  "producers": [producer_json(p) for p in sorted(producers, key=lambda p: p.producer_id)]})
    return 0


def run_abort(cluster: TxnCluster, args: argparse.Namespace, out: Output) -> int:
    """`abort`: an ABORT marker for the producer, written by the partition leader. With
    --start-offset, the producer is the one whose open transaction starts there, and the
    coordinator epoch its last one (0 if it has none), as Kafka's tool does."""
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        producer = find_open_transaction(cluster.describe_producers([tp]).get(tp, []), args.start_offset)
        if producer is None:
            raise ToolError(f"Could not find any open transaction starting at offset {args.start_offset} on "
                            f"partition {tp}")
        pid, epoch, coordinator_epoch = producer.producer_id, producer.producer_epoch, max(producer.coordinator_epoch, 0)
    else:
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    cluster.abort(tp, pid, epoch, coordinator_epoch)
    out.message(f"Aborted the transaction of producer {pid} (epoch {epoch}, coordinator epoch {coordinator_epoch}) "
                f"on {tp}\n")
    out.document({"topic": tp.topic, "partition": tp.partition, "producer_id": pid, "producer_epoch": epoch,
                  "coordinator_epoch": coordinator_epoch, "aborted": True})
    return 0


def run_find_hanging(cluster: TxnCluster, args: argparse.Namespace, out: Output) -> int:
    """`find-hanging`: open transactions older than the maximum timeout (DescribeProducers) whose
    producer's transactional id (ListTransactions, DescribeTransactions) does not list the
    partition as part of an active transaction."""
    _check_broker(cluster, args.broker_id)
    if args.broker_id is not None:
        partitions = cluster.partitions_on_broker(args.broker_id)
    else:
        partitions = cluster.topic_partitions(args.topic)
        if args.partition is not None:
            wanted = TopicPartition(args.topic, args.partition)
            if wanted not in partitions:
                raise ToolError(f"Partition {wanted} does not exist")
            partitions = [wanted]
    producers = cluster.describe_producers(partitions, args.broker_id)
    candidates = open_transactions(producers, _now_ms(), args.max_transaction_timeout)
    ids: dict[int, str] = {}
    descriptions = {}
    if candidates:
        pids = sorted({c.producer.producer_id for c in candidates})
        ids = {t.producer_id: t.transactional_id for t in cluster.list_transactions(producer_ids=pids)}
        descriptions = {txn_id: cluster.describe_transaction(txn_id) for txn_id in sorted(set(ids.values()))}
    hanging = hanging_transactions(candidates, ids, descriptions)
    out.text(format_hanging(hanging))
    out.document({"hanging": [hanging_json(h) for h in hanging]})
    return 0


ACTION_RUNNERS: dict[str, Callable[[TxnCluster, argparse.Namespace, Output], int]] = {
    "list": run_list, "describe": run_describe, "describe-producers": run_describe_producers,
    "abort": run_abort, "find-hanging": run_find_hanging,
}
