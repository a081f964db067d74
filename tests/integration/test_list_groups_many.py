"""ListGroups of more groups than one slice (server/group_listing.py answers them in slices of
5,000 with turns of the event loop between): 12,000 offsets-only groups made by pipelined raw
OffsetCommits on one connection, listed exactly through confluent-kafka's AdminClient, with the
state and type filters, and raw at v0 and v3 (the versions before state and type)."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from clients import create_topic
from group_helpers import request_schema, unique
from raw_client import RawClient, decode_response

OFFSET_COMMIT, LIST_GROUPS = 8, 16
GROUPS = 12_000
PIPELINE = 500  # commits sent before their answers are read


def commit_many(bootstrap: str, groups: list[str], topic: str) -> None:
    """One standalone OffsetCommit (v8) per group, PIPELINE at a time on one connection."""
    cls, mod = request_schema(OFFSET_COMMIT, 8)
    partitions = (mod.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(1),
                                                   committed_leader_epoch=i32(-1), committed_metadata=None),)
    topics = (mod.OffsetCommitRequestTopic(name=TopicName(topic), partitions=partitions),)
    with RawClient(bootstrap, timeout=60) as client:
        for start in range(0, len(groups), PIPELINE):
            first = client.correlation_id + 1
            batch = groups[start:start + PIPELINE]
            client.send_raw(b"".join(
                len(frame).to_bytes(4, "big") + frame for frame in
                (client.encode_request(OFFSET_COMMIT, 8, cls(group_id=GroupId(g), generation_id_or_member_epoch=i32(-1),
                                                              member_id="", group_instance_id=None, topics=topics))
                 for g in batch)))
            for n in range(len(batch)):
                response = decode_response(OFFSET_COMMIT, 8, client.read_frame(), first + n)
                assert [p.error_code.value for t in response.topics for p in t.partitions] == [0]


@pytest.fixture(scope="module")
def many_groups(shared_broker):
    """The shared broker with GROUPS offsets-only groups of a fresh prefix."""
    topic, prefix = unique("lgmany"), unique("lgm")
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    groups = [f"{prefix}-{n:05d}" for n in range(GROUPS)]
    commit_many(shared_broker.bootstrap, groups, topic)
    return shared_broker, prefix, set(groups)


def _listed(admin: AdminClient, prefix: str, **filters) -> dict[str, tuple]:
    result = admin.list_consumer_groups(request_timeout=60, **filters).result(90)
    assert not result.errors, result.errors
    return {g.group_id: (g.state, g.type, g.is_simple_consumer_group) for g in result.valid
            if g.group_id.startswith(prefix)}


def test_every_group_listed_once_with_filters(many_groups):
    broker, prefix, groups = many_groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = _listed(admin, prefix)
    assert set(listed) == groups
    assert set(listed.values()) == {(ConsumerGroupState.EMPTY, ConsumerGroupType.CLASSIC, True)}
    assert set(_listed(admin, prefix, states={ConsumerGroupState.EMPTY})) == groups
    assert set(_listed(admin, prefix, types={ConsumerGroupType.CLASSIC})) == groups
    assert _listed(admin, prefix, states={ConsumerGroupState.STABLE}) == {}
    assert _listed(admin, prefix, types={ConsumerGroupType.CONSUMER}) == {}


@pytest.mark.parametrize("version", [0, 3])
def test_old_versions_list_every_group_once(many_groups, version):
    broker, prefix, groups = many_groups
    cls, _ = request_schema(LIST_GROUPS, version)
    with RawClient(broker.bootstrap, timeout=60) as client:
        response = client.call(LIST_GROUPS, version, cls())
    assert response.error_code.value == 0
    names = [g.group_id for g in response.groups if g.group_id.startswith(prefix)]
    assert len(names) == len(set(names)) and set(names) == groups
    assert {g.protocol_type for g in response.groups if g.group_id.startswith(prefix)} == {""}
