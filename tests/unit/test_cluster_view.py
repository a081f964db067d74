"""What cluster mode's view tells clients while partitions change hands (issue #25): the lease
is renewed at least three times per TTL, Metadata's controller is always a listed broker, and
FindCoordinator waits a moment for a partition without a leader (broker/cluster_view.py
`once_led`, cluster/member.py's view events)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from offsetd.broker.cluster_view import HANDOFF_WAIT_S, once_led
from offsetd.cluster.member import ClusterMember, Leader
from offsetd.server.cluster_runtime import PostgresView
from offsetd.storage.postgres_store import BrokerRow

KEY = (uuid.UUID(int=1), 0)


def member(ttl_ms: int = 3000, heartbeat_ms: int = 2000) -> ClusterMember:
    return ClusterMember(store=None, node_id=1, host="127.0.0.1", port=9092, ttl_ms=ttl_ms,  # type: ignore[arg-type]
                         heartbeat_ms=heartbeat_ms, callbacks=None)  # type: ignore[arg-type]


def test_the_lease_is_renewed_at_least_three_times_per_ttl() -> None:
    assert member(3000, 2000).heartbeat_ms == 1000  # the README's 3 s lease with the default heartbeat
    assert member(3000, 2000).lease.margin_ms == 1000
    assert member(9000, 2000).heartbeat_ms == 2000  # the defaults are left as they are


def test_the_controller_is_a_listed_broker_or_none() -> None:
    view = PostgresView(member())
    assert view.controller_id == -1 and view.brokers() == []  # before the first look at PostgreSQL
    view.member.brokers = [BrokerRow(2, "h2", 9093), BrokerRow(3, "h3", 9094)]
    assert view.controller_id == 2 and 2 in [node for node, _, _ in view.brokers()]


class Topic:
    topic_id = KEY[0]


def test_find_coordinator_answers_as_soon_as_the_partition_has_a_leader() -> None:
    async def run() -> tuple[Any, float]:
        view = PostgresView(member())
        view.member.brokers = [BrokerRow(2, "h2", 9093)]
        loop = asyncio.get_running_loop()

        def claimed() -> None:  # a peer's claim, seen 50 ms later
            view.member.leaders[KEY] = Leader(2, 7)
            view.member._view_updated()
        loop.call_later(0.05, claimed)
        started = loop.time()
        answer = once_led(view, lambda: view.leader(Topic, 0), lambda led: led[0] == -1)
        assert asyncio.isfuture(answer)
        return await answer, loop.time() - started
    led, waited = asyncio.run(run())
    assert led == (2, 7) and waited < HANDOFF_WAIT_S / 2


def test_find_coordinator_gives_up_waiting_after_a_second() -> None:
    async def run() -> tuple[Any, float]:
        view = PostgresView(member())
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await once_led(view, lambda: view.leader(Topic, 0), lambda led: led[0] == -1)  # type: ignore[misc]
        return answer, loop.time() - started
    led, waited = asyncio.run(run())
    assert led == (-1, -1) and HANDOFF_WAIT_S - 0.05 <= waited < HANDOFF_WAIT_S + 0.5


def test_a_view_that_cannot_change_answers_at_once() -> None:
    class Fixed:  # the embedded engine's view has no `changed`
        pass
    assert once_led(Fixed(), lambda: (-1, -1), lambda led: led[0] == -1) == (-1, -1)  # type: ignore[arg-type]


def test_a_plan_over_more_partitions_than_a_slice_decides_as_one_plan(monkeypatch) -> None:
    """ClusterMember plans 10,000 partitions per turn of the event loop: the slices together
    decide what one plan over every partition decides."""
    import offsetd.cluster.member as member_module
    from offsetd.cluster.ownership import PartitionRow, plan

    monkeypatch.setattr(member_module, "PLAN_SLICE", 7)
    m = member()
    keys = [(uuid.UUID(int=t), p) for t in range(3) for p in range(20)]
    m._rows = {k: PartitionRow(k, [None, 1, 2, 3][i % 4], 1) for i, k in enumerate(keys)}
    m.owned = {k: 1 for k, row in m._rows.items() if row.owner == 1}
    m.owned[(uuid.UUID(int=9), 0)] = 1  # a partition of a deleted topic
    rows = list(m._rows.values())
    sliced = asyncio.run(m._plan((1, 2), True, rows, True))
    whole = plan(1, (1, 2), rows, m.owned, True)
    assert (sorted(sliced.claim), sorted(sliced.release), sorted(sliced.lost), sorted(sliced.disown)) == \
        (sorted(whole.claim), sorted(whole.release), sorted(whole.lost), sorted(whole.disown))
    assert (uuid.UUID(int=9), 0) in sliced.lost and sliced.claim
