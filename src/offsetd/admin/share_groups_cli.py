"""`offsetd share-groups`: a kafka-share-groups compatible tool for KIP-932 share groups
(reference share-groups.md §6). This module parses and validates the options (Kafka's names and
rules; every input error is one line on stderr and exit status 2, before anything touches the
cluster) and dispatches to admin/share_groups_actions.py. Exit status 1 means the cluster refused
or failed."""

from __future__ import annotations

import argparse
import sys

from .client_config import build_client_config
from .cluster import Cluster
from .errors import ToolError, ToolParser, UsageError
from .group_tool_args import ACTIONS, add_shared_options
from .output import Output
from .share_groups_actions import (
    ResetRequest, parse_share_states, run_delete, run_delete_offsets, run_describe, run_list, run_reset,
)
from .share_groups_client import ShareGroupsClient
from .time_args import parse_kafka_datetime
from .topic_args import TopicArg, parse_topic_arg

SCENARIOS = ("to-earliest", "to-latest", "to-datetime")


def build_parser() -> argparse.ArgumentParser:
    """kafka-share-groups' options, plus --output."""
    p = ToolParser(prog="offsetd share-groups", description="List, describe and delete share groups and reset "
                   "or delete their offsets (kafka-share-groups compatible; works against any Kafka 4.2 cluster).")
    add_shared_options(p, group="share group", all_groups="share groups", actions={
        "list": "list all share groups",
        "describe": "describe share groups: offsets (default), members or state",
        "delete": "delete share groups (only empty ones)",
        "reset-offsets": "reset the start offsets of an empty share group",
        "delete-offsets": "delete a share group's offsets of the given --topic(s)"},
        all_topics="reset every partition the group has a start offset for",
        offsets="describe: start offsets and lag (the default view)")
    p.add_argument("--verbose", action="store_true", help="describe: extra columns (LEADER-EPOCH, epochs)")
    p.add_argument("--dry-run", action="store_true", help="reset-offsets: only show the new offsets")
    p.add_argument("--execute", action="store_true", help="reset-offsets: apply them")
    p.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    p.add_argument("--to-datetime", metavar="DATETIME", help="reset to the first record at or after "
                   "YYYY-MM-DDTHH:mm:SS.sss[zone] (UTC without a zone)")
    p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")
    return p


def _opt(name: str) -> str:
    return f"[{name}]"


def _has(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name.replace("-", "_"))
    return not (value is None or value is False or value == [])


def validate(args: argparse.Namespace) -> str:
    """Kafka's option rules (ShareGroupCommandOptions.checkArgs); the action. Raises UsageError."""
    actions = [a for a in ACTIONS if _has(args, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS))
    action = actions[0]
    if not args.bootstrap_server:
        raise UsageError(f'Missing required argument "{_opt("bootstrap-server")}"')
    if args.timeout <= 0:
        raise UsageError(f"Option {_opt('timeout')} must be a positive number of milliseconds")
    if args.group and args.all_groups:
        raise UsageError(f'Option "{_opt("group")}" can\'t be used with option "{_opt("all-groups")}"')
    if action in ("describe", "delete") and not (args.group or args.all_groups):
        raise UsageError(f"Option {_opt(action)} takes one of these options: {_opt('all-groups')}, {_opt('group')}")
    if action == "list" and (args.group or args.all_groups):
        raise UsageError(f"Option {_opt('list')} does not take {_opt('group')} or {_opt('all-groups')}")
    if (args.topic or args.all_topics) and action not in ("reset-offsets", "delete-offsets"):
        raise UsageError(f"Option {_opt('topic' if args.topic else 'all-topics')} can only be used with "
                         f"{_opt('reset-offsets')} or {_opt('delete-offsets')}")
    for name in ("members", "offsets", "verbose"):
        if _has(args, name) and action != "describe":
            raise UsageError(f"Option {_opt(name)} can only be used with {_opt('describe')}")
    if args.state is not None and action not in ("describe", "list"):
        raise UsageError(f"Option {_opt('state')} can only be used with {_opt('describe')} or {_opt('list')}")
    if action != "reset-offsets":
        for name in ("dry-run", "execute") + SCENARIOS:
            if _has(args, name):
                raise UsageError(f"Option {_opt(name)} can only be used with {_opt('reset-offsets')}")
    if action == "describe":
        views = [v for v in ("members", "offsets") if _has(args, v)] + (["state"] if args.state is not None else [])
        if len(views) > 1:
            raise UsageError(f"Option {_opt('describe')} takes at most one of these options: "
                             f"{_opt('members')}, {_opt('offsets')}, {_opt('state')}")
        if args.state:
            raise UsageError(f"Option {_opt('describe')} does not take a value for {_opt('state')}")
    if action == "delete-offsets" and (len(args.group) != 1 or not args.topic or args.all_topics):
        raise UsageError(f"Option {_opt('delete-offsets')} takes the following options: "
                         f"{_opt('group')} (exactly one), {_opt('topic')}")
    if action == "delete-offsets" and any(":" in t for t in args.topic):
        raise UsageError(f"Option {_opt('delete-offsets')} takes whole topics (no partitions)")
    if action == "list":
        parse_share_states(args.state)
    if action == "reset-offsets":
        _validate_reset(args)
    return action


