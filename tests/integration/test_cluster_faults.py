"""Cluster mode under faults, with real processes: a frozen owner (zombie), an owner cut off from
PostgreSQL while clients still reach it (split brain), PostgreSQL crashing, a graceful handoff,
and consumers and producers carrying on through a broker kill."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from broker_process import wait_for
from cluster_process import BrokerCluster
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from group_helpers import OFFSET_COMMIT, request_schema
from integration.clients import create_topic
from integration.cluster_helpers import (
    FAST,
    GroupHistory,
    commit_forever,
    committed,
    coordinator_of,
    new_owner,
    pg_rows,
    wait_settled,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64
from pg_proxy import PgProxy
from raw_client import RawClient, decode_response
from postgres_server import before_drop

from offsetd.cluster.ownership import rendezvous_owner
from offsetd.records.offsets import partition_for


def offsets_partition_epoch(dsn: str, partition: int) -> int:
    return pg_rows(dsn, "SELECT p.epoch FROM offsetd_partition p JOIN offsetd_topic t USING (topic_id) "
                        "WHERE t.name = '__consumer_offsets' AND p.partition = $1", partition)[0][0]


class PinnedCommitter:
    """OffsetCommit v9 requests on one connection to one broker (no coordinator lookup, no retry)."""

    def __init__(self, bootstrap: str) -> None:
        self.client = RawClient(bootstrap, timeout=20)

    def commit(self, group: str, offset: int) -> dict[int, int]:
        """Send the commit and wait for its answer: {partition: error code}."""
        self.send(group, offset)
        return self.answer()

    def send(self, group: str, offset: int) -> None:
        cls, mod = request_schema(OFFSET_COMMIT, 9)
        body = cls(group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="",
                   group_instance_id=None, topics=(mod.OffsetCommitRequestTopic(
                       name=TopicName("hist"), partitions=(mod.OffsetCommitRequestPartition(
                           partition_index=i32(0), committed_offset=i64(offset), committed_leader_epoch=i32(-1),
                           committed_metadata=None),)),))
        self.client.send_frame(self.client.encode_request(OFFSET_COMMIT, 9, body))

    def answer(self) -> dict[int, int]:
        frame = self.client.read_frame()
        assert frame is not None, "broker closed the connection"
        response = decode_response(OFFSET_COMMIT, 9, frame, self.client.correlation_id)
        return {r.partition_index: int(r.error_code.value) for t in response.topics for r in t.partitions}

    def close(self) -> None:
        self.client.close()


def test_zombie_owner_writes_nothing_after_losing_its_partitions(pg_dsn, cluster_factory) -> None:
    """SIGSTOP the coordinator past its lease; another broker claims (epoch + 1) and takes commits.
    A commit that reached the frozen owner is answered NOT_COORDINATOR when it wakes; nothing is
    ever stored with its old epoch after the new owner's first write; reads show the new commits."""
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "hist", 1)
    group = "zombie-group"
    partition = partition_for(group, 12)
    history = GroupHistory(group)
    stop = threading.Event()
    committer = threading.Thread(target=commit_forever, args=(cluster.bootstrap, history, stop, "confluent"))
    committer.start()
    try:
        wait_for(lambda: len(history.acked) >= 10, timeout=20, message="commits before the freeze")
        zombie = coordinator_of(cluster.bootstrap, group)
        old_epoch = offsets_partition_epoch(pg_dsn, partition)
        pinned_client = PinnedCommitter(cluster.broker(zombie).bootstrap)  # connected before the freeze
        cluster.sigstop(zombie)
        frozen_at = time.monotonic()
        wait_for(lambda: history.acked[-1][0] > frozen_at + 0.5, timeout=20,
                 message="commits on the new owner while the old one is frozen")
        wait_for(lambda: new_owner(cluster, group, zombie), timeout=20,
                 message="Metadata naming the new owner")
        new_epoch = offsets_partition_epoch(pg_dsn, partition)
        assert new_epoch > old_epoch
        # a commit sent to the frozen owner waits in its socket (the kernel takes it on a
        # connection already accepted); it is answered as soon as the owner wakes
        pinned_client.send(group, 10**9)
        cluster.sigcont(zombie)
        answer = [pinned_client.answer()]
        wait_for(lambda: history.acked[-1][0] > time.monotonic() - 0.5, timeout=10, message="commits go on")
    finally:
        stop.set()
        committer.join(30)
    pinned_client.close()
    assert answer == [{0: 16}]  # NOT_COORDINATOR: its lease ran out while frozen
    old_last = pg_rows(pg_dsn, "SELECT max(b.last_offset) FROM offsetd_batch b JOIN offsetd_topic t USING (topic_id) "
                               "WHERE t.name = '__consumer_offsets' AND b.partition = $1 AND b.epoch = $2",
                       partition, old_epoch)[0][0]
    new_first = pg_rows(pg_dsn, "SELECT min(b.base_offset) FROM offsetd_batch b JOIN offsetd_topic t USING (topic_id) "
                                "WHERE t.name = '__consumer_offsets' AND b.partition = $1 AND b.epoch = $2",
                        partition, new_epoch)[0][0]
    assert new_first is not None and (old_last is None or old_last < new_first)
    values = [v for _, v in history.acked]
    assert committed(cluster.bootstrap, group) == values[-1]
    assert 10**9 not in [v for _, v in history.acked] and committed(cluster.bootstrap, group) != 10**9


