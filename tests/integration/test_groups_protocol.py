"""Wire-level group behaviour that clients hide, with exact requests from the kio-based raw client
(tests/raw_client.py) against a real broker process: FindCoordinator single and batched keys,
the JoinGroup MEMBER_ID_REQUIRED handshake and timeout validation, and the OffsetCommit error
choices that depend on the request version (reference §0, §1.1, §1.6, §1.10, §7)."""

from __future__ import annotations

import datetime

import pytest
from kio.index import load_request_schema
from kio.schema.types import GroupId
from kio.static.primitive import i8

from clients import create_topic
from group_helpers import GROUP_BROKER, raw_offset_commit, raw_offset_fetch, unique
from raw_client import RawClient

FIND_COORDINATOR, JOIN_GROUP = 10, 11
# ConsumerProtocolSubscription v0 for topics ["foo", "bar"] (reference §4.8)
SUBSCRIPTION = bytes.fromhex("0000000000020003666f6f0003626172ffffffff")


def _schema(api_key: int, version: int):
    cls = load_request_schema(api_key, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def _join(client: RawClient, group: str, member_id: str = "", session_ms: int = 10000, version: int = 9,
          protocols=(("range", SUBSCRIPTION),)):
    cls, mod = _schema(JOIN_GROUP, version)
    fields = dict(group_id=GroupId(group), session_timeout=datetime.timedelta(milliseconds=session_ms),
                  rebalance_timeout=datetime.timedelta(milliseconds=10000), member_id=member_id,
                  group_instance_id=None, protocol_type="consumer",
                  protocols=tuple(mod.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols))
    if version >= 8:
        fields["reason"] = None
    return client.call(JOIN_GROUP, version, cls(**fields))


def test_find_coordinator_single_and_batched_keys(broker_factory):
    """§1.10 FindCoordinator: v3 answers one key with top-level fields; v4+ answers each of several
    keys in `Coordinators[]`; every group's coordinator is this broker's advertised endpoint."""
    broker = broker_factory(GROUP_BROKER)
    host, port = broker.bootstrap.rsplit(":", 1)
    with RawClient(broker.bootstrap) as client:
        cls, _ = _schema(FIND_COORDINATOR, 3)
        single = client.call(FIND_COORDINATOR, 3, cls(key="g-one", key_type=i8(0)))
        assert (int(single.error_code.value), single.node_id, single.host, single.port) == (0, 1, host, int(port))
        cls, _ = _schema(FIND_COORDINATOR, 4)
        batched = client.call(FIND_COORDINATOR, 4, cls(key_type=i8(0), coordinator_keys=("g-one", "g-two", "")))
        assert [(c.key, int(c.error_code.value), c.node_id, c.host, c.port) for c in batched.coordinators] == [
            (k, 0, 1, host, int(port)) for k in ("g-one", "g-two", "")]


def test_join_group_member_id_required_handshake(broker_factory):
    """§1.6: a v4+ JoinGroup with MemberId "" gets MEMBER_ID_REQUIRED(79) with a generated id
    `clientId + "-" + UUID`; rejoining with it completes the (first, delay 0) rebalance: generation
    1, this member the leader, the protocol chosen from the request, the member listed with its
    subscription metadata (§1.6 v7+ returns the protocol type)."""
    broker = broker_factory(GROUP_BROKER)
    group = unique("graw")
    with RawClient(broker.bootstrap) as client:
        first = _join(client, group)
        assert int(first.error_code.value) == 79
        assert first.member_id.startswith("raw-test-") and len(first.member_id) > len("raw-test-")
        joined = _join(client, group, member_id=first.member_id)
        assert int(joined.error_code.value) == 0
        assert (joined.generation_id, joined.leader, joined.member_id) == (1, first.member_id, first.member_id)
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, SUBSCRIPTION)]


@pytest.mark.parametrize("session_ms, error", [(999, 26), (1000, 79), (300001, 26)])
def test_join_group_session_timeout_bounds(broker_factory, session_ms, error):
    """§1.6: SessionTimeoutMs below group.min.session.timeout.ms or above
    group.max.session.timeout.ms → INVALID_SESSION_TIMEOUT(26); at the minimum it is accepted
    (the handshake's MEMBER_ID_REQUIRED follows)."""
    broker = broker_factory({**GROUP_BROKER, "group.max.session.timeout.ms": "300000"})
    with RawClient(broker.bootstrap) as client:
        assert int(_join(client, unique("gsess"), session_ms=session_ms).error_code.value) == error


def test_join_group_empty_group_id_is_invalid(broker_factory):
    """§7.3: "" is INVALID_GROUP_ID(24) for JoinGroup, but a valid group id for OffsetCommit and
    OffsetFetch."""
    broker = broker_factory(GROUP_BROKER)
    topic = unique("empty-id")
    create_topic(broker.bootstrap, topic, partitions=1)
    with RawClient(broker.bootstrap) as client:
        assert int(_join(client, "").error_code.value) == 24
    assert raw_offset_commit(broker.bootstrap, "", topic, {0: (5, "blank", -1)}) == {0: 0}
    assert raw_offset_fetch(broker.bootstrap, "", topic, [0]) == {0: (5, -1, "blank", 0)}


@pytest.mark.parametrize("version, error", [(9, 69), (8, 22), (5, 22)])
def test_commit_with_generation_to_unknown_group(broker_factory, version, error):
    """§1.1 step 7 / §7.1: a commit with generation ≥ 0 to a group that does not exist gets
    GROUP_ID_NOT_FOUND(69) from v9 on and ILLEGAL_GENERATION(22) before; nothing is committed and
    no group is created (a later fetch reads -1)."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("gen"), unique("gnone")
    create_topic(broker.bootstrap, topic, partitions=1)
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (5, None, -1)}, version=version,
                             generation=3, member_id="someone") == {0: error}
    assert raw_offset_fetch(broker.bootstrap, group, topic, [0]) == {0: (-1, -1, "", 0)}


def test_commit_to_unknown_topic_partition(broker_factory):
    """§1.1 step 3 / §7.5: partitions of unknown topics, or partition indexes that do not exist,
    get UNKNOWN_TOPIC_OR_PARTITION(3) before any group check, while the valid partition of the
    same request commits."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("known"), unique("gpart")
    create_topic(broker.bootstrap, topic, partitions=1)
    assert raw_offset_commit(broker.bootstrap, group, topic, {0: (1, None, -1), 5: (1, None, -1)}) == {0: 0, 5: 3}
    missing = unique("missing")
    assert raw_offset_commit(broker.bootstrap, unique("gmissing"), missing, {0: (1, None, -1)}) == {0: 3}
