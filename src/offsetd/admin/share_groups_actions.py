"""What `offsetd share-groups` does once its options are valid (admin/share_groups_cli.py):
list, describe (offsets, members, state), delete, delete-offsets and reset-offsets, with
kafka-share-groups' columns and messages (reference share-groups.md §6) in text mode and one
JSON document with `--output json`. Each returns the exit status: 1 when the cluster refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .cluster import Cluster
from .errors import ToolError, UsageError
from .model import TP
from .output import Output
from .share_groups_client import ShareGroupDescription, ShareGroupsClient, ShareOffset
from .table import Column, render
from .topic_args import TopicArg

# A share group's states (GroupState's names) by the lower-case spelling `--list --state` accepts.
SHARE_STATES: dict[str, str] = {name.lower(): name for name in ("Empty", "Stable", "Dead")}


def parse_share_states(value: str | None) -> frozenset[str]:
    """The states `--list --state a,b` selects; empty = no filter. UsageError on an unknown one."""
    if not value:
        return frozenset()
    names = [s.strip().lower() for s in value.split(",")]
    if not all(n in SHARE_STATES for n in names):
        raise UsageError(f"Invalid state list '{value}'. Valid states are: " + ", ".join(SHARE_STATES.values()))
    return frozenset(SHARE_STATES[n] for n in names)


def _table(out: Output, columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> None:
    """Kafka's layout: a blank line, the header, the rows."""
    out.text("\n" + "\n".join(render(columns, rows)) + "\n")


def _missing(value: int) -> int | None:
    """-1 (no value) as Kafka's `-`."""
    return None if value < 0 else value


# --------------------------------------------------------------------------------- list


def run_list(client: ShareGroupsClient, state: str | None, out: Output) -> int:
    """`--list`: group ids; with `--state`, GROUP and STATE columns, optionally filtered."""
    wanted = parse_share_states(state)
    groups = [(g, s) for g, s in client.list_groups() if not wanted or s in wanted]
    out.document([{"group": g, "state": s} for g, s in groups])
    if state is None:
        out.text("".join(f"{g}\n" for g, _ in groups))
    else:
        out.text("\n".join(render([Column("GROUP", 15, True), Column("STATE", 0)], groups)) + "\n")
    return 0


# ----------------------------------------------------------------------------- describe


def run_describe(client: ShareGroupsClient, groups: list[str], view: str, verbose: bool, out: Output) -> int:
    """`--describe` in one of the views; groups that could not be described are reported and
    make the exit status 1."""
    described = client.describe(groups)
    status = 0
    document: list[dict[str, Any]] = []
    for group in sorted(described):
        d = described[group]
        if isinstance(d, str):
            out.message(f"\nError: Share group '{group}' could not be described: {d}\n")
            document.append({"group": group, "error": d})
            status = 1
            continue
        if d.state == "Dead":
            out.message(f"\nError: Share group '{group}' does not exist.\n")
            document.append({"group": group, "error": "does not exist"})
            status = 1
            continue
        if view == "state":
            document.append(_state(d, verbose, out))
        elif view == "members":
            document.append(_members(d, verbose, out))
        else:
            document.append(_offsets(d, client.offsets(group), verbose, out))
    out.document(document)
    return status


def _state(d: ShareGroupDescription, verbose: bool, out: Output) -> dict[str, Any]:
    node, host, port = d.coordinator
    coordinator = f"{host}:{port}  ({node})"
    if d.state == "Empty":
        out.note(f"\nShare group '{d.group}' has no active members.\n")
    columns = [Column("GROUP", 15, True), Column("COORDINATOR (ID)", 25, True), Column("STATE", 15)]
    row: list[Any] = [d.group, coordinator, d.state]
    if verbose:
        columns += [Column("GROUP-EPOCH", 12), Column("ASSIGNMENT-EPOCH", 17)]
        row += [d.group_epoch, d.assignment_epoch]
    _table(out, columns + [Column("#MEMBERS", 0)], [row + [len(d.members)]])
    return {"group": d.group, "coordinator": {"id": node, "host": host, "port": port}, "state": d.state,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "members": len(d.members)}


