"""ListGroups in slices (`server/group_listing.py`, `protocol/listed_groups.py`): the same bytes as
a dict per group through the generic encoder, for every version and filter; an answer of at most a
slice at once, a larger one as a coroutine pausing after each slice; groups deleted, created or
unloaded between slices never break it and no group is listed twice."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace as NS
from typing import Any

import pytest
from coordinator_helpers import PREPARING_CONNECT, STABLE_CONSUMER, Harness, build_group

from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.protocol.encoder import SplitFrame, encode_response
from offsetd.server.coordinator_runtime import ShardState
from offsetd.security.authorization import Op, Res
from offsetd.server.group_listing import list_groups

LIST_GROUPS = 16
COORDINATOR_LOAD_IN_PROGRESS = 14  # §0
TYPES = ("classic", "consumer", "share")


def shards(count: int, groups_each: int, prefix: str = "") -> list[Any]:
    """Shard runtimes (state and shard: what the listing reads) with offsets-only groups."""
    runtimes = []
    for s in range(count):
        h = Harness.new()
        for g in range(groups_each):
            h.seed_offsets(f"{prefix}s{s}-g{g}", {("t", 0): 1})
        runtimes.append(NS(state=ShardState.ACTIVE, shard=h.shard, harness=h))
    return runtimes


def consumer_group(h: Harness, group_id: str) -> None:
    """A KIP-848 consumer group of one member (Stable), through the shard."""
    req = ConsumerGroupHeartbeatRequest(group_id=group_id, member_id="m1", member_epoch=0, rebalance_timeout_ms=30_000,
                                        subscribed_topic_names=("foo",), topic_partitions=())
    h.run(h.shard.consumer_group_heartbeat(h.token("cg"), req, 1, h.now, TopicsImage({"foo": (uuid.UUID(int=1), 2)}, 1)))


def ask(runtimes: list[Any], version: int = 5, slice_size: int = 5000, broker: Any = None, **filters: Any) -> Any:
    req = NS(states_filter=filters.get("states", ()), types_filter=filters.get("types", ()))
    return list_groups(broker or NS(), runtimes, NS(version=version, principal="User:alice", host="h"), req,
                       slice_size)


def drive(answer: Any, between: Any = lambda turn: None) -> tuple[dict, int]:
    """Run a coroutine answer by hand, calling between(turn) at each pause: (body, pauses)."""
    turns = 0
    while True:
        try:
            answer.send(None)
        except StopIteration as done:
            return done.value, turns
        turns += 1
        between(turns)


def wire(body: dict, version: int) -> bytes:
    """The frame of an answer as the connection sends it (the parts of a SplitFrame in order)."""
    frame = encode_response(LIST_GROUPS, version, 7, body)
    return b"".join(frame.parts) if isinstance(frame, SplitFrame) else frame


def listed(body: dict, version: int = 5) -> list[tuple[str, str, str, str]]:
    """The groups of an answer, as a client reads them (the encoded frame decoded by kio)."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    frame = wire(body, version)
    header = 5 if version >= 3 else 4  # correlation id, and tagged fields in a flexible header
    decoded = entity_reader(load_response_schema(LIST_GROUPS, version))(frame[4:], header)[0]
    return [(g.group_id, g.protocol_type, getattr(g, "group_state", ""), getattr(g, "group_type", ""))
            for g in decoded.groups]


def dict_answer(runtimes: list[Any], states: set[str], types: set[str]) -> dict:
    """The answer as ListGroups made it before slicing: a dict per group, classic groups first."""
    groups = [{"group_id": g, "protocol_type": p, "group_state": s, "group_type": t}
              for t in TYPES if not types or t in types
              for r in runtimes for g, p, s in r.shard.list_groups(t) if not states or s.lower() in states]
    return {"error_code": 0, "groups": groups}


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize("slice_size", [2, 5000])
def test_the_same_bytes_as_a_dict_per_group(version: int, slice_size: int) -> None:
    runtimes = shards(3, 4)
    h = runtimes[0].harness
    build_group(h, "stable", STABLE_CONSUMER)
    build_group(h, "connect", PREPARING_CONNECT)
    h.seed_offsets("é" * 100, {("t", 0): 1})  # a compact length of two bytes, in UTF-8
    consumer_group(h, "kip848")
    for states, types in [((), ()), (("EMPTY", "stable"), ()), ((), ("Consumer",)), (("stable",), ("classic",))]:
        answer = ask(runtimes, version, slice_size, states=states, types=types)
        body = drive(answer)[0] if asyncio.iscoroutine(answer) else answer
        want = dict_answer(runtimes, {s.lower() for s in states}, {t.lower() for t in types})
        assert wire(body, version) == encode_response(LIST_GROUPS, version, 7, want)


