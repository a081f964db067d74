"""How persisted state batches combine: an update's runs override the offsets they cover, and
nothing below the share-partition start offset is kept (Kafka's PersisterStateBatchCombiner rule,
reference share-groups.md §5 "Replay")."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..records.share_state_records import StateBatch


def combine(current: Iterable[StateBatch], changes: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """`current` with `changes` laid over it in order, cut at `start_offset`, neighbouring runs of
    the same state and count joined: sorted, never overlapping."""
    runs = sorted(current, key=lambda b: b.first_offset)
    for change in changes:
        kept: list[StateBatch] = []
        for run in runs:
            if run.last_offset < change.first_offset or run.first_offset > change.last_offset:
                kept.append(run)
                continue
            if run.first_offset < change.first_offset:
                kept.append(replace(run, last_offset=change.first_offset - 1))
            if run.last_offset > change.last_offset:
                kept.append(replace(run, first_offset=change.last_offset + 1))
        kept.append(change)
        runs = sorted(kept, key=lambda b: b.first_offset)
    joined: list[StateBatch] = []
    for run in runs:
        if run.last_offset < start_offset:
            continue
        if run.first_offset < start_offset:
            run = replace(run, first_offset=start_offset)
        last = joined[-1] if joined else None
        if (last is not None and last.last_offset + 1 == run.first_offset
                and (last.delivery_state, last.delivery_count) == (run.delivery_state, run.delivery_count)):
            joined[-1] = replace(last, last_offset=run.last_offset)
        else:
            joined.append(run)
    return tuple(joined)