def test_owner_cut_off_from_postgresql_stops_acknowledging(pg_dsn, tmp_path: Path) -> None:
    """Split brain: the owner's PostgreSQL connections are blackholed while clients still reach
    it. It stops acknowledging by its lease deadline, another broker takes over, and no commit it
    acknowledged is lost."""
    cluster = BrokerCluster(pg_dsn, tmp_path / "cluster", 3, FAST)
    proxy = PgProxy.for_dsn(pg_dsn)
    before_drop(pg_dsn, cluster.stop)
    group = "split-group"
    try:
        # broker 1 reaches PostgreSQL only through the proxy
        cluster.broker(1).overrides["storage.engine"] = proxy.dsn
        cluster.start()
        wait_settled(cluster, 3)
        create_topic(cluster.bootstrap, "hist", 1)
        # a group whose offsets partition broker 1 is the preferred owner of (it stays there)
        offsets_id = pg_rows(pg_dsn, "SELECT topic_id FROM offsetd_topic WHERE name = '__consumer_offsets'")[0][0]
        group = next(g for g in (f"split-{i}" for i in range(1000))
                     if rendezvous_owner((offsets_id, partition_for(g, 12)), [1, 2, 3]) == 1)
        wait_for(lambda: coordinator_of(cluster.bootstrap, group) == 1, timeout=15, message="broker 1 coordinates")
        acked: list[tuple[float, int]] = []  # (when, value) of commits broker 1 acknowledged
        sent: list[int] = []
        stop = threading.Event()

        def commit_to_broker_1() -> None:
            """Commits sent to broker 1 itself, one after another, whatever it answers."""
            pinned = PinnedCommitter(cluster.broker(1).bootstrap)
            try:
                while not stop.is_set():
                    value = len(sent) + 1
                    sent.append(value)
                    if pinned.commit(group, value) == {0: 0}:
                        acked.append((time.monotonic(), value))
                    else:
                        time.sleep(0.05)
            finally:
                pinned.close()

        committer = threading.Thread(target=commit_to_broker_1)
        committer.start()
        try:
            wait_for(lambda: len(acked) >= 10, timeout=20, message="commits before the cut")
            proxy.blackhole()
            cut_at = time.monotonic()
            wait_for(lambda: coordinator_of(cluster.broker(2).bootstrap, group) in (2, 3), timeout=15,
                     message="another broker owns the group's partition")
            asked = len(sent)
            wait_for(lambda: len(sent) >= asked + 5, timeout=15, message="broker 1 asked again after the takeover")
        finally:
            stop.set()
            committer.join(30)
        late = [v for ts, v in acked if ts > cut_at + 3.0]  # past the 3 s lease
        assert not late, f"broker 1 acknowledged {late[:5]} after its lease deadline"
        # still cut off, still reachable by clients: broker 1 answers, and refuses
        refusing = PinnedCommitter(cluster.broker(1).bootstrap)
        try:
            sent.append(len(sent) + 1)
            assert refusing.commit(group, sent[-1]) == {0: 16}  # NOT_COORDINATOR
        finally:
            refusing.close()
        proxy.heal()
        # the last acknowledged commit, or a later one that reached PostgreSQL before the cut but
        # whose answer did not come back (durable, never acknowledged: allowed)
        final = committed(cluster.broker(2).bootstrap, group)
        assert final >= acked[-1][1] and final in sent
    finally:
        cluster.stop()
        proxy.close()