def assignment_string(partitions: Sequence[TP]) -> str:
    """`topic:0,1;other:2`: a member's partitions by topic, as Kafka's ASSIGNMENT column."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items()))


def _members(d: ShareGroupDescription, verbose: bool, out: Output) -> dict[str, Any]:
    members = sorted(d.members, key=lambda m: m.member_id)
    if d.state == "Empty":
        out.note(f"\nShare group '{d.group}' has no active members.\n")
    if members:
        columns = [Column("GROUP", 15, True), Column("CONSUMER-ID", 15, True), Column("HOST", 15, True),
                   Column("CLIENT-ID", 15, True), Column("#PARTITIONS", 12)]
        columns += [Column("MEMBER-EPOCH", 13)] if verbose else []
        rows = [[d.group, m.member_id, m.host, m.client_id, len(m.assignment)]
                + ([m.member_epoch] if verbose else []) + [assignment_string(m.assignment)] for m in members]
        _table(out, columns + [Column("ASSIGNMENT", 0)], rows)
    return {"group": d.group, "state": d.state, "members": [
        {"consumer_id": m.member_id, "host": m.host, "client_id": m.client_id, "member_epoch": m.member_epoch,
         "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in m.assignment]} for m in members]}


def _offsets(d: ShareGroupDescription, offsets: list[ShareOffset], verbose: bool, out: Output) -> dict[str, Any]:
    if d.state == "Empty":
        out.note(f"\nShare group '{d.group}' has no active members.\n")
    if not offsets:
        out.text(f"\nShare group '{d.group}' has no offset information.\n")
    else:
        columns = [Column("GROUP", 15, True), Column("TOPIC", 15, True), Column("PARTITION", 10)]
        columns += [Column("LEADER-EPOCH", 13)] if verbose else []
        rows = [[d.group, o.tp.topic, o.tp.partition] + ([_missing(o.leader_epoch)] if verbose else [])
                + [_missing(o.start_offset), _missing(o.lag)] for o in offsets]
        _table(out, columns + [Column("START-OFFSET", 13), Column("LAG", 0)], rows)
    return {"group": d.group, "state": d.state, "offsets": [
        {"topic": o.tp.topic, "partition": o.tp.partition, "leader_epoch": _missing(o.leader_epoch),
         "start_offset": _missing(o.start_offset), "lag": _missing(o.lag)} for o in offsets]}


# ------------------------------------------------------------------------------- delete


def run_delete(client: ShareGroupsClient, groups: list[str], out: Output) -> int:
    """`--delete`: DeleteGroups; Kafka's success line and one line per failed group."""
    results = client.delete_groups(groups)
    ok = [g for g in groups if results.get(g) is None]
    failed = {g: results[g] for g in groups if results.get(g) is not None}
    out.document([{"group": g, "error": results.get(g)} for g in groups])
    quoted = ", ".join(f"'{g}'" for g in ok)
    if not failed:
        out.text(f"Deletion of requested share groups ({quoted}) was successful.\n")
        return 0
    out.message("Deletion of some share groups failed:\n")
    for group, error in failed.items():
        out.message(f"* Group '{group}' could not be deleted due to: {error}\n")
    if ok:
        out.text(f"\nThese share groups were deleted successfully: {quoted}\n")
    return 1


def run_delete_offsets(client: ShareGroupsClient, group: str, topics: list[str], out: Output) -> int:
    """`--delete-offsets`: DeleteShareGroupOffsets; TOPIC and STATUS per topic."""
    results = client.delete_offsets(group, list(dict.fromkeys(topics)))
    rows = [(t, "Successful" if e is None else f"Error: {e}") for t, e in sorted(results.items())]
    out.document([{"topic": t, "error": e} for t, e in sorted(results.items())])
    out.text("\n".join([""] + render([Column("TOPIC", 15, True), Column("STATUS", 0)], rows)) + "\n")
    return 1 if any(e is not None for e in results.values()) else 0


