"""`offsetd groups`: kafka-consumer-groups compatible operator tool. This module parses and
validates the options (Kafka's names and rules; every input error is one line on stderr and exit
status 2, before anything touches the cluster), then dispatches to the action modules:
`listing`, `describe`, `delete`, `reset`. Exit status 1 means the cluster refused or failed."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .client_config import build_client_config
from .cluster import Cluster
from .delete import run_delete_groups, run_delete_offsets
from .describe import DescribeOptions, run_describe
from .errors import ToolError, ToolParser, UsageError
from .group_tool_args import ACTIONS, add_shared_options
from .listing import ListOptions, parse_state_filter, parse_type_filter, run_list
from .output import Output
from .reset import ResetOptions, run_reset
from .reset_plan import SCENARIOS, ResetSpec, parse_csv
from .time_args import parse_iso_duration, parse_kafka_datetime
from .topic_args import TopicArg, parse_topic_arg

DESCRIBE_VIEWS = ("members", "offsets", "state", "health")
RESET_MODES = ("dry-run", "execute", "export", "all-topics", "undo-file")

DRY_RUN_WARNING = ("WARN: No action will be performed as the --execute option is missing. In a future major "
                   "release, the default behavior of this command will be to prompt the user before executing "
                   "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
                   "are scripting this command and want to keep the current default behavior without prompting.\n")


def build_parser() -> argparse.ArgumentParser:
    """Kafka's kafka-consumer-groups options, plus --health, --undo-file and --output."""
    p = ToolParser(prog="offsetd groups", description="List, describe, delete consumer groups and reset or delete "
                "their offsets (kafka-consumer-groups compatible; works against any Kafka cluster).")
    add_shared_options(p, group="group", all_groups="consumer groups", actions={
        "list": "list all consumer groups",
        "describe": "describe groups and their offset lag",
        "delete": "delete groups (only inactive ones)",
        "reset-offsets": "reset offsets of inactive groups (dry run unless --execute)",
        "delete-offsets": "delete offsets of one group for the given --topic(s)"},
        all_topics="reset every partition the group has an offset for",
        offsets="describe: offsets and lag (the default view)")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPES",
                   help="list: show types, optionally filtered (classic,consumer)")
    p.add_argument("--health", action="store_true", help="describe: Burrow-style health of each partition")
    p.add_argument("--verbose", action="store_true", help="describe: extra columns (LEADER-EPOCH, LAG-TIME, ...)")
    p.add_argument("--dry-run", action="store_true", help="reset-offsets: only show the plan (the default)")
    p.add_argument("--execute", action="store_true", help="reset-offsets: commit the plan")
    p.add_argument("--export", action="store_true", help="reset-offsets: print the plan as CSV for --from-file")
    p.add_argument("--undo-file", metavar="PATH", help="reset-offsets --execute: where to save the previous offsets "
                   "(default ./offsetd-reset-undo-<group>-<UTC time>.csv)")
    p.add_argument("--to-datetime", metavar="DATETIME", help="reset to the first record at or after "
                   "YYYY-MM-DDTHH:mm:SS.sss[zone] (UTC without a zone)")
    p.add_argument("--by-duration", metavar="DURATION", help="reset to the first record at or after now minus "
                   "an ISO-8601 duration PnDTnHnMnS")
    p.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    p.add_argument("--to-current", action="store_true", help="reset to the committed offset (log end without one)")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset (clamped to the log)")
    p.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (clamped)")
    p.add_argument("--from-file", metavar="CSV", help="reset to the offsets in a CSV written by --export")
    p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")
    return p


def _opt(name: str) -> str:
    """An option as Kafka's messages name it: `[name]`."""
    return f"[{name}]"


def _has(args: argparse.Namespace, name: str) -> bool:
    """Whether option `name` (dashed spelling) was given."""
    value = getattr(args, name.replace("-", "_"))
    return not (value is None or value is False or value == [])  # 0 is a given value (--to-offset 0)


def _conflict(first: str, second: str) -> UsageError:
    """Kafka's message for two options that cannot be combined."""
    return UsageError(f'Option "{_opt(first)}" can\'t be used with option "{_opt(second)}"')


