"""The line protocol between a chaos client subprocess (group_member.py, txn_loop.py) and the
harness thread that runs it (cluster_workers.ClientProcessWorker): one JSON object per stdout line.

* ``{"op": id, "kind": ..., "group": ..., "partition": ..., "value": ..., "topic": ..., ...}``: an
  operation begins (`id` unique within the process); the harness records it in the history.
* ``{"done": id, "outcome": ok|failed|unknown|aborted, "error": name}``: it is decided.
* ``{"note": text}``: something for the run's notes.

The harness asks a client to stop with a line on its stdin (or by closing it)."""

from __future__ import annotations

import json
import select
import sys
from typing import Any


def emit(event: dict[str, Any]) -> None:
    """One event line on stdout, flushed."""
    print(json.dumps(event), flush=True)


def invoke(op_id: str, kind: str, **fields: Any) -> None:
    """An operation begins: its kind and Op fields (group, partition, value, topic, count, metadata)."""
    emit({"op": op_id, "kind": kind, **fields})


def done(op_id: str, outcome: str, error: str | None = None) -> None:
    """An operation is decided."""
    emit({"done": op_id, "outcome": outcome, "error": error})


def note(text: str) -> None:
    """A line for the run's notes."""
    emit({"note": text})


def stop_asked() -> bool:
    """Whether a line (or the end) arrived on stdin: the harness asks the client to stop."""
    return bool(select.select([sys.stdin], [], [], 0)[0])
