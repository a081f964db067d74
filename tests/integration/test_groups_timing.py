"""Time from subscribe() to the first record for a new group, with and without
`group.initial.rebalance.delay.ms` (reference §1.6 Persistence; issue 3 benchmark item). These are
functional bounds, not benchmarks."""

from __future__ import annotations

import time

from clients import create_topic, produce
from group_helpers import GROUP_BROKER, Member, poll_until, unique


def _subscribe_to_first_record(bootstrap: str) -> float:
    topic, group = unique("first"), unique("gfirst")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [{"value": b"hello"}])
    started = time.monotonic()
    member = Member(bootstrap, group, [topic], "first")
    try:
        poll_until([member], lambda: member.messages, timeout=20, message="the first record")
        elapsed = time.monotonic() - started
        assert member.messages[0].value() == b"hello"
        return elapsed
    finally:
        member.close()


def test_new_group_first_record_quickly_without_initial_delay(broker_factory):
    """§1.6: with group.initial.rebalance.delay.ms=0 the first join of a new group completes at
    once; subscribe() to the first record of a fresh group takes well under 3 s."""
    broker = broker_factory(GROUP_BROKER)
    elapsed = _subscribe_to_first_record(broker.bootstrap)
    assert elapsed < 3.0, f"{elapsed:.2f}s from subscribe() to the first record"


def test_initial_rebalance_delay_holds_the_first_join(broker_factory):
    """§1.6: the first rebalance of an Empty group is delayed by group.initial.rebalance.delay.ms
    (a lone member's join completes only after the delay)."""
    broker = broker_factory({**GROUP_BROKER, "group.initial.rebalance.delay.ms": "2000"})
    elapsed = _subscribe_to_first_record(broker.bootstrap)
    assert 1.9 <= elapsed < 10.0, f"{elapsed:.2f}s from subscribe() to the first record"
