"""A failed write of `__consumer_offsets` (a full disk, an I/O error) through the real shell
(`server/coordinator_runtime.ShardRuntime`) and a real partition log on disk. Every operation of
the failed batch, and every one queued behind it, fails; the shard then replays its log again, so
memory holds exactly what the log holds (§5.3: "as if it had never been attempted"), for offsets
and classic groups alike. The failures are real: a full disk is a small tmpfs filled up (ENOSPC:
refused until space is freed, then served again), a broken device is the segment's descriptor
swapped for a read-only one (EBADF: the log directory goes offline until a restart)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any, Awaitable

import pytest
from small_disk import SmallDisk
from coordinator_helpers import NONE, REBALANCE_MS, SESSION_MS, consumer_protocols, make_config

from offsetd.coordinator.classic_group_ops import JoinRequest
from offsetd.coordinator.consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.coordinator.write_errors import KAFKA_STORAGE_ERROR, NOT_COORDINATOR, CoordinatorWriteError
from offsetd.server.coordinator_runtime import ShardRuntime, ShardState, new_token
from offsetd.server.group_commit import GroupCommit
from offsetd.storage import LogConfig, PartitionLog

RETENTION = 10080 * 60_000  # offsets.retention.minutes default (§2)
G = "g"


class Broken:
    """While active, the offsets partition's active segment cannot be written."""

    def __init__(self, plog: PartitionLog) -> None:
        self.segment = plog.active_segment

    def __enter__(self) -> "Broken":
        self.saved = os.dup(self.segment.file.fileno())
        read_only = os.open(self.segment.log_path, os.O_RDONLY)
        os.dup2(read_only, self.segment.file.fileno())
        os.close(read_only)
        return self

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self.saved, self.segment.file.fileno())
        os.close(self.saved)


