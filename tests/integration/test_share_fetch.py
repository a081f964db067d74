"""ShareFetch (78) and ShareAcknowledge (79) against a real broker, as raw v1 requests written by kio
(reference share-groups.md §3-§5): acquisition with delivery counts, piggy-backed and separate
acknowledgements, the session epochs and their errors, a dropped connection releasing its
records, and acknowledged state surviving a kill -9. share.auto.offset.reset is set the way
confluent-kafka's own share-consumer suite sets it: IncrementalAlterConfigs on the GROUP."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.index import load_request_schema

from clients import create_topic
from group_helpers import unique
from integration.share_helpers import group_configs
from raw_client import RawClient, build

SHARE_FETCH, SHARE_ACKNOWLEDGE, METADATA = 78, 79, 3
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
INVALID_REQUEST, UNKNOWN_TOPIC_ID, INVALID_RECORD_STATE = 42, 100, 121
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 122, 123


def topic_id(client: RawClient, topic: str) -> uuid.UUID:
    """The topic's id from Metadata v12."""
    cls = load_request_schema(METADATA, 12)
    answer = client.call(METADATA, 12, build(cls, {"topics": [{"name": topic, "topic_id": None}],
                                                   "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False}))
    return answer.topics[0].topic_id


def share_fetch(client: RawClient, group: str, member: str, epoch: int, partitions: dict, *, max_wait_ms: int = 0,
                max_records: int = 500) -> object:
    """A ShareFetch v1; `partitions` {(topic id, partition): [(first, last, [types])] acks}."""
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, index), acks in partitions.items():
        by_topic.setdefault(tid, []).append({"partition_index": index, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": l, "acknowledge_types": tuple(t)} for f, l, t in acks]})
    cls = load_request_schema(SHARE_FETCH, 1)
    body = build(cls, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                       "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": 1,
                       "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
                       "topics": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                       "forgotten_topics_data": []})
    return client.call(SHARE_FETCH, 1, body)


def share_acknowledge(client: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, index: int,
                      acks: list) -> object:
    cls = load_request_schema(SHARE_ACKNOWLEDGE, 1)
    body = build(cls, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": index, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": l, "acknowledge_types": tuple(t)} for f, l, t in acks]}]}]})
    return client.call(SHARE_ACKNOWLEDGE, 1, body)


def acquired(answer: object) -> list[tuple[int, int, int]]:
    assert answer.error_code == 0, answer
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def the_partition(answer: object) -> object:
    (topic,) = answer.responses
    (partition,) = topic.partitions
    return partition


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), partition=0)
        producer.flush(10)  # one batch per record: acquisition goes whole batches at a time
    assert producer.flush(10) == 0


@pytest.fixture
def setup(broker_factory):
    broker = broker_factory()
    topic, group = unique("share"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic, 10)
    with RawClient(broker.bootstrap) as client:
        tid = topic_id(client, topic)
    return broker, group, tid


def test_records_are_acquired_released_redelivered_and_accepted(setup) -> None:
    broker, group, tid = setup
    key = (tid, 0)
    with RawClient(broker.bootstrap) as client:
        first = share_fetch(client, group, "m1", 0, {key: []})
        assert acquired(first) == [(0, 9, 1)]
        assert len(the_partition(first).records) > 0
        # piggy-backed: release 0-4, accept 5-9; the same fetch takes 0-4 again (count 2)
        second = share_fetch(client, group, "m1", 1, {key: [(0, 4, [RELEASE]), (5, 9, [ACCEPT])]})
        assert the_partition(second).acknowledge_error_code == 0
        assert acquired(second) == [(0, 4, 2)]
        ack = share_acknowledge(client, group, "m1", 2, tid, 0, [(0, 4, [ACCEPT])])
        assert (ack.error_code, ack.responses[0].partitions[0].error_code) == (0, 0)
        assert acquired(share_fetch(client, group, "m1", 3, {key: []}, max_wait_ms=100)) == []
        produce(broker.bootstrap, broker_topic(broker, tid), 1)
        assert acquired(share_fetch(client, group, "m1", 4, {key: []}, max_wait_ms=5000)) == [(10, 10, 1)]