def _validate_reset(args: argparse.Namespace) -> None:
    """One of --dry-run/--execute, exactly one group, one scope, one scenario."""
    if args.dry_run and args.execute:
        raise UsageError(f"Option {_opt('reset-offsets')} only accepts one of {_opt('execute')} and {_opt('dry-run')}")
    if not (args.dry_run or args.execute):
        raise UsageError(f"Option {_opt('reset-offsets')} takes the option: {_opt('execute')} or {_opt('dry-run')}")
    if len(args.group) != 1:
        raise UsageError(f"Option {_opt('reset-offsets')} takes the option: {_opt('group')} (exactly one)")
    if not (args.topic or args.all_topics):
        raise UsageError(f"Option {_opt('reset-offsets')} takes one of these options: "
                         f"{_opt('all-topics')}, {_opt('topic')}")
    if args.topic and args.all_topics:
        raise UsageError(f'Option "{_opt("topic")}" can\'t be used with option "{_opt("all-topics")}"')
    scenarios = [s for s in SCENARIOS if _has(args, s)]
    if len(scenarios) != 1:
        raise UsageError(f"Option {_opt('reset-offsets')} takes one of these options: "
                         + ", ".join(_opt(s) for s in SCENARIOS))


def reset_request(args: argparse.Namespace, topics: tuple[TopicArg, ...]) -> ResetRequest:
    """The reset to run, its datetime parsed (UsageError when malformed)."""
    scenario = next(s for s in SCENARIOS if _has(args, s))
    timestamp = parse_kafka_datetime(args.to_datetime) if scenario == "to-datetime" else None
    return ResetRequest(args.group[0], scenario, timestamp, topics, args.all_topics, args.execute)


def main(argv: list[str]) -> int:
    """Run `offsetd share-groups ARGV`; the exit status (0 ok, 1 failed, 2 bad input)."""
    out = Output()
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.output == "json")
        action = validate(args)
        topics = tuple(parse_topic_arg(t) for t in args.topic)
        reset = reset_request(args, topics) if action == "reset-offsets" else None
        client_config = build_client_config(args.bootstrap_server, args.command_config)
        timeout_s = args.timeout / 1000
        client = ShareGroupsClient(client_config, timeout_s)
        try:
            if action == "list":
                return run_list(client, args.state, out)
            if action == "delete-offsets":
                return run_delete_offsets(client, args.group[0], [t.topic for t in topics], out)
            if reset is not None:
                cluster = Cluster(client_config, timeout_s)
                try:
                    return run_reset(client, cluster, reset, out)
                finally:
                    cluster.close()
            groups = [g for g, _ in client.list_groups()] if args.all_groups else list(dict.fromkeys(args.group))
            if action == "delete":
                return run_delete(client, groups, out)
            view = "members" if args.members else "state" if args.state is not None else "offsets"
            return run_describe(client, groups, view, args.verbose, out)
        finally:
            client.close()
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd share-groups: {exc}\n")
        return 2
    except ToolError as exc:
        out.message(f"\nError: Executing share group command failed due to {exc}\n")
        out.document({"error": str(exc)})
        return 1