@pytest.mark.parametrize("version", [0, 5])
def test_a_large_answer_goes_out_as_its_slices_the_same_bytes(version: int) -> None:
    """A slice of 64 KB or more is a deferred chunk of a SplitFrame, sent without a copy; the
    smaller ones (here the slices across the shards' edge) are copied into the frame between."""
    runtimes = shards(2, 2500, prefix="a-group-id-of-some-length-")
    body, pauses = drive(ask(runtimes, version, slice_size=2000))
    frame = encode_response(LIST_GROUPS, version, 7, body)
    assert isinstance(frame, SplitFrame) and pauses == 2
    assert b"".join(frame.parts) == encode_response(LIST_GROUPS, version, 7, dict_answer(runtimes, set(), set()))
    assert len(frame) == len(b"".join(frame.parts)) and frame.parts[0][:4] == (len(frame) - 4).to_bytes(4, "big")


def test_at_most_a_slice_is_answered_at_once_more_pauses_after_each_slice() -> None:
    runtimes = shards(3, 7)  # 21 groups
    assert isinstance(ask(runtimes, slice_size=21), dict)
    body, pauses = drive(ask(runtimes, slice_size=5))
    assert pauses == 4  # 5 + 5 + 5 + 5 + 1 ids, read across the shards' edges
    assert sorted(g[0] for g in listed(body)) == sorted(f"s{s}-g{g}" for s in range(3) for g in range(7))


def test_groups_changing_between_slices_neither_break_nor_repeat() -> None:
    runtimes = shards(2, 10)
    h0, h1 = runtimes[0].harness, runtimes[1].harness

    def change(turn: int) -> None:
        if turn == 1:  # in the first shard, being read: one listed already, one not yet
            h0.delete_groups(["s0-g0", "s0-g9"])
            h0.seed_offsets("new-in-s0", {("t", 0): 1})
        if turn == 2:  # the second shard, not read yet
            h1.delete_groups(["s1-g5"])
            h1.seed_offsets("new-in-s1", {("t", 0): 1})

    body, pauses = drive(ask(runtimes, slice_size=3), change)
    names = [g[0] for g in listed(body)]
    assert len(names) == len(set(names))
    assert "s0-g9" not in names and "new-in-s0" not in names and "s1-g5" not in names
    assert "new-in-s1" in names  # its shard's ids were taken after it was created
    assert {f"s{s}-g{g}" for s in range(2) for g in range(1, 9)} - {"s1-g5"} <= set(names)


def test_a_shard_unloaded_between_slices_is_not_read_further() -> None:
    runtimes = shards(2, 6)

    def unload(turn: int) -> None:
        if turn == 1:
            runtimes[0].state = ShardState.UNLOADED
            runtimes[0].shard.reset()

    body, _ = drive(ask(runtimes, slice_size=4), unload)
    assert sorted(g[0] for g in listed(body)) == [f"s0-g{g}" for g in range(4)] + [f"s1-g{g}" for g in range(6)]


def test_a_loading_shard_answers_14_and_one_not_active_is_left_out() -> None:
    runtimes = shards(2, 2)
    runtimes[1].state = ShardState.UNLOADED
    assert [g[0] for g in listed(ask(runtimes))] == ["s0-g0", "s0-g1"]
    runtimes[1].state = ShardState.LOADING
    assert ask(runtimes, slice_size=1) == {"error_code": COORDINATOR_LOAD_IN_PROGRESS, "groups": ()}


def test_under_acls_only_the_groups_the_principal_may_describe_are_listed_in_every_slice() -> None:
    """§4: without DESCRIBE on the cluster, a group the principal may not DESCRIBE is left out."""
    class Authorizer:
        def authorize(self, principal: str, host: str, op: Any, rtype: Any, name: str) -> bool:
            return (principal, op, rtype) == ("User:alice", Op.DESCRIBE, Res.GROUP) and name.startswith("s1-")

    runtimes = shards(3, 5)
    body, pauses = drive(ask(runtimes, slice_size=4, broker=NS(authorizer=Authorizer())))
    assert pauses == 3 and [g[0] for g in listed(body)] == [f"s1-g{g}" for g in range(5)]
