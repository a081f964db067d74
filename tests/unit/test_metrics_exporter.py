"""The Prometheus collector and the JSON builders of `offsetd.metrics`, against real
GroupCoordinatorShards driven through their API (commit, join/sync, expire, delete), with the
shell's replay emulated by coordinator_helpers.Harness."""

from __future__ import annotations

import asyncio
import errno
import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from coordinator_helpers import OTHER_TOPIC, SUBSCRIBED, Harness, form_group, make_config, stabilize
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.metrics import exporter
from offsetd.metrics.exporter import CoordinatorCollector, exposition
from offsetd.metrics.http import groups_json
from offsetd.metrics.lag_view import _Look
from offsetd.metrics.snapshot import (
    CoordinatorUnavailable, GroupNotFound, Slicer, Snapshot, group_detail, run, take_snapshot,
)
from offsetd.records.batch import build_batch
from offsetd.records.offsets import partition_for
from offsetd.server.coordinator_runtime import ShardState
from offsetd.server.group_commit import GroupCommit
from offsetd.storage import LogConfig, PartitionLog
from offsetd.storage.coordinator_journal import encode_entry, journal_paths, read_journals
from offsetd.storage.log_dir import LogDirectory

RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes default (10080)
DAY_MS = 24 * 3600 * 1000


LOG_DIR = LogDirectory(Path("/data"))


def runtime(shard: GroupCoordinatorShard, state: ShardState = ShardState.ACTIVE, load_time_ms: float = 0.0,
            records_loaded: int = 0, log_dir: LogDirectory = LOG_DIR, group_commit: Any = None) -> SimpleNamespace:
    """The parts of a ShardRuntime the metrics read."""
    return SimpleNamespace(shard=shard, state=state, load_time_ms=load_time_ms, records_loaded=records_loaded,
                           plog=SimpleNamespace(log_dir=log_dir), group_commit=group_commit)


def registry_for(runtimes) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector(runtimes))
    return registry


def commit(h: Harness, group: str, partitions: range | list[int], topic: str = OTHER_TOPIC, offset: int = 10,
           **kwargs) -> None:
    errors, _, _ = h.commit(group, [(topic, p, offset, 3, f"m{p}") for p in partitions], **kwargs)
    assert set(errors.values()) == {0}, errors


@pytest.fixture
def h() -> Harness:
    return Harness.new()


# -------------------------------------------------------------------------------- meters


def test_commit_count_and_num_offsets_follow_commits(h):
    registry = registry_for([runtime(h.shard)])
    value = registry.get_sample_value
    assert value("offsetd_group_coordinator_offset_commit_total") == 0
    commit(h, "g1", range(3))
    commit(h, "g2", range(2))
    assert value("offsetd_group_coordinator_offset_commit_total") == 5
    assert value("offsetd_group_coordinator_num_offsets") == 5
    commit(h, "g1", [0])  # a re-commit counts as a commit but is no new offset
    assert value("offsetd_group_coordinator_offset_commit_total") == 6
    assert value("offsetd_group_coordinator_num_offsets") == 5
    assert value("offsetd_group_coordinator_num_groups", {"state": "Empty"}) == 2
    for state in ("Stable", "PreparingRebalance", "CompletingRebalance", "Dead"):
        assert value("offsetd_group_coordinator_num_groups", {"state": state}) == 0


def test_expirations_and_deletions_are_counted_and_remove_offsets(h):
    registry = registry_for([runtime(h.shard)])
    value = registry.get_sample_value
    commit(h, "old", range(2))
    h.advance(DAY_MS)
    commit(h, "young", range(4))
    deletion, _ = h.delete_offsets("young", [(OTHER_TOPIC, [0, 1, 7])])  # 7 has no offset: no tombstone
    assert deletion["error_code"] == 0
    assert value("offsetd_group_coordinator_offset_deletion_total") == 2
    assert value("offsetd_group_coordinator_num_offsets") == 4
    h.advance(RETENTION_MS - DAY_MS)  # "old" is exactly at its expiry time (inclusive), "young" a day short
    h.run(h.shard.expire_offsets(h.now, list(h.shard.groups)))
    assert value("offsetd_group_coordinator_offset_expiration_total") == 2
    assert value("offsetd_group_coordinator_num_offsets") == 2
    assert value("offsetd_group_coordinator_num_groups", {"state": "Empty"}) == 1  # "old" is gone
    assert value("offsetd_group_earliest_offset_expiry_timestamp_ms", {"group": "old"}) is None


