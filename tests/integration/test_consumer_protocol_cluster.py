"""KIP-848 consumer groups in cluster mode: three brokers over PostgreSQL, confluent-kafka members
with `group.protocol=consumer`, and a kill -9 of the group's coordinator. The new owner loads the
group's records (types 3-8, 16) with its offsets, the members carry on with their partitions and
epochs, no record is lost and no acknowledged commit goes back."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from integration.clients import create_topic
from integration.cluster_helpers import FAST, coordinator_of, wait_settled
from integration.consumer_protocol_helpers import BROKER, Member, poll_until, read_by, send, values


def test_members_carry_on_after_a_kill9_of_their_coordinator(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, overrides={**FAST, **BROKER})
    wait_settled(cluster, 3)
    topic, group = "cp-failover", "cp-failover-group"
    create_topic(cluster.bootstrap, topic, 4)
    members = [Member(cluster.bootstrap, group, [topic], **{"client.id": f"m{i}"}) for i in range(2)]
    poll_until(members, lambda: all(len(m.assigned()) == 2 for m in members), timeout=45,
               message="2 partitions each")
    before = values("before", 40)
    send(cluster.bootstrap, topic, before, 4)
    poll_until(members, lambda: set(before) <= set(read_by(members)), timeout=30, message="records before the kill")
    for m in members:
        m.consumer.commit(asynchronous=False)
    held = [m.assigned() for m in members]
    victim = coordinator_of(cluster.bootstrap, group)
    killed_at = time.monotonic()
    cluster.kill9(victim)
    after = values("after", 40)
    survivor = next(n for n in cluster.live_node_ids() if n != victim)
    send(cluster.broker(survivor).bootstrap, topic, after, 4)
    poll_until(members, lambda: set(after) <= set(read_by(members)), timeout=60, message="records after the kill")
    assert time.monotonic() - killed_at < 60
    assert [m.assigned() for m in members] == held  # the group, its epochs and partitions, carried on
    for m in members:
        m.consumer.commit(asynchronous=False)
    committed = members[0].consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=15)
    assert sum(tp.offset for tp in committed) == len(before) + len(after)
    for m in members:
        m.consumer.close()
