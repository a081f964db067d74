"""Cluster mode against real processes: PostgreSQL and three `offsetd serve` brokers, driven by
clients nobody here wrote (confluent-kafka / librdkafka, kafka-python)."""

from __future__ import annotations

import datetime
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter

import kafka
import pytest
from broker_process import wait_for
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from integration.clients import consume_all, create_topic, produce
from kio.index import load_request_schema
from raw_client import RawClient

from offsetd.records.batch import iter_batches
from offsetd.records.offsets import partition_for
from integration.cluster_helpers import (
    FAST,
    GroupHistory,
    commit_forever,
    committed,
    coordinator_of,
    new_owner,
    leader_of,
    pg_rows,
    wait_settled,
)

def test_three_brokers_share_topics_data_and_groups(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    create_topic(cluster.bootstrap, "shared", 6)

    def leaders_known() -> bool:
        topic = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("shared", timeout=10).topics["shared"]
        return all(p.leader in (1, 2, 3) for p in topic.partitions.values())
    wait_for(leaders_known, timeout=20, message="every partition of 'shared' has a leader")
    # replication is PostgreSQL's: a factor up to the live brokers is accepted, more is refused
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("replicated", 2, 3)], operation_timeout=10)["replicated"].result(15)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR|larger than available brokers: 3"):
        admin.create_topics([NewTopic("over-replicated", 2, 4)], operation_timeout=10)["over-replicated"].result(15)
    # each broker only knows the topic through PostgreSQL's catalogue
    for node in (1, 2, 3):
        single = AdminClient({"bootstrap.servers": cluster.broker(node).bootstrap})
        assert "shared" in single.list_topics(timeout=10).topics

    sent = [{"key": f"k{i}".encode(), "value": None if i % 50 == 0 else f"v{i}".encode(), "partition": i % 6}
            for i in range(600)]
    produce(cluster.bootstrap, "shared", sent, acks="all")
    got = consume_all(cluster.bootstrap, "shared", list(range(6)), 600)
    assert sorted((m.key(), m.value()) for m in got) == sorted((m["key"], m["value"]) for m in sent)
    assert Counter(m.partition() for m in got) == Counter(i % 6 for i in range(600))

    # a group: confluent-kafka commits, kafka-python (another client) reads the same offsets back
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cg", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["shared"])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 600 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen += 1
    assert seen == 600
    consumer.commit(asynchronous=False)
    admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: its futures need the handle
    described = admin_client.describe_consumer_groups(["cg"])["cg"].result(10)
    assert described.coordinator.id == coordinator_of(cluster.bootstrap, "cg")
    assert len(described.members) == 1 and described.state.name == "STABLE"
    consumer.close()
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        offsets = admin.list_group_offsets("cg")["cg"]
    finally:
        admin.close()
    assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {p: 100 for p in range(6)}
    # the operator tools work against the cluster as against any Kafka cluster
    described = subprocess.run([sys.executable, "-m", "offsetd.cli", "groups", "--bootstrap-server", cluster.bootstrap,
                                "--describe", "--group", "cg"], capture_output=True, text=True, timeout=60)
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("cg ")]
    assert sorted((r[2], r[3], r[5]) for r in rows) == [(str(p), "100", "0") for p in range(6)], described.stdout
    dumped = subprocess.run([sys.executable, "-m", "offsetd.cli", "offsets-log", "dump", "--bootstrap-server",
                             cluster.bootstrap], capture_output=True, text=True, timeout=60)
    assert sum(line.startswith("[cg,shared,") for line in dumped.stdout.splitlines()) >= 6, dumped.stdout[-2000:]


FETCH = 1


def batch_record_counts(data: bytes) -> list[tuple[int, int]]:
    """(base offset, records) of each batch in stored bytes."""
    return [(h.base_offset, h.records_count) for _, h in iter_batches(data)]

# make test runs a few seeds; `make failover` the twenty (OFFSETD_FAILOVER_SEEDS=20).
SEEDS = range(int(os.environ.get("OFFSETD_FAILOVER_SEEDS", "2")))