def broker_topic(broker, tid: uuid.UUID) -> str:
    """The topic name of an id (Metadata v12 by id)."""
    with RawClient(broker.bootstrap) as client:
        cls = load_request_schema(METADATA, 12)
        answer = client.call(METADATA, 12, build(cls, {"topics": [{"name": None, "topic_id": tid}],
                                                       "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False}))
        return answer.topics[0].name


def test_a_waiting_share_fetch_is_answered_by_a_produce(setup) -> None:
    """A long poll (10 s) on the session's partition returns as soon as a record lands there."""
    import concurrent.futures
    import time

    broker, group, tid = setup
    topic = broker_topic(broker, tid)
    with RawClient(broker.bootstrap, timeout=20) as client:
        assert acquired(share_fetch(client, group, "m1", 0, {(tid, 0): []})) == [(0, 9, 1)]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            waiting = pool.submit(share_fetch, client, group, "m1", 1, {}, max_wait_ms=10_000)
            produce(broker.bootstrap, topic, 1)
            assert acquired(waiting.result(15)) == [(10, 10, 1)]
            assert time.monotonic() - started < 5  # woken by the append, not the 10 s timeout


def test_session_errors_and_bad_acknowledgements(setup) -> None:
    broker, group, tid = setup
    key = (tid, 0)
    with RawClient(broker.bootstrap) as client:
        assert share_fetch(client, group, "m1", 3, {key: []}).error_code == SHARE_SESSION_NOT_FOUND
        assert share_fetch(client, group, "m1", 0, {key: [(0, 0, [ACCEPT])]}).error_code == INVALID_REQUEST
        assert share_fetch(client, group, "", 0, {key: []}).error_code == INVALID_REQUEST
        assert acquired(share_fetch(client, group, "m1", 0, {key: []})) == [(0, 9, 1)]
        assert share_fetch(client, group, "m1", 5, {key: []}).error_code == INVALID_SHARE_SESSION_EPOCH
        assert share_acknowledge(client, group, "m1", 0, tid, 0, []).error_code == INVALID_SHARE_SESSION_EPOCH
        other = share_fetch(client, group, "m2", 0, {key: []})
        assert acquired(other) == []  # all ten are m1's
        wrong = share_fetch(client, group, "m2", 1, {key: [(0, 0, [ACCEPT])]})
        assert the_partition(wrong).acknowledge_error_code == INVALID_RECORD_STATE
        bad = share_acknowledge(client, group, "m1", 1, tid, 0, [(3, 2, [ACCEPT])])  # first past last
        assert bad.responses[0].partitions[0].error_code == INVALID_REQUEST
        unknown = share_fetch(client, group, "m3", 0, {(uuid.uuid4(), 0): []})
        assert the_partition(unknown).error_code == UNKNOWN_TOPIC_ID
        assert client.call(18, 3, build(load_request_schema(18, 3), {
            "client_software_name": "t", "client_software_version": "1"})).error_code == 0  # still serving


def test_a_dropped_connection_releases_its_records_with_their_counts(setup) -> None:
    broker, group, tid = setup
    with RawClient(broker.bootstrap) as gone:
        assert acquired(share_fetch(gone, group, "m1", 0, {(tid, 0): []})) == [(0, 9, 1)]
    with RawClient(broker.bootstrap) as client:
        got: list = []
        for epoch in range(50):  # the release follows the close: fetch (waiting 100 ms) until it did
            got = acquired(share_fetch(client, group, "m2", epoch, {(tid, 0): []}, max_wait_ms=100))
            if got:
                break
        assert got == [(0, 9, 2)]


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_acknowledged_records_are_never_redelivered_after_a_restart(setup, crash) -> None:
    broker, group, tid = setup
    key = (tid, 0)
    holder = RawClient(broker.bootstrap)  # stays connected: its session dies with the broker
    try:
        assert acquired(share_fetch(holder, group, "m1", 0, {key: []})) == [(0, 9, 1)]
        answer = share_fetch(holder, group, "m1", 1, {key: [(0, 3, [ACCEPT]), (4, 5, [REJECT]), (6, 7, [RELEASE])]},
                             max_records=1)
        assert the_partition(answer).acknowledge_error_code == 0
        assert acquired(answer) == [(6, 6, 2)]
        if crash:
            broker.kill9()
        broker.restart()
    finally:
        holder.close()
    with RawClient(broker.bootstrap) as client:
        again = acquired(share_fetch(client, group, "m9", 0, {key: []}))
    # 0-5 are done for good; 6-9 come back
    assert [o for first, last, _ in again for o in range(first, last + 1)] == [6, 7, 8, 9]
    if crash:  # with their persisted counts: 6-7 released once; acquisitions are never persisted
        assert again == [(6, 7, 2), (8, 9, 1)]


def test_read_committed_never_delivers_an_aborted_transaction(broker_factory) -> None:
    """share.isolation.level=read_committed (§4): a committed transaction's records and the
    markers are acquired (clients ack markers as GAP), an aborted one's never; an open one's
    only once it commits."""
    broker = broker_factory()
    topic, group = unique("share-txn"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("t"), "linger.ms": 0})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit", "open"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{outcome}-{i}".encode(), partition=0)
        producer.flush(10)
        if outcome == "commit":
            producer.commit_transaction(30)
        elif outcome == "abort":
            producer.abort_transaction(30)
    # the log: 0-2 committed, 3 marker, 4-6 aborted, 7 marker, 8-10 committed, 11 marker, 12-14 open
    with RawClient(broker.bootstrap) as client:
        tid = topic_id(client, topic)
        got = acquired(share_fetch(client, group, "m1", 0, {(tid, 0): []}))
        assert [o for first, last, _ in got for o in range(first, last + 1)] == [0, 1, 2, 3, 7, 8, 9, 10, 11]
        producer.commit_transaction(30)
        got = acquired(share_fetch(client, group, "m1", 1, {(tid, 0): []}, max_wait_ms=5000))
        assert [o for first, last, _ in got for o in range(first, last + 1)] == [12, 13, 14, 15]


def test_describe_share_group_offsets_gives_the_start_offset_and_the_lag(setup) -> None:
    """DescribeShareGroupOffsets v1 (§6): lag = log end - start offset - records done past it."""
    broker, group, tid = setup
    name = broker_topic(broker, tid)
    with RawClient(broker.bootstrap) as client:
        cls = load_request_schema(90, 1)
        before = client.call(90, 1, build(cls, {"groups": [{"group_id": group, "topics": [
            {"topic_name": name, "partitions": [0]}]}]}))
        assert [(p.start_offset, p.lag) for p in before.groups[0].topics[0].partitions] == [(-1, -1)]
        assert acquired(share_fetch(client, group, "m1", 0, {(tid, 0): []})) == [(0, 9, 1)]
        ack = share_acknowledge(client, group, "m1", 1, tid, 0, [(0, 3, [ACCEPT]), (6, 7, [ACCEPT])])
        assert ack.responses[0].partitions[0].error_code == 0
        after = client.call(90, 1, build(cls, {"groups": [{"group_id": group, "topics": None}]}))
        (topic,) = after.groups[0].topics
        assert (topic.topic_name, topic.topic_id) == (name, tid)
        assert [(p.partition_index, p.start_offset, p.lag) for p in topic.partitions] == [(0, 4, 4)]


def test_a_groups_own_lock_duration_is_answered_and_runs_out(broker_factory) -> None:
    """share.record.lock.duration.ms on the GROUP (within the broker's bounds): the answer's
    AcquisitionLockTimeoutMs, and a record not acknowledged in time goes to the next fetch."""
    broker = broker_factory({"group.share.min.record.lock.duration.ms": "1000"})
    topic, group = unique("share-lock"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    too_short = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "999", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="share.record.lock.duration.ms"):
        admin.incremental_alter_configs([too_short])[too_short].result(15)
    produce(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap, timeout=20) as client:
        tid = topic_id(client, topic)
        first = share_fetch(client, group, "m1", 0, {(tid, 0): []})
        assert (acquired(first), first.acquisition_lock_timeout.total_seconds()) == ([(0, 1, 1)], 1.0)
        again = share_fetch(client, group, "m2", 0, {(tid, 0): []}, max_wait_ms=10_000)  # woken by the expiry
        assert acquired(again) == [(0, 1, 2)]


def test_share_groups_show_in_the_lag_metrics(broker_factory) -> None:
    """A share group (a ShareConsumer keeps it alive) on /metrics, in kafka_exporter's families:
    its start offset as the group's offset, and as lag the records no member has acknowledged
    yet (DescribeShareGroupOffsets' lag: log end - start offset - records done past it)."""
    import re
    import time
    import urllib.request

    from confluent_kafka import AcknowledgeType, ShareConsumer
    from prometheus_client.parser import text_string_to_metric_families

    from broker_process import wait_for

    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    url = wait_for(lambda: re.search(r"metrics listening on (http://127\.0\.0\.1:\d+)", broker.log()),
                   message="metrics").group(1)
    topic, group = unique("share-lag"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic, 10)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    verdicts = {o: AcknowledgeType.ACCEPT for o in range(4)} | {6: AcknowledgeType.REJECT, 7: AcknowledgeType.REJECT}
    judged: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while not set(verdicts) <= judged:  # 0-3 accepted, 6-7 rejected, the rest given back
            assert time.monotonic() < deadline, f"judged only {sorted(judged)}"
            for msg in consumer.poll(0.5):
                consumer.acknowledge(msg, verdicts.get(msg.offset(), AcknowledgeType.RELEASE))
                judged.add(msg.offset())
            consumer.commit_sync(15)

        def lag() -> dict[str, float]:
            with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
                text = response.read().decode()
            labels = (("consumergroup", group), ("partition", "0"), ("topic", topic))
            return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if tuple(sorted(s.labels.items())) == labels}
        got = wait_for(lambda: lag().get("kafka_consumergroup_lag") is not None and lag(), message="share lag")
        assert (got["kafka_consumergroup_current_offset"], got["kafka_consumergroup_lag"]) == (4, 4)
    finally:
        consumer.close()