def test_completed_rebalances_and_group_states(h):
    registry = registry_for([runtime(h.shard)])
    value = registry.get_sample_value
    info = form_group(h, "consumers", [None, None])
    assert value("offsetd_group_coordinator_num_groups", {"state": "CompletingRebalance"}) == 1
    assert value("offsetd_group_coordinator_group_completed_rebalance_total") == 0
    stabilize(h, info)
    assert value("offsetd_group_coordinator_group_completed_rebalance_total") == 1
    assert value("offsetd_group_coordinator_num_groups", {"state": "Stable"}) == 1
    assert value("offsetd_group_coordinator_num_groups", {"state": "CompletingRebalance"}) == 0


# ------------------------------------------------------------------------- expiry preview


def test_earliest_expiry_per_group(h):
    registry = registry_for([runtime(h.shard)])
    value = registry.get_sample_value
    metric = "offsetd_group_earliest_offset_expiry_timestamp_ms"
    first = h.now
    commit(h, "standalone", [0])
    h.advance(5_000)
    commit(h, "standalone", [1])
    # a standalone group's offsets expire by their own commit time: the earliest is the first commit
    assert value(metric, {"group": "standalone"}) == first + RETENTION_MS
    # an explicit retention (OffsetCommit v2-v4 retention_time) wins
    commit(h, "explicit", [0], retention_ms=60_000, version=2)
    assert value(metric, {"group": "explicit"}) == h.now + 60_000
    # retention -1 set on the group: never expires, so the group has no sample
    h.shard.group_retention_ms["forever"] = -1
    commit(h, "forever", [0])
    assert value(metric, {"group": "forever"}) is None
    # a Stable consumer group keeps its subscribed topics' offsets: only the unsubscribed topic expires
    info = form_group(h, "consumers", [None])
    stabilize(h, info)
    errors, _, _ = h.commit("consumers", [(SUBSCRIBED, 0, 5, -1, None)], member_id=info.leader,
                            generation=info.generation)
    assert errors == {(SUBSCRIBED, 0): 0}
    assert value(metric, {"group": "consumers"}) is None
    errors, _, _ = h.commit("consumers", [(OTHER_TOPIC, 0, 5, -1, None)], member_id=info.leader,
                            generation=info.generation)
    assert errors == {(OTHER_TOPIC, 0): 0}
    assert value(metric, {"group": "consumers"}) == h.now + RETENTION_MS


def test_group_detail_lists_members_offsets_and_expiry_times(h):
    info = form_group(h, "consumers", [None, "static-1"])
    stabilize(h, info)
    committed_at = h.now
    errors, _, _ = h.commit("consumers", [(SUBSCRIBED, 0, 42, 7, "meta"), (OTHER_TOPIC, 3, 9, -1, None)],
                            member_id=info.leader, generation=info.generation)
    assert set(errors.values()) == {0}
    detail = group_detail([runtime(h.shard)], "consumers")
    assert json.loads(json.dumps(detail)) == detail  # JSON-serialisable as it is
    assert detail["state"] == "Stable" and detail["protocol_type"] == "consumer"
    assert detail["generation"] == info.generation and detail["protocol"] == "range"
    assert detail["retention_ms"] == RETENTION_MS
    assert detail["subscribed_topics"] == [SUBSCRIBED]
    assert sorted(m["member_id"] for m in detail["members"]) == sorted(info.members)
    assert {m["group_instance_id"] for m in detail["members"]} == {None, "static-1"}
    assert all(m["client_id"] == "client" and m["client_host"] == "/127.0.0.1" for m in detail["members"])
    assert detail["offsets"] == [
        {"topic": SUBSCRIBED, "partition": 0, "offset": 42, "leader_epoch": 7, "metadata": "meta",
         "commit_timestamp_ms": committed_at, "expires_at_ms": None},  # subscribed: never while Stable
        {"topic": OTHER_TOPIC, "partition": 3, "offset": 9, "leader_epoch": -1, "metadata": "",
         "commit_timestamp_ms": committed_at, "expires_at_ms": committed_at + RETENTION_MS},
    ][::-1 if OTHER_TOPIC < SUBSCRIBED else 1]
    assert detail["earliest_expiry_ms"] == committed_at + RETENTION_MS


def test_group_detail_unknown_group_and_unavailable_shard(h):
    with pytest.raises(GroupNotFound):
        group_detail([runtime(h.shard)], "nobody")
    commit(h, "g", [0])
    with pytest.raises(CoordinatorUnavailable) as loading:
        group_detail([runtime(h.shard, ShardState.LOADING)], "g")
    assert loading.value.error == "COORDINATOR_LOAD_IN_PROGRESS"
    with pytest.raises(CoordinatorUnavailable) as failed:
        group_detail([runtime(h.shard, ShardState.FAILED)], "g")
    assert failed.value.error == "COORDINATOR_NOT_AVAILABLE"


# ----------------------------------------------------------------------- several shards


