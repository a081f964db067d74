"""`offsetd groups --describe`: the offsets view (default; lag per partition, LAG-TIME with
`--verbose`), the members view and the state view, laid out as kafka-consumer-groups prints them,
and `--health` through `health.py`. Row building is pure; `run_describe` does the I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .cluster import Cluster
from offsetd.lag.compute import offset_lag, record_needed, time_lag_ms
from .model import REBALANCING_STATES, TP, Committed, GroupDescription, LogBounds, Member
from .output import Output
from .table import MISSING, Column, render
from .time_args import format_duration_ms


@dataclass(frozen=True)
class DescribeOptions:
    """Which view (`offsets`, `members`, `state`, `health`) and whether `--verbose`."""

    view: str = "offsets"
    verbose: bool = False


@dataclass(frozen=True)
class OffsetRow:
    """One partition line of the offsets view."""

    group: str
    tp: TP
    committed: Committed | None
    bounds: LogBounds | None
    lag: int | None
    lag_time_ms: int | None
    consumer_id: str
    host: str
    client_id: str

    def as_json(self) -> dict[str, Any]:
        """The row for `--output json` (null where text shows `-`)."""
        return {
            "topic": self.tp.topic, "partition": self.tp.partition,
            "leader_epoch": self.committed.leader_epoch if self.committed else None,
            "current_offset": self.committed.offset if self.committed else None,
            "log_start_offset": self.bounds.start if self.bounds else None,
            "log_end_offset": self.bounds.end if self.bounds else None,
            "lag": self.lag, "lag_time_ms": self.lag_time_ms,
            "consumer_id": _or_none(self.consumer_id), "host": _or_none(self.host),
            "client_id": _or_none(self.client_id),
        }


def _or_none(value: str) -> str | None:
    """JSON null for Kafka's `-` placeholder."""
    return None if value == MISSING else value


def partition_owners(description: GroupDescription, committed: dict[TP, Committed]) -> list[tuple[TP, Member | None]]:
    """Partitions in Kafka's describe order: members with an assignment, most partitions first,
    each member's partitions by topic and partition; then committed partitions nobody owns."""
    owned: list[tuple[TP, Member | None]] = []
    members = sorted((m for m in description.members if m.assignment), key=lambda m: -len(m.assignment))
    for member in members:
        owned += [(tp, member) for tp in sorted(member.assignment)]
    assigned = {tp for tp, _ in owned}
    return owned + [(tp, None) for tp in sorted(committed) if tp not in assigned]


def offset_rows(description: GroupDescription, committed: dict[TP, Committed],
                bounds: dict[TP, LogBounds | None], timestamps: dict[tuple[TP, int], int | None],
                now_ms: int) -> list[OffsetRow]:
    """The offsets view of one group, with offset lag and time lag per partition."""
    rows = []
    for tp, member in partition_owners(description, committed):
        commit, tp_bounds = committed.get(tp), bounds.get(tp)
        offset = commit.offset if commit else None
        needed = record_needed(offset, tp_bounds)
        record_ts = timestamps.get((tp, needed)) if needed is not None else None
        rows.append(OffsetRow(
            description.group, tp, commit, tp_bounds, offset_lag(offset, tp_bounds),
            time_lag_ms(offset, tp_bounds, record_ts, now_ms),
            member.consumer_id if member else MISSING, member.host if member else MISSING,
            member.client_id if member else MISSING))
    return rows


# Offsets view columns: Kafka's, with LEADER-EPOCH (Kafka 4 --verbose) and LAG-TIME (ours) in
# verbose mode. Each entry: column, value of a row, shown only in verbose mode.
_OFFSET_COLUMNS: list[tuple[Column, Callable[[OffsetRow], Any], bool]] = [
    (Column("GROUP", grows=True), lambda r: r.group, False),
    (Column("TOPIC", grows=True), lambda r: r.tp.topic, False),
    (Column("PARTITION", 10), lambda r: r.tp.partition, False),
    (Column("LEADER-EPOCH"), lambda r: r.committed.leader_epoch if r.committed else None, True),
    (Column("CURRENT-OFFSET"), lambda r: r.committed.offset if r.committed else None, False),
    (Column("LOG-END-OFFSET"), lambda r: r.bounds.end if r.bounds else None, False),
    (Column("LAG"), lambda r: r.lag, False),
    (Column("LAG-TIME"), lambda r: None if r.lag_time_ms is None else format_duration_ms(r.lag_time_ms), True),
    (Column("CONSUMER-ID", grows=True), lambda r: r.consumer_id, False),
    (Column("HOST", grows=True), lambda r: r.host, False),
    (Column("CLIENT-ID", 0), lambda r: r.client_id, False),
]


def format_offsets(rows: list[OffsetRow], verbose: bool) -> str:
    """Kafka's offsets table: a blank line, the header, one line per partition."""
    chosen = [(c, get) for c, get, verbose_only in _OFFSET_COLUMNS if verbose or not verbose_only]
    lines = render([c for c, _ in chosen], [[get(r) for _, get in chosen] for r in rows])
    return "\n" + "\n".join(lines) + "\n"


