"""Consumer groups inside the coordinator shard (reference B7): records routed and loaded through
the shard's replay, the classic side's say on a heartbeat, offsets with member epochs, expiry,
deletion and timers of both kinds in one loop. Error codes are the reference's numbers."""

from __future__ import annotations

import uuid

from coordinator_helpers import Harness, consumer_protocols, replay_into_fresh_shard

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.config import ConsumerGroupConfig
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage

FOO = uuid.UUID(int=0xF00)
TOPICS = TopicsImage({"foo": (FOO, 4), "other": (uuid.UUID(int=0x07), 1)}, 1)

NONE, UNSUPPORTED_VERSION, UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL = 0, 35, 25, 23
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, STALE_MEMBER_EPOCH = 68, 69, 86, 113


def heartbeat(h: Harness, member_id: str, epoch: int = 0, group_id: str = "g", **fields):
    """One heartbeat through the shard; its records go to the harness's log."""
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 30_000)
        fields.setdefault("subscribed_topic_names", ("foo",))
        fields.setdefault("topic_partitions", ())
    req = ConsumerGroupHeartbeatRequest(group_id=group_id, member_id=member_id, member_epoch=epoch, **fields)
    token = h.token("cg")
    result = h.shard.consumer_group_heartbeat(token, req, 1, h.now, TOPICS)
    assert not result.replay  # replayed by the operation itself
    return h.run(result)[token]


def test_consumer_group_records_load_through_the_shard_replay():
    h = Harness.new()
    assert heartbeat(h, "m1").member_epoch == 1
    h.commit("g", [("foo", 0, 7, -1, None)], member_id="m1", generation=1)
    loaded = replay_into_fresh_shard(h.log)
    group = loaded.consumer.groups["g"]
    assert set(group.members) == {"m1"} and group.group_epoch == 1
    assert loaded.skipped_records == 0
    assert loaded.fetch_offsets("g", [("foo", [0])]) == [("foo", [(0, 7, -1, "")])]


def test_a_live_classic_group_refuses_a_consumer_member_unless_upgraded_and_an_empty_one_is_taken_over():
    h = Harness.new(consumer=ConsumerGroupConfig(migration_policy="disabled"))
    join = JoinRequest("c", "", None, "cli", "/h", 10_000, 10_000, "consumer", consumer_protocols(), False)
    h.run(h.shard.join_group(h.token("join"), join, h.now, TOPICS))
    assert heartbeat(h, "m1", group_id="c").error_code == GROUP_ID_NOT_FOUND
    assert "c" not in h.shard.consumer.groups
    h = Harness.new()  # bidirectional: the group is upgraded (test_consumer_group_migration.py)
    h.run(h.shard.join_group(h.token("join"), join, h.now, TOPICS))
    assert heartbeat(h, "m1", group_id="c").error_code == NONE
    h.seed_offsets("simple", {("foo", 1): 42})  # an offsets-only group
    assert heartbeat(h, "m1", group_id="simple").error_code == NONE
    assert h.offset("simple", "foo", 1) == 42


def test_join_group_on_a_consumer_group():
    h = Harness.new()
    heartbeat(h, "m1")
    join = JoinRequest("g", "", None, "cli", "/h", 10_000, 10_000, "consumer", consumer_protocols(), False)
    token = h.token("join")
    bad = JoinRequest("g", "", None, "cli", "/h", 10_000, 10_000, "connect", consumer_protocols(), False)
    assert h.run(h.shard.join_group(token, bad, h.now, TOPICS))[token]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    heartbeat(h, "m1", epoch=-1)
    token = h.token("join")
    result = h.shard.join_group(token, join, h.now, TOPICS)
    h.run(result)
    assert "g" not in h.shard.consumer.groups  # an empty consumer group becomes classic
    assert "g" not in replay_into_fresh_shard(h.log).consumer.groups


def test_offset_commit_and_fetch_with_member_epochs():
    h = Harness.new()
    epoch = heartbeat(h, "m1").member_epoch
    commit = [("foo", 0, 5, -1, None)]
    assert h.commit("g", commit, member_id="m1", generation=epoch)[0] == {("foo", 0): NONE}
    assert h.commit("g", commit, member_id="m1", generation=epoch + 1)[0] == {("foo", 0): STALE_MEMBER_EPOCH}
    assert h.commit("g", commit, member_id="who", generation=epoch)[0] == {("foo", 0): UNKNOWN_MEMBER_ID}
    assert h.commit("g", commit, member_id="", generation=-1)[0] == {("foo", 0): UNKNOWN_MEMBER_ID}
    assert h.commit("g", commit, member_id="m1", generation=epoch, version=8)[0] == {("foo", 0): UNSUPPORTED_VERSION}
    group = h.shard.consumer.groups["g"]
    assert group.validate_offset_fetch(None, -1) == NONE
    assert group.validate_offset_fetch("m1", epoch) == NONE
    assert group.validate_offset_fetch("m1", epoch + 1) == STALE_MEMBER_EPOCH
    assert group.validate_offset_fetch("who", epoch) == UNKNOWN_MEMBER_ID
    heartbeat(h, "m1", epoch=-1)  # memberless: a simple commit is accepted
    assert h.commit("g", commit, member_id="", generation=-1)[0] == {("foo", 0): NONE}


