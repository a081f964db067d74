"""The line protocol between a chaos client subprocess (group_member.py, txn_loop.py) and the
harness thread that runs it (cluster_workers.ClientProcessWorker): one JSON object per stdout line.

* ``{"op": id, "kind": ..., "group": ..., "partition": ..., "value": ..., "topic": ..., ...}``: an
  operation begins (`id` unique within the process); the harness records it in the history.
* ``{"done": id, "outcome": ok|failed|unknown|aborted, "error": name, "offset": n}``: it is decided.
* ``{"note": text}``: something for the run's notes.

The harness asks a client to stop with a line on its stdin (or by closing it)."""

from __future__ import annotations

import json
import select
import sys
import threading
from typing import Any

from history import Op, commit_metadata

_PRINT = threading.Lock()  # a producer's delivery reports and its own thread both emit


def emit(event: dict[str, Any]) -> None:
    """One event line on stdout, flushed."""
    with _PRINT:
        print(json.dumps(event), flush=True)


def invoke(op_id: str, kind: str, **fields: Any) -> None:
    """An operation begins: its kind and Op fields (group, partition, value, topic, count, metadata)."""
    emit({"op": op_id, "kind": kind, **fields})


def done(op_id: str, outcome: str, error: str | None = None, offset: int | None = None) -> None:
    """An operation is decided (a produce: at `offset`)."""
    emit({"done": op_id, "outcome": outcome, "error": error, "offset": offset})


def note(text: str) -> None:
    """A line for the run's notes."""
    emit({"note": text})


def stop_asked() -> bool:
    """Whether a line (or the end) arrived on stdin: the harness asks the client to stop."""
    return bool(select.select([sys.stdin], [], [], 0)[0])


class _Notes(list):  # type: ignore[type-arg]
    """A list whose appended lines go out as note events."""

    def append(self, text: str) -> None:  # type: ignore[override]
        note(text)


class EventHistory:
    """What harness.py's client threads call on their History (invoke, complete, notes), sent as
    event lines instead, so one of them can run in a process of its own (thread_client.py)."""

    def __init__(self, metadata_bytes: int) -> None:
        self.metadata_bytes = metadata_bytes
        self.notes = _Notes()
        self._lock = threading.Lock()
        self._next = 0

    def invoke(self, round_no: int, kind: str, client: str, group: str | None, partition: int,
               value: str, topic: str = "") -> Op:
        """An operation begins: an `op` event (a commit's with the metadata its sender puts on it)."""
        with self._lock:
            self._next += 1
            op = Op(self._next, round_no, kind, client, group, partition, value, 0.0, topic=topic)
        fields: dict[str, Any] = {"group": group, "partition": partition, "value": value, "topic": topic}
        if kind == "commit":
            fields["metadata"] = commit_metadata(op, self.metadata_bytes)
        invoke(str(op.op), kind, **fields)
        return op

    def complete(self, op: Op, outcome: str, *, offset: int | None = None, error: str | None = None) -> None:
        """An operation is decided: a `done` event."""
        done(str(op.op), outcome, error, offset)
