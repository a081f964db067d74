"""Transactional offsets through the real shell (`server/coordinator_runtime.ShardRuntime`) and a
real `__consumer_offsets` partition log on disk (KOC §5.4, reference A7/A10): a TxnOffsetCommit
result is one transactional batch, in queue order with the plain group-commit batches of the same
drain; `write_marker` appends a control batch, replays it and resolves; a restart loads the
pending offsets and markers back to the same state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable

import pytest
from coordinator_helpers import NONE, make_config

from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.coordinator.write_errors import CoordinatorWriteError
from offsetd.records.batch import iter_batches
from offsetd.records.control import CONTROL_ABORT, CONTROL_COMMIT, parse_marker
from offsetd.server.coordinator_runtime import ShardRuntime, ShardState, new_token
from offsetd.storage import LogConfig, PartitionLog

G = "g"
PID = 4000
NOW = 1_700_000_000_000
COORDINATOR_LOAD_IN_PROGRESS = 14  # §0
UNSTABLE_OFFSET_COMMIT = 88


class Shell:
    """A shard, its runtime and its partition log in a directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.plog = PartitionLog.open(path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), NOW)
        self.shard = GroupCoordinatorShard(0, make_config())
        self.runtime = ShardRuntime(self.shard, self.plog, fsync=True, clock=lambda: NOW)

    def plain(self, offset: int, partition: int = 0) -> "asyncio.Future[Any]":
        token = new_token()
        self.runtime.submit(self.shard.commit_offsets(token, G, "", None, -1, [("t", partition, offset, -1, None)],
                                                      -1, 9, NOW))
        return token

    def txn(self, offset: int, partition: int = 0, producer_id: int = PID, epoch: int = 0) -> "asyncio.Future[Any]":
        token = new_token()
        self.runtime.submit(self.shard.txn_offset_commit(token, G, "", None, -1, [("t", partition, offset, -1, None)],
                                                         producer_id, epoch, NOW))
        return token

    def fetch(self, partition: int = 0) -> int:
        [(_, [(_, offset, _, _)])] = self.shard.fetch_offsets(G, [("t", [partition])])
        return offset

    def batches(self) -> list[tuple[int, int, int, bool]]:
        """(base offset, producer id, records, control) of every batch in the log."""
        data = self.plog.read(0, 1 << 20)
        return [(h.base_offset, h.producer_id, h.records_count, h.is_control) for _, h in iter_batches(data)]


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_commit_marker_promotes_and_a_restart_loads_the_same_state(tmp_path: Path) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path)
        await shell.runtime.load()
        # one drain: plain, transactional, plain -> three batches in that order, one append
        first, txn, last = shell.plain(5, 0), shell.txn(10, 0), shell.plain(7, 1)
        assert await first == {("t", 0): NONE} and await txn == {("t", 0): NONE} and await last == {("t", 1): NONE}
        assert shell.batches() == [(0, -1, 1, False), (1, PID, 1, False), (2, -1, 1, False)]
        assert shell.fetch(0) == 5 and shell.shard.has_open_transaction(G)
        rows = shell.shard.fetch_stable_offsets(G, [("t", [0, 1])])
        assert rows == [("t", [(0, -1, -1, "", UNSTABLE_OFFSET_COMMIT), (1, 7, -1, "", NONE)])]
        assert await shell.runtime.write_marker(PID, 0, True, 3) is None
        assert shell.batches()[-1] == (3, PID, 1, True)
        assert parse_marker(shell.plog.read(3, 1 << 20)) == (CONTROL_COMMIT, 3)
        assert shell.fetch(0) == 10 and not shell.shard.has_open_transaction(G)
        # a second transaction left open, then a restart
        assert await shell.txn(11, 1, producer_id=PID + 1) == {("t", 1): NONE}
        shell.plog.close()

        again = Shell(tmp_path)
        await again.runtime.load()
        assert again.runtime.state is ShardState.ACTIVE
        assert (again.fetch(0), again.fetch(1)) == (10, 7)
        assert again.shard.pending_partitions(G) == [("t", 1)]
        await again.runtime.write_marker(PID + 1, 0, False, 3)
        assert parse_marker(again.plog.read(again.plog.log_end_offset - 1, 1 << 20))[0] == CONTROL_ABORT
        assert again.fetch(1) == 7 and not again.shard.has_open_transaction(G)
        again.plog.close()

    run(scenario())


def test_write_marker_while_loading_fails_with_load_in_progress(tmp_path: Path) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path)  # not loaded yet
        with pytest.raises(CoordinatorWriteError) as caught:
            await shell.runtime.write_marker(PID, 0, True, 0)
        assert caught.value.error_code == COORDINATOR_LOAD_IN_PROGRESS
        assert shell.plog.log_end_offset == 0
        shell.plog.close()

    run(scenario())


def test_a_refused_marker_fails_alone(tmp_path: Path) -> None:
    """A marker whose producer epoch is older than the producer's (a zombie's, A7: 47) is refused
    by the log; the commits queued around it in the same drain are written and answered."""
    async def scenario() -> None:
        shell = Shell(tmp_path)
        await shell.runtime.load()
        assert await shell.txn(10, 0, epoch=5) == {("t", 0): NONE}
        before = shell.plain(1, 1)
        stale = shell.runtime.write_marker(PID, 4, True, 0)
        after = shell.plain(2, 2)
        with pytest.raises(CoordinatorWriteError) as caught:
            await stale
        assert caught.value.error_code == 47
        assert await before == {("t", 1): NONE} and await after == {("t", 2): NONE}
        assert shell.runtime.state is ShardState.ACTIVE and shell.shard.has_open_transaction(G)
        await shell.runtime.write_marker(PID, 5, True, 0)
        assert shell.fetch(0) == 10
        shell.plog.close()

    run(scenario())