def watch_committed(bootstrap: str, group: str, seen: list[int], stop: threading.Event) -> None:
    """Read the group's committed offset over and over (through whichever broker coordinates)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        while not stop.is_set():
            try:
                offset = consumer.committed([TopicPartition("hist", 0)], timeout=2)[0].offset
            except KafkaException:
                continue  # no coordinator for a moment: that is the failover being measured
            if offset >= 0:
                seen.append(offset)
    finally:
        consumer.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_kill9_of_a_coordinator_loses_no_acknowledged_commit(pg_dsn, cluster_factory, seed: int) -> None:
    """Four groups commit strictly increasing offsets (confluent-kafka and kafka-python); the
    coordinator of one is killed at a random moment. Every acknowledged commit survives, no value
    never sent appears, no group's committed offset goes backwards, and the same clients go on
    committing on the new owner within the lease TTL + 2 s."""
    rng = random.Random(seed)
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "hist", 1)
    groups = [GroupHistory(f"hist-{seed}-{i}") for i in range(4)]
    target = groups[rng.randrange(4)]
    stop = threading.Event()
    observed: list[int] = []
    threads = [threading.Thread(target=commit_forever, args=(cluster.bootstrap, g, stop,
                                                              "confluent" if i % 2 == 0 else "kafka-python"))
               for i, g in enumerate(groups)]
    threads.append(threading.Thread(target=watch_committed, args=(cluster.bootstrap, target.group, observed, stop)))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: all(len(g.acked) >= 20 for g in groups), timeout=30, message="every group commits")
        time.sleep(rng.uniform(0.0, 1.5))  # a random moment, not synchronisation
        victim = coordinator_of(cluster.bootstrap, target.group)
        killed_at = time.monotonic()
        cluster.kill9(victim)
        wait_for(lambda: all(g.acked and g.acked[-1][0] > killed_at + 1 for g in groups), timeout=30,
                 message="every group commits again after the kill")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    first_after = min(ts for ts, _ in target.acked if ts > killed_at) - killed_at
    assert first_after <= 3.0 + 2.0, f"first commit {first_after:.2f} s after the kill of broker {victim}"
    assert observed and observed == sorted(observed), "a committed offset went backwards"
    assert set(observed) <= set(target.sent), "a committed value that was never sent"
    for g in groups:
        values = [v for _, v in g.acked]
        assert values == sorted(values) and len(set(values)) == len(values)
        final = committed(cluster.bootstrap, g.group)
        assert final == values[-1], f"{g.group}: committed {final}, last acknowledged {values[-1]}"
        assert final in g.sent


def test_group_configs_and_retention_are_shared_through_postgresql(pg_dsn, cluster_factory) -> None:
    """A group's offsets.retention.minutes set through one broker is what every broker reports;
    retention deletes a data partition's old segments on its leader and in PostgreSQL, so a new
    leader starts the log where the old one had moved it."""
    cluster = cluster_factory(pg_dsn, overrides={**FAST, "log.retention.check.interval.ms": "300"})
    wait_settled(cluster, 3)
    alter = ConfigResource(ConfigResource.Type.GROUP, "configured", incremental_configs=[
        ConfigEntry("offsets.retention.minutes", "4321", incremental_operation=AlterConfigOpType.SET)])
    one = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
    for future in one.incremental_alter_configs([alter]).values():
        future.result(15)

    def retention_seen_by(node: int) -> str | None:
        admin = AdminClient({"bootstrap.servers": cluster.broker(node).bootstrap})
        resource = ConfigResource(ConfigResource.Type.GROUP, "configured")
        entries = admin.describe_configs([resource])[resource].result(10)
        return entries["offsets.retention.minutes"].value
    for node in (1, 2, 3):
        wait_for(lambda: retention_seen_by(node) == "4321", timeout=10, message=f"broker {node} has the group config")

    # retention: 1 KiB segments, records older than 1 s are deleted
    create_topic(cluster.bootstrap, "aging", 1, {"segment.bytes": "1024", "retention.ms": "1000"})
    produce(cluster.bootstrap, "aging", [{"value": b"x" * 200} for _ in range(40)], acks="all")

    def earliest() -> int:
        """The log start, asked by a new client (fresh metadata: the leader may have just died)."""
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "aging-reader"})
        try:
            return consumer.get_watermark_offsets(TopicPartition("aging", 0), timeout=5)[0]
        except KafkaException:  # the leader was just killed: asked again
            return -1
        finally:
            consumer.close()
    start = wait_for(lambda: earliest() > 0 and earliest(), timeout=20, message="retention moves the log start")

    def stored_below(offset: int) -> int:
        return int(pg_rows(pg_dsn, "SELECT count(*) FROM offsetd_batch b JOIN offsetd_topic t USING (topic_id) "
                                   "WHERE t.name = 'aging' AND b.last_offset < $1", offset)[0][0])
    wait_for(lambda: stored_below(start) == 0, timeout=10, message="PostgreSQL drops what retention deleted")
    cluster.kill9(leader_of(cluster.bootstrap, "aging", 0))
    wait_for(lambda: earliest() >= start, timeout=20, message="the new leader starts where retention left the log")

    # once retention moves the log start past the old leader's epoch, that epoch leaves the history
    produce(cluster.bootstrap, "aging", [{"value": b"y" * 200} for _ in range(5)], acks="all")

    def history() -> list[tuple[int, int]]:
        return [tuple(r) for r in pg_rows(pg_dsn, "SELECT h.epoch, p.epoch FROM offsetd_leader_epoch h JOIN "
                                                  "offsetd_partition p USING (topic_id, partition) JOIN offsetd_topic t "
                                                  "USING (topic_id) WHERE t.name = 'aging'")]
    wait_for(lambda: len(history()) == 1 and history()[0][0] == history()[0][1], timeout=20,
             message="the leader epochs below the log start pruned from PostgreSQL")


def test_a_broker_that_does_not_lead_names_the_leader(pg_dsn, cluster_factory) -> None:
    """Fetch v16 sent to a broker that does not lead the partition: NOT_LEADER_OR_FOLLOWER with
    KIP-951's current leader (id and epoch) and that leader's endpoint."""
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "routed", 1)
    leader = wait_for(lambda: max(leader_of(cluster.bootstrap, "routed", 0), 0), timeout=10,
                      message="a leader for routed-0")
    # read once the partition is claimed (the claim bumps the epoch)
    topic_id, epoch = pg_rows(pg_dsn, "SELECT t.topic_id, p.epoch FROM offsetd_topic t JOIN offsetd_partition p "
                                      "USING (topic_id) WHERE t.name = 'routed'")[0]
    other = next(n for n in (1, 2, 3) if n != leader)
    cls = load_request_schema(FETCH, 16)
    mod = __import__(cls.__module__, fromlist=["x"])
    request = cls(max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
                  topics=(mod.FetchTopic(topic_id=topic_id, partitions=(
                      mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
                  forgotten_topics_data=())
    with RawClient(cluster.broker(other).bootstrap) as client:
        # the other broker learns of the claim at its next look at ownership (a NOTIFY or a
        # heartbeat): until then it knows no leader (-1)
        response = wait_for(lambda: (r := client.call(FETCH, 16, request)).responses[0].partitions[0]
                            .current_leader.leader_id != -1 and r, timeout=10, message="the leader known")
    answer = response.responses[0].partitions[0]
    assert int(answer.error_code.value) == 6  # NOT_LEADER_OR_FOLLOWER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader, epoch)
    endpoints = {e.node_id: e.port for e in response.node_endpoints}
    assert endpoints == {leader: int(cluster.broker(leader).bootstrap.rsplit(":", 1)[1])}


def test_compaction_reaches_postgresql_so_a_new_owner_loads_little(pg_dsn, cluster_factory) -> None:
    """The leader's log cleaner compacts `__consumer_offsets`, and PostgreSQL's copy of the
    partition is replaced by the cleaned batches: after a kill -9 the new owner loads the latest
    value per key, not every commit ever made, and the group's offset is the last one committed."""
    cluster = cluster_factory(pg_dsn, overrides={**FAST, "offsets.topic.segment.bytes": "4096",
                                                 "log.cleaner.backoff.ms": "200"})
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "hist", 1)
    group = "compacted"
    partition = partition_for(group, 12)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for value in range(1, 1501):
            consumer.commit(offsets=[TopicPartition("hist", 0, value)], asynchronous=False)
    finally:
        consumer.close()

    def stored_records() -> int:
        """Records of the group's offsets partition in PostgreSQL (a v2 batch header holds its count)."""
        rows = pg_rows(pg_dsn, "SELECT b.bytes FROM offsetd_batch b JOIN offsetd_topic t USING (topic_id) "
                               "WHERE t.name = '__consumer_offsets' AND b.partition = $1", partition)
        return sum(count for (data,) in rows for _, count in batch_record_counts(data))
    wait_for(lambda: stored_records() < 300, timeout=30, message="PostgreSQL holds the compacted partition")
    owner = coordinator_of(cluster.bootstrap, group)
    cluster.kill9(owner)
    successor = wait_for(lambda: new_owner(cluster, group, owner), timeout=20,
                         message="a new owner of the group's partition")
    assert committed(cluster.bootstrap, group) == 1500
    loaded = [int(line.split("loaded ")[1].split()[0]) for line in cluster.broker(successor).log().splitlines()
              if f"__consumer_offsets-{partition}: loaded" in line]
    assert loaded and loaded[-1] < 300, f"the new owner replayed {loaded} records"


def test_a_broker_that_cannot_join_says_why(tmp_path) -> None:
    """No PostgreSQL behind storage.engine, or not a URL at all: the broker exits at once with a
    line naming the problem (the password masked), not a traceback or a hang."""
    def serve(engine: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "offsetd.cli", "serve", "--override", f"storage.engine={engine}",
                               "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override",
                               f"log.dirs={tmp_path / 'data'}"], capture_output=True, text=True, timeout=60)
    unreachable = serve("postgresql://offsetd:s3cret@127.0.0.1:1/offsetd")
    assert unreachable.returncode == 1
    assert "cannot join the cluster in postgresql://offsetd:***@127.0.0.1:1/offsetd" in unreachable.stderr
    assert "s3cret" not in unreachable.stderr and "Traceback" not in unreachable.stderr
    invalid = serve("mysql://db/offsetd")
    assert invalid.returncode == 2
    assert "Invalid value 'mysql://db/offsetd' for configuration storage.engine" in invalid.stderr
