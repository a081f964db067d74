"""A coordinator shard that stops coordinating its groups (cluster mode: its `__consumer_offsets`
partition moved, or was given up after an append with an unknown outcome) or rebuilds them from
its log answers every JoinGroup and SyncGroup parked in a rebalance with NOT_COORDINATOR. Before,
they were dropped with the groups and never answered: librdkafka waits on a JoinGroup for its
rebalance timeout, with every later request on that connection (synchronous commits included)
queued behind it (found by the cluster chaos harness: three group members' commits hung for
minutes after a PostgreSQL crash)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from coordinator_helpers import NONE, REBALANCE_MS, SESSION_MS, consumer_protocols, make_config

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.consumer_group_ops import TopicsImage
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.coordinator.write_errors import NOT_COORDINATOR
from offsetd.server.coordinator_runtime import ShardRuntime, new_token
from offsetd.storage import LogConfig, PartitionLog

GROUP = "g"


def join_request(member_id: str) -> JoinRequest:
    return JoinRequest(group_id=GROUP, member_id=member_id, group_instance_id=None, client_id="c",
                       client_host="/127.0.0.1", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                       protocol_type="consumer", protocols=consumer_protocols(), require_known_member_id=False)


async def parked_join(tmp_path: Path, leave: str) -> dict[str, Any]:
    """A one-member group, then a second member whose join parks (the first must rejoin), then the
    shard `leave`s ("unload" or "reload"); the parked join's answer."""
    plog = PartitionLog.open(tmp_path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), 0)
    runtime = ShardRuntime(GroupCoordinatorShard(0, make_config(initial_rebalance_delay_ms=0)), plog, fsync=False,
                           clock=lambda: 0)
    await runtime.load()

    def call(operation: str, *args: Any) -> "asyncio.Future[Any]":
        token = new_token()
        runtime.submit(getattr(runtime.shard, operation)(token, *args))
        return token

    first = await call("join_group", join_request(""), 0, TopicsImage())
    member = first["member_id"]
    synced = await call("sync_group", GROUP, member, None, first["generation_id"], "consumer", "range",
                        {member: b"assignment"}, 0)
    assert synced["error_code"] == NONE
    second = call("join_group", join_request(""), 0, TopicsImage())
    await asyncio.sleep(0.05)
    assert not second.done(), "the second member's join waits for the first to rejoin"
    if leave == "unload":
        runtime.unload()
    else:
        await runtime._reload()
    return await asyncio.wait_for(second, 5)


def test_a_parked_join_is_answered_when_the_shard_unloads(tmp_path: Path) -> None:
    assert asyncio.run(parked_join(tmp_path, "unload"))["error_code"] == NOT_COORDINATOR


def test_a_parked_join_is_answered_when_the_shard_rebuilds_from_its_log(tmp_path: Path) -> None:
    assert asyncio.run(parked_join(tmp_path, "reload"))["error_code"] == NOT_COORDINATOR
