"""Classic-group membership on the sans-IO GroupCoordinatorShard: JoinGroup (§1.6), SyncGroup
(§1.7), Heartbeat (§1.8), LeaveGroup (§1.9) and the state machine (§1.11).

Error tables are data (the *_MATRIX / *_CASES lists); the group situations they refer to are
built by `coordinator_helpers.build_group`.
"""

from __future__ import annotations

import pytest

from coordinator_helpers import (
    COMPLETING, COMPLETING_CONSUMER, DEAD_GROUP, EMPTY, EMPTY_CONSUMER, EMPTY_SIMPLE, MISSING, PREPARING,
    PREPARING_CONSUMER, REBALANCE_MS, SESSION_MS, STABLE, STABLE_CONSUMER,
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NONE,
    REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
    Harness, build_group, connect_protocols, consumer_protocols, form_group, group_records, stabilize,
)
from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
from offsetd.records.offsets import GroupMetadataKey


def join_done(done: dict, token: str) -> dict:
    assert token in done, f"join {token} is still parked"
    return done[token]


def fire_each_deadline(h: Harness, until: int) -> dict:
    """Emulate a shell that wakes at every timer deadline up to `until` (inclusive), in order."""
    completed: dict = {}
    while (deadline := h.shard.next_deadline()) is not None and deadline <= until:
        done, _ = h.fire(max(deadline, h.now))
        completed.update(done)
    h.now = max(h.now, until)
    return completed


# ==========================================================================================
# §1.6 JoinGroup: the MEMBER_ID_REQUIRED handshake and the first generation


@pytest.mark.parametrize("n_members", [1, 2, 3])
def test_member_id_required_handshake_then_join_completes(n_members):
    """§1.6 (v4+): a dynamic member joining with MemberId "" gets MEMBER_ID_REQUIRED(79) and a
    generated id; rejoining with it completes the join phase (initial delay 0) once no handshake is
    open: generation 1, CompletingRebalance, the selected protocol, the leader gets the member list
    (with metadata) and followers get none. A new group writes an "empty" GroupMetadata record
    (ProtocolType "", generation 0, null protocol and leader, no members)."""
    h = Harness.new()
    t0 = h.now
    ids = []
    for i in range(n_members):
        tok, done, result = h.join("g", require_known=True, client_id=f"client-{i}")
        resp = join_done(done, tok)
        assert resp["error_code"] == MEMBER_ID_REQUIRED
        assert resp["member_id"].startswith(f"client-{i}-")
        ids.append(resp["member_id"])
        if i == 0:
            assert result.records == [(GroupMetadataKey("g"), GroupMetadataValue(
                protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=t0,
                members=()))]
    assert len(set(ids)) == n_members
    assert h.state("g") == EMPTY

    h.advance(10)
    tokens = []
    everything: dict = {}
    for i, member_id in enumerate(ids):
        tok, done, _ = h.join("g", member_id, require_known=True, client_id=f"client-{i}")
        tokens.append(tok)
        everything.update(done)
        if i < n_members - 1:
            assert not any(t in done for t in tokens), "the join phase waits for open handshakes"
    responses = [join_done(everything, t) for t in tokens]
    assert h.state("g") == COMPLETING
    leader = responses[0]["leader"]
    assert leader == ids[0]
    meta = consumer_protocols()[0][1]
    for member_id, resp in zip(ids, responses):
        assert resp["error_code"] == NONE
        assert resp["generation_id"] == 1
        assert resp["member_id"] == member_id
        assert (resp["protocol_type"], resp["protocol_name"], resp["leader"]) == ("consumer", "range", leader)
        if member_id == leader:
            assert [(m["member_id"], m["metadata"]) for m in resp["members"]] == [(m, meta) for m in ids]
        else:
            assert list(resp["members"]) == []


