"""Share groups (KIP-932) in cluster mode: three brokers on one PostgreSQL, a share group reading a
topic whose partitions are led by different brokers, the share state kept by the share
coordinators owning `__share_group_state`'s partitions (often other brokers than the leaders), and
a kill -9 of a partition's leader mid-consumption, checked against the history of deliveries and
confirmed acknowledgements: no accepted record is delivered again, none is lost, and records held
unacknowledged when their leader died come back. And the internal state APIs (83-87) answering
NOT_COORDINATOR on a broker that does not own the state's partition, and the admins' share-group
offsets reaching the state's owner through a group coordinator on the other broker."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid

from broker_process import wait_for
from confluent_kafka import AcknowledgeType, Producer
from integration.clients import create_topic
from integration.cluster_helpers import FAST, coordinator_of, leader_of, pg_rows, wait_settled
from integration.share_helpers import History, share_consumer
from kio.index import load_request_schema
from raw_client import RawClient, build

from offsetd.cluster.ownership import rendezvous_owner
from offsetd.records.offsets import partition_for
from offsetd.server.share_state import share_state_key

FIND_COORDINATOR, METADATA, DELETE_GROUPS, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 10, 3, 42, 90, 91, 92
INITIALIZE, READ, WRITE = 83, 84, 85
NOT_COORDINATOR, INVALID_REQUEST, FENCED_LEADER_EPOCH = 16, 42, 74
COORDINATOR_MOVING = {14, 15, 16}
_METRICS = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")
SHARE = {**FAST, "share.coordinator.state.topic.num.partitions": "6",
         "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "3000",
         "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
         # a member whose leave went to a killed coordinator keeps its partitions this long
         "group.share.session.timeout.ms": "6000", "group.share.min.session.timeout.ms": "6000"}
PARTITIONS, PER_PARTITION = 6, 60
EXPLICIT = {"share.acknowledgement.mode": "explicit"}


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    """The topic's id, from Metadata v12."""
    with RawClient(bootstrap) as client:
        answer = client.call(METADATA, 12, build(load_request_schema(METADATA, 12), {
            "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
    return answer.topics[0].topic_id


def _share_coordinator(bootstrap: str, key: str) -> int | None:
    """FindCoordinator v6 key type 2 (share): the owner of the key's `__share_group_state`
    partition, None while the topic or its owner is not there yet."""
    with RawClient(bootstrap) as client:
        answer = client.call(FIND_COORDINATOR, 6, build(load_request_schema(FIND_COORDINATOR, 6),
                                                         {"key_type": 2, "coordinator_keys": [key]}))
    entry = answer.coordinators[0]
    return entry.node_id if entry.error_code == 0 else None


def _state_call(bootstrap: str, api_key: int, version: int, group: str, tid: uuid.UUID, partition: dict) -> object:
    """One partition's result of a share state API (83-87) sent to `bootstrap`."""
    with RawClient(bootstrap) as client:
        answer = client.call(api_key, version, build(load_request_schema(api_key, version), {
            "group_id": group, "topics": [{"topic_id": tid, "partitions": [partition]}]}))
    return answer.results[0].partitions[0]


def test_the_share_state_apis_answer_not_coordinator_off_their_partition(pg_dsn, cluster_factory) -> None:
    """Two brokers: 83-85 at the state's owner and at the other broker; then the admins' APIs."""
    cluster = cluster_factory(pg_dsn, size=2, overrides={**SHARE, "metrics.listener": "http://127.0.0.1:0"})
    wait_settled(cluster, 2)
    create_topic(cluster.bootstrap, "states", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        producer.produce("states", b"x", partition=0)
    assert producer.flush(15) == 0
    group, tid = "state-api", _topic_id(cluster.broker(1).bootstrap, "states")
    key = share_state_key((group, tid, 0))
    # the first lookup creates __share_group_state; its partitions are claimed soon after, maybe
    # first by a broker that then hands one over to its preferred owner: both brokers must name that one
    wait_for(lambda: _share_coordinator(cluster.broker(1).bootstrap, key), timeout=30,
             message="a share coordinator for the key")
    state_topic = pg_rows(cluster.dsn, "SELECT topic_id FROM offsetd_topic WHERE name = '__share_group_state'")[0][0]
    owner = rendezvous_owner((state_topic, partition_for(key, 6)), [1, 2])
    wait_for(lambda: all(_share_coordinator(cluster.broker(n).bootstrap, key) == owner for n in (1, 2)), timeout=20,
             message=f"both brokers naming broker {owner}, the preferred owner")
    other = next(n for n in cluster.node_ids if n != owner)
    at_owner, elsewhere = cluster.broker(owner).bootstrap, cluster.broker(other).bootstrap

    read = {"partition": 0, "leader_epoch": 3}
    assert _state_call(elsewhere, READ, 0, group, tid, read).error_code == NOT_COORDINATOR
    assert _state_call(elsewhere, INITIALIZE, 0, group, tid,
                       {"partition": 0, "state_epoch": 1, "start_offset": 7}).error_code == NOT_COORDINATOR
    assert _state_call(at_owner, READ, 0, group, tid, read).error_code == INVALID_REQUEST  # never initialized
    assert _state_call(at_owner, INITIALIZE, 0, group, tid,
                       {"partition": 0, "state_epoch": 1, "start_offset": 7}).error_code == 0
    state = _state_call(at_owner, READ, 0, group, tid, read)
    assert (state.error_code, state.state_epoch, state.start_offset) == (0, 1, 7)
    write = {"partition": 0, "state_epoch": 1, "start_offset": 9, "delivery_complete_count": 0,
             "state_batches": [{"first_offset": 9, "last_offset": 9, "delivery_state": 2, "delivery_count": 1}]}
    assert _state_call(elsewhere, WRITE, 1, group, tid, {**write, "leader_epoch": 3}).error_code == NOT_COORDINATOR
    assert _state_call(at_owner, WRITE, 1, group, tid, {**write, "leader_epoch": 2}).error_code == FENCED_LEADER_EPOCH
    assert _state_call(at_owner, WRITE, 1, group, tid, {**write, "leader_epoch": 3}).error_code == 0
    assert _state_call(at_owner, READ, 0, group, tid, read).start_offset == 9

    # The admins' offsets at a group coordinator that is not the state's owner: Alter initializes,
    # Describe summarizes and Delete tombstones the state over the peer connection.
    offsets_topic = pg_rows(cluster.dsn, "SELECT topic_id FROM offsetd_topic WHERE name = '__consumer_offsets'")[0][0]
    admin_group = next(g for g in (f"admin-{i}" for i in range(100))
                       if rendezvous_owner((offsets_topic, partition_for(g, 12)), [1, 2])
                       != rendezvous_owner((state_topic, partition_for(share_state_key((g, tid, 0)), 6)), [1, 2]))
    altered = _admin_call(cluster, admin_group, ALTER_OFFSETS, 0, {"group_id": admin_group, "topics": [
        {"topic_name": "states", "partitions": [{"partition_index": 0, "start_offset": 4}]}]})
    assert altered.error_code == 0 and altered.responses[0].partitions[0].error_code == 0
    assert _starts(cluster, admin_group) == {0: 4}
    # the coordinator's lag view shows the share-partition whose state the other broker holds
    coordinator = coordinator_of(cluster.bootstrap, admin_group)
    url = _METRICS.search(cluster.broker(coordinator).log()).group(1)  # type: ignore[union-attr]
    looked = wait_for(lambda: _share_lag(url, admin_group), timeout=15, message="the coordinator's look")
    assert looked == {("states", 0): (4, 10, 6)}
    deleted = _admin_call(cluster, admin_group, DELETE_OFFSETS, 0, {"group_id": admin_group,
                                                                    "topics": [{"topic_name": "states"}]})
    assert deleted.error_code == 0 and deleted.responses[0].error_code == 0
    assert _starts(cluster, admin_group) == {0: -1}
    # DeleteGroups deletes a share group's state with it, on the state's owner
    _admin_call(cluster, admin_group, ALTER_OFFSETS, 0, {"group_id": admin_group, "topics": [
        {"topic_name": "states", "partitions": [{"partition_index": 0, "start_offset": 6}]}]})
    assert _starts(cluster, admin_group) == {0: 6}
    gone = _admin_call(cluster, admin_group, DELETE_GROUPS, 2, {"groups_names": [admin_group]})
    assert gone.results[0].error_code == 0
    assert _starts(cluster, admin_group) == {0: -1}


def _share_lag(url: str, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """The broker's /v1/lag of a share group: (topic, partition) -> (start offset, log end, lag)."""
    with urllib.request.urlopen(f"{url}/v1/lag?group={group}", timeout=15) as response:
        groups = json.loads(response.read())["groups"]
    return {(p["topic"], p["partition"]): (p["committed"], p["log_end"], p["lag"])
            for g in groups for p in g["partitions"]}


def _starts(cluster, group: str) -> dict[int, int]:
    """DescribeShareGroupOffsets v1 of topic `states` at the group coordinator: partition -> start offset."""
    answer = _admin_call(cluster, group, DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": group, "topics": [
        {"topic_name": "states", "partitions": [0]}]}]})
    return {p.partition_index: p.start_offset for t in answer.groups[0].topics for p in t.partitions}


def _admin_call(cluster, group: str, api_key: int, version: int, body: dict) -> object:
    """An admin request to the group's coordinator, asked again while it moves."""
    def ask() -> object | None:
        with RawClient(cluster.broker(coordinator_of(cluster.bootstrap, group)).bootstrap) as client:
            answer = client.call(api_key, version, build(load_request_schema(api_key, version), body))
        codes = ({getattr(answer, "error_code", 0)} | {g.error_code for g in getattr(answer, "groups", ())}
                 | {r.error_code for r in getattr(answer, "results", ())})
        return None if codes & COORDINATOR_MOVING else answer
    return wait_for(ask, timeout=30, message=f"api {api_key} answered by the group coordinator")


def _lags(cluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """DescribeShareGroupOffsets v1 at the group coordinator: partition -> (start offset, lag)."""
    answer = _admin_call(cluster, group, DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": group, "topics": [
        {"topic_name": topic, "partitions": list(range(PARTITIONS))}]}]})
    return {p.partition_index: (p.start_offset, p.lag) for t in answer.groups[0].topics for p in t.partitions}