def test_postgresql_crash_loses_nothing_acknowledged(private_postgres, tmp_path: Path) -> None:
    """`pg_ctl stop -m immediate` during commits and produce, then a restart: every commit and
    every record acknowledged before, during or after is there; brokers carry on without restart."""
    server = private_postgres()
    dsn = server.create_database("crash")
    cluster = BrokerCluster(dsn, tmp_path / "cluster", 3, FAST).start()
    before_drop(dsn, cluster.stop)
    try:
        wait_settled(cluster, 3)
        create_topic(cluster.bootstrap, "hist", 1)
        create_topic(cluster.bootstrap, "data", 3)
        history = GroupHistory("crash-group")
        delivered: list[bytes] = []
        stop = threading.Event()

        def produce_forever() -> None:
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                                 "enable.idempotence": True, "message.timeout.ms": 60000, "log_level": 0})
            n = 0
            while not stop.is_set():
                n += 1
                producer.produce("data", value=b"%d" % n,
                                 on_delivery=lambda err, msg: err is None and delivered.append(msg.value()))
                producer.poll(0.002)
            assert producer.flush(60) == 0

        threads = [threading.Thread(target=commit_forever, args=(cluster.bootstrap, history, stop, "confluent")),
                   threading.Thread(target=produce_forever)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(history.acked) >= 20 and len(delivered) >= 200, timeout=30,
                     message="commits and records before the crash")
            server.stop("immediate")
            crashed_at = time.monotonic()
            time.sleep(1.0)  # PostgreSQL stays down a while (the outage, not synchronisation)
            server.start()
            wait_for(lambda: history.acked[-1][0] > crashed_at + 1 and len(delivered) > 400, timeout=60,
                     message="commits and records after the restart")
            wait_for(lambda: all("listening for cluster changes again" in cluster.broker(n).log() for n in (1, 2, 3)),
                     timeout=10, message="every broker LISTENs again on a new connection")
        finally:
            stop.set()
            for t in threads:
                t.join(90)
        values = [v for _, v in history.acked]
        assert committed(cluster.bootstrap, "crash-group") == values[-1]
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("data", p, -2) for p in range(3)])
        stored: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not set(delivered) <= stored and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                stored.add(msg.value())
        consumer.close()
        missing = set(delivered) - stored
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    finally:
        cluster.stop()


def test_graceful_handoff_on_sigterm(pg_dsn, cluster_factory) -> None:
    """SIGTERM of the owner: its partitions are released, not left to expire; the group's clients
    commit on the new owner well within the lease TTL."""
    cluster = cluster_factory(pg_dsn, overrides={**FAST, "broker.session.timeout.ms": "9000",
                                                  "broker.heartbeat.interval.ms": "2000"})
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "hist", 1)
    history = GroupHistory("handoff-group")
    stop = threading.Event()
    committer = threading.Thread(target=commit_forever, args=(cluster.bootstrap, history, stop, "confluent"))
    committer.start()
    try:
        wait_for(lambda: len(history.acked) >= 10, timeout=20, message="commits before the handoff")
        owner = coordinator_of(cluster.bootstrap, history.group)
        stopped_at = time.monotonic()
        assert cluster.terminate(owner) == 0
        wait_for(lambda: history.acked[-1][0] > stopped_at, timeout=9, message="a commit after the handoff")
    finally:
        stop.set()
        committer.join(30)
    gap = min(ts for ts, _ in history.acked if ts > stopped_at) - stopped_at
    assert gap < 3.0, f"first commit {gap:.2f} s after SIGTERM (a 9 s lease: no handoff would take > 9 s)"
    assert committed(cluster.bootstrap, history.group) == history.acked[-1][1]


def test_consumers_and_producers_carry_on_through_a_broker_kill(pg_dsn, cluster_factory) -> None:
    """A consumer group keeps consuming through a kill -9 of a broker (only records after the last
    commit are delivered again); producers with acks=all lose nothing they were told was stored."""
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "flow", 6)
    delivered: list[bytes] = []
    stop = threading.Event()

    def produce_forever() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "log_level": 0})
        n = 0
        while not stop.is_set():
            n += 1
            producer.produce("flow", value=b"%d" % n, on_delivery=lambda err, msg: err is None
                             and delivered.append(msg.value()))
            producer.poll(0.001)
        assert producer.flush(60) == 0

    consumed: list[bytes] = []
    # a delivery of a record at or below an acknowledged commit of its partition: must not happen
    wrongly_redelivered: list[tuple[int, int]] = []

    def consume_forever() -> None:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "flow-group",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
        consumer.subscribe(["flow"])
        acked: dict[int, int] = {}  # partition -> last acknowledged committed offset
        uncommitted = 0
        while not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                if msg.offset() < acked.get(msg.partition(), 0):
                    wrongly_redelivered.append((msg.partition(), msg.offset()))
                consumed.append(msg.value())
                uncommitted += 1
            if uncommitted >= 50:
                try:
                    for tp in consumer.commit(asynchronous=False) or ():
                        acked[tp.partition] = max(acked.get(tp.partition, 0), tp.offset)
                    uncommitted = 0
                except KafkaException:
                    pass  # not acknowledged: these records may come again, as they should
        consumer.close()

    threads = [threading.Thread(target=produce_forever), threading.Thread(target=consume_forever)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(consumed) >= 500, timeout=30, message="records flowing before the kill")
        victim = coordinator_of(cluster.bootstrap, "flow-group")
        cluster.kill9(victim)
        killed_at_count = len(consumed)
        wait_for(lambda: len(consumed) >= killed_at_count + 1000, timeout=40, message="records flowing after the kill")
        producing_done = len(delivered)
        wait_for(lambda: set(delivered[:producing_done]) <= set(consumed), timeout=40,
                 message="every delivered record consumed")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not wrongly_redelivered, f"records delivered again below an acknowledged commit: {wrongly_redelivered[:5]}"
    assert set(delivered[:producing_done]) <= set(consumed)  # nothing acknowledged to the producer is lost
    assert len(consumed) - len(set(consumed)) < len(consumed) // 4  # redelivery is the exception