@pytest.mark.parametrize("assign_follower", [True, False], ids=["full assignment", "follower missing"])
def test_sync_leader_stabilizes_group_and_completes_parked_followers(assign_follower):
    """§1.7: in CompletingRebalance a follower's SyncGroup is parked until the leader's; the leader's
    assignment (missing members get an empty one) is written as a GroupMetadata record (generation,
    protocol type and name, leader, members with subscription metadata and assignment,
    currentStateTimestamp), every parked sync gets its assignment and the group becomes Stable."""
    h = Harness.new()
    tok_a, done, _ = h.join("g", require_known=True, client_id="client-a")
    a = done[tok_a]["member_id"]
    tok_b, done, _ = h.join("g", require_known=True, client_id="client-b", session_ms=12_000,
                            rebalance_ms=40_000)
    b = done[tok_b]["member_id"]
    h.join("g", a, require_known=True, client_id="client-a")
    joined_at = h.now
    _, done, _ = h.join("g", b, require_known=True, client_id="client-b", session_ms=12_000, rebalance_ms=40_000)
    assert h.state("g") == COMPLETING

    h.advance(100)
    tok_sb, done, result = h.sync("g", b, 1)
    assert tok_sb not in done and result.records == []
    assert h.state("g") == COMPLETING
    assignments = {a: b"for-a", b: b"for-b"} if assign_follower else {a: b"for-a"}
    tok_sa, done, result = h.sync("g", a, 1, assignments)
    expected_b = b"for-b" if assign_follower else b""
    assert done[tok_sa] == {"error_code": NONE, "protocol_type": "consumer", "protocol_name": "range",
                            "assignment": b"for-a"}
    assert done[tok_sb] == {"error_code": NONE, "protocol_type": "consumer", "protocol_name": "range",
                            "assignment": expected_b}
    assert h.state("g") == STABLE

    [(key, value)] = result.records
    assert key == GroupMetadataKey("g")
    meta = consumer_protocols()[0][1]
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", 1, "range", a)
    # §1.11: every transition stamps the time; the record carries the group's state timestamp (the
    # reference does not say whether the CompletingRebalance or the Stable stamp is persisted).
    assert value.current_state_timestamp in (joined_at, h.now)
    assert value.members == (
        MemberMetadata(member_id=a, group_instance_id=None, client_id="client-a", client_host="/127.0.0.1",
                       rebalance_timeout=REBALANCE_MS, session_timeout=SESSION_MS, subscription=meta,
                       assignment=b"for-a"),
        MemberMetadata(member_id=b, group_instance_id=None, client_id="client-b", client_host="/127.0.0.1",
                       rebalance_timeout=40_000, session_timeout=12_000, subscription=meta,
                       assignment=expected_b),
    )

    # Stable: a sync answers the member's current assignment at once.
    tok, done, _ = h.sync("g", b, 1)
    assert done[tok]["assignment"] == expected_b


def test_simple_group_can_be_joined():
    """§1.6: a simple group (Empty, no protocol type) can be joined; it takes the joiner's protocol
    type, and its committed offsets stay."""
    h = Harness.new()
    build_group(h, "g", EMPTY_SIMPLE)
    info = form_group(h, "g", [None])
    assert h.shard.describe_group("g")["protocol_type"] == "consumer"
    assert info.generation == 1
    assert h.shard.fetch_offsets("g", None) != []


# ==========================================================================================
# §1.6 JoinGroup errors

JOIN_ERROR_CASES = [
    # (id, situation, request overrides (callable info -> kwargs), expected error)
    ("group id '' -> 24", MISSING, lambda i: {"group_id": ""}, INVALID_GROUP_ID),
    ("group id null -> 24", MISSING, lambda i: {"group_id": None}, INVALID_GROUP_ID),
    ("session below min -> 26", MISSING, lambda i: {"session_ms": 5999}, INVALID_SESSION_TIMEOUT),
    ("session above max -> 26", MISSING, lambda i: {"session_ms": 1_800_001}, INVALID_SESSION_TIMEOUT),
    ("session min ok", MISSING, lambda i: {"session_ms": 6000}, MEMBER_ID_REQUIRED),
    ("session max ok", MISSING, lambda i: {"session_ms": 1_800_000}, MEMBER_ID_REQUIRED),
    ("missing group, member id set -> 25", MISSING, lambda i: {"member_id": "someone"}, UNKNOWN_MEMBER_ID),
    ("new group, empty protocol type -> 23", MISSING, lambda i: {"protocol_type": ""},
     INCONSISTENT_GROUP_PROTOCOL),
    ("new group, no protocols -> 23", MISSING, lambda i: {"protocols": []}, INCONSISTENT_GROUP_PROTOCOL),
    ("simple group, empty protocol type -> 23", EMPTY_SIMPLE, lambda i: {"protocol_type": ""},
     INCONSISTENT_GROUP_PROTOCOL),
    ("Empty group, another protocol type -> accepted", EMPTY_CONSUMER,
     lambda i: {"protocol_type": "connect", "protocols": connect_protocols()}, MEMBER_ID_REQUIRED),
    ("Empty group, known member id -> 25", EMPTY_CONSUMER, lambda i: {"member_id": i.former[0]},
     UNKNOWN_MEMBER_ID),
    ("Stable, other protocol type -> 23", STABLE_CONSUMER,
     lambda i: {"protocol_type": "connect", "protocols": connect_protocols()}, INCONSISTENT_GROUP_PROTOCOL),
    ("Stable, no common protocol -> 23", STABLE_CONSUMER,
     lambda i: {"protocols": consumer_protocols(names=("roundrobin",))}, INCONSISTENT_GROUP_PROTOCOL),
    ("Stable, unknown member id -> 25", STABLE_CONSUMER, lambda i: {"member_id": "stranger"}, UNKNOWN_MEMBER_ID),
    ("Dead, new member -> 15", DEAD_GROUP, lambda i: {}, COORDINATOR_NOT_AVAILABLE),
    ("Dead, existing member -> 15", DEAD_GROUP, lambda i: {"member_id": i.leader}, COORDINATOR_NOT_AVAILABLE),
]


