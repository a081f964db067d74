"""Random member behaviour against the consumer-group heartbeat: no partition ever has two owners,
replay alone rebuilds the state, and a group left alone converges to a stable assignment of
every subscribed partition (B3, B4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer_group_helpers import NONE, Harness, as_dict, tps
from offsetd.coordinator.consumer_group import ConsumerGroupState

NAMES = ("a", "b", "c", "d")
SUBSCRIPTIONS = (("foo",), ("foo", "bar"), ("bar",))


class Member:
    """A client: what it owns, what it was last told, whether it applies assignments at once."""

    def __init__(self) -> None:
        self.epoch = -1  # -1: not in the group
        self.owned: dict = {}
        self.told: dict | None = None

    def lose_everything(self) -> None:
        self.epoch, self.owned, self.told = -1, {}, None


def _step(h: Harness, members: dict[str, Member], action: tuple) -> None:
    kind, name, arg = action
    m = members[name]
    if kind == "advance":
        h.advance(arg)
        group = h.ops.groups.get("g")
        for n, other in members.items():  # the coordinator dropped it: its partitions are gone
            if other.epoch >= 0 and (group is None or n not in group.members):
                other.lose_everything()
        return
    if m.epoch < 0:
        if kind == "leave":
            return
        r = h.join(name, SUBSCRIPTIONS[arg % len(SUBSCRIPTIONS)])
        assert r.error_code == NONE, r
        m.epoch, m.told = r.member_epoch, as_dict(r.assignment)
        m.owned = {t: set(ps) for t, ps in (m.told or {}).items()}
        return
    if kind == "leave":
        r = h.heartbeat(member_id=name, member_epoch=-1)
        assert r.error_code == NONE
        m.lose_everything()
        return
    apply = kind == "beat"
    fields = {}
    if arg == 1:
        fields["subscribed_topic_names"] = SUBSCRIPTIONS[len(name) % len(SUBSCRIPTIONS)]
    r = h.heartbeat(member_id=name, member_epoch=m.epoch, topic_partitions=tps(m.owned), **fields)
    if r.error_code != NONE:
        m.lose_everything()  # fenced: the client drops its partitions and rejoins later
        return
    m.epoch = r.member_epoch
    if r.assignment is not None:
        m.told = as_dict(r.assignment)
    if apply and m.told is not None:
        # Revocation is immediate; a new partition is taken only if told so (the server never
        # tells a member to take one another member still holds).
        m.owned = {t: set(ps) for t, ps in m.told.items()}
    elif m.told is not None:
        # A slow client only gives up what it lost, keeping the rest as it was.
        m.owned = {t: ps & m.told.get(t, set()) for t, ps in m.owned.items() if ps & m.told.get(t, set())}


def _check_no_two_owners(h: Harness, members: dict[str, Member]) -> None:
    seen: set = set()
    for m in members.values():
        mine = {(t, p) for t, ps in m.owned.items() for p in ps}
        assert not (mine & seen), "a partition consumed by two members"
        seen |= mine
    group = h.ops.groups.get("g")
    if group is None:
        return
    owners: set = set()
    for member in group.members.values():
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    assert (t, p) not in owners, "a partition with two owners in the coordinator"
                    owners.add((t, p))


actions = st.lists(st.one_of(
    st.tuples(st.sampled_from(("beat", "slow")), st.sampled_from(NAMES), st.integers(0, 8)),
    st.tuples(st.just("leave"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("advance"), st.sampled_from(NAMES), st.sampled_from((1_000, 20_000, 46_000))),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(actions)
def test_random_members_never_share_a_partition_and_converge(steps) -> None:
    h = Harness()
    members = {n: Member() for n in NAMES}
    for action in steps:
        _step(h, members, action)
        _check_no_two_owners(h, members)
    assert h.replayed().groups == h.ops.groups
    # Left alone, well-behaved members reach a stable assignment of every subscribed partition.
    for _ in range(4):
        for name in NAMES:
            if members[name].epoch >= 0:
                _step(h, members, ("beat", name, 0))
                _check_no_two_owners(h, members)
    group = h.ops.groups.get("g")
    if group is None or not group.members:
        return
    assert group.state() is ConsumerGroupState.STABLE
    subscribed = {n for m in group.members.values() for n in m.subscribed_topic_names}
    expected = {(tid, p) for name, (tid, count) in h.topics.topics.items() if name in subscribed for p in range(count)}
    owned = {(t, p) for m in members.values() for t, ps in m.owned.items() for p in ps}
    assert owned == expected
