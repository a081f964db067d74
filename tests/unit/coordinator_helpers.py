"""Shared data and drivers for the sans-IO coordinator unit tests (tests/unit/test_coordinator_*.py).

The error codes and the reference's tables are written down here as data, from
`shared/reference/kafka-offsets-conformance.md` (cited as §n), not imported from offsetd, so the
tests check the shard against the specification rather than against itself.

`apply(shard, result)` emulates the shell: a result's records are replayed only when
`result.replay` is true (and, in the real shell, only after they are durable); the completions
come back as a dict token -> response.

`Harness` wraps a shard with a fake clock and a log of every record any result emitted (whatever
its replay flag), which is what `__consumer_offsets` would hold; `replay_into_fresh_shard` loads
that log into a new shard (§5.1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Hashable

from offsetd.coordinator.config import GroupCoordinatorConfig
from offsetd.coordinator.consumer_group_ops import TopicsImage
from offsetd.coordinator.group import GroupState
from offsetd.coordinator.result import CoordinatorResult
from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records.consumer_protocol import encode_consumer_subscription
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, decode_key, decode_value

# ------------------------------------------------------------------------------------------
# §0 error codes (the numbers, from the reference's table)

NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

# §1.11 wire state names
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")

# Default timeouts for test members (inside §1.6's 6000..1800000 session window).
SESSION_MS = 10_000
REBALANCE_MS = 30_000

# Topics: members of "consumer" groups built here subscribe to SUBSCRIBED; OTHER_TOPIC is not
# subscribed by anyone.
SUBSCRIBED = "t-sub"
OTHER_TOPIC = "t-other"


def consumer_protocols(topics: list[str] = (SUBSCRIBED,), names: tuple[str, ...] = ("range",)
                       ) -> list[tuple[str, bytes]]:
    """JoinGroup protocols of a "consumer" member: ConsumerProtocolSubscription v0 metadata."""
    meta = encode_consumer_subscription(list(topics))
    return [(name, meta) for name in names]


def connect_protocols() -> list[tuple[str, bytes]]:
    """Protocols of a non-consumer ("connect") member: opaque metadata."""
    return [("default", b"\x00\x01connect-worker")]


# ------------------------------------------------------------------------------------------
# The shell emulation


def resolve(response: Any) -> Any:
    """A completion may be a callable computing the body at delivery time (result.Response)."""
    return response() if callable(response) else response


def apply(shard: GroupCoordinatorShard, result: CoordinatorResult) -> dict[Hashable, Any]:
    """What the shell does with a result: replay its records only when `result.replay` is true
    (after they are durable), then deliver the completions. Returns token -> response."""
    if result.replay:
        for key, value in result.records:
            if isinstance(key, bytes):  # encoded by the commit path
                shard.replay_raw(key, value)
            else:
                shard.replay(key, value)
    tokens = [token for token, _ in result.completions]
    assert len(tokens) == len(set(tokens)), f"a token was completed twice: {tokens}"
    return {token: resolve(response) for token, response in result.completions}


def decoded(records: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A result's records as key and value objects (the commit path gives them encoded)."""
    return [_decoded(k, v) if isinstance(k, bytes) else (k, v) for k, v in records]


def _decoded(key: bytes, value: bytes | None) -> tuple[Any, Any]:
    k = decode_key(key)
    return k, None if value is None else decode_value(k, value)


def make_config(**overrides: Any) -> GroupCoordinatorConfig:
    """Kafka defaults, except no initial rebalance delay unless a test asks for one."""
    overrides.setdefault("initial_rebalance_delay_ms", 0)
    return GroupCoordinatorConfig(**overrides)


