"""The report of a one-node chaos run (harness.py): totals over its rounds, a Markdown table, the
first cases of each kind of violation, and a line per round."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checker import CheckResult

if TYPE_CHECKING:
    from harness import Harness, RoundReport


@dataclass
class Summary:
    """Totals of a run (counts over all rounds; lost/duplicates are the worst check's)."""

    rounds: int
    wall_seconds: float
    operations: Counter[str]
    faults: Counter[str]
    errors: Counter[str]
    checks: int
    lost: int
    duplicates: int
    phantoms: int
    reordered: int
    lost_commits: int
    phantom_commits: int
    backwards_commits: int
    failed_visible: int
    failed_commit_visible: int
    incidents: list[str]
    notes: list[str]
    evidence: dict[str, list[str]]
    seed: int
    fault_kinds: tuple[str, ...]
    start_seconds: list[float]

    @classmethod
    def of(cls, harness: Harness) -> "Summary":
        checks = [c for r in harness.rounds for c in r.checks]
        worst = lambda attr: max((getattr(c, attr) for c in checks), default=0)  # noqa: E731
        operations: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for r in harness.rounds:
            operations.update(r.outcomes)
            errors.update(r.errors)
        faults = Counter(f.kind for f in harness.history.faults)
        return cls(rounds=len(harness.rounds), wall_seconds=time.monotonic() - harness.started,
                   operations=operations, faults=faults, errors=errors, checks=len(checks),
                   lost=worst("lost"), duplicates=worst("duplicates"), phantoms=worst("phantoms"),
                   reordered=worst("reordered"), lost_commits=worst("lost_commits"),
                   phantom_commits=worst("phantom_commits"),
                   backwards_commits=worst("backwards_commits"), failed_visible=worst("failed_visible"),
                   failed_commit_visible=worst("failed_commit_visible"),
                   incidents=[f"round {r.round}: {i}" for r in harness.rounds for i in r.incidents],
                   notes=list(harness.history.notes[:20]),
                   evidence=_first_cases(checks),
                   seed=harness.config.seed, fault_kinds=harness.config.faults,
                   start_seconds=list(harness.broker.start_seconds) if harness.broker else [])

    @property
    def violations(self) -> int:
        return (self.lost + self.duplicates + self.phantoms + self.reordered + self.lost_commits
                + self.phantom_commits + self.backwards_commits)

    def count(self, outcome: str, kind: str | None = None) -> int:
        return sum(n for key, n in self.operations.items()
                   if key.endswith(" " + outcome) and (kind is None or key.startswith(kind + " ")))

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON-able data (Counters as plain dicts)."""
        return {name: dict(value) if isinstance(value, Counter) else value
                for name, value in vars(self).items()} | {"violations": self.violations}

    def table(self) -> str:
        """A Markdown table of the run, ready to paste."""
        total = sum(self.operations.values())
        rows = [
            ("fault kinds selected", ",".join(self.fault_kinds)),
            ("rounds / checks", f"{self.rounds} / {self.checks}"),
            ("wall time", f"{self.wall_seconds:.0f} s"),
            ("operations (produce / commit)",
             f"{total} ({sum(n for k, n in self.operations.items() if k.startswith('produce'))} / "
             f"{sum(n for k, n in self.operations.items() if k.startswith('commit'))})"),
            ("faults injected during rounds",
             ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()) if not k.startswith("end-")) or "none"),
            ("restarts at round ends (kill -9 / SIGTERM)",
             f"{self.faults.get('end-kill9', 0)} / {self.faults.get('end-term', 0)}"),
            ("acknowledged (produce / commit)", f"{self.count('ok')} ({self.count('ok', 'produce')} / "
                                                f"{self.count('ok', 'commit')})"),
            ("failed (produce / commit)", f"{self.count('failed')} ({self.count('failed', 'produce')} / "
                                          f"{self.count('failed', 'commit')})"),
            ("unknown (produce / commit)", f"{self.count('unknown')} ({self.count('unknown', 'produce')} / "
                                           f"{self.count('unknown', 'commit')})"),
            ("lost acknowledged records", str(self.lost)),
            ("lost acknowledged commits", str(self.lost_commits)),
            ("commits acknowledged below an earlier acknowledged one", str(self.backwards_commits)),
            ("duplicates", str(self.duplicates)),
            ("never-sent records / commits read back", f"{self.phantoms} / {self.phantom_commits}"),
            ("order violations", str(self.reordered)),
            ("failed yet visible (records / commits; allowed)", f"{self.failed_visible} / {self.failed_commit_visible}"),
            ("broker start to listening (median / max)", _median_max(self.start_seconds)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"| {'metric':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
        return "\n".join(lines)

    def text(self) -> str:
        parts = [self.table()]
        if self.errors:
            parts.append("errors seen by clients: " + ", ".join(f"{k} x{n}" for k, n in self.errors.most_common()))
        if self.incidents:
            parts.append("incidents:\n" + "\n".join(f"  - {i}" for i in self.incidents))
        if self.notes:
            parts.append("notes:\n" + "\n".join(f"  - {n}" for n in self.notes))
        for category, cases in self.evidence.items():
            parts.append(f"evidence, {category}:\n" + "\n".join(f"  - {e}" for e in cases))
        parts.append(f"seed {self.seed}; verdict: {'PASS' if self.violations == 0 else 'FAIL'}")
        return "\n\n".join(parts)


def _median_max(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.2f} s / {ordered[-1]:.2f} s"


def _first_cases(checks: list[CheckResult], per_category: int = 6) -> dict[str, list[str]]:
    """The first cases of each category of violation, in check order."""
    found: dict[str, list[str]] = {}
    for c in checks:
        for category, cases in c.evidence.items():
            room = per_category - len(found.setdefault(category, []))
            found[category] += cases[:max(0, room)]
    return found


def format_round(report: RoundReport) -> str:
    """One line per round plus one per check."""
    outcomes = " ".join(f"{k}={n}" for k, n in sorted(report.outcomes.items()))
    lines = [f"round {report.round} [{','.join(report.faults)}] {report.seconds:.1f}s: {outcomes}"]
    for c in report.checks:
        lines.append(f"  check {c.label} ({c.seconds:.1f}s): read {c.records_read} records / {c.commits_read} commits; "
                     f"lost={c.lost} dup={c.duplicates} phantom={c.phantoms} reordered={c.reordered} "
                     f"lost_commits={c.lost_commits} phantom_commits={c.phantom_commits} "
                     f"backwards_commits={c.backwards_commits}")
    lines += [f"  ! {i}" for i in report.incidents]
    return "\n".join(lines)
