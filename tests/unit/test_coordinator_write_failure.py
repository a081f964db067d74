"""A failed write of `__consumer_offsets` (a full disk, an I/O error) through the real shell
(`server/coordinator_runtime.ShardRuntime`) and a real partition log on disk. Every operation of
the failed batch, and every one queued behind it, fails; the shard then replays its log again, so
memory holds exactly what the log holds (§5.3: "as if it had never been attempted"), for offsets
and classic groups alike. The failure is real: the segment's descriptor is swapped for a
read-only one, so the append's pwritev fails with EBADF."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Awaitable

import pytest
from coordinator_helpers import NONE, REBALANCE_MS, SESSION_MS, consumer_protocols, make_config

from offsetd.coordinator.shard import GroupCoordinatorShard, JoinRequest
from offsetd.server.coordinator_runtime import ShardRuntime, ShardState, new_token
from offsetd.storage import LogConfig, PartitionLog

RETENTION = 10080 * 60_000  # offsets.retention.minutes default (§2)
G = "g"


class Broken:
    """While active, the offsets partition's active segment cannot be written."""

    def __init__(self, plog: PartitionLog) -> None:
        self.segment = plog.active_segment

    def __enter__(self) -> "Broken":
        self.saved = os.dup(self.segment.fd)
        read_only = os.open(self.segment.log_path, os.O_RDONLY)
        os.dup2(read_only, self.segment.fd)
        os.close(read_only)
        return self

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self.saved, self.segment.fd)
        os.close(self.saved)


class Shell:
    """A shard, its runtime and its log partition on disk, with a clock the test moves."""

    def __init__(self, tmp_path: Path, now: int = 10 * RETENTION) -> None:
        self.dir = tmp_path
        self.now = now
        self.plog = PartitionLog.open(tmp_path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), now)
        self.shard = GroupCoordinatorShard(0, make_config(initial_rebalance_delay_ms=0))
        self.runtime = ShardRuntime(self.shard, self.plog, fsync=True, clock=lambda: self.now)

    async def start(self) -> None:
        await self.runtime.load()

    async def call(self, operation: str, *args: Any) -> Any:
        """Run a shard operation through the runtime; the response once its records are durable."""
        token = new_token()
        self.runtime.submit(getattr(self.runtime.shard, operation)(token, *args))
        return await token

    def commit(self, offset: int, timestamp: int | None = None) -> Awaitable[Any]:
        """A standalone (generation -1) commit of g/t/0, as AdminClient or Spark would send it."""
        if timestamp is not None:
            self.now = timestamp
        return self.call("commit_offsets", G, "", None, -1, [("t", 0, offset, -1, None)], -1, 9, self.now)

    def fetch(self) -> list:
        return self.runtime.shard.fetch_offsets(G, [("t", [0])])

    async def settled(self) -> None:
        """Until nothing is queued or being written and the shard serves again."""
        while self.runtime._queue or self.runtime._writing or self.runtime.state is not ShardState.ACTIVE:
            await asyncio.sleep(0)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_failed_commit_fails_and_the_shard_keeps_the_durable_offset(tmp_path: Path) -> None:
    shell = Shell(tmp_path)

    async def main() -> None:
        await shell.start()
        assert await shell.commit(1) == {("t", 0): NONE}
        with Broken(shell.plog):
            with pytest.raises(OSError):
                await shell.commit(2)
            await shell.settled()
        assert shell.fetch() == [("t", [(0, 1, -1, "")])]
        assert await shell.commit(3) == {("t", 0): NONE}  # the partition works again

    run(main())
    assert shell.fetch() == [("t", [(0, 3, -1, "")])]
    shell.runtime.stop()
    shell.plog.close()
    restarted = Shell(tmp_path)
    run(restarted.start())
    assert restarted.fetch() == [("t", [(0, 3, -1, "")])]


def test_a_commit_whose_write_failed_does_not_shield_the_old_offset_from_expiry(tmp_path: Path) -> None:
    """§5.3 + §2: the old offset, committed a retention ago, is still the group's offset after its
    re-commit failed, and the next sweep expires it with its simple group."""
    shell = Shell(tmp_path)

    async def main() -> None:
        await shell.start()
        assert await shell.commit(1, timestamp=9 * RETENTION) == {("t", 0): NONE}
        shell.now = 10 * RETENTION
        with Broken(shell.plog):
            with pytest.raises(OSError):
                await shell.commit(2)
            await shell.settled()
        assert shell.fetch() == [("t", [(0, 1, -1, "")])]
        await shell.runtime.sweep()
        await shell.settled()

    run(main())
    assert shell.fetch() == [("t", [(0, -1, -1, "")])], "the old offset never expired"
    assert G not in shell.runtime.shard.groups


def _join(shell: Shell, member_id: str = "") -> Awaitable[Any]:
    return shell.call("join_group", JoinRequest(
        group_id="cg", member_id=member_id, group_instance_id=None, client_id="c", client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocol_type="consumer",
        protocols=consumer_protocols(), require_known_member_id=False), shell.now)


def test_a_classic_group_change_whose_write_failed_is_rolled_back(tmp_path: Path) -> None:
    """The member's LeaveGroup empties the group in memory at once and writes its GroupMetadata;
    when that write fails the group is Stable with its member again, as the log says."""
    shell = Shell(tmp_path)

    async def main() -> None:
        await shell.start()
        joined = await _join(shell)
        member, generation = joined["member_id"], joined["generation_id"]
        synced = await shell.call("sync_group", "cg", member, None, generation, "consumer", "range",
                                  {member: b"assignment"}, shell.now)
        assert synced["error_code"] == NONE
        with Broken(shell.plog):
            with pytest.raises(OSError):
                await shell.call("leave_group", "cg", [(member, None)], shell.now)
            await shell.settled()
        group = shell.runtime.shard.groups["cg"]
        assert group.state.value == "Stable" and list(group.members) == [member]
        assert group.generation == generation
        left = await shell.call("leave_group", "cg", [(member, None)], shell.now)
        assert left["error_code"] == NONE
        assert shell.runtime.shard.groups["cg"].state.value == "Empty"

    run(main())