def _produce_spread(bootstrap: str, topic: str, total: int) -> None:
    """`total` records, one per partition per log batch (a fetch acquires whole batches: a few
    records at a time, so every member keeps some to read)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(total):
        producer.produce(topic, f"r{i}".encode(), partition=i % PARTITIONS)
        if i % PARTITIONS == PARTITIONS - 1:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0


def _read(history: History, consumers: list, errors: list, seconds: float, until=lambda: False) -> None:
    """Poll, ACCEPT and commit with every consumer for about `seconds`, or until `until()`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not until():
        for consumer in consumers:
            batch = []
            for msg in consumer.poll(0.2):
                if msg.error() is not None:  # a leader going away, surfaced to the application
                    errors.append(msg.error())
                    continue
                history.delivered(msg)
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                batch.append(msg)
            if batch:
                history.commit(consumer, batch)


def test_a_share_group_across_brokers_survives_a_kill9_of_a_partition_leader(pg_dsn, cluster_factory) -> None:
    """Three brokers, six partitions, two share consumers; kill -9 the leader of records one holds."""
    started = time.monotonic()
    cluster = cluster_factory(pg_dsn, overrides=SHARE)
    wait_settled(cluster, 3)
    topic, group = "sq", "sq-group"
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    leaders = wait_for(lambda: (ls := {p: leader_of(cluster.bootstrap, topic, p) for p in range(PARTITIONS)})
                       and all(n > 0 for n in ls.values()) and ls, timeout=20, message="every partition led")
    assert len(set(leaders.values())) >= 2, leaders  # 6 partitions on 3 brokers: 3**-5 to land on one
    # Start offsets 0 through the group coordinator (AlterShareGroupOffsets -> the share coordinators),
    # so no record produced before a partition's first fetch is skipped by the default `latest` reset.
    altered = _admin_call(cluster, group, ALTER_OFFSETS, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": p, "start_offset": 0} for p in range(PARTITIONS)]}]})
    assert altered.error_code == 0 and all(p.error_code == 0 for t in altered.responses for p in t.partitions)
    total = PARTITIONS * PER_PARTITION
    _produce_spread(cluster.bootstrap, topic, total)
    tid = _topic_id(cluster.broker(1).bootstrap, topic)
    state_owners = {p: wait_for(lambda p=p: _share_coordinator(cluster.broker(1).bootstrap, share_state_key(
        (group, tid, p))), timeout=20, message="the share coordinators") for p in range(PARTITIONS)}

    history, errors = History(), []
    holder = share_consumer(cluster.bootstrap, group, topic, **{**EXPLICIT, "max.poll.records": "20",
                                                                "client.id": "holder"})
    reader = share_consumer(cluster.bootstrap, group, topic, **{**EXPLICIT, "max.poll.records": "20"})
    late = None
    try:
        deadline = time.monotonic() + 40
        while len(history.accepted) < total // 3:
            assert time.monotonic() < deadline, f"{len(history.accepted)} accepted before the kill"
            _read(history, [holder, reader], errors, 0.5, until=lambda: len(history.accepted) >= total // 3)
        held: list = []  # acquired by the holder, never acknowledged: they must come back
        while not held:
            assert time.monotonic() < deadline, "nothing left for the holder to acquire"
            held = [m for m in holder.poll(0.3) if m.error() is None]
        for msg in held:
            history.delivered(msg)
        leaders = {p: leader_of(cluster.bootstrap, topic, p) for p in range(PARTITIONS)}  # as they are now
        victim = leaders[held[0].partition()]
        group_coordinator = coordinator_of(cluster.bootstrap, group)
        cluster.kill9(victim)
        killed_at = time.monotonic()
        # The holder leaves (it would otherwise keep its partitions and prefetch from them unread):
        # what it holds on live leaders is released, what it holds on the dead one comes back
        # when the new leader reads the state again.
        holder.close()
        holder = None
        late = share_consumer(cluster.bootstrap, group, topic, **{**EXPLICIT, "max.poll.records": "20"})

        deadline = killed_at + 45
        while (len(history.deliveries) < total
               or any(history.deliveries[(m.partition(), m.offset())] < 2 for m in held)):
            assert time.monotonic() < deadline, (f"{len(history.deliveries)} of {total} records delivered, "
                                                 f"{sum(history.deliveries[(m.partition(), m.offset())] >= 2 for m in held)}"
                                                 f" of {len(held)} held ones again")
            _read(history, [reader, late], errors, 0.5)
        failover_s = time.monotonic() - killed_at
        # Every record ends accepted: the start offset of each partition reaches its end (lag 0),
        # as the share coordinators now hold it (the killed broker's partitions moved).
        wait_for(lambda: (_read(history, [reader, late], errors, 0.3) or True)
                 and _lags(cluster, group, topic) == {p: (PER_PARTITION, 0) for p in range(PARTITIONS)},
                 timeout=30, interval=0, message="every share-partition's start offset at its end")
    finally:
        for consumer in (holder, reader, late):
            if consumer is not None:
                consumer.close()
    assert set(history.deliveries) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert all(history.deliveries[(m.partition(), m.offset())] >= 2 for m in held)
    print(f"failover: every record delivered {failover_s:.1f} s after the kill -9 of broker {victim} (leader of "
          f"{sorted(p for p, n in leaders.items() if n == victim)}, share coordinator of "
          f"{sorted(p for p, n in state_owners.items() if n == victim)}"
          f"{', the group coordinator' if victim == group_coordinator else ''}); "
          f"{sum(history.deliveries.values()) - total} redeliveries, {len(errors)} errors surfaced, "
          f"{time.monotonic() - started:.1f} s in all")
