"""ListGroups (§1.10) in slices: a broker with a million groups answers it without holding every
other client for seconds. The shards' groups are read LIST_GROUPS_SLICE at a time (shard.list_groups
of a slice of its group ids) and written to wire form as they are read (protocol/listed_groups.py);
between slices the handler gives the event loop a turn. An answer of at most a slice of groups is
made at once, as before. A group created or deleted while a long answer is made may be in it or
not; none is listed twice.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generator, Iterable

from ..coordinator.shard import GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER, GROUP_TYPE_SHARE
from ..protocol.errors import Error
from ..protocol.listed_groups import ListedGroups
from ..security.authorization import Op, Res, access
from .coordinator_runtime import ShardRuntime, ShardState

__all__ = ["LIST_GROUPS_SLICE", "list_groups"]

Body = dict[str, Any]

# Groups read and written per turn of the event loop: ~5 ms of CPU (interpreted, one core).
LIST_GROUPS_SLICE = 5000

# In the order an answer lists them (all classic groups first, then consumer, then share groups).
GROUP_TYPES = (GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER, GROUP_TYPE_SHARE)


def list_groups(broker: Any, runtimes: list[ShardRuntime], ctx: Any, req: Any,
                slice_size: int = LIST_GROUPS_SLICE) -> "Body | Any":
    """The answer, or a coroutine of it when there are more groups than a slice. Any loading
    shard makes the whole answer 14; the filters are case-insensitive."""
    if any(r.state is ShardState.LOADING for r in runtimes):
        return {"error_code": Error.COORDINATOR_LOAD_IN_PROGRESS, "groups": ()}
    states = {s.lower() for s in getattr(req, "states_filter", ())}
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    acc = access(broker, ctx)
    # DESCRIBE on the cluster lists every group; else only those the principal may DESCRIBE,
    # the others left out silently (§4)
    visible = None if acc is None or acc.cluster(Op.DESCRIBE) else \
        (lambda group_id: acc.allows(Op.DESCRIBE, Res.GROUP, group_id))  # type: ignore[union-attr]
    steps = _listing(runtimes, ctx.version, [t for t in GROUP_TYPES if not types or t in types],
                     states, visible, slice_size)
    try:
        next(steps)
    except StopIteration as done:
        return done.value
    return _finish(steps)


def _listing(runtimes: list[ShardRuntime], version: int, group_types: Iterable[str], states: set[str],
             visible: Callable[[str], bool] | None, slice_size: int) -> Generator[None, None, Body]:
    """Make the answer, pausing (yielding) after each slice_size group ids read while more are to
    be read. A shard's ids are taken when its turn comes; a shard that stops being active during a
    pause is not read further."""
    listed = ListedGroups(version)
    since_pause = 0
    for group_type in group_types:
        for runtime in runtimes:
            if runtime.state is not ShardState.ACTIVE:
                continue
            ids = runtime.shard.group_ids_of_type(group_type)
            start = 0
            while start < len(ids):
                if since_pause >= slice_size:
                    yield
                    since_pause = 0
                    if runtime.state is not ShardState.ACTIVE:
                        break
                end = start + slice_size - since_pause
                rows = runtime.shard.list_groups(group_type, ids[start:end])
                since_pause += min(end, len(ids)) - start
                start = end
                if states:
                    rows = [row for row in rows if row[2].lower() in states]
                if visible is not None:
                    rows = [row for row in rows if visible(row[0])]
                listed.add(group_type, rows)
    return {"error_code": Error.NONE, "groups": listed.array()}


async def _finish(steps: Generator[None, None, Body]) -> Body:
    """Run the rest of the listing, one slice per turn of the event loop."""
    while True:
        await asyncio.sleep(0)
        try:
            next(steps)
        except StopIteration as done:
            return done.value
