"""AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) v0 as raw kio requests against a
real broker (reference share-groups.md §6): an alter creates a missing group and answers 3 for an
unknown topic or partition; the leaders' windows follow an alter or a delete at once (the next
ShareFetch reads the new state, and its acknowledgements are not fenced by the new state
epoch); DeleteGroups deletes an empty share group's state with it."""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka import Producer
from kio.index import load_request_schema

from clients import create_topic
from group_helpers import unique
from raw_client import RawClient, build

METADATA, SHARE_FETCH, SHARE_ACKNOWLEDGE, SHARE_GROUP_DESCRIBE = 3, 78, 79, 77
DELETE_GROUPS, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 42, 90, 91, 92
ACCEPT, UNKNOWN_TOPIC_OR_PARTITION, GROUP_ID_NOT_FOUND = 1, 3, 69


def topic_id(client: RawClient, topic: str) -> uuid.UUID:
    cls = load_request_schema(METADATA, 12)
    answer = client.call(METADATA, 12, build(cls, {"topics": [{"name": topic, "topic_id": None}],
                                                   "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False}))
    return answer.topics[0].topic_id


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0


def share_fetch(client: RawClient, group: str, epoch: int, tid: uuid.UUID, acks: list | None = None) -> list:
    """A ShareFetch v1 of partition 0 by member m1; the acquired (first, last, delivery count)."""
    cls = load_request_schema(SHARE_FETCH, 1)
    batches = [{"first_offset": f, "last_offset": l, "acknowledge_types": (t,)} for f, l, t in acks or []]
    answer = client.call(SHARE_FETCH, 1, build(cls, {
        "group_id": group, "member_id": "m1", "share_session_epoch": epoch, "max_wait": datetime.timedelta(0),
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "forgotten_topics_data": [],
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": batches}]}]}))
    assert answer.error_code == 0, answer
    for t in answer.responses:
        for p in t.partitions:
            assert p.acknowledge_error_code == 0, p
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def alter(client: RawClient, group: str, topics: dict[str, dict[int, int]]) -> object:
    cls = load_request_schema(ALTER_OFFSETS, 0)
    return client.call(ALTER_OFFSETS, 0, build(cls, {"group_id": group, "topics": [
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps.items()]}
        for t, ps in topics.items()]}))


def delete_offsets(client: RawClient, group: str, topics: list[str]) -> object:
    cls = load_request_schema(DELETE_OFFSETS, 0)
    return client.call(DELETE_OFFSETS, 0, build(cls, {"group_id": group,
                                                      "topics": [{"topic_name": t} for t in topics]}))


def start_offsets(client: RawClient, group: str) -> dict[tuple[str, int], int]:
    """DescribeShareGroupOffsets v1 of every topic the group has state for."""
    cls = load_request_schema(DESCRIBE_OFFSETS, 1)
    answer = client.call(DESCRIBE_OFFSETS, 1, build(cls, {"groups": [{"group_id": group, "topics": None}]}))
    return {(t.topic_name, p.partition_index): p.start_offset for t in answer.groups[0].topics for p in t.partitions}


def test_alter_creates_the_group_and_refuses_unknown_partitions(broker_factory) -> None:
    broker = broker_factory()
    topic, group = unique("sgo"), unique("q")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as client:
        answer = alter(client, group, {topic: {0: 3, 5: 0}, "no-such-topic": {0: 0}})
        assert answer.error_code == 0
        codes = {(t.topic_name, p.partition_index): p.error_code for t in answer.responses for p in t.partitions}
        assert codes == {(topic, 0): 0, (topic, 5): UNKNOWN_TOPIC_OR_PARTITION,
                         ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert start_offsets(client, group) == {(topic, 0): 3}
        cls = load_request_schema(SHARE_GROUP_DESCRIBE, 1)
        (described,) = client.call(SHARE_GROUP_DESCRIBE, 1, build(cls, {
            "group_ids": [group], "include_authorized_operations": False})).groups
        assert (described.error_code, described.group_state, described.group_epoch) == (0, "Empty", 1)
        missing = delete_offsets(client, unique("q"), [topic])
        assert missing.error_code == GROUP_ID_NOT_FOUND


def test_fetches_follow_an_alter_and_a_delete_of_the_offsets(broker_factory) -> None:
    broker = broker_factory()
    topic, group = unique("sgo"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 10)
    with RawClient(broker.bootstrap) as client:
        tid = topic_id(client, topic)
        assert alter(client, group, {topic: {0: 6}}).error_code == 0
        assert share_fetch(client, group, 0, tid) == [(6, 9, 1)]
        assert share_fetch(client, group, 1, tid, [(6, 9, ACCEPT)]) == []
        assert start_offsets(client, group) == {(topic, 0): 10}
        # a new state epoch: the window the leader holds is dropped and read again
        assert alter(client, group, {topic: {0: 2}}).error_code == 0
        assert share_fetch(client, group, 0, tid) == [(2, 9, 1)]
        assert share_fetch(client, group, 1, tid, [(2, 9, ACCEPT)]) == []  # written at the new epoch
        assert start_offsets(client, group) == {(topic, 0): 10}
        # deleted: the next fetch starts afresh with share.auto.offset.reset (latest)
        answer = delete_offsets(client, group, [topic])
        assert [(t.topic_name, t.error_code) for t in answer.responses] == [(topic, 0)]
        assert start_offsets(client, group) == {}
        assert share_fetch(client, group, 0, tid) == []
        assert start_offsets(client, group) == {(topic, 0): 10}
        again = delete_offsets(client, group, [topic, "no-such-topic"])
        assert {t.topic_name: t.error_code for t in again.responses} == {topic: 0, "no-such-topic": 3}


def test_delete_groups_deletes_a_share_group_and_its_state(broker_factory) -> None:
    broker = broker_factory()
    topic, group = unique("sgo"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as client:
        assert alter(client, group, {topic: {0: 0}}).error_code == 0
        assert start_offsets(client, group) == {(topic, 0): 0}
        cls = load_request_schema(DELETE_GROUPS, 2)
        answer = client.call(DELETE_GROUPS, 2, build(cls, {"groups_names": [group]}))
        assert [(r.group_id, r.error_code) for r in answer.results] == [(group, 0)]
        assert start_offsets(client, group) == {}