@pytest.mark.parametrize("situation,overrides,expected",
                         [pytest.param(s, o, e, id=i) for i, s, o, e in JOIN_ERROR_CASES])
def test_join_errors(situation, overrides, expected):
    """§1.6 errors: 24 for ""/null group id; 26 outside group.{min,max}.session.timeout.ms;
    25 for a member id on a missing group (which is not created); 23 for an empty protocol type or
    protocol list on an Empty group, or a different protocol type / no common protocol on a
    non-empty one; 25 for a known member id on an Empty group; 15 on a Dead group."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    kwargs = {"group_id": "g", "require_known": True}
    kwargs.update(overrides(info))
    group_id = kwargs.pop("group_id")
    log_before = len(h.log)
    tok, done, result = h.join(group_id, **kwargs)
    assert done[tok]["error_code"] == expected
    assert len(done) == 1
    if expected not in (NONE, MEMBER_ID_REQUIRED):
        # a rejected join creates nothing and writes nothing
        assert result.records == [] and len(h.log) == log_before
        if situation == MISSING:
            assert h.state("g") == "Dead" and list(h.shard.list_groups()) == []


@pytest.mark.parametrize("situation", [COMPLETING_CONSUMER, STABLE_CONSUMER])
def test_group_max_size_completing_and_stable(situation):
    """§1.6 group.max.size in CompletingRebalance or Stable: a new member is refused with
    GROUP_MAX_SIZE_REACHED(81) when the group is full; an existing member is accepted."""
    h = Harness.new(group_max_size=2)
    info = build_group(h, "g", situation)
    tok, done, _ = h.join("g", require_known=True)
    assert done[tok]["error_code"] == GROUP_MAX_SIZE_REACHED
    tok, done, _ = h.join("g", require_known=False)
    assert done[tok]["error_code"] == GROUP_MAX_SIZE_REACHED
    assert len(h.member_ids("g")) == 2
    tok, done, _ = h.join("g", info.leader)
    assert done.get(tok, {"error_code": NONE})["error_code"] != GROUP_MAX_SIZE_REACHED


def test_group_max_size_preparing_rebalance():
    """§1.6 group.max.size in PreparingRebalance: accepted if the member is already awaiting a join
    or fewer than max members are awaiting; otherwise 81 (even for a member of the group)."""
    h = Harness.new(group_max_size=3)
    info = build_group(h, "g", PREPARING_CONSUMER)  # 2 members, only the leader awaits a join
    tok, done, _ = h.join("g")  # a new member: 1 awaiting < 3
    assert tok not in done
    tok, done, _ = h.join("g")  # another: 2 awaiting < 3
    assert tok not in done
    tok, done, _ = h.join("g")  # 3 awaiting: full
    assert done[tok]["error_code"] == GROUP_MAX_SIZE_REACHED
    tok, done, _ = h.join("g", info.follower)  # a member, but not awaiting: full
    assert done[tok]["error_code"] == GROUP_MAX_SIZE_REACHED
    tok, done, _ = h.join("g", info.leader)  # already awaiting: accepted
    assert done.get(tok, {"error_code": NONE})["error_code"] != GROUP_MAX_SIZE_REACHED


def test_group_max_size_empty_group_always_accepts():
    """§1.6: an Empty group always accepts the joining member."""
    h = Harness.new(group_max_size=1)
    build_group(h, "g", EMPTY_CONSUMER)
    info = form_group(h, "g", [None])
    assert len(info.members) == 1


# ==========================================================================================
# §1.6 initial rebalance delay

# (arrival times of new members relative to the first join, when the join phase completes)
# delay 3000, rebalance timeout 10000.
INITIAL_DELAY_CASES = [
    pytest.param([0], 3000, id="one member: after the delay"),
    pytest.param([0, 2000], 6000, id="member during the delay: extended once"),
    pytest.param([0, 1000, 4000], 9000, id="members keep arriving: extended twice"),
    pytest.param([0, 1000, 4000, 7000, 9500], 10000, id="bounded by the rebalance timeout"),
]


@pytest.mark.parametrize("arrivals,completes_at", INITIAL_DELAY_CASES)
def test_initial_rebalance_delay(arrivals, completes_at):
    """§1.6: the first rebalance of an Empty group completes group.initial.rebalance.delay.ms after
    it starts, extended (by the delay) while new members keep arriving, up to the rebalance
    timeout; until then no join is answered, even though every member has joined."""
    h = Harness.new(initial_rebalance_delay_ms=3000)
    start = h.now
    tokens = []
    for offset in arrivals:
        completed = fire_each_deadline(h, start + offset)
        assert not completed
        tok, done, _ = h.join("g", rebalance_ms=10_000)
        assert tok not in done
        tokens.append(tok)
        assert h.state("g") == PREPARING
    assert not fire_each_deadline(h, start + completes_at - 1)
    assert h.state("g") == PREPARING
    completed = fire_each_deadline(h, start + completes_at)
    assert sorted(completed) == sorted(tokens)
    assert {completed[t]["generation_id"] for t in tokens} == {1}
    assert all(completed[t]["error_code"] == NONE for t in tokens)
    assert h.state("g") == COMPLETING
    assert len(h.member_ids("g")) == len(arrivals)


# ==========================================================================================
# §1.7 SyncGroup errors

SYNC_CASES = [
    # (id, situation, request overrides (info -> kwargs), expected)
    ("group id '' -> 24", STABLE_CONSUMER, lambda i: {"group_id": ""}, INVALID_GROUP_ID),
    ("group id null -> 24", STABLE_CONSUMER, lambda i: {"group_id": None}, INVALID_GROUP_ID),
    ("missing group -> 25", MISSING, lambda i: {"member_id": "someone", "generation": 1}, UNKNOWN_MEMBER_ID),
    ("Empty -> 25", EMPTY_CONSUMER, lambda i: {"member_id": i.former[0], "generation": i.generation},
     UNKNOWN_MEMBER_ID),
    ("Dead -> 15", DEAD_GROUP, lambda i: {}, COORDINATOR_NOT_AVAILABLE),
    ("unknown member -> 25", STABLE_CONSUMER, lambda i: {"member_id": "stranger"}, UNKNOWN_MEMBER_ID),
    ("wrong generation -> 22", STABLE_CONSUMER, lambda i: {"generation": i.generation + 1}, ILLEGAL_GENERATION),
    ("other protocol type -> 23", STABLE_CONSUMER, lambda i: {"protocol_type": "connect"},
     INCONSISTENT_GROUP_PROTOCOL),
    ("other protocol name -> 23", STABLE_CONSUMER, lambda i: {"protocol_name": "roundrobin"},
     INCONSISTENT_GROUP_PROTOCOL),
    ("PreparingRebalance -> 27", PREPARING_CONSUMER, lambda i: {"member_id": i.follower}, REBALANCE_IN_PROGRESS),
    ("Stable, matching protocol -> 0", STABLE_CONSUMER,
     lambda i: {"protocol_type": "consumer", "protocol_name": "range"}, NONE),
]


@pytest.mark.parametrize("situation,overrides,expected", [pytest.param(s, o, e, id=i) for i, s, o, e in SYNC_CASES])
def test_sync_errors(situation, overrides, expected):
    """§1.7 errors: 24; missing group or Empty 25; Dead 15; member validation 25; generation
    mismatch 22; protocol type/name different from the group's 23; PreparingRebalance 27."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    kwargs = {"group_id": "g", "member_id": info.some_member, "generation": info.generation}
    kwargs.update(overrides(info))
    tok, done, result = h.sync(kwargs.pop("group_id"), kwargs.pop("member_id"), kwargs.pop("generation"), **kwargs)
    assert done[tok]["error_code"] == expected
    assert result.records == []


