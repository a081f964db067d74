"""`offsetd groups --delete` (DeleteGroups) and `--delete-offsets` (OffsetDelete, KIP-496) with
Kafka's messages and its TOPIC / PARTITION / STATUS result table."""

from __future__ import annotations

from typing import Any

from .cluster import Cluster
from .model import TP
from .output import Output
from .table import MISSING, Column, render
from .topic_args import TopicArg

# Top-level OffsetDelete errors Kafka reports with the error's own message; those it reports as
# "partition-level" (the table has the details); anything else is "unknown".
_OWN_MESSAGE = frozenset({"INVALID_GROUP_ID", "GROUP_ID_NOT_FOUND", "GROUP_AUTHORIZATION_FAILED", "NON_EMPTY_GROUP"})
_PARTITION_LEVEL = frozenset({"GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PARTITION"})


def run_delete_groups(cluster: Cluster, groups: list[str], out: Output) -> int:
    """Delete the groups; exit status 1 if any could not be deleted."""
    outcome = cluster.delete_groups(groups)
    deleted = [g for g in groups if outcome[g] is None]
    failed = [(g, outcome[g]) for g in groups if outcome[g] is not None]
    if not failed:
        out.message("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in deleted) + ") was successful.\n")
    else:
        out.message("\nError: Deletion of some consumer groups failed:\n")
        for group, error in failed:
            out.message(f"* Group '{group}' could not be deleted due to: {error}\n")
        if deleted:
            out.message("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted) + "\n")
    out.document({"deleted": deleted, "failed": [{"group": g, "error": e} for g, e in failed]})
    return 1 if failed else 0


def run_delete_offsets(cluster: Cluster, group: str, topics: tuple[TopicArg, ...], out: Output) -> int:
    """Delete the group's offsets of the given topics / partitions; exit status 1 unless every
    partition succeeded."""
    results: dict[TP, str | None] = {}
    partitions: set[TP] = set()
    described = cluster.topic_partitions(t.topic for t in topics if t.partitions is None)
    for arg in topics:
        if arg.partitions is not None:
            partitions.update(TP(arg.topic, p) for p in arg.partitions)
        elif isinstance(described[arg.topic], str):
            results[TP(arg.topic, -1)] = str(described[arg.topic])  # topic-level failure: PARTITION '-'
        else:
            partitions.update(TP(arg.topic, p) for p in described[arg.topic])
    if partitions:
        outcome = cluster.delete_offsets(group, partitions)
        top_name, top_text = outcome.error, outcome.message
        results.update(outcome.partitions)
    else:
        top_name, top_text = "UNKNOWN_TOPIC_OR_PARTITION", None
    if top_name is None:
        out.message(f"Request succeeded for deleting offsets from group {group}.\n")
    elif top_name in _OWN_MESSAGE:
        out.message(f"\nError: {top_text}\n")
    elif top_name in _PARTITION_LEVEL:
        out.message("\nError: Encountered some partition-level error, see the follow-up details.\n")
    else:
        out.message(f"\nError: Encountered some unknown error: {top_name}\n")
    out.text(format_delete_offsets(results))
    out.document({"group": group, "error": top_name, "message": top_text,
                  "partitions": [_partition_json(tp, err) for tp, err in sorted(results.items())]})
    return 0 if top_name is None and all(err is None for err in results.values()) else 1


def format_delete_offsets(results: dict[TP, str | None]) -> str:
    """Kafka's TOPIC / PARTITION / STATUS table (STATUS padded to 15, as Kafka's format does)."""
    columns = [Column("TOPIC", grows=True), Column("PARTITION", 10), Column("STATUS")]
    rows = [[tp.topic, tp.partition if tp.partition >= 0 else MISSING,
             "Successful" if err is None else f"Error: {err}"] for tp, err in sorted(results.items())]
    return "\n" + "\n".join(render(columns, rows)) + "\n"


def _partition_json(tp: TP, error: str | None) -> dict[str, Any]:
    """One result row for `--output json` (partition null for a topic-level failure)."""
    return {"topic": tp.topic, "partition": tp.partition if tp.partition >= 0 else None,
            "status": "Successful" if error is None else "Error", "error": error}