def validate(args: argparse.Namespace) -> tuple[str, str | None]:
    """Kafka's option rules (checkArgs) plus ours; returns (action, reset scenario or None).
    Raises UsageError with Kafka's wording."""
    actions = [a for a in ACTIONS if _has(args, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS))
    action = actions[0]
    if not args.bootstrap_server:
        raise UsageError(f'Missing required argument "{_opt("bootstrap-server")}"')
    if args.timeout <= 0:
        raise UsageError(f"Option {_opt('timeout')} must be a positive number of milliseconds")
    if args.group and args.all_groups:
        raise _conflict("group", "all-groups")
    needs_groups = {"describe", "delete", "reset-offsets"}
    if action in needs_groups and not (args.group or args.all_groups):
        raise UsageError(f"Option {_opt(action)} takes one of these options: {_opt('all-groups')}, {_opt('group')}")
    if action == "list" and (args.group or args.all_groups):
        raise _conflict("group" if args.group else "all-groups", "list")
    if args.topic and action in ("list", "describe"):
        raise _conflict("topic", action)
    for name in ("members", "offsets", "verbose", "health"):
        if _has(args, name) and action != "describe":
            raise UsageError(f"Option {_opt(name)} can only be used with {_opt('describe')}")
    if args.state is not None and action not in ("describe", "list"):
        raise UsageError(f"Option {_opt('state')} can only be used with {_opt('describe')} or {_opt('list')}")
    if args.type is not None and action != "list":
        raise UsageError(f"Option {_opt('type')} can only be used with {_opt('list')}")
    scenario = _validate_reset(args) if action == "reset-offsets" else None
    if action != "reset-offsets":
        for name in RESET_MODES + tuple(SCENARIOS):
            if _has(args, name):
                raise UsageError(f"Option {_opt(name)} can only be used with {_opt('reset-offsets')}")
    if action == "describe":
        views = [v for v in DESCRIBE_VIEWS if (args.state is not None if v == "state" else _has(args, v))]
        if len(views) > 1:
            raise UsageError(f"Option {_opt('describe')} takes at most one of these options: "
                             + ", ".join(_opt(v) for v in DESCRIBE_VIEWS))
        if args.state:
            raise UsageError(f"Option {_opt('describe')} does not take a value for {_opt('state')}")
    if action == "list":
        parse_state_filter(args.state)
        parse_type_filter(args.type)
    if action == "delete" and args.topic:
        raise UsageError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if action == "delete-offsets":
        if args.all_groups:
            raise _conflict("all-groups", "delete-offsets")
        if len(args.group) != 1 or not args.topic:
            raise UsageError(f"Option {_opt('delete-offsets')} takes the following options: "
                             f"{_opt('group')} (exactly one), {_opt('topic')}")
    return action, scenario


def _validate_reset(args: argparse.Namespace) -> str:
    """The reset-offsets rules: one mode, one scenario, a scope unless --from-file."""
    if args.dry_run and args.execute:
        raise UsageError(f"Option {_opt('reset-offsets')} only accepts one of {_opt('execute')} and {_opt('dry-run')}")
    scenarios = [s for s in SCENARIOS if _has(args, s)]
    if len(scenarios) > 1:
        raise _conflict(scenarios[0], scenarios[1])
    if not scenarios:
        raise UsageError(f"Option {_opt('reset-offsets')} requires one of the following scenarios: "
                         + ", ".join(_opt(s) for s in SCENARIOS))
    scenario = scenarios[0]
    if scenario != "from-file" and not (args.all_topics or args.topic):
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    if args.all_topics and args.topic:
        raise _conflict("all-topics", "topic")
    if args.export and args.output == "json":
        raise _conflict("export", "output")
    if args.undo_file and not args.execute:
        raise UsageError(f"Option {_opt('undo-file')} can only be used with {_opt('execute')}")
    return scenario


def reset_spec(args: argparse.Namespace, scenario: str, now_ms: int) -> ResetSpec:
    """The scenario's argument, parsed (datetime, duration, CSV); UsageError when malformed."""
    if scenario == "to-datetime":
        return ResetSpec(scenario, timestamp_ms=parse_kafka_datetime(args.to_datetime))
    if scenario == "by-duration":
        return ResetSpec(scenario, timestamp_ms=now_ms - parse_iso_duration(args.by_duration))
    if scenario == "from-file":
        try:
            text = Path(args.from_file).read_text()
        except OSError as exc:
            raise UsageError(f"Cannot read --from-file '{args.from_file}': {exc.strerror}") from None
        return ResetSpec(scenario, file_plan=parse_csv(text, args.group, args.from_file))
    value = {"to-offset": args.to_offset, "shift-by": args.shift_by}.get(scenario)
    return ResetSpec(scenario, value=value)


def main(argv: list[str]) -> int:
    """Run `offsetd groups ARGV`; returns the exit status (0 ok, 1 failed, 2 bad input)."""
    out = Output()
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.output == "json")
        action, scenario = validate(args)
        topics: tuple[TopicArg, ...] = tuple(parse_topic_arg(t) for t in args.topic)
        spec = reset_spec(args, scenario, int(time.time() * 1000)) if scenario else None
        client_config = build_client_config(args.bootstrap_server, args.command_config)
        if action == "reset-offsets" and not (args.dry_run or args.execute):
            out.note(DRY_RUN_WARNING)
        cluster = Cluster(client_config, args.timeout / 1000)
        try:
            return _dispatch(cluster, args, action, topics, spec, out)
        finally:
            cluster.close()
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd groups: {exc}\n")
        return 2
    except ToolError as exc:
        out.message(f"\nError: Executing consumer group command failed due to {exc}\n")
        out.document({"error": str(exc)})
        return 1


def _dispatch(cluster: Cluster, args: argparse.Namespace, action: str, topics: tuple[TopicArg, ...],
              spec: ResetSpec | None, out: Output) -> int:
    """Resolve the groups and run the action."""
    if action == "list":
        return run_list(cluster, ListOptions(args.state, args.type), out)
    groups = [g.group for g in cluster.list_groups()] if args.all_groups else list(dict.fromkeys(args.group))
    if action == "describe":
        view = next((v for v in ("members", "health") if _has(args, v)), "state" if args.state is not None else "offsets")
        return run_describe(cluster, groups, DescribeOptions(view, args.verbose), out)
    if action == "delete":
        return run_delete_groups(cluster, groups, out)
    if action == "delete-offsets":
        return run_delete_offsets(cluster, groups[0], topics, out)
    assert spec is not None
    options = ResetOptions(spec, args.all_topics, topics, args.execute, args.export, args.undo_file,
                           args.bootstrap_server, args.command_config)
    return run_reset(cluster, groups, options, out)