def shards_with_groups(count: int, partitions: int = 3, now: int = 1_000_000) -> list[Harness]:
    """`partitions` shards (each with its own Harness, one clock value) holding `count` standalone
    groups g000..., each on the shard Kafka's hash puts it, one offset each."""
    harnesses = [Harness(GroupCoordinatorShard(p, make_config()), now=now) for p in range(partitions)]
    for i in range(count):
        group = f"g{i:05d}"
        commit(harnesses[partition_for(group, partitions)], group, [i % 4], offset=i)
    return harnesses


def test_partition_state_and_load_time_and_loading_shards_hide_their_groups():
    hs = shards_with_groups(30)
    runtimes = [runtime(hs[0].shard, ShardState.ACTIVE, 12.5, 100),
                runtime(hs[1].shard, ShardState.LOADING), runtime(hs[2].shard, ShardState.FAILED)]
    value = registry_for(runtimes).get_sample_value
    assert value("offsetd_group_coordinator_partition_load_time_ms", {"partition": "0"}) == 12.5
    assert value("offsetd_group_coordinator_partition_records_loaded", {"partition": "0"}) == 100
    for partition, state in enumerate(("active", "loading", "failed")):
        for name in ("loading", "active", "failed"):
            assert value("offsetd_group_coordinator_partition_state",
                         {"partition": str(partition), "state": name}) == (1 if name == state else 0)
    # groups and offsets of loading / failed partitions are not shown (a partial replay)
    assert value("offsetd_group_coordinator_num_offsets") == len(hs[0].shard.offsets)
    assert sum(value("offsetd_group_coordinator_num_groups", {"state": s}) for s in ("Empty", "Stable")) == \
        len(hs[0].shard.groups)
    # commits counted by any shard are counted
    assert value("offsetd_group_coordinator_offset_commit_total") == 30


def test_exposition_is_one_family_per_metric_across_chunks(monkeypatch):
    monkeypatch.setattr(exporter, "GROUP_CHUNK", 7)
    hs = shards_with_groups(50)
    text = exposition([runtime(h.shard) for h in hs]).decode()
    assert text.count("# TYPE offsetd_group_earliest_offset_expiry_timestamp_ms gauge") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expiry = families["offsetd_group_earliest_offset_expiry_timestamp_ms"]
    assert {s.labels["group"]: s.value for s in expiry.samples} == {
        f"g{i:05d}": 1_000_000 + RETENTION_MS for i in range(50)}
    assert families["offsetd_group_coordinator_offset_commit"].type == "counter"
    assert families["offsetd_group_coordinator_num_offsets"].samples[0].value == 50


def test_group_label_values_are_escaped():
    h = Harness.new()
    group = 'we"ird\\group\nname ü'
    commit(h, group, [0])
    text = exposition([runtime(h.shard)]).decode()
    [sample] = [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "offsetd_group_earliest_offset_expiry_timestamp_ms"]
    assert sample.labels == {"group": group}


# ---------------------------------------------------------------------- /v1/groups JSON


def test_groups_json_lists_every_group_sorted_with_counts():
    hs = shards_with_groups(40)
    info = form_group(hs[0], "a-consumers", [None, None])
    stabilize(hs[0], info)  # (the list does not care which shard a group sits on)
    runtimes = [runtime(h.shard) for h in hs]
    snapshot, out = Snapshot(), []
    run(take_snapshot(runtimes, snapshot))
    run(groups_json(snapshot, out))
    rows = json.loads(b"".join(out))
    assert [r["group"] for r in rows] == sorted(r["group"] for r in rows)
    assert len(rows) == 41
    by_group = {r["group"]: r for r in rows}
    assert by_group["g00005"] == {"group": "g00005", "state": "Empty", "protocol_type": "", "members": 0,
                                  "offsets": 1, "earliest_expiry_ms": 1_000_000 + RETENTION_MS}
    assert by_group["a-consumers"] == {"group": "a-consumers", "state": "Stable", "protocol_type": "consumer",
                                       "members": 2, "offsets": 0, "earliest_expiry_ms": None}


def test_paused_reads_give_the_same_answer_and_skip_groups_removed_meanwhile(monkeypatch):
    hs = shards_with_groups(60)
    runtimes = [runtime(h.shard) for h in hs]
    whole = Snapshot()
    run(take_snapshot(runtimes, whole))
    paused, pauses = Snapshot(), 0
    steps = take_snapshot(runtimes, paused, Slicer(0.0))  # pause after every group
    removed = None
    for _ in steps:
        pauses += 1
        if pauses == 3:  # delete a group the read has not reached yet, as DeleteGroups would
            shard = hs[2].shard
            removed = sorted(shard.groups)[-1]
            errors, _ = hs[2].delete_groups([removed])
            assert errors == {removed: 0}
    assert pauses >= 60
    assert removed is not None
    assert [g for s in paused.shards for g in s.groups] == [
        g for s in whole.shards for g in s.groups if g[0] != removed]
    out_whole, out_paused = [], []
    run(groups_json(whole, out_whole))
    run(groups_json(whole, out_paused, Slicer(0.0)))
    assert out_whole != [] and b"".join(out_whole) == b"".join(out_paused)