def test_subscribed_topics_never_expire_and_an_empty_group_goes_with_its_offsets():
    h = Harness.new(retention_ms=1000)
    epoch = heartbeat(h, "m1").member_epoch
    h.commit("g", [("foo", 0, 5, -1, None), ("other", 0, 1, -1, None)], member_id="m1", generation=epoch)
    h.advance(5000)
    expired = h.run(h.shard.expire_offsets(h.now, h.shard.group_ids()))
    assert h.offset("g", "foo", 0) == 5 and h.offset("g", "other", 0) == -1
    assert expired == {}
    assert h.delete_groups(["g"])[0] == {"g": NON_EMPTY_GROUP}
    assert h.delete_offsets("g", [("foo", [0])])[0]["topics"] == {"foo": {0: GROUP_SUBSCRIBED_TO_TOPIC}}
    heartbeat(h, "m1", epoch=-1)
    h.run(h.shard.expire_offsets(h.now, h.shard.group_ids()))
    assert "g" not in h.shard.consumer.groups and "g" not in h.shard.groups
    assert "g" not in replay_into_fresh_shard(h.log).consumer.groups


def test_session_timeouts_run_in_the_shard_timer_loop():
    h = Harness.new()
    heartbeat(h, "m1")
    deadline = h.shard.next_deadline()
    assert deadline == h.now + h.shard.config.consumer.session_timeout_ms
    h.fire(deadline)
    assert not h.shard.consumer.groups["g"].members


def test_describe_and_list_answer_the_consumer_group():
    h = Harness.new()
    heartbeat(h, "m1", client_id="cli", client_host="/10.0.0.1")
    h.seed_offsets("g", {("foo", 0): 1})  # its offsets-only classic entry stays hidden
    described = h.shard.describe_consumer_group("g", lambda topic_id: "?")
    assert (described["error_code"], described["group_state"], described["group_epoch"],
            described["assignor_name"]) == (NONE, "Stable", 1, "uniform")
    [member] = described["members"]
    assert (member["client_id"], member["client_host"], member["member_epoch"]) == ("cli", "/10.0.0.1", 1)
    assert member["assignment"] == member["target_assignment"] == {"topic_partitions": [
        {"topic_id": FOO, "topic_name": "foo", "partitions": [0, 1, 2, 3]}]}
    assert h.shard.describe_consumer_group("nope", str)["error_code"] == GROUP_ID_NOT_FOUND
    assert (h.shard.describe_group("g")["group_state"], h.shard.describe_group("g")["error_code"]) == ("Dead", NONE)
    assert list(h.shard.list_groups()) == []
    assert h.shard.list_groups("consumer") == [("g", "consumer", "Stable")]


def test_describe_groups_v6_answers_group_id_not_found_for_a_group_that_is_not_classic():
    """KIP-1043: from v6, a consumer group or an unknown id is Dead with 69 and a message; a
    classic group (here an offsets-only one) is described as at v5."""
    h = Harness.new()
    heartbeat(h, "m1")
    h.seed_offsets("simple", {("foo", 0): 1})
    consumer, unknown = h.shard.describe_group("g", 6), h.shard.describe_group("nope", 6)
    assert (consumer["error_code"], consumer["group_state"], consumer["error_message"]) == (
        GROUP_ID_NOT_FOUND, "Dead", "Group g is not a classic group.")
    assert (unknown["error_code"], unknown["group_state"], unknown["error_message"]) == (
        GROUP_ID_NOT_FOUND, "Dead", "Group nope not found.")
    assert h.shard.describe_group("nope", 5)["error_code"] == NONE
    simple = h.shard.describe_group("simple", 6)
    assert (simple["error_code"], simple["group_state"]) == (NONE, "Empty") and "error_message" not in simple


def test_a_group_of_its_own_configs_gets_its_session_timeout_and_heartbeat_interval():
    h = Harness.new()
    h.shard.consumer_group_configs["g"] = (50_000, 7_000)  # consumer.session.timeout.ms, ...heartbeat...
    assert heartbeat(h, "m1").heartbeat_interval_ms == 7_000
    assert h.shard.next_deadline() == h.now + 50_000
    h.shard.reset()  # the overrides are settings: a reload keeps them
    assert heartbeat(h, "m1", group_id="g").heartbeat_interval_ms == 7_000
    assert heartbeat(h, "m2", group_id="other").heartbeat_interval_ms == 5_000