class Shell:
    """A shard, its runtime and its log partition on disk, with a clock the test moves; the
    fsyncs on the event loop (`group_commit` None) or on group commit's threads."""

    def __init__(self, tmp_path: Path, group_commit: GroupCommit | None, now: int = 10 * RETENTION) -> None:
        self.dir = tmp_path
        self.now = now
        self.plog = PartitionLog.open(tmp_path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), now)
        self.shard = GroupCoordinatorShard(0, make_config(initial_rebalance_delay_ms=0))
        self.runtime = ShardRuntime(self.shard, self.plog, fsync=True, clock=lambda: self.now,
                                    group_commit=group_commit)


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

    async def _idle_in(self, state: ShardState, timeout: float = 10.0) -> None:
        """Yield to the runtime until nothing is queued or being written and it is in `state`;
        fail after `timeout` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.runtime._queue or self.runtime._writing or self.runtime.state is not state:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for the shard to settle in {state}: "
                                     f"state {self.runtime.state}, {len(self.runtime._queue)} queued, "
                                     f"writing {bool(self.runtime._writing)}")
            await asyncio.sleep(0)

    async def settled(self) -> None:
        """Until nothing is queued or being written and the shard serves again."""
        await self._idle_in(ShardState.ACTIVE)

    async def settled_failed(self) -> None:
        """Until nothing is queued or being written and the shard has stopped serving."""
        await self._idle_in(ShardState.FAILED)


@pytest.fixture(params=["inline", "group-commit"])
def fsyncs(request: pytest.FixtureRequest) -> Any:
    """Each test twice: the fsync in plog.append, and off the loop through server/group_commit.py."""
    if request.param == "inline":
        yield None
        return
    group_commit = GroupCommit()
    yield group_commit
    group_commit.stop()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def commit_until_refused(shell: Shell, first: int, limit: int = 500) -> int:
    """Commit first, first+1, ... while the disk is full: small appends still fit the page the
    log already has, until one needs a new page (or an index entry) and is refused. Returns the
    last acknowledged offset."""
    for offset in range(first, first + limit):
        try:
            assert run(shell.commit(offset)) == {("t", 0): NONE}
        except CoordinatorWriteError as exc:
            assert (exc.append_error, exc.error_code) == (KAFKA_STORAGE_ERROR, NOT_COORDINATOR)  # §0.1
            return offset - 1
    raise AssertionError(f"{limit} commits fitted on a full disk")


def test_commits_on_a_full_disk_fail_and_none_acknowledged_is_lost(
        small_disk: SmallDisk, fsyncs: GroupCommit | None, caplog) -> None:
    """Issue 16's trial: fill the disk, commit until refused, keep committing (all refused),
    free the space, commit again without a restart, restart: the group reads back the last
    acknowledged offset, and recovery found nothing out of order."""
    shell = Shell(small_disk.path, fsyncs)
    run(shell.start())
    assert run(shell.commit(1)) == {("t", 0): NONE}  # the log has a page
    small_disk.fill()
    acknowledged = commit_until_refused(shell, 2)
    run(shell.settled())
    assert shell.fetch() == [("t", [(0, acknowledged, -1, "")])]
    for offset in range(acknowledged + 1, acknowledged + 20):  # each refused, none half-written
        with pytest.raises(CoordinatorWriteError):
            run(shell.commit(offset))
        run(shell.settled())
    assert shell.plog.log_end_offset == acknowledged  # one record per commit, from offset 0
    assert not shell.plog.log_dir.offline  # a full disk is not a broken one
    small_disk.free()
    for offset in range(10_000, 10_020):
        assert run(shell.commit(offset)) == {("t", 0): NONE}
    assert shell.fetch() == [("t", [(0, 10_019, -1, "")])]
    shell.runtime.stop()
    shell.plog.close()
    caplog.clear()
    restarted = Shell(small_disk.path, fsyncs)
    run(restarted.start())
    assert restarted.fetch() == [("t", [(0, 10_019, -1, "")])]
    assert restarted.plog.log_end_offset == acknowledged + 20
    assert not [r for r in caplog.records if "recovery" in r.getMessage()], caplog.text


def test_a_failed_device_takes_the_shard_offline_until_restart(
        tmp_path: Path, fsyncs: GroupCommit | None) -> None:
    """A write error that is not a full disk (EBADF here) takes the log directory offline: the
    failed commit gets NOT_COORDINATOR, later ones are refused without a write, and a restart
    serves the durable offset again."""
    shell = Shell(tmp_path, fsyncs)

    async def main() -> None:
        await shell.start()
        assert await shell.commit(1) == {("t", 0): NONE}
        with Broken(shell.plog):
            with pytest.raises(CoordinatorWriteError) as failed:
                await shell.commit(2)
            assert failed.value.error_code == NOT_COORDINATOR
            await shell.settled_failed()
        assert shell.plog.log_dir.offline
        with pytest.raises(CoordinatorWriteError):
            await shell.commit(3)
        assert shell.fetch() == [("t", [(0, 1, -1, "")])]

    run(main())
    shell.runtime.stop()
    shell.plog.close()
    restarted = Shell(tmp_path, fsyncs)
    run(restarted.start())
    assert restarted.fetch() == [("t", [(0, 1, -1, "")])]
    assert run(restarted.commit(4)) == {("t", 0): NONE}


def test_a_commit_whose_write_failed_does_not_shield_the_old_offset_from_expiry(
        small_disk: SmallDisk, fsyncs: GroupCommit | None) -> None:
    """§5.3 + §2: the old offset, committed a retention ago, is still the group's offset after its
    re-commit failed, and the next sweep expires it with its simple group."""
    shell = Shell(small_disk.path, fsyncs)
    run(shell.start())
    assert run(shell.commit(1, timestamp=9 * RETENTION)) == {("t", 0): NONE}
    shell.now = 10 * RETENTION
    small_disk.fill()
    with pytest.raises(CoordinatorWriteError):
        for _ in range(500):  # until an append needs a page the full disk does not have
            run(shell.call("commit_offsets", "o", "", None, -1, [("t", 0, 5, -1, None)], -1, 9, shell.now))
    run(shell.settled())
    with pytest.raises(CoordinatorWriteError):  # as large as the refused one, at the same place
        run(shell.commit(2))
    run(shell.settled())
    small_disk.free()
    assert shell.fetch() == [("t", [(0, 1, -1, "")])]

    async def sweep() -> None:  # in one loop: asyncio.run would cancel the sweep's write in its fsync
        await shell.runtime.sweep()
        await shell.settled()

    run(sweep())
    assert shell.fetch() == [("t", [(0, -1, -1, "")])], "the old offset never expired"
    assert G not in shell.runtime.shard.groups


CG = "cg-" + "x" * 300  # its GroupMetadata record is larger than any filler commit


def _join(shell: Shell, member_id: str = "") -> Awaitable[Any]:
    return shell.call("join_group", JoinRequest(
        group_id=CG, member_id=member_id, group_instance_id=None, client_id="c", client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocol_type="consumer",
        protocols=consumer_protocols(), require_known_member_id=False), shell.now, TopicsImage())


def test_a_classic_group_change_whose_write_failed_is_rolled_back(
        small_disk: SmallDisk, fsyncs: GroupCommit | None) -> None:
    """The member's LeaveGroup empties the group in memory at once and writes its GroupMetadata;
    when that write fails (a full disk) the group is Stable with its member again, as the log says."""
    shell = Shell(small_disk.path, fsyncs)
    run(shell.start())
    joined = run(_join(shell))
    member, generation = joined["member_id"], joined["generation_id"]
    synced = run(shell.call("sync_group", CG, member, None, generation, "consumer", "range",
                            {member: b"assignment"}, shell.now))
    assert synced["error_code"] == NONE
    small_disk.fill()
    commit_until_refused(shell, 1)  # the log's last page is now too full for any larger record
    run(shell.settled())
    with pytest.raises(CoordinatorWriteError):
        run(shell.call("leave_group", CG, [(member, None)], shell.now))
    run(shell.settled())
    group = shell.runtime.shard.groups[CG]
    assert group.state.value == "Stable" and list(group.members) == [member]
    assert group.generation == generation
    small_disk.free()
    left = run(shell.call("leave_group", CG, [(member, None)], shell.now))
    assert left["error_code"] == NONE
    assert shell.runtime.shard.groups[CG].state.value == "Empty"


def test_a_consumer_group_change_whose_write_failed_is_rolled_back(
        small_disk: SmallDisk, fsyncs: GroupCommit | None) -> None:
    """A consumer-group heartbeat replays its records at once (reference B6); when their write
    fails the shard is rebuilt from the log, so the member that tried to leave is back, with its
    epoch and partitions, and its session timer runs again."""
    topics = TopicsImage({"t": (uuid.UUID(int=1), 2)}, 1)
    shell = Shell(small_disk.path, fsyncs)
    run(shell.start())
    joined = run(shell.call("consumer_group_heartbeat", ConsumerGroupHeartbeatRequest(
        "cg", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), topic_partitions=()),
        1, shell.now, topics))
    assert (joined.error_code, joined.member_epoch) == (NONE, 1)
    small_disk.fill()
    commit_until_refused(shell, 1)
    run(shell.settled())
    leave = ConsumerGroupHeartbeatRequest("cg", "m1", -1)
    with pytest.raises(CoordinatorWriteError):
        run(shell.call("consumer_group_heartbeat", leave, 1, shell.now, topics))
    run(shell.settled())
    group = shell.runtime.shard.consumer.groups["cg"]
    assert list(group.members) == ["m1"] and group.members["m1"].member_epoch == 1
    assert shell.runtime.shard.next_deadline() is not None  # its session timer again
    small_disk.free()
    left = run(shell.call("consumer_group_heartbeat", leave, 1, shell.now, topics))
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    assert not shell.runtime.shard.consumer.groups["cg"].members