def assignment_string(assignment: tuple[TP, ...]) -> str:
    """Kafka 4's assignment notation `topicA:0,1;topicB:2`, or `-` when empty."""
    if not assignment:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:" + ",".join(map(str, sorted(ps))) for t, ps in sorted(by_topic.items()))


def _or_missing(value: int | None) -> int | str:
    """An epoch, or Kafka's `-` where there is none."""
    return MISSING if value is None else value


def format_members(description: GroupDescription, verbose: bool) -> str:
    """Kafka's members table. GROUP-INSTANCE-ID appears only when a member is static; #PARTITIONS
    keeps Kafka's trailing pad; verbose adds Kafka 4's columns: the member's epoch and assignment,
    the group's target assignment epoch and the member's target assignment (`-` for classic
    groups, which have none), and UPGRADED when a consumer group has classic-protocol members."""
    static = any(m.group_instance_id for m in description.members)
    upgraded = verbose and any(m.upgraded is False for m in description.members)
    columns = [Column("GROUP", grows=True), Column("CONSUMER-ID", grows=True)]
    columns += [Column("GROUP-INSTANCE-ID", 17, grows=True)] if static else []
    columns += [Column("HOST", grows=True), Column("CLIENT-ID", grows=True), Column("#PARTITIONS")]
    rows = []
    for m in description.members:
        row: list[Any] = [description.group, m.consumer_id] + ([m.group_instance_id or ""] if static else [])
        row += [m.host, m.client_id, len(m.assignment)]
        if verbose:
            target_epoch = description.target_assignment_epoch if m.member_epoch is not None else None
            target = MISSING if m.target_assignment is None else assignment_string(m.target_assignment)
            row += [_or_missing(m.member_epoch), assignment_string(m.assignment), _or_missing(target_epoch), target]
            row += [str(m.upgraded).lower() if m.upgraded is not None else MISSING] if upgraded else []
        rows.append(row)
    if verbose:
        current = len(columns) + 1  # the CURRENT-ASSIGNMENT cell of a row
        assignment_width = max([20] + [len(r[current]) for r in rows])
        target_width = max([20] + [len(r[current + 2]) for r in rows]) if upgraded else 20
        columns += [Column("CURRENT-EPOCH"), Column("CURRENT-ASSIGNMENT", assignment_width),
                    Column("TARGET-EPOCH"), Column("TARGET-ASSIGNMENT", target_width)]
        columns += [Column("UPGRADED", 0)] if upgraded else []
    else:
        columns += [Column("", 0)]  # Kafka's format ends "%-15s ": one trailing space
        rows = [r + [""] for r in rows]
    return "\n" + "".join(line + "\n" for line in render(columns, rows))


def coordinator_string(description: GroupDescription) -> str:
    """Kafka's COORDINATOR (ID) cell: `host:port  (id)`."""
    c = description.coordinator
    return f"{c.host}:{c.port}  ({c.id})" if c else MISSING


def format_state(description: GroupDescription, verbose: bool) -> str:
    """Kafka's state table (one group); verbose adds the KIP-848 epochs (`-` for classic)."""
    coordinator = coordinator_string(description)
    columns = [Column("GROUP", 15, grows=True), Column("COORDINATOR (ID)", 25, grows=True),
               Column("ASSIGNMENT-STRATEGY", 20), Column("STATE", 20)]
    row: list[Any] = [description.group, coordinator, description.assignment_strategy or MISSING, description.state]
    if verbose:
        columns += [Column("GROUP-EPOCH"), Column("TARGET-ASSIGNMENT-EPOCH", 25)]
        row += [_or_missing(description.group_epoch), _or_missing(description.target_assignment_epoch)]
    columns.append(Column("#MEMBERS", 0))
    row.append(len(description.members))
    return "\n" + "\n".join(render(columns, [row])) + "\n"


def state_json(description: GroupDescription) -> dict[str, Any]:
    """The state view of one group for `--output json`."""
    c = description.coordinator
    return {"group": description.group, "type": description.type, "state": description.state,
            "assignment_strategy": description.assignment_strategy or None, "members": len(description.members),
            "coordinator": {"id": c.id, "host": c.host, "port": c.port} if c else None,
            "group_epoch": description.group_epoch, "target_assignment_epoch": description.target_assignment_epoch}


def _partitions_json(assignment: tuple[TP, ...] | None) -> list[dict[str, Any]] | None:
    """An assignment for `--output json` (null when unknown)."""
    return None if assignment is None else [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(assignment)]