def test_sync_fenced_static_member():
    """§1.7 member validation: an instance id mapped to another member -> FENCED_INSTANCE_ID(82)."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    dynamic = next(m for m in info.members if m not in info.instance_ids)
    tok, done, _ = h.sync("g", dynamic, info.generation, instance_id="inst-a")
    assert done[tok]["error_code"] == FENCED_INSTANCE_ID


def test_parked_sync_fails_when_a_rebalance_starts():
    """§1.7: a sync that was waiting when a new rebalance started is completed with 27."""
    h = Harness.new()
    info = build_group(h, "g", COMPLETING_CONSUMER)
    tok_sync, done, _ = h.sync("g", info.follower, info.generation)
    assert tok_sync not in done
    tok_join, done, _ = h.join("g")  # a new member starts a rebalance
    assert done[tok_sync]["error_code"] == REBALANCE_IN_PROGRESS
    assert h.state("g") == PREPARING


def test_members_that_do_not_sync_in_time_are_removed():
    """§1.7: members that do not send SyncGroup within the rebalance timeout are removed and a
    rebalance starts. The clock starts when the join phase completes (the sync phase begins); a
    late leader sync does not give the others more time. Heartbeats keep both sessions alive."""
    h = Harness.new()
    info = build_group(h, "g", COMPLETING_CONSUMER)
    t0 = h.now
    for at in (8000, 16000):
        fire_each_deadline(h, t0 + at)
        assert h.heartbeat("g", info.leader, info.generation) == NONE
        assert h.heartbeat("g", info.follower, info.generation) == NONE
    fire_each_deadline(h, t0 + 20000)
    h.sync("g", info.leader, info.generation, {})  # the leader syncs late; the follower never does
    assert h.state("g") == STABLE
    fire_each_deadline(h, t0 + 24000)
    assert h.heartbeat("g", info.leader, info.generation) == NONE
    assert h.heartbeat("g", info.follower, info.generation) == NONE
    fire_each_deadline(h, t0 + REBALANCE_MS)
    assert h.member_ids("g") == [info.leader]
    assert h.state("g") == PREPARING


# ==========================================================================================
# §1.8 Heartbeat matrix

HEARTBEAT_MATRIX = [
    # (id, situation, member ("member" | "unknown"), generation delta, expected)
    ("group id '' -> 24", "", "member", 0, INVALID_GROUP_ID),
    ("group id null -> 24", None, "member", 0, INVALID_GROUP_ID),
    ("unknown group -> 25", MISSING, "member", 0, UNKNOWN_MEMBER_ID),
    ("unknown member -> 25", STABLE_CONSUMER, "unknown", 0, UNKNOWN_MEMBER_ID),
    ("wrong generation -> 22", STABLE_CONSUMER, "member", 1, ILLEGAL_GENERATION),
    ("PreparingRebalance -> 27", PREPARING_CONSUMER, "member", 0, REBALANCE_IN_PROGRESS),
    ("CompletingRebalance -> 0", COMPLETING_CONSUMER, "member", 0, NONE),
    ("Stable -> 0", STABLE_CONSUMER, "member", 0, NONE),
    ("Empty -> 25", EMPTY_CONSUMER, "member", 0, UNKNOWN_MEMBER_ID),
    ("Empty simple -> 25", EMPTY_SIMPLE, "member", 0, UNKNOWN_MEMBER_ID),
    ("Dead -> 15", DEAD_GROUP, "member", 0, COORDINATOR_NOT_AVAILABLE),
]


@pytest.mark.parametrize("situation,who,gen_delta,expected",
                         [pytest.param(s, w, d, e, id=i) for i, s, w, d, e in HEARTBEAT_MATRIX])
@pytest.mark.parametrize("member_kind", ["leader", "follower"])
def test_heartbeat_matrix(situation, who, gen_delta, expected, member_kind):
    """§1.8 Heartbeat: group id "" 24; unknown group 25; Dead 15; member validation 25;
    generation mismatch 22; Empty 25; PreparingRebalance 27; CompletingRebalance/Stable NONE."""
    h = Harness.new()
    bad_group_id = situation in ("", None)
    info = build_group(h, "g", STABLE_CONSUMER if bad_group_id else situation)
    group_id = situation if bad_group_id else "g"
    if who == "unknown":
        member = "stranger"
    elif len(info.members) > 1:
        member = info.leader if member_kind == "leader" else info.follower
    else:
        member = info.some_member
    assert h.heartbeat(group_id, member, info.generation + gen_delta) == expected


@pytest.mark.parametrize("instance_id,owner,expected", [
    pytest.param("inst-a", "static", NONE, id="own instance id -> 0"),
    pytest.param("inst-a", "dynamic", FENCED_INSTANCE_ID, id="another member's instance id -> 82"),
    pytest.param("inst-nope", "static", UNKNOWN_MEMBER_ID, id="unknown instance id -> 25"),
])
def test_heartbeat_static_member_validation(instance_id, owner, expected):
    """§1.8 member validation with instance ids: 82 or 25."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    static = next(iter(info.instance_ids))
    member = static if owner == "static" else next(m for m in info.members if m != static)
    assert h.heartbeat("g", member, info.generation, instance_id) == expected