# -------------------------------------------------------------------------------- reset


@dataclass(frozen=True)
class ResetRequest:
    """What `--reset-offsets` was asked: the group, the scenario (to-earliest, to-latest,
    to-datetime with its timestamp), the scope and whether to apply it."""

    group: str
    scenario: str
    timestamp_ms: int | None
    topics: tuple[TopicArg, ...]
    all_topics: bool
    execute: bool


def run_reset(client: ShareGroupsClient, cluster: Cluster, req: ResetRequest, out: Output) -> int:
    """`--reset-offsets`: only for an empty (or missing) group; the new start offsets shown as
    GROUP TOPIC PARTITION NEW-OFFSET, and applied with AlterShareGroupOffsets under --execute."""
    described = client.describe([req.group]).get(req.group)
    if isinstance(described, ShareGroupDescription) and described.state not in ("Empty", "Dead"):
        raise ToolError(f"Share group '{req.group}' is not empty.")
    partitions = _partitions(client, cluster, req)
    offsets = _new_offsets(cluster, req, partitions)
    errors: dict[TP, str | None] = client.alter(req.group, offsets) if req.execute and offsets else {}
    rows = [(req.group, tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())]
    out.document([{"group": g, "topic": t, "partition": p, "new_offset": o, "error": errors.get(TP(t, p))}
                  for g, t, p, o in rows])
    if rows:
        _table(out, [Column("GROUP", 15, True), Column("TOPIC", 15, True), Column("PARTITION", 10),
                     Column("NEW-OFFSET", 0)], rows)
    failed = {tp: e for tp, e in errors.items() if e is not None}
    for tp, error in sorted(failed.items()):
        out.message(f"Error: the start offset of {tp} was not reset: {error}\n")
    return 1 if failed else 0


def _partitions(client: ShareGroupsClient, cluster: Cluster, req: ResetRequest) -> list[TP]:
    """The scope: the --topic partitions (every partition of a bare topic), or every partition
    the group has a start offset for (--all-topics)."""
    if req.all_topics:
        return [o.tp for o in client.offsets(req.group)]
    bare = [t.topic for t in req.topics if t.partitions is None]
    known = cluster.topic_partitions(bare + [t.topic for t in req.topics if t.partitions is not None])
    result: list[TP] = []
    for t in req.topics:
        found = known.get(t.topic)
        if isinstance(found, str):
            raise ToolError(f"Topic '{t.topic}': {found}")
        for p in (found or []) if t.partitions is None else t.partitions:
            if p not in (found or []):
                raise ToolError(f"Partition {t.topic}-{p} does not exist.")
            result.append(TP(t.topic, p))
    return sorted(set(result))


def _new_offsets(cluster: Cluster, req: ResetRequest, partitions: list[TP]) -> dict[TP, int]:
    """Each partition's new start offset from ListOffsets: log start, log end, or the first
    offset at or after the datetime (the log end when there is none)."""
    bounds = cluster.log_bounds(partitions)
    missing = [tp for tp in partitions if bounds.get(tp) is None]
    if missing:
        raise ToolError("Error getting the log offsets of " + ", ".join(str(tp) for tp in missing))
    if req.scenario == "to-earliest":
        return {tp: bounds[tp].start for tp in partitions}  # type: ignore[union-attr]
    if req.scenario == "to-latest":
        return {tp: bounds[tp].end for tp in partitions}  # type: ignore[union-attr]
    assert req.timestamp_ms is not None
    found = cluster.offsets_for_timestamp(partitions, req.timestamp_ms)
    return {tp: bounds[tp].end if found[tp] is None else found[tp] for tp in partitions}  # type: ignore

