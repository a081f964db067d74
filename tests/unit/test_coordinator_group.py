"""ClassicGroup rules on their own: the §1.11 state machine and the §1.4 subscription test
(§6.2 ClassicGroupTest transition tests, testIsSubscribedToTopic, testSubscribedTopics*)."""

from __future__ import annotations

import pytest

from offsetd.coordinator.group import ClassicGroup, ClassicGroupMember, GroupState, IllegalStateTransition
from offsetd.records.consumer_protocol import encode_consumer_subscription

E, P, C, S, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                 GroupState.STABLE, GroupState.DEAD)

# §1.11 allowed previous states of each target state.
ALLOWED_FROM = {
    E: {P},
    P: {S, C, E},
    C: {P},
    S: {C},
    D: {E, P, C, S, D},
}

TRANSITIONS = [pytest.param(src, dst, src in ALLOWED_FROM[dst], id=f"{src.value}->{dst.value}")
               for src in GroupState for dst in GroupState]


@pytest.mark.parametrize("src,dst,allowed", TRANSITIONS)
def test_state_transitions(src, dst, allowed):
    """§1.11: only the listed transitions are allowed; every transition stamps
    currentStateTimestamp = now; an illegal one changes nothing."""
    group = ClassicGroup("g", state=src, state_timestamp=1)
    if allowed:
        group.transition(dst, 500)
        assert (group.state, group.state_timestamp) == (dst, 500)
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition(dst, 500)
        assert (group.state, group.state_timestamp) == (src, 1)


def test_state_wire_names():
    """§1.10/§1.11: the names are the wire strings."""
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def member(member_id: str, protocol_type: str, metadata: bytes) -> ClassicGroupMember:
    return ClassicGroupMember(member_id=member_id, group_instance_id=None, client_id="c", client_host="/h",
                              rebalance_timeout_ms=30_000, session_timeout_ms=10_000, protocol_type=protocol_type,
                              protocols=[("range", metadata)])


SUB = encode_consumer_subscription(["a", "b"])

# (id, protocol type, members' metadata (None: no members), protocol chosen, topic -> subscribed?)
SUBSCRIPTION_CASES = [
    ("no protocol type (simple)", None, None, None, {"a": False}),
    ("non-consumer protocol", "connect", [SUB], "range", {"a": False, "z": False}),
    ("consumer, no members", "consumer", None, None, {"a": False}),
    ("consumer with a subscription", "consumer", [SUB], "range", {"a": True, "b": True, "z": False}),
    ("consumer, union of members", "consumer", [SUB, encode_consumer_subscription(["z"])], "range",
     {"a": True, "z": True, "y": False}),
    ("consumer, protocol not chosen yet", "consumer", [SUB], None, {"a": True, "z": True}),
    ("consumer, unparsable metadata", "consumer", [b"\x00\x00\xff"], "range", {"a": True, "z": True}),
    ("consumer, later subscription version with extra fields", "consumer",
     [encode_consumer_subscription(["a"], b"ud", version=3) + b"\x00\x00\x00\x05extra"], "range",
     {"a": True, "b": False}),
]


@pytest.mark.parametrize("protocol_type,metadatas,protocol,expected",
                         [pytest.param(t, m, p, e, id=i) for i, t, m, p, e in SUBSCRIPTION_CASES])
def test_is_subscribed_to_topic(protocol_type, metadatas, protocol, expected):
    """§1.4 isSubscribedToTopic: a known set decides; an unknown one (no or non-"consumer" protocol
    type, protocol not chosen, unparsable metadata) means subscribed iff the protocol type is
    "consumer". "consumer" with no members is known and empty. Metadata is parsed as
    ConsumerProtocolSubscription v0 after an int16 version; later fields are ignored."""
    group = ClassicGroup("g")
    for i, metadata in enumerate(metadatas or []):
        group.add(member(f"m{i}", protocol_type or "", metadata))
    group.protocol_type = protocol_type
    group.protocol_name = protocol
    group.compute_subscribed_topics()
    assert {t: group.is_subscribed_to_topic(t) for t in expected} == expected