@pytest.mark.parametrize("situation", [PREPARING_CONSUMER, COMPLETING_CONSUMER, STABLE_CONSUMER])
def test_heartbeat_renews_session(situation):
    """§1.8: PreparingRebalance (27), CompletingRebalance and Stable (0) heartbeats renew the session."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    start = h.now
    h.advance(SESSION_MS - 1)
    h.heartbeat("g", info.follower, info.generation)
    fire_each_deadline(h, start + SESSION_MS)
    assert info.follower in h.member_ids("g")
    fire_each_deadline(h, start + 2 * SESSION_MS - 1)
    assert info.follower not in h.member_ids("g")


# ==========================================================================================
# Session timeout (§1.8, §6.3 testClassicGroupMemberSessionTimeout)


def test_session_timeout_removes_member_and_rebalances():
    """§1.8/§1.9: a member whose session expires (fire_timers) is removed and, the group being
    Stable, a rebalance is prepared; the survivor sees 27 and rejoins into the next generation."""
    h = Harness.new()
    info = build_group(h, "g", STABLE_CONSUMER)
    start = h.now
    h.advance(5000)
    assert h.heartbeat("g", info.leader, info.generation) == NONE
    fire_each_deadline(h, start + SESSION_MS - 1)
    assert sorted(h.member_ids("g")) == sorted(info.members)
    fire_each_deadline(h, start + SESSION_MS)
    assert h.member_ids("g") == [info.leader]
    assert h.state("g") == PREPARING
    assert h.heartbeat("g", info.leader, info.generation) == REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", info.follower, info.generation) == UNKNOWN_MEMBER_ID
    tok, done, _ = h.join("g", info.leader)
    resp = join_done(done, tok)
    assert (resp["error_code"], resp["generation_id"]) == (NONE, info.generation + 1)
    assert [m["member_id"] for m in resp["members"]] == [info.leader]
    assert h.state("g") == COMPLETING


def test_member_that_does_not_rejoin_is_removed_at_rebalance_timeout():
    """§1.6: a member that does not rejoin within the rebalance timeout is dropped and the join
    phase completes with the members that did (heartbeats keep the laggard's session alive)."""
    h = Harness.new()
    info = build_group(h, "g", PREPARING_CONSUMER)  # leader rejoined, follower did not
    start = h.now
    for at in range(8000, REBALANCE_MS, 8000):
        fire_each_deadline(h, start + at)
        assert h.heartbeat("g", info.follower, info.generation) == REBALANCE_IN_PROGRESS
    completed = fire_each_deadline(h, start + REBALANCE_MS)
    [resp] = [r for r in completed.values() if "generation_id" in r]
    assert (resp["error_code"], resp["generation_id"], resp["member_id"]) == (
        NONE, info.generation + 1, info.leader)
    assert h.member_ids("g") == [info.leader]


# ==========================================================================================
# §1.9 LeaveGroup


def leave_fixture(h: Harness) -> dict[str, str]:
    """Stable group: static leader "inst-a" and a dynamic follower; plus one open handshake."""
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    static = next(iter(info.instance_ids))
    tok, done, _ = h.join("g", require_known=True)
    assert done[tok]["error_code"] == MEMBER_ID_REQUIRED
    return {"A": static, "B": next(m for m in info.members if m != static), "P": done[tok]["member_id"],
            "generation": info.generation}


def ids(ref: dict, name: str | None) -> str:
    return "" if name is None else ref.get(name, name)


LEAVE_MATRIX = [
    # (id, [(member ref, instance id)], per-member errors, members removed, group state after)
    ('"" + static instance id -> removed', [(None, "inst-a")], [NONE], ["A"], PREPARING),
    ('"" + unknown instance id -> 25', [(None, "inst-nope")], [UNKNOWN_MEMBER_ID], [], STABLE),
    ('"" without instance id -> 25', [(None, None)], [UNKNOWN_MEMBER_ID], [], STABLE),
    ("pending member -> removed", [("P", None)], [NONE], [], None),
    ("unknown member -> 25", [("stranger", None)], [UNKNOWN_MEMBER_ID], [], STABLE),
    ("another member's instance id -> 82", [("B", "inst-a")], [FENCED_INSTANCE_ID], [], STABLE),
    ("static member with its instance id", [("A", "inst-a")], [NONE], ["A"], PREPARING),
    ("dynamic member", [("B", None)], [NONE], ["B"], PREPARING),
    # Both members leave, but the open handshake of P still holds the join phase open (§1.6), so
    # the group is not Empty yet (test_last_member_leaving_empties_group covers that).
    ("batch: both members", [("A", "inst-a"), ("B", None)], [NONE, NONE], ["A", "B"], PREPARING),
    ("batch: one valid, one unknown", [("B", None), ("stranger", None)], [NONE, UNKNOWN_MEMBER_ID], ["B"],
     PREPARING),
]


@pytest.mark.parametrize("members,errors,removed,state_after",
                         [pytest.param(m, e, r, s, id=i) for i, m, e, r, s in LEAVE_MATRIX])
def test_leave_group_matrix(members, errors, removed, state_after):
    """§1.9 per-member results (v3+ batch): MemberId "" with an instance id of a current static
    member removes it (admin removal); "" otherwise 25; a pending member is removed; otherwise
    member validation (25 / 82) then removal. After a removal from a Stable group a rebalance is
    prepared; when the last member leaves the group becomes Empty."""
    h = Harness.new()
    ref = leave_fixture(h)
    request = [(ids(ref, m), i) for m, i in members]
    body, done, _ = h.leave("g", request)
    assert body["error_code"] == NONE
    assert [(m["member_id"], m["group_instance_id"], m["error_code"]) for m in body["members"]] == [
        (mid, inst, err) for (mid, inst), err in zip(request, errors)]
    remaining = h.member_ids("g")
    for name in ("A", "B"):
        assert (ref[name] in remaining) is (name not in removed)
    if state_after is not None:
        assert h.state("g") == state_after
    if members == [("P", None)]:  # the handshake id is gone: rejoining with it is refused
        tok, done, _ = h.join("g", ref["P"], require_known=True)
        assert done[tok]["error_code"] == UNKNOWN_MEMBER_ID


LEAVE_TOP_LEVEL = [
    # (id, group id, situation, expected top-level, expected per-member)
    ("group id '' -> 24", "", STABLE_CONSUMER, INVALID_GROUP_ID, None),
    ("group id null -> 24", None, STABLE_CONSUMER, INVALID_GROUP_ID, None),
    ("unknown group -> NONE, every member 25", "g", MISSING, NONE, UNKNOWN_MEMBER_ID),
    ("Dead -> 15", "g", DEAD_GROUP, COORDINATOR_NOT_AVAILABLE, None),
]


@pytest.mark.parametrize("group_id,situation,top,per_member",
                         [pytest.param(g, s, t, p, id=i) for i, g, s, t, p in LEAVE_TOP_LEVEL])
def test_leave_group_top_level(group_id, situation, top, per_member):
    """§1.9 top-level errors: 24 for ""/null; unknown group: NONE with every member 25 (v3+);
    Dead: 15."""
    h = Harness.new()
    info = build_group(h, "g", situation)
    request = [(info.some_member, None), ("other", "inst-x")]
    body, _, result = h.leave(group_id, request)
    assert body["error_code"] == top
    if per_member is not None:
        assert [(m["member_id"], m["error_code"]) for m in body["members"]] == [
            (info.some_member, per_member), ("other", per_member)]
    assert result.records == []


def test_leave_completes_parked_join_with_unknown_member():
    """§1.6: a member removed by LeaveGroup while its join is parked has that join completed with
    UNKNOWN_MEMBER_ID(25) and MemberId ""."""
    h = Harness.new()
    info = build_group(h, "g", STABLE_CONSUMER)
    tok, done, _ = h.join("g", info.leader)
    assert tok not in done and h.state("g") == PREPARING
    body, done, _ = h.leave("g", [(info.leader, None)])
    assert body["members"][0]["error_code"] == NONE
    assert (done[tok]["error_code"], done[tok]["member_id"]) == (UNKNOWN_MEMBER_ID, "")


def test_leave_of_pending_member_lets_join_phase_complete():
    """§1.9: after a successful leave in PreparingRebalance the join phase completes if it can: an
    open MEMBER_ID_REQUIRED handshake that leaves no longer holds it open."""
    h = Harness.new()
    tok_p, done, _ = h.join("g", require_known=True)
    pending = done[tok_p]["member_id"]
    tok_a, done, _ = h.join("g", require_known=True)
    a = done[tok_a]["member_id"]
    tok, done, _ = h.join("g", a, require_known=True)
    assert tok not in done and h.state("g") == PREPARING
    body, done, _ = h.leave("g", [(pending, None)])
    assert body["members"][0]["error_code"] == NONE
    resp = join_done(done, tok)
    assert (resp["error_code"], resp["generation_id"], resp["member_id"]) == (NONE, 1, a)
    assert h.state("g") == COMPLETING


def test_last_member_leaving_empties_group():
    """§1.9 (§6.3 testCompleteJoinPhaseInEmptyStateSkipsRebalance): when the last member leaves,
    the join completes with no members: generation incremented, state Empty, and a GroupMetadata
    record with no members and currentStateTimestamp = now (the Empty-retention clock, §2)."""
    h = Harness.new()
    info = form_group(h, "g", [None])
    stabilize(h, info)
    h.advance(12345)
    body, _, result = h.leave("g", [(info.leader, None)])
    assert body["members"][0]["error_code"] == NONE
    assert h.state("g") == EMPTY
    assert h.member_ids("g") == []
    [(key, value)] = group_records(result.records)
    assert key == GroupMetadataKey("g")
    assert value.generation == info.generation + 1
    assert value.members == ()
    assert value.current_state_timestamp == h.now
    assert (value.protocol, value.leader) == (None, None)
    assert h.heartbeat("g", info.leader, info.generation + 1) == UNKNOWN_MEMBER_ID


def test_session_expiry_of_last_member_empties_group():
    """§1.9 / §1.8: the same happens when the last member's session expires."""
    h = Harness.new()
    info = form_group(h, "g", [None])
    stabilize(h, info)
    _, result = h.fire(h.now + SESSION_MS)
    assert h.state("g") == EMPTY
    [(_, value)] = group_records(result.records)
    assert (value.generation, value.members, value.current_state_timestamp) == (
        info.generation + 1, (), h.now)


# ==========================================================================================
# Static membership (§1.6 KIP-345)


def test_static_member_rejoin_with_unknown_member_id_keeps_stable():
    """§1.6 static membership: a static member rejoining with MemberId "" in Stable with the same
    protocols gets a fresh member id (instanceId-UUID) and the current generation without a
    rebalance; the old member id is fenced: heartbeats with it get 82 (with the instance id) or 25
    (without), while the new id heartbeats fine and keeps the old assignment."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info, {m: f"assignment-{m}".encode() for m in info.members})
    old = next(iter(info.instance_ids))
    tok, done, _ = h.join("g", instance_id="inst-a", require_known=True)
    resp = join_done(done, tok)
    new = resp["member_id"]
    assert resp["error_code"] == NONE
    assert new != old and new.startswith("inst-a-")
    assert resp["generation_id"] == info.generation
    assert h.state("g") == STABLE
    assert sorted(h.member_ids("g")) == sorted([new, info.follower])
    assert h.heartbeat("g", old, info.generation, "inst-a") == FENCED_INSTANCE_ID
    assert h.heartbeat("g", old, info.generation) == UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", new, info.generation, "inst-a") == NONE
    assert h.heartbeat("g", info.follower, info.generation) == NONE
    tok, done, _ = h.sync("g", new, info.generation, instance_id="inst-a")
    assert done[tok] == {"error_code": NONE, "protocol_type": "consumer", "protocol_name": "range",
                         "assignment": f"assignment-{old}".encode()}


def test_static_member_rejoin_with_changed_protocols_rebalances():
    """§1.6 static membership: with different protocols the replacement triggers a rebalance."""
    h = Harness.new()
    info = form_group(h, "g", ["inst-a", None])
    stabilize(h, info)
    tok, done, _ = h.join("g", instance_id="inst-a",
                          protocols=consumer_protocols(topics=["t-sub", "t-new"]))
    assert tok not in done
    assert h.state("g") == PREPARING


def test_pending_member_id_expires_after_session_timeout():
    """§1.6: a MEMBER_ID_REQUIRED id is pending and expires after the session timeout; the join
    phase it was holding open then completes, and the expired id is no longer accepted."""
    h = Harness.new()
    tok, done, _ = h.join("g", require_known=True)
    a = done[tok]["member_id"]
    h.advance(1000)
    tok, done, _ = h.join("g", require_known=True)
    pending = done[tok]["member_id"]
    pending_since = h.now
    tok_a, done, _ = h.join("g", a, require_known=True)
    assert tok_a not in done
    assert not fire_each_deadline(h, pending_since + SESSION_MS - 1)
    completed = fire_each_deadline(h, pending_since + SESSION_MS)
    resp = join_done(completed, tok_a)
    assert (resp["error_code"], resp["generation_id"], [m["member_id"] for m in resp["members"]]) == (NONE, 1, [a])
    tok, done, _ = h.join("g", pending, require_known=True)
    assert done[tok]["error_code"] == UNKNOWN_MEMBER_ID


def test_leave_of_laggard_in_preparing_rebalance_completes_join():
    """§1.9: when the member everyone waits for leaves during PreparingRebalance, the join phase
    completes at once for those who rejoined."""
    h = Harness.new()
    info = build_group(h, "g", STABLE_CONSUMER)
    tok, done, _ = h.join("g", info.leader)
    assert tok not in done and h.state("g") == PREPARING
    body, done, _ = h.leave("g", [(info.follower, None)])
    assert body["members"][0]["error_code"] == NONE
    resp = join_done(done, tok)
    assert (resp["error_code"], resp["generation_id"]) == (NONE, info.generation + 1)
    assert [m["member_id"] for m in resp["members"]] == [info.leader]
    assert h.state("g") == COMPLETING
