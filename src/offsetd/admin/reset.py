"""`offsetd groups --reset-offsets`: Kafka's flow (only Empty or Dead groups, dry run unless
`--execute`, the NEW-OFFSET table or `--export` CSV) plus an undo: before an execute commits
anything, the previous committed offsets of every partition it changes are written to a CSV in
`--from-file` format, so replaying that file with `--execute` restores them.

All plans are computed before any offset is committed, so a refusal found while planning (for
example a shift without a committed offset) leaves every group unchanged."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .cluster import Cluster
from .errors import ToolError
from .model import INACTIVE_STATES, TP, Committed
from .output import Output
from .reset_plan import PlanInputs, ResetSpec, compute_plan, format_csv
from .table import Column, render
from .topic_args import TopicArg


@dataclass(frozen=True)
class ResetOptions:
    """Scope (`all_topics` or `topics`), scenario, mode, and what the undo hint repeats."""

    spec: ResetSpec
    all_topics: bool
    topics: tuple[TopicArg, ...]
    execute: bool
    export: bool
    undo_file: str | None
    bootstrap: str
    command_config: str | None


@dataclass
class GroupReset:
    """One group's outcome: its state, plan, previous offsets, or why it was refused."""

    group: str
    state: str
    offsets: dict[TP, int]
    previous: dict[TP, Committed]
    error: str | None = None
    warnings: tuple[str, ...] = ()


def run_reset(cluster: Cluster, groups: list[str], options: ResetOptions, out: Output) -> int:
    """Plan every group, then (with --execute) save the undo file and commit; print the plans."""
    descriptions = cluster.describe_groups(groups)
    results = [_plan_group(cluster, group, descriptions[group].state, options, out) for group in groups]
    failed = any(r.error for r in results)
    undo_path = None
    if options.execute:
        changing = [r for r in results if r.offsets]
        undo_path = _write_undo(changing, options, out) if changing else None
        for r in changing:
            try:
                cluster.alter_offsets(r.group, r.offsets)
            except ToolError as exc:
                r.error = str(exc)
                failed = True
                out.message(f"\nError: Executing consumer group command failed due to {exc}\n")
    plans = {r.group: r.offsets for r in results}
    if options.export:
        out.text(format_csv(plans, with_group=len(groups) != 1) + "\n")
    else:
        out.text(format_reset_table(plans))
    out.document({"dry_run": not options.execute, "undo_file": str(undo_path) if undo_path else None,
                  "groups": [_group_json(r) for r in results]})
    return 1 if failed else 0


def _plan_group(cluster: Cluster, group: str, state: str, options: ResetOptions, out: Output) -> GroupReset:
    """Refuse an active group (Kafka's message), else compute its plan and print its warnings."""
    if state not in INACTIVE_STATES:
        message = (f"Assignments can only be reset if the group '{group}' is inactive, "
                   f"but the current state is {state}.")
        out.message(f"\nError: {message}\n")
        return GroupReset(group, state, {}, {}, message)
    committed = cluster.committed_offsets(group)
    spec = options.spec
    if spec.file_plan is not None:
        if group not in spec.file_plan:
            message = f"No reset plan for group {group} found."
            out.message(f"\nError: {message}\n")
            return GroupReset(group, state, {}, {}, message)
        partitions = sorted(spec.file_plan[group])
    elif options.all_topics:
        partitions = sorted(committed)  # Kafka: the partitions that have a committed offset
    else:
        partitions = _scope_partitions(cluster, options.topics)
    _check_partitions_exist(cluster, partitions)
    by_timestamp = cluster.offsets_for_timestamp(partitions, spec.timestamp_ms) if spec.timestamp_ms is not None else {}
    inputs = PlanInputs(cluster.log_bounds(partitions), committed, by_timestamp)
    plan = compute_plan(group, partitions, spec, inputs)
    for notice in plan.notices:
        out.message(notice)
    for warning in plan.warnings:
        out.note(f"WARN: {warning}\n")
    previous = {tp: committed[tp] for tp in plan.offsets if tp in committed}
    warnings = tuple(n.strip() for n in plan.notices) + tuple(plan.warnings)
    return GroupReset(group, state, plan.offsets, previous, warnings=warnings)


