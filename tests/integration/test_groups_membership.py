"""Classic consumer groups with confluent-kafka (librdkafka): assignment across members, and the
rebalances on join, on leave and on session timeout (reference §1.6-§1.9, §1.11)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from clients import create_topic
from group_helpers import GROUP_BROKER, Member, SubprocessMember, balanced, poll_until, unique

STRATEGIES = ["range", "cooperative-sticky"]


def _members(bootstrap: str, group: str, topic: str, strategy: str, n: int, **conf) -> list[Member]:
    return [Member(bootstrap, group, [topic], f"m{i}", **{"partition.assignment.strategy": strategy}, **conf)
            for i in range(n)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_three_members_split_six_partitions_then_one_leaves(broker_factory, strategy):
    """§1.6/§1.7: three members joining one group each get 2 of 6 partitions, disjoint, covering
    the topic (a rebalance on every join). §1.9: when one member close()s (LeaveGroup) the other
    two rebalance and cover all 6 partitions, 3 each, well before any session timeout."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("six"), unique("g3")
    create_topic(broker.bootstrap, topic, partitions=6)
    # session timeout far above the test's bounds: only the LeaveGroup can explain a quick rebalance
    members = _members(broker.bootstrap, group, topic, strategy, 3, **{"session.timeout.ms": 30000})
    try:
        poll_until(members, lambda: balanced(members, 6, per_member=2), timeout=20,
                   message="3 members with 2 partitions each")
        for m in members:
            assert not [e for e in m.errors if e.fatal()], m.errors
        # §1.6 protocol selection: the broker chose the members' common protocol
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
        assert desc.partition_assignor == strategy
        assert len(desc.members) == 3
        # the first member saw every rebalance: eager revokes everything it holds, cooperative
        # (incremental) revokes only what moves to the newcomers
        held: set = set()
        for kind, parts in members[0].events:
            if kind == "assign":
                held |= parts
            else:
                if strategy == "cooperative-sticky":
                    assert parts < held, (kind, parts, held)
                else:
                    assert parts == held, (kind, parts, held)
                held -= parts
        assert {p for _, p in held} == members[0].partitions()

        leaving, staying = members[0], members[1:]
        before = {m.name: m.partitions() for m in staying}
        started = time.monotonic()
        leaving.close()
        poll_until(staying, lambda: balanced(staying, 6, per_member=3), timeout=15,
                   message="2 remaining members with 3 partitions each")
        assert time.monotonic() - started < 15  # far less than session.timeout.ms=30000
        if strategy == "cooperative-sticky":
            # sticky: each remaining member kept what it had and only gained partitions
            for m in staying:
                assert before[m.name] <= m.partitions(), (m.name, before[m.name], m.partitions())
    finally:
        for m in members:
            m.close()


def test_rebalance_on_session_timeout_of_killed_member(broker_factory):
    """§1.8 / issue 3: a member that is kill -9'd sends no LeaveGroup; the coordinator removes it
    only when its session expires (not when its connection drops) and the group rebalances, so
    the remaining members take over its partitions after about session.timeout.ms."""
    broker = broker_factory(GROUP_BROKER)  # group.min.session.timeout.ms=1000
    topic, group = unique("sess"), unique("gsess")
    create_topic(broker.bootstrap, topic, partitions=6)
    victim = SubprocessMember(broker.bootstrap, group, topic, "victim",
                              **{"partition.assignment.strategy": "range", "session.timeout.ms": 3000})
    members = _members(broker.bootstrap, group, topic, "range", 2, **{"session.timeout.ms": 30000})
    everyone = [*members, victim]
    try:
        poll_until(everyone, lambda: balanced(everyone, 6, per_member=2), timeout=20,
                   message="3 members (one in a subprocess) with 2 partitions each")
        lost = victim.partitions()
        victim.kill9()
        killed_at = time.monotonic()
        poll_until(members, lambda: balanced(members, 6, per_member=3), timeout=15,
                   message="survivors covering all 6 partitions after the victim's session expired")
        elapsed = time.monotonic() - killed_at
        # the victim's last heartbeat was at most heartbeat.interval.ms (300) before the kill
        assert elapsed >= 2.0, f"rebalanced {elapsed:.2f}s after the kill: before session.timeout.ms=3000"
        assert lost <= set().union(*(m.partitions() for m in members))
    finally:
        victim.cleanup()
        for m in members:
            m.close()


def test_member_below_min_session_timeout_is_rejected(broker_factory):
    """§1.6: a JoinGroup with session.timeout.ms below group.min.session.timeout.ms gets
    INVALID_SESSION_TIMEOUT(26); librdkafka reports it and never gets an assignment."""
    broker = broker_factory({**GROUP_BROKER, "group.min.session.timeout.ms": "5000"})
    topic, group = unique("minsess"), unique("gmin")
    create_topic(broker.bootstrap, topic, partitions=1)
    member = Member(broker.bootstrap, group, [topic], "short", **{"session.timeout.ms": 2000,
                                                                 "heartbeat.interval.ms": 500})
    try:
        poll_until([member], lambda: any(e.code() == KafkaError.INVALID_SESSION_TIMEOUT for e in member.errors),
                   timeout=15, message="an INVALID_SESSION_TIMEOUT error")
        assert member.assignment() == set()
    finally:
        member.close()


def test_group_max_size_rejects_an_extra_member(broker_factory):
    """§1.6: with group.max.size=2 a third member's JoinGroup gets GROUP_MAX_SIZE_REACHED(81);
    librdkafka reports it as a consumer error and the third member stays unassigned while the
    two members in the group share all partitions."""
    broker = broker_factory({**GROUP_BROKER, "group.max.size": "2"})
    topic, group = unique("max"), unique("gmax")
    create_topic(broker.bootstrap, topic, partitions=4)
    first = _members(broker.bootstrap, group, topic, "range", 2)
    everyone = list(first)
    try:
        poll_until(first, lambda: balanced(first, 4, per_member=2), timeout=20, message="two members, 2 each")
        extra = Member(broker.bootstrap, group, [topic], "extra", **{"partition.assignment.strategy": "range"})
        everyone.append(extra)
        poll_until(everyone, lambda: any(e.code() == KafkaError.GROUP_MAX_SIZE_REACHED for e in extra.errors),
                   timeout=20, message="GROUP_MAX_SIZE_REACHED for the third member")
        assert extra.assignment() == set()
        assert balanced(first, 4, per_member=2)
        assert not [e for m in first for e in m.errors], [str(e) for m in first for e in m.errors]
    finally:
        for m in everyone:
            m.close()