@dataclass
class Harness:
    """A shard, a fake clock (`now`, ms) and the log of every emitted record (§4: what the
    offsets topic would hold, in order)."""

    shard: GroupCoordinatorShard
    now: int = 1_000_000
    log: list[tuple[Any, Any]] = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def new(cls, **config: Any) -> "Harness":
        return cls(GroupCoordinatorShard(0, make_config(**config)))

    def token(self, prefix: str) -> str:
        return f"{prefix}-{next(self._seq)}"

    def run(self, result: CoordinatorResult) -> dict[Hashable, Any]:
        self.log.extend(decoded(result.records))
        return apply(self.shard, result)

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now

    # ---------------------------------------------------------------------- operations

    def join(self, group_id: str | None, member_id: str = "", *, instance_id: str | None = None,
             protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None,
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS,
             require_known: bool = False, client_id: str = "client", token: str | None = None
             ) -> tuple[str, dict[Hashable, Any], CoordinatorResult]:
        """Send a JoinGroup; returns (token, completions, raw result)."""
        token = token or self.token("join")
        req = JoinRequest(
            group_id=group_id, member_id=member_id, group_instance_id=instance_id, client_id=client_id,
            client_host="/127.0.0.1", session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=consumer_protocols() if protocols is None else protocols,
            require_known_member_id=require_known)
        result = self.shard.join_group(token, req, self.now, TopicsImage())
        return token, self.run(result), result

    def sync(self, group_id: str | None, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None, *, instance_id: str | None = None,
             protocol_type: str | None = None, protocol_name: str | None = None,
             token: str | None = None) -> tuple[str, dict[Hashable, Any], CoordinatorResult]:
        token = token or self.token("sync")
        result = self.shard.sync_group(token, group_id, member_id, instance_id, generation, protocol_type,
                                       protocol_name, assignments or {}, self.now)
        return token, self.run(result), result

    def heartbeat(self, group_id: str | None, member_id: str, generation: int,
                  instance_id: str | None = None) -> int:
        token = self.token("hb")
        done = self.run(self.shard.heartbeat(token, group_id, member_id, instance_id, generation, self.now))
        return done[token]["error_code"]

    def leave(self, group_id: str | None, members: list[tuple[str, str | None]]
              ) -> tuple[dict[str, Any], dict[Hashable, Any], CoordinatorResult]:
        token = self.token("leave")
        result = self.shard.leave_group(token, group_id, members, self.now)
        done = self.run(result)
        return done[token], done, result

    def commit(self, group_id: str | None, offsets: list[tuple[str, int, int, int, str | None]], *,
               member_id: str = "", instance_id: str | None = None, generation: int = -1,
               retention_ms: int = -1, version: int = 9
               ) -> tuple[dict[tuple[str, int], int], dict[Hashable, Any], CoordinatorResult]:
        token = self.token("commit")
        result = self.shard.commit_offsets(token, group_id, member_id, instance_id, generation, offsets,
                                           retention_ms, version, self.now)
        done = self.run(result)
        return done[token], done, result

    def fire(self, at: int | None = None) -> tuple[dict[Hashable, Any], CoordinatorResult]:
        """Advance the clock to `at` (if given) and fire every expired timer."""
        if at is not None:
            assert at >= self.now
            self.now = at
        result = self.shard.fire_timers(self.now)
        return self.run(result), result

    def delete_groups(self, group_ids: list[str]) -> tuple[dict[str, int], CoordinatorResult]:
        token = self.token("delete-groups")
        result = self.shard.delete_groups(token, group_ids)
        return self.run(result)[token], result

    def delete_offsets(self, group_id: str | None, topics: list[tuple[str, list[int]]]
                       ) -> tuple[dict[str, Any], CoordinatorResult]:
        token = self.token("delete-offsets")
        result = self.shard.delete_offsets(token, group_id, topics)
        return self.run(result)[token], result

    # ------------------------------------------------------------------------ queries

    def state(self, group_id: str) -> str:
        return self.shard.describe_group(group_id)["group_state"]

    def member_ids(self, group_id: str) -> list[str]:
        return [m["member_id"] for m in self.shard.describe_group(group_id)["members"]]

    def offset(self, group_id: str, topic: str, partition: int) -> int:
        [(_, [(_, offset, _, _)])] = self.shard.fetch_offsets(group_id, [(topic, [partition])])
        return offset

    def seed_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Put committed offsets in place the way the loader does: replay OffsetCommit records."""
        for (topic, partition), offset in offsets.items():
            key = OffsetCommitKey(group_id, topic, partition)
            value = OffsetCommitValue(offset=offset, commit_timestamp=self.now)
            self.log.append((key, value))
            self.shard.replay(key, value)


# ------------------------------------------------------------------------------------------
# Building groups in a given state


@dataclass
class GroupInfo:
    """A group built for a test. `members` are current member ids (leader first);
    `former` are ids of members that left (for Empty groups); `generation` is G."""

    group_id: str
    generation: int
    members: list[str]
    leader: str | None
    former: list[str] = field(default_factory=list)
    instance_ids: dict[str, str] = field(default_factory=dict)  # member id -> instance id
    protocol_type: str | None = "consumer"

    @property
    def follower(self) -> str:
        return next(m for m in self.members if m != self.leader)

    @property
    def some_member(self) -> str:
        """A member id that is valid for the group if it has members, else a former member."""
        return self.members[0] if self.members else (self.former[0] if self.former else "former-member")


def form_group(h: Harness, group_id: str, instances: list[str | None], *, protocol_type: str = "consumer",
               protocols: list[tuple[str, bytes]] | None = None) -> GroupInfo:
    """Bring `len(instances)` members (None = dynamic, else that static instance id) through one
    join phase in a new group (initial delay 0) and return it in CompletingRebalance.

    Dynamic members do the v4+ MEMBER_ID_REQUIRED handshake first; while their ids are pending
    the join phase cannot complete (§1.6), so every member lands in the same generation."""
    assert len(instances) == 1 or None in instances, "need a dynamic member to hold the join phase open"
    pending: list[str] = []
    for inst in instances:
        if inst is None:
            tok, done, _ = h.join(group_id, require_known=True, protocol_type=protocol_type, protocols=protocols)
            assert done[tok]["error_code"] == MEMBER_ID_REQUIRED, done
            pending.append(done[tok]["member_id"])
    tokens: list[str] = []
    everything: dict[Hashable, Any] = {}
    for inst in instances:
        if inst is not None:
            tok, done, _ = h.join(group_id, instance_id=inst, require_known=True, protocol_type=protocol_type,
                                  protocols=protocols)
            tokens.append(tok)
            everything.update(done)
    for member_id in pending:
        tok, done, _ = h.join(group_id, member_id, require_known=True, protocol_type=protocol_type,
                              protocols=protocols)
        tokens.append(tok)
        everything.update(done)
    responses = [everything[t] for t in tokens]
    assert all(r["error_code"] == NONE for r in responses), responses
    generation = responses[0]["generation_id"]
    leader = responses[0]["leader"]
    members = [r["member_id"] for r in responses]
    members.sort(key=lambda m: m != leader)
    instance_ids = {}
    for inst, r in zip([i for i in instances if i is not None], responses):
        instance_ids[r["member_id"]] = inst
    assert h.state(group_id) == COMPLETING
    return GroupInfo(group_id, generation, members, leader, instance_ids=instance_ids, protocol_type=protocol_type)


def stabilize(h: Harness, info: GroupInfo, assignments: dict[str, bytes] | None = None) -> dict[Hashable, Any]:
    """Followers sync (parked), then the leader syncs with `assignments` -> Stable (§1.7)."""
    assignments = assignments if assignments is not None else {m: f"assignment-{m}".encode() for m in info.members}
    done: dict[Hashable, Any] = {}
    for m in info.members:
        if m != info.leader:
            _, d, _ = h.sync(info.group_id, m, info.generation, instance_id=info.instance_ids.get(m))
            done.update(d)
    _, d, _ = h.sync(info.group_id, info.leader, info.generation, assignments,
                     instance_id=info.instance_ids.get(info.leader))
    done.update(d)
    assert h.state(info.group_id) == STABLE
    return done


# Names of the group situations the reference's tables have rows for.
MISSING = "does not exist"
EMPTY_SIMPLE = "Empty (simple)"
EMPTY_CONSUMER = "Empty (consumer)"
EMPTY_CONNECT = "Empty (connect)"
PREPARING_CONSUMER = "PreparingRebalance (consumer)"
COMPLETING_CONSUMER = "CompletingRebalance (consumer)"
STABLE_CONSUMER = "Stable (consumer)"
PREPARING_CONNECT = "PreparingRebalance (connect)"
COMPLETING_CONNECT = "CompletingRebalance (connect)"
STABLE_CONNECT = "Stable (connect)"
STABLE_CONSUMER_UNPARSABLE = "Stable (consumer, unparsable subscription)"
DEAD_GROUP = "Dead"


def build_group(h: Harness, group_id: str, situation: str) -> GroupInfo:
    """A group in the named situation. Non-empty groups have two members (leader first).

    Dead: the shard has no operation that makes a group Dead (NEW only does so on unload, §5.2),
    so the test drives the state machine directly: `ClassicGroup.transition(GroupState.DEAD)`."""
    if situation == MISSING:
        return GroupInfo(group_id, 0, [], None, protocol_type=None)
    if situation == EMPTY_SIMPLE:
        errors, _, _ = h.commit(group_id, [(OTHER_TOPIC, 0, 1, -1, None)])
        assert errors == {(OTHER_TOPIC, 0): NONE}
        assert h.state(group_id) == EMPTY
        return GroupInfo(group_id, 0, [], None, protocol_type=None)
    connect = "connect" in situation
    unparsable = "unparsable" in situation
    protocol_type = "connect" if connect else "consumer"
    protocols = connect_protocols() if connect else (
        [("range", b"\x00")] if unparsable else consumer_protocols())
    if situation in (EMPTY_CONSUMER, EMPTY_CONNECT):
        info = form_group(h, group_id, [None], protocol_type=protocol_type, protocols=protocols)
        stabilize(h, info)
        body, _, _ = h.leave(group_id, [(info.leader, None)])
        assert body["error_code"] == NONE and body["members"][0]["error_code"] == NONE
        assert h.state(group_id) == EMPTY
        return GroupInfo(group_id, info.generation + 1, [], None, former=info.members, protocol_type=protocol_type)
    info = form_group(h, group_id, [None, None], protocol_type=protocol_type, protocols=protocols)
    if situation in (COMPLETING_CONSUMER, COMPLETING_CONNECT):
        return info
    stabilize(h, info)
    if situation in (STABLE_CONSUMER, STABLE_CONNECT, STABLE_CONSUMER_UNPARSABLE):
        return info
    if situation in (PREPARING_CONSUMER, PREPARING_CONNECT):
        # The leader rejoins: a rebalance starts; the follower has not rejoined, so it stays open.
        tok, done, _ = h.join(group_id, info.leader, protocol_type=protocol_type, protocols=protocols)
        assert tok not in done
        assert h.state(group_id) == PREPARING
        return info
    if situation == DEAD_GROUP:
        h.shard.groups[group_id].transition(GroupState.DEAD, h.now)
        assert h.state(group_id) == DEAD
        return info
    raise ValueError(situation)


def replay_into_fresh_shard(log: list[tuple[Any, Any]], config: GroupCoordinatorConfig | None = None
                            ) -> GroupCoordinatorShard:
    """Load an offsets-topic log into a new shard (§5.1: every record replayed in order)."""
    shard = GroupCoordinatorShard(0, config or make_config())
    for key, value in log:
        shard.replay(key, value)
    return shard


def group_records(records: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    return [(k, v) for k, v in records if isinstance(k, GroupMetadataKey)]