def members_json(description: GroupDescription) -> list[dict[str, Any]]:
    """The members of one group for `--output json`."""
    return [{"consumer_id": m.consumer_id, "group_instance_id": m.group_instance_id, "host": m.host,
             "client_id": m.client_id, "partitions": len(m.assignment), "assignment": _partitions_json(m.assignment),
             "member_epoch": m.member_epoch, "target_assignment": _partitions_json(m.target_assignment),
             "target_assignment_epoch": description.target_assignment_epoch if m.member_epoch is not None else None,
             "upgraded": m.upgraded}
            for m in description.members]


def announce_state(description: GroupDescription, out: Output) -> bool:
    """Kafka's per-group preamble: an error for a group that does not exist (returns False),
    a note for an empty or rebalancing group."""
    group, state = description.group, description.state
    if state == "Dead":
        out.message(f"\nError: Consumer group '{group}' does not exist.\n")
        return False
    if state == "Empty":
        out.note(f"\nConsumer group '{group}' has no active members.\n")
    elif state in REBALANCING_STATES:
        out.note(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
    return True


def run_describe(cluster: Cluster, groups: list[str], options: DescribeOptions, out: Output) -> int:
    """Describe the groups (sorted, like Kafka's TreeMap); exit status 1 if one does not exist."""
    if options.view == "health":
        return _run_health(cluster, groups, out)
    # epochs only where they are shown: they cost a ConsumerGroupDescribe through kafka-python
    epochs = options.verbose and options.view in ("members", "state")
    descriptions = cluster.describe_groups(groups, epochs=epochs)
    ordered = [descriptions[g] for g in sorted(descriptions)]
    view = {"offsets": _describe_offsets, "members": _describe_members, "state": _describe_state}[options.view]
    documents = view(cluster, ordered, options.verbose, out)
    out.document(documents)
    return 1 if any(d.state == "Dead" for d in ordered) else 0


def _describe_offsets(cluster: Cluster, descriptions: list[GroupDescription], verbose: bool,
                      out: Output) -> list[dict[str, Any]]:
    """Offsets view: committed offsets per group, log offsets for every partition shown (one
    ListOffsets per bound for all groups), record timestamps for time lag when it is shown."""
    live = [d for d in descriptions if d.state != "Dead"]
    committed = {d.group: cluster.committed_offsets(d.group) for d in live}
    partitions = {tp for d in live for tp, _ in partition_owners(d, committed[d.group])}
    bounds = cluster.log_bounds(partitions)
    timestamps: dict[tuple[TP, int], int | None] = {}
    if verbose or out.json_mode:
        wanted = set()
        for d in live:
            for tp, commit in committed[d.group].items():
                needed = record_needed(commit.offset, bounds.get(tp))
                if needed is not None:
                    wanted.add((tp, needed))
        timestamps = cluster.first_record_timestamps(wanted)
    now_ms = int(time.time() * 1000)
    documents = []
    for d in descriptions:
        if not announce_state(d, out):
            documents.append({"group": d.group, "state": d.state, "error": f"Consumer group '{d.group}' does not exist.",
                              "partitions": []})
            continue
        rows = offset_rows(d, committed[d.group], bounds, timestamps, now_ms)
        if rows:
            out.text(format_offsets(rows, verbose))
        documents.append({"group": d.group, "state": d.state, "error": None, "partitions": [r.as_json() for r in rows]})
    return documents


def _describe_members(cluster: Cluster, descriptions: list[GroupDescription], verbose: bool,
                      out: Output) -> list[dict[str, Any]]:
    """Members view (Kafka prints the header even for a group without members)."""
    return _describe_each(descriptions, out, lambda d: format_members(d, verbose),
                          lambda d: {"group": d.group, "state": d.state, "members": members_json(d)})


def _describe_state(cluster: Cluster, descriptions: list[GroupDescription], verbose: bool,
                    out: Output) -> list[dict[str, Any]]:
    """State view."""
    return _describe_each(descriptions, out, lambda d: format_state(d, verbose), state_json)


def _describe_each(descriptions: list[GroupDescription], out: Output, table: Callable[[GroupDescription], str],
                   document: Callable[[GroupDescription], dict[str, Any]]) -> list[dict[str, Any]]:
    """A one-table-per-group view: the preamble, the table of each existing group, and per group
    its JSON document with `error` last."""
    documents = []
    for d in descriptions:
        exists = announce_state(d, out)
        if exists:
            out.text(table(d))
        documents.append({**document(d), "error": None if exists else f"Consumer group '{d.group}' does not exist."})
    return documents


def _run_health(cluster: Cluster, groups: list[str], out: Output) -> int:
    """`--describe --health`: Burrow-style grades from `health.py` (imported here, when used)."""
    from .health import format_health, group_health, health_json

    results = [group_health(cluster.client_config, group, cluster.timeout_s) for group in sorted(set(groups))]
    out.text(format_health(results))
    out.document(health_json(results))
    # Like describing a missing group: exit 1 when a group could not be evaluated or is unknown.
    return 1 if any(r.error is not None or r.status.name == "NOTFOUND" for r in results) else 0