def test_log_directory_metrics_follow_failures_and_going_offline() -> None:
    """Kafka's OfflineLogDirectoryCount / LogDirectoryOffline, and the failed writes count: a full
    disk counts failures and stays online; an I/O error takes the directory offline."""
    log_dir = LogDirectory(Path("/var/offsetd"))
    runtimes = [runtime(GroupCoordinatorShard(0, make_config()), log_dir=log_dir)]
    registry = registry_for(runtimes)
    labels = {"log_directory": "/var/offsetd"}

    def values() -> tuple:
        return (registry.get_sample_value("offsetd_log_manager_offline_log_directory_count"),
                registry.get_sample_value("offsetd_log_directory_offline", labels),
                registry.get_sample_value("offsetd_log_directory_failed_writes_total", labels))

    assert values() == (0, 0, 0)
    log_dir.failed(OSError(errno.ENOSPC, "No space left on device"), "append to t-0")
    assert values() == (0, 0, 1)
    log_dir.failed(OSError(errno.EIO, "Input/output error"), "append to t-0")
    assert values() == (1, 1, 2)



def test_the_coordinators_journal_counts_its_rounds_appends_and_bytes(tmp_path: Path) -> None:
    """Single node: the journal's fdatasyncs, the appends they made durable and the bytes written;
    no such family without a journal."""
    assert "offsetd_coordinator_journal_rounds" not in {f.name for f in exporter.CoordinatorCollector(
        [runtime(GroupCoordinatorShard(0, make_config()))]).collect()}
    gc = GroupCommit(aio=False, journal=tmp_path)
    plog = PartitionLog.open(tmp_path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), 0)
    registry = registry_for([runtime(GroupCoordinatorShard(0, make_config()), group_commit=gc)])

    async def three() -> None:
        for value in (b"a", b"b", b"c"):
            await gc.append(plog, build_batch([(b"k", value, 0, [])]), 0)

    try:
        asyncio.run(three())
    finally:
        gc.stop()
    get = registry.get_sample_value
    assert (get("offsetd_coordinator_journal_rounds_total"), get("offsetd_coordinator_journal_appends_total"),
            get("offsetd_coordinator_journal_bypassed")) == (3, 3, 0)
    journaled = read_journals(journal_paths(tmp_path))
    assert get("offsetd_coordinator_journal_bytes_total") == sum(
        len(encode_entry(name.encode(), [batches])) for name, appends in journaled.items() for batches in appends)


def test_a_consumer_protocol_group_is_listed_and_detailed_as_such(h):
    """KIP-848: the group row and /v1/groups/{group} show the consumer group (state, members,
    subscription), not the offsets-only entry its commits keep beside it."""
    topics = TopicsImage({OTHER_TOPIC: (uuid.UUID(int=5), 2)}, 1)
    token = h.token("cg")
    h.run(h.shard.consumer_group_heartbeat(token, ConsumerGroupHeartbeatRequest(
        "kip848", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(OTHER_TOPIC,),
        topic_partitions=(), client_id="cli"), 1, h.now, topics))
    commit(h, "kip848", [0], member_id="m1", generation=1)
    snapshot, out = Snapshot(), []
    run(take_snapshot([runtime(h.shard)], snapshot))
    run(groups_json(snapshot, out))
    [row] = json.loads(b"".join(out))
    assert row == {"group": "kip848", "state": "Stable", "protocol_type": "consumer", "members": 1,
                   "offsets": 1, "earliest_expiry_ms": None}  # subscribed: never expires
    detail = group_detail([runtime(h.shard)], "kip848")
    assert (detail["state"], detail["protocol"], detail["generation"], detail["subscribed_topics"]) == (
        "Stable", "uniform", 1, [OTHER_TOPIC])
    assert [(m["member_id"], m["client_id"]) for m in detail["members"]] == [("m1", "cli")]
    look = _Look(SimpleNamespace(bounds=lambda topic, partition: None), {}, {}, h.now)  # the lag view's row
    lag = look.group(h.shard, "kip848")
    assert (lag.state, lag.protocol_type, [(m.member_id, m.assignment) for m in lag.member_list]) == (
        "Stable", "consumer", [("m1", [(OTHER_TOPIC, 0), (OTHER_TOPIC, 1)])])
    assert [(p.partition, p.consumer_id, p.expires_at_ms) for p in lag.partitions] == [(0, "m1", None)]