def _scope_partitions(cluster: Cluster, topics: tuple[TopicArg, ...]) -> list[TP]:
    """`--topic` arguments as partitions; a bare topic means all of its partitions."""
    bare = [t.topic for t in topics if t.partitions is None]
    described = cluster.topic_partitions(bare)
    partitions: set[TP] = set()
    for arg in topics:
        if arg.partitions is not None:
            partitions.update(TP(arg.topic, p) for p in arg.partitions)
            continue
        found = described[arg.topic]
        if isinstance(found, str):
            raise ToolError(f"Topic '{arg.topic}': {found}")
        partitions.update(TP(arg.topic, p) for p in found)
    return sorted(partitions)


def _check_partitions_exist(cluster: Cluster, partitions: list[TP]) -> None:
    """Kafka refuses a plan naming partitions that do not exist."""
    described = cluster.topic_partitions({tp.topic for tp in partitions})
    missing = [tp for tp in partitions if isinstance(described[tp.topic], str) or tp.partition not in described[tp.topic]]
    if missing:
        raise ToolError('The partitions "' + ",".join(map(str, missing)) + '" do not exist')


def format_reset_table(plans: dict[str, dict[TP, int]]) -> str:
    """Kafka's GROUP / TOPIC / PARTITION / NEW-OFFSET table (header only if any group was
    considered, even one whose plan is empty, as Kafka prints it)."""
    if not plans:
        return "\n"
    columns = [Column("GROUP", grows=True), Column("TOPIC", grows=True), Column("PARTITION", 10), Column("NEW-OFFSET", 0)]
    rows = [[group, tp.topic, tp.partition, offset]
            for group in sorted(plans) for tp, offset in sorted(plans[group].items())]
    return "\n" + "\n".join(render(columns, rows)) + "\n"


def _group_json(r: GroupReset) -> dict[str, Any]:
    """One group of the reset for `--output json`."""
    return {"group": r.group, "state": r.state, "error": r.error, "warnings": list(r.warnings),
            "partitions": [{"topic": tp.topic, "partition": tp.partition,
                            "previous_offset": r.previous[tp].offset if tp in r.previous else None,
                            "new_offset": offset} for tp, offset in sorted(r.offsets.items())]}


# --- undo -----------------------------------------------------------------------------------


def undo_path_for(groups: list[str], now: datetime, directory: Path) -> Path:
    """Default undo file: `offsetd-reset-undo-<group>-<UTC time>.csv` in `directory` (no group
    in the name when several groups are reset); never an existing file."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in groups[0]) if len(groups) == 1 else ""
    stem = f"offsetd-reset-undo-{safe + '-' if safe else ''}{stamp}"
    path, n = directory / f"{stem}.csv", 1
    while path.exists():
        path, n = directory / f"{stem}-{n}.csv", n + 1
    return path


def _write_undo(changing: list[GroupReset], options: ResetOptions, out: Output) -> Path:
    """Write the previous offsets of the partitions about to change and print how to undo."""
    groups = [r.group for r in changing]
    path = Path(options.undo_file) if options.undo_file else undo_path_for(groups, datetime.now(timezone.utc), Path.cwd())
    previous = {r.group: {tp: c.offset for tp, c in r.previous.items()} for r in changing}
    try:
        path.write_text(format_csv(previous, with_group=len(groups) != 1))
    except OSError as exc:
        raise ToolError(f"Cannot write the undo file '{path}': {exc.strerror}; nothing was reset") from None
    command = ["offsetd", "groups", "--bootstrap-server", options.bootstrap]
    command += ["--command-config", options.command_config] if options.command_config else []
    for group in groups:
        command += ["--group", group]
    command += ["--reset-offsets", "--from-file", str(path), "--execute"]
    out.note(f"Saved the previous offsets to {path}; undo with: {shlex.join(command)}\n")
    uncommitted = [f"{r.group}:{tp}" if len(groups) > 1 else str(tp)
                   for r in changing for tp in sorted(r.offsets) if tp not in r.previous]
    if uncommitted:
        out.note(f"Note: {', '.join(uncommitted)} had no committed offset before this reset; the undo file "
                 "cannot remove offsets (use --delete-offsets for that).\n")
    return path
