"""Reset plans as pure functions: the scenarios of `--reset-offsets` (one table entry each),
Kafka's clamping into [log start, log end] with its warnings, and the CSV format that `--export`
writes and `--from-file` reads (`topic,partition,offset`, or `group,topic,partition,offset`)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Callable

from .errors import ToolError, UsageError
from .model import TP, Committed, LogBounds


@dataclass(frozen=True)
class ResetSpec:
    """The chosen scenario (option name without dashes) and its argument: `value` for
    to-offset / shift-by, `timestamp_ms` for to-datetime / by-duration (resolved to a point in
    time), `file_plan` (group -> partition -> offset) for from-file."""

    scenario: str
    value: int | None = None
    timestamp_ms: int | None = None
    file_plan: dict[str, dict[TP, int]] | None = None


@dataclass(frozen=True)
class PlanInputs:
    """What the cluster said, for the partitions of one group's plan."""

    bounds: dict[TP, LogBounds | None]
    committed: dict[TP, Committed]
    by_timestamp: dict[TP, int | None] = field(default_factory=dict)


@dataclass
class Plan:
    """New offsets, Kafka's clamping warnings (stderr) and `Warn:` notices (stdout)."""

    offsets: dict[TP, int]
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def _bound(inputs: PlanInputs, tp: TP, which: str) -> int:
    """Log start or end of a partition, or Kafka's error when ListOffsets gave none."""
    bounds = inputs.bounds.get(tp)
    if bounds is None:
        kind = "starting" if which == "start" else "ending"
        raise ToolError(f"Error getting {kind} offset of topic partition: {tp}")
    return bounds.start if which == "start" else bounds.end


def _to_earliest(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    return {tp: _bound(inputs, tp, "start") for tp in partitions}


def _to_latest(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    return {tp: _bound(inputs, tp, "end") for tp in partitions}


def _to_current(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    # Kafka: keep the committed offset; a partition without one goes to the log end.
    return {tp: inputs.committed[tp].offset if tp in inputs.committed else _bound(inputs, tp, "end")
            for tp in partitions}


def _to_offset(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    assert spec.value is not None
    return {tp: spec.value for tp in partitions}


def _shift_by(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    assert spec.value is not None
    missing = [tp for tp in partitions if tp not in inputs.committed]
    if missing:
        raise UsageError(f"Cannot shift offset for partition {missing[0]} since there is no current committed offset")
    return {tp: inputs.committed[tp].offset + spec.value for tp in partitions}


def _to_timestamp(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    # No record at or after the time: Kafka warns on stdout and falls back to the log end.
    offsets = {}
    for tp in partitions:
        found = inputs.by_timestamp.get(tp)
        if found is None:
            plan.notices.append(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. "
                                "Falling back to latest known offset.\n")
            found = _bound(inputs, tp, "end")
        offsets[tp] = found
    return offsets


def _from_file(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs, plan: Plan) -> dict[TP, int]:
    assert spec.file_plan is not None
    return {tp: spec.file_plan[group][tp] for tp in partitions}


# scenario -> (requested offsets, whether they are clamped into the log's bounds). Offsets read
# from the log (earliest, latest, by timestamp) are in bounds already; Kafka clamps the others.
ScenarioFn = Callable[[str, list[TP], ResetSpec, PlanInputs, Plan], dict[TP, int]]
SCENARIOS: dict[str, tuple[ScenarioFn, bool]] = {
    "to-datetime": (_to_timestamp, False),
    "by-duration": (_to_timestamp, False),
    "to-earliest": (_to_earliest, False),
    "to-latest": (_to_latest, False),
    "shift-by": (_shift_by, True),
    "from-file": (_from_file, True),
    "to-current": (_to_current, False),
    "to-offset": (_to_offset, True),
}


def clamp(tp: TP, requested: int, bounds: LogBounds, warnings: list[str]) -> int:
    """Kafka's range check: above the log end -> the end, below the log start -> the start,
    each with Kafka's warning."""
    if requested > bounds.end:
        warnings.append(f"New offset ({requested}) is higher than latest offset for topic partition {tp}. "
                        f"Value will be set to {bounds.end}.")
        return bounds.end
    if requested < bounds.start:
        warnings.append(f"New offset ({requested}) is lower than earliest offset for topic partition {tp}. "
                        f"Value will be set to {bounds.start}.")
        return bounds.start
    return requested


def compute_plan(group: str, partitions: list[TP], spec: ResetSpec, inputs: PlanInputs) -> Plan:
    """New offsets for `partitions` of `group` under `spec`."""
    scenario, clamped = SCENARIOS[spec.scenario]
    plan = Plan({})
    requested = scenario(group, sorted(partitions), spec, inputs, plan)
    for tp, offset in sorted(requested.items()):
        if clamped:
            bounds = inputs.bounds.get(tp)
            if bounds is None:
                _bound(inputs, tp, "end")  # raises Kafka's error
            assert bounds is not None
            offset = clamp(tp, offset, bounds, plan.warnings)
        plan.offsets[tp] = offset
    return plan


# --- CSV ------------------------------------------------------------------------------------


def format_csv(plans: dict[str, dict[TP, int]], with_group: bool) -> str:
    """`--export` lines, sorted: `topic,partition,offset`, or with the group first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for group in sorted(plans):
        for tp, offset in sorted(plans[group].items()):
            writer.writerow(([group] if with_group else []) + [tp.topic, tp.partition, offset])
    return buffer.getvalue()


def parse_csv(text: str, groups: list[str], source: str) -> dict[str, dict[TP, int]]:
    """A `--from-file` plan: group -> partition -> offset. The three-column form needs exactly one
    `--group` (it is that group's plan), as in Kafka. UsageError naming the line when malformed."""
    rows = [(n, row) for n, row in enumerate(csv.reader(io.StringIO(text)), start=1) if any(c.strip() for c in row)]
    if not rows:
        raise UsageError(f"Invalid reset plan '{source}': the file has no lines")
    single = len(rows[0][1]) == 3
    if single and len(groups) != 1:
        raise UsageError(f"Invalid reset plan '{source}': the topic,partition,offset format needs exactly one "
                         "--group; use group,topic,partition,offset for several groups")
    plan: dict[str, dict[TP, int]] = {}
    for number, row in rows:
        fields = [c.strip() for c in row]
        if len(fields) != (3 if single else 4) or not _is_int(fields[-2]) or not _is_int(fields[-1]) \
                or int(fields[-2]) < 0 or not fields[-3] or (not single and not fields[0]):
            expected = "topic,partition,offset" if single else "group,topic,partition,offset"
            raise UsageError(f"Invalid reset plan '{source}' line {number}: '{','.join(row)}' (expected {expected})")
        group = groups[0] if single else fields[0]
        plan.setdefault(group, {})[TP(fields[-3], int(fields[-2]))] = int(fields[-1])
    return plan


def _is_int(text: str) -> bool:
    """True for an optionally signed decimal integer."""
    return text.lstrip("+-").isdigit() and text.count("-") + text.count("+") <= 1
