"""Run records, best-of-N aggregation, the comparison table and the JSON results file."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from bench.workload import Metric

#: "n/a": the workload does not apply to this broker (see ``Workload.brokers``).
Status = Literal["ok", "failed", "skipped", "n/a"]


@dataclass
class WorkloadOutcome:
    """One workload on one broker in one repetition."""

    workload: str
    status: Status
    metrics: dict[str, Metric] = field(default_factory=dict)
    error: str | None = None
    detail: str | None = None  # e.g. a client's traceback
    wall_s: float = 0.0


@dataclass
class BrokerRun:
    """One repetition of the whole workload list against one fresh broker."""

    broker: str
    repetition: int
    bootstrap: str | None = None
    start_error: str | None = None
    outcomes: list[WorkloadOutcome] = field(default_factory=list)


@dataclass
class Cell:
    """The aggregate of one metric for one broker over all repetitions."""

    runs: int = 0
    ok: int = 0
    values: list[float] = field(default_factory=list)
    failed: int = 0
    skipped: int = 0
    not_applicable: int = 0
    best: float | None = None  # set only when every repetition succeeded

    def text(self, unit: str) -> str:
        if self.runs == 0:
            return "not run"
        if self.not_applicable == self.runs:
            return "n/a"
        if self.failed:
            return f"FAILED ({self.failed}/{self.runs})"
        if self.skipped:
            return f"skipped ({self.skipped}/{self.runs})"
        if self.best is None:
            return "ok"  # a workload that succeeded without producing figures
        return format_value(self.best, unit)


@dataclass
class Row:
    """One line of the table: a metric (or a workload that produced none) across brokers."""

    workload: str
    key: str
    label: str
    unit: str
    higher_is_better: bool
    cells: dict[str, Cell]
    ratio: float | None = None


def format_value(value: float, unit: str) -> str:
    """Render a figure with precision suited to its unit."""
    if unit == "count":
        return f"{value:,.0f}"
    if unit == "MB/s":
        return f"{value:,.1f}"
    if unit.endswith("/s"):  # msg/s, commits/s, ...
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    if unit == "ms":
        return f"{value:,.2f}"
    if unit == "s":
        return f"{value:,.3f}"
    return f"{value:,.4g}"


def aggregate(
    runs: list[BrokerRun], brokers: list[str], workload_names: list[str]
) -> list[Row]:
    """Best-of-N per broker and metric; ratio = brokers[0] / brokers[1].

    A cell has a figure only if the workload succeeded in every repetition on that broker;
    otherwise it reports how many repetitions failed or were skipped.
    """
    rows: list[Row] = []
    for wl in workload_names:
        metas: dict[str, Metric] = {}  # metric key -> a sample, in first-seen order
        for run in runs:
            for out in run.outcomes:
                if out.workload == wl:
                    for key, metric in out.metrics.items():
                        metas.setdefault(key, metric)
        if not metas:  # a workload without figures: show a row only if something went wrong
            metas = {"": Metric(wl, "", math.nan)}
        for key, meta in metas.items():
            cells: dict[str, Cell] = {}
            for broker in brokers:
                cell = Cell()
                for run in runs:
                    if run.broker != broker:
                        continue
                    cell.runs += 1
                    out = next((o for o in run.outcomes if o.workload == wl), None)
                    if out is None or out.status == "failed":
                        cell.failed += 1
                    elif out.status == "skipped":
                        cell.skipped += 1
                    elif out.status == "n/a":
                        cell.not_applicable += 1
                    else:
                        cell.ok += 1
                        if key in out.metrics:
                            cell.values.append(out.metrics[key].value)
                if cell.values and len(cell.values) == cell.runs:
                    cell.best = max(cell.values) if meta.higher_is_better else min(cell.values)
                cells[broker] = cell
            if key == "" and all(c.runs == 0 or (not c.failed and not c.skipped)
                                 for c in cells.values()):
                continue
            row = Row(wl, key, meta.label, meta.unit, meta.higher_is_better, cells)
            if len(brokers) == 2:
                a, b = (cells[x].best for x in brokers)
                if a is not None and b is not None and b != 0:
                    row.ratio = a / b
            rows.append(row)
    return rows


def format_table(rows: list[Row], brokers: list[str], repeat: int) -> str:
    """Plain-text table: metric | <broker 1> | <broker 2> | ratio."""
    ratio_head = f"ratio {brokers[0]}/{brokers[1]}" if len(brokers) == 2 else "ratio"
    header = ["metric", *brokers, ratio_head]
    body: list[list[str]] = []
    for row in rows:
        name = f"{row.label} {row.unit}".strip() if row.key else f"{row.label}"
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        body.append([name, *(row.cells[b].text(row.unit) for b in brokers), ratio])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:]))
        return " | ".join([first, *rest])

    sep = "-+-".join("-" * w for w in widths)
    best = f"best of {repeat}" if repeat > 1 else "single run"
    notes = (
        f"({best}; MB/s = 10^6 bytes of message values per second; "
        "throughput: higher is better, latency: lower is better)"
    )
    return "\n".join([line(header), sep, *(line(r) for r in body), notes])


def failures(runs: list[BrokerRun]) -> list[str]:
    """One line per failed start or failed workload, for printing under the table."""
    lines: list[str] = []
    for run in runs:
        tag = f"[{run.broker} #{run.repetition + 1}]"
        if run.start_error:
            first_line = run.start_error.splitlines()[0] if run.start_error else ""
            lines.append(f"{tag} broker start failed: {first_line}")
        for out in run.outcomes:
            if out.status == "failed" and not run.start_error:
                lines.append(f"{tag} {out.workload} FAILED: {out.error}")
    return lines


def write_json(
    results_dir: Path,
    *,
    config: dict[str, Any],
    environment: dict[str, Any],
    runs: list[BrokerRun],
    rows: list[Row],
    brokers: list[str],
) -> Path:
    """Write every raw run and the aggregate to ``results_dir/bench-<UTC time>.json``;
    return its path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.now(timezone.utc)
    stem = f"bench-{now.strftime('%Y%m%dT%H%M%SZ')}"
    path = results_dir / f"{stem}.json"
    n = 1
    while path.exists():  # two runs in the same second
        n += 1
        path = results_dir / f"{stem}-{n}.json"
    summary = []
    for row in rows:
        if not row.key:
            continue
        summary.append(
            {
                "workload": row.workload,
                "metric": row.key,
                "label": row.label,
                "unit": row.unit,
                "higher_is_better": row.higher_is_better,
                **{b: asdict(row.cells[b]) for b in brokers},
                "ratio": row.ratio,  # brokers[0] / brokers[1], best against best
            }
        )
    doc = {
        "created_utc": now.isoformat(timespec="seconds"),
        "config": config,
        "environment": environment,
        "brokers": brokers,
        "summary": summary,
        "runs": [asdict(r) for r in runs],
        "ok": not failures(runs),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
