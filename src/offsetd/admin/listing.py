"""`offsetd groups --list`: group ids one per line, or with `--state` / `--type` a GROUP [TYPE]
[STATE] table, optionally filtered by comma-separated states or types (Kafka's names, matched
case-insensitively)."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster
from .errors import UsageError
from .model import GROUP_STATES, GROUP_TYPES, GroupListing
from .output import Output
from .table import Column, render


@dataclass(frozen=True)
class ListOptions:
    """`--state` / `--type` as given: None when the option is absent, "" when given bare
    (show the column, no filter), else the comma-separated filter."""

    state: str | None = None
    type: str | None = None


def parse_state_filter(value: str | None) -> frozenset[str]:
    """Kafka state names selected by `--state a,b`; empty = no filter. UsageError on unknown."""
    if not value:
        return frozenset()
    names = [s.strip().lower() for s in value.split(",")]
    if not all(n in GROUP_STATES for n in names):
        raise UsageError(f"Invalid state list '{value}'. Valid states are: " + ", ".join(GROUP_STATES.values()))
    return frozenset(GROUP_STATES[n] for n in names)


def parse_type_filter(value: str | None) -> frozenset[str]:
    """Kafka type names selected by `--type a,b`; empty = no filter. UsageError on unknown."""
    if not value:
        return frozenset()
    names = [s.strip().lower() for s in value.split(",")]
    if not all(n in GROUP_TYPES for n in names):
        raise UsageError(f"Invalid types list '{value}'. Valid types are: " + ", ".join(GROUP_TYPES))
    return frozenset(GROUP_TYPES[n] for n in names)


def select(listings: list[GroupListing], states: frozenset[str], types: frozenset[str]) -> list[GroupListing]:
    """The listings matching both filters (an empty filter matches everything)."""
    return [g for g in listings if (not states or g.state in states) and (not types or g.type in types)]


def format_listing(listings: list[GroupListing], show_type: bool, show_state: bool) -> str:
    """Kafka's `--list` text: bare ids, or the GROUP column (longest id, at least 15, plus 10)
    followed by TYPE and STATE columns of 20 (every column padded, as Kafka's printf does)."""
    if not (show_type or show_state):
        return "".join(f"{g.group}\n" for g in listings)
    group_width = max([15] + [len(g.group) for g in listings]) + 10
    columns = [Column("GROUP", group_width)]
    columns += [Column("TYPE", 20)] if show_type else []
    columns += [Column("STATE", 20)] if show_state else []
    rows = [[g.group] + ([g.type] if show_type else []) + ([g.state] if show_state else []) for g in listings]
    return "".join(line + "\n" for line in render(columns, rows))


def run_list(cluster: Cluster, options: ListOptions, out: Output) -> int:
    """List the groups; exit status 0."""
    states, types = parse_state_filter(options.state), parse_type_filter(options.type)
    listings = select(cluster.list_groups(), states, types)
    out.text(format_listing(listings, options.type is not None, options.state is not None))
    out.document([{"group": g.group, "type": g.type, "state": g.state} for g in listings])
    return 0
