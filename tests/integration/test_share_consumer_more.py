"""More share-group behaviour seen through confluent-kafka's ShareConsumer (librdkafka 2.16;
reference share-groups.md §1, §4, §7): several consumers on one partition, the delivery count
limit, the cap on in-flight records, share.auto.offset.reset (latest, by_duration), and a broker
restart (SIGTERM and kill -9) checked against the history of deliveries and confirmed
acknowledgements."""

from __future__ import annotations

import collections
import time

from confluent_kafka import AcknowledgeType, ShareConsumer

from clients import create_topic
from group_helpers import unique
from share_helpers import History, group_configs, poll_until, produce, read_accepting, share_consumer

# The broker's default 30 s locks (nothing runs out while a test polls its consumers in turn),
# heartbeats as the other share tests have them.
LONG_LOCKS = {"group.share.heartbeat.interval.ms": "5000", "group.share.min.heartbeat.interval.ms": "1000"}
EXPLICIT = {"share.acknowledgement.mode": "explicit"}


def test_three_consumers_on_one_partition_each_get_records_and_every_record_once(broker_factory) -> None:
    broker = broker_factory(LONG_LOCKS)
    topic, group = unique("sc3"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    consumers = [share_consumer(broker.bootstrap, group, topic, **{"max.poll.records": "3"}) for _ in range(3)]
    produced: list[bytes] = []
    by_consumer: dict[int, list[bytes]] = collections.defaultdict(list)
    deadline = time.monotonic() + 60
    try:
        turn = 0
        while len(by_consumer) < 3 or sum(map(len, by_consumer.values())) < len(produced):
            assert time.monotonic() < deadline, f"timed out: {({i: len(v) for i, v in by_consumer.items()})}"
            if len(by_consumer) < 3 and len(produced) < 600:  # small batches until all three have some
                batch = [f"r{len(produced) + i}".encode() for i in range(6)]
                produce(broker.bootstrap, topic, batch, 1, each_alone=True)
                produced += batch
            for i in [(turn + k) % 3 for k in range(3)]:  # each consumer polls first in turn
                for msg in consumers[i].poll(0.2):
                    assert msg.error() is None, msg.error()
                    by_consumer[i].append(msg.value())
            turn += 1
        delivered = [value for values in by_consumer.values() for value in values]
        assert sorted(delivered) == sorted(produced)  # each accepted (implicitly) and so once
        assert all(by_consumer[i] for i in range(3))
    finally:
        for consumer in consumers:
            consumer.close()


def test_a_record_released_delivery_count_limit_times_is_archived(broker_factory) -> None:
    broker = broker_factory({**LONG_LOCKS, "group.share.delivery.count.limit": "2"})  # its minimum
    topic, group = unique("sc-limit"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic, [b"poison"], 1)
    consumer = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    deliveries: list[tuple[bytes, int]] = []

    def judge(c: ShareConsumer, msg) -> None:
        deliveries.append((msg.value(), msg.delivery_count()))
        c.acknowledge(msg, AcknowledgeType.RELEASE if msg.value() == b"poison" else AcknowledgeType.ACCEPT)

    try:
        poll_until([consumer], lambda s: (b"poison", 2) in deliveries, on_message=judge)
        assert all(e is None for e in consumer.commit_sync(15).values())  # the second RELEASE: archived
        produce(broker.bootstrap, topic, [b"later"], 1)
        # an AVAILABLE poison (a lower offset) would come before "later"
        poll_until([consumer], lambda s: any(v == b"later" for v, _ in deliveries), on_message=judge)
        assert deliveries == [(b"poison", 1), (b"poison", 2), (b"later", 1)]
    finally:
        consumer.close()


def test_no_more_than_partition_max_record_locks_are_held_at_once(broker_factory) -> None:
    broker = broker_factory({**LONG_LOCKS, "group.share.partition.max.record.locks": "100"})  # its minimum
    topic, group = unique("sc-cap"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    values = [f"v{i}".encode() for i in range(300)]
    produce(broker.bootstrap, topic, values, 1)
    holder = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    other = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    try:
        held = poll_until([holder], lambda s: len(s) > 0)  # one poll's records, never acknowledged yet
        assert 0 < len(held) <= 100
        # while the holder keeps its records the window is full: the other gets nothing
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            assert list(other.poll(0.2)) == []
        for _, msg in held:
            holder.acknowledge(msg, AcknowledgeType.ACCEPT)
        assert all(e is None for e in holder.commit_sync(15).values())
        def accept(c: ShareConsumer, msg) -> None:
            c.acknowledge(msg, AcknowledgeType.ACCEPT)

        rest = poll_until([other, holder], lambda s: len(s) + len(held) >= len(values), on_message=accept)
        assert sorted(m.value() for _, m in held + rest) == sorted(values)
    finally:
        other.close()
        holder.close()


def test_latest_is_the_default_reset_records_before_the_first_fetch_are_not_delivered(broker_factory) -> None:
    broker = broker_factory(LONG_LOCKS)
    topic, group = unique("sc-latest"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"before{i}".encode() for i in range(5)], 1)
    consumer = share_consumer(broker.bootstrap, group, topic)
    seen: list[bytes] = []
    produced = 0
    deadline = time.monotonic() + 45
    try:
        while not any(v.startswith(b"after") for v in seen):  # the share-partition is read first at some point
            assert time.monotonic() < deadline and produced < 300, f"nothing after the reset; {produced} produced"
            produce(broker.bootstrap, topic, [f"after{produced}".encode()], 1)
            produced += 1
            seen += [m.value() for m in consumer.poll(0.3)]
        first = min(int(v[5:]) for v in seen if v.startswith(b"after"))
        tail = [f"after{i}".encode() for i in range(produced, produced + 5)]
        produce(broker.bootstrap, topic, tail, 1)
        expected = {f"after{i}".encode() for i in range(first, produced + 5)}
        seen += [m.value() for _, m in poll_until([consumer], lambda s: expected <= set(seen) | {
            m.value() for _, m in s})]
        assert not [v for v in seen if v.startswith(b"before")]
        assert sorted(seen) == sorted(expected)  # everything from the first delivered on, once
    finally:
        consumer.close()


def test_by_duration_reset_starts_at_the_first_record_of_the_last_hour(broker_factory) -> None:
    broker = broker_factory(LONG_LOCKS)
    topic, group = unique("sc-dur"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="by_duration:PT1H")
    two_hours_ago = int(time.time() * 1000) - 2 * 3600_000
    produce(broker.bootstrap, topic, [f"old{i}".encode() for i in range(5)], 1, timestamp_ms=two_hours_ago)
    recent = [f"recent{i}".encode() for i in range(5)]
    produce(broker.bootstrap, topic, recent, 1)
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        seen = poll_until([consumer], lambda s: set(recent) <= {m.value() for _, m in s})
        assert [m.value() for _, m in seen] == recent  # the old ones (lower offsets) never came
    finally:
        consumer.close()


def test_accepted_records_stay_accepted_across_restarts_and_the_rest_come_back(broker_factory) -> None:
    broker = broker_factory({"group.share.min.record.lock.duration.ms": "1000",
                             "group.share.record.lock.duration.ms": "3000", **LONG_LOCKS})
    topic, group = unique("sc-restart"), unique("q")
    # one partition, shared by both members (with two, the idle first member would be given one)
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    for chunk in range(20):  # log batches of 10 records: a fetch takes some, not all
        produce(broker.bootstrap, topic, [f"a{chunk * 10 + i}".encode() for i in range(10)], 1)
    history = History()
    first = share_consumer(broker.bootstrap, group, topic, **{**EXPLICIT, "max.poll.records": "30"})
    second = None
    try:
        read_accepting(history, first, lambda: len(history.accepted) >= 60)
        held: list = []  # acquired; half accepted, half never acknowledged when the broker dies
        deadline = time.monotonic() + 30
        while len(held) < 2:
            assert time.monotonic() < deadline
            held = list(first.poll(0.3))
        for msg in held:
            history.delivered(msg)
        for msg in held[:len(held) // 2]:
            first.acknowledge(msg, AcknowledgeType.ACCEPT)
        history.commit(first, held[:len(held) // 2])
        broker.kill9()
        broker.start()
        second = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
        read_accepting(history, second, lambda: len(history.accepted) >= 200)
        assert set(history.accepted) == set(history.deliveries)  # every record, the held ones came back
        assert all(history.deliveries[(m.partition(), m.offset())] == 2 for m in held[len(held) // 2:])

        produce(broker.bootstrap, topic, [f"b{i}".encode() for i in range(100)], 1)
        read_accepting(history, second, lambda: len(history.accepted) >= 250)
        broker.restart()  # SIGTERM, then the same port and data
        read_accepting(history, second, lambda: len(history.accepted) >= 300)
        assert len(history.deliveries) == 300
    finally:
        if second is not None:
            second.close()
        first.close()
