"""The transaction coordinator's shell (`server/transaction_runtime.TxnShardRuntime`) on a real
`__transaction_state` partition log with group commit: its writes are a chain of callbacks (one
batch in flight, what queues meanwhile goes next), Complete* is installed as soon as the markers
are under way while the id's records wait until they are written, its record lingers to go with
the id's next write, which supersedes it; a failed fsync fails the requests and rebuilds the
shard from the log."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from offsetd.coordinator.write_errors import CoordinatorWriteError
from offsetd.records.batch import decode_records, iter_batches
from offsetd.records.transaction_log import decode_key, decode_value
from offsetd.server.coordinator_runtime import ShardState, new_token
from offsetd.server.group_commit import GroupCommit
from offsetd.server.transaction_runtime import APPLIED_LINGER_S, TxnShardRuntime
from offsetd.storage import LogConfig, PartitionLog
from offsetd.transaction.config import TransactionConfig
from offsetd.transaction.metadata import TxnState
from offsetd.transaction.result import MarkerJob
from offsetd.transaction.shard import TransactionCoordinatorShard

S = TxnState
NOW = 1_700_000_000_000
TXN = "app"
WAIT_S = 10.0  # the longest a test polls for a write


class Shell:
    """A shard, its runtime (group commit on threads) and its partition log in a directory;
    marker jobs are recorded and reported written at once."""

    def __init__(self, path: Path, group_commit: GroupCommit) -> None:
        self.path = path
        self.group_commit = group_commit
        self.jobs: list[MarkerJob] = []
        self.plog = PartitionLog.open(path, "__transaction_state", 0,
                                      LogConfig(cleanup_policy="compact", preallocate=True), NOW)
        self.runtime = self._runtime()

    def _runtime(self) -> TxnShardRuntime:
        shard = TransactionCoordinatorShard(0, TransactionConfig(), iter(range(100, 200)).__next__)
        return TxnShardRuntime(shard, self.plog, fsync=True, clock=lambda: NOW, markers=self._markers,
                               group_commit=self.group_commit)

    def _markers(self, job: MarkerJob, _still: Callable[[], bool]) -> Awaitable[None] | None:
        self.jobs.append(job)
        return self.markers_pending

    markers_pending: "asyncio.Future[None] | None" = None  # set: the markers are written when it resolves

    def call(self, operation: Callable[[Any], Any]) -> "asyncio.Future[Any]":
        token = new_token()
        self.runtime.submit(operation(token))
        return token

    def states(self) -> list[str]:
        """The state of every record in the log, in order."""
        data = self.plog.read(self.plog.log_start_offset, 1 << 20)
        return [S(decode_value(r.value).transaction_status).name for pos, h in iter_batches(data)
                for r in decode_records(data[pos:pos + h.size]) if decode_key(r.key) == TXN]

    def meta(self) -> Any:
        return self.runtime.shard.transactions[TXN]


async def begin(shell: Shell) -> tuple[int, int]:
    """InitProducerId and AddPartitionsToTxn: (producer id, epoch) of an Ongoing transaction."""
    shard = shell.runtime.shard
    init = await shell.call(lambda t: shard.init_producer_id(t, TXN, 60_000, -1, -1, 3, NOW))
    pid, epoch = init["producer_id"], init["producer_epoch"]
    added = await shell.call(lambda t: shard.add_partitions(t, TXN, pid, epoch, [("t", 0)], 3, NOW))
    assert added == {("t", 0): 0}
    return pid, epoch


async def wait_for(check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.001)


@pytest.fixture
def group_commit() -> Any:
    gc = GroupCommit(aio=False)  # threads: os.fdatasync can be failed by a test
    yield gc
    gc.stop()


def test_complete_is_installed_at_once_and_the_next_write_supersedes_its_record(
        tmp_path: Path, group_commit: GroupCommit) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path, group_commit)
        await shell.runtime.load()
        shard = shell.runtime.shard
        pid, epoch = await begin(shell)
        assert await shell.call(lambda t: shard.end_txn(t, TXN, pid, epoch, True, 3, NOW)) == {"error_code": 0}
        # the answer comes first: the markers start in the callback after the answer's
        assert shell.jobs == [] and shell.meta().state is S.PREPARE_COMMIT
        await asyncio.sleep(0)
        assert [job.transactional_id for job in shell.jobs] == [TXN]
        # the markers went in at once: Complete* is the id's state before its record is written
        assert shell.meta().state is S.COMPLETE_COMMIT and shell.meta().pending is None
        assert shell.states() == ["EMPTY", "ONGOING", "PREPARE_COMMIT"]
        # the next transaction starts at once; its Ongoing record supersedes the lingering Complete*
        added = await shell.call(lambda t: shard.add_partitions(t, TXN, pid, epoch, [("t", 1)], 3, NOW))
        assert added == {("t", 1): 0}
        assert shell.states() == ["EMPTY", "ONGOING", "PREPARE_COMMIT", "ONGOING"]
        assert shell.meta().state is S.ONGOING and shell.meta().partitions == {("t", 1)}
        # a restart loads the same state
        shell.runtime = shell._runtime()
        await shell.runtime.load()
        assert shell.meta().state is S.ONGOING and shell.meta().partitions == {("t", 1)}

    asyncio.run(scenario())


def test_a_lingering_complete_is_written_alone_after_a_moment(tmp_path: Path, group_commit: GroupCommit) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path, group_commit)
        await shell.runtime.load()
        shard = shell.runtime.shard
        pid, epoch = await begin(shell)
        await shell.call(lambda t: shard.end_txn(t, TXN, pid, epoch, False, 3, NOW))
        assert shell.states()[-1] == "PREPARE_ABORT"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await wait_for(lambda: shell.states()[-1] == "COMPLETE_ABORT")
        assert loop.time() - started >= APPLIED_LINGER_S * 0.5
        shell.runtime = shell._runtime()
        await shell.runtime.load()
        assert shell.meta().state is S.COMPLETE_ABORT and shell.meta().partitions == set()

    asyncio.run(scenario())


def test_the_next_transaction_starts_at_once_but_its_record_waits_for_the_markers(
        tmp_path: Path, group_commit: GroupCommit) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path, group_commit)
        await shell.runtime.load()
        shard = shell.runtime.shard
        pid, epoch = await begin(shell)
        loop = asyncio.get_running_loop()
        shell.markers_pending = written = loop.create_future()
        # EndTxn is answered once Prepare* is durable; Complete* is installed with the markers in
        # flight, right after the answer
        assert await shell.call(lambda t: shard.end_txn(t, TXN, pid, epoch, True, 3, NOW)) == {"error_code": 0}
        await asyncio.sleep(0)
        assert shell.meta().state is S.COMPLETE_COMMIT
        # the next transaction is accepted, but its Ongoing record waits for the markers ...
        added = shell.call(lambda t: shard.add_partitions(t, TXN, pid, epoch, [("t", 1)], 3, NOW))
        # ... while another id's records go on
        other = await shell.call(lambda t: shard.init_producer_id(t, "other", 60_000, -1, -1, 3, NOW))
        assert other["error_code"] == 0
        await asyncio.sleep(APPLIED_LINGER_S * 2)
        assert not added.done() and shell.states() == ["EMPTY", "ONGOING", "PREPARE_COMMIT"]
        written.set_result(None)
        assert await added == {("t", 1): 0}
        assert shell.states() == ["EMPTY", "ONGOING", "PREPARE_COMMIT", "ONGOING"]
        shell.runtime = shell._runtime()
        await shell.runtime.load()
        assert shell.meta().state is S.ONGOING and shell.meta().partitions == {("t", 1)}

    asyncio.run(scenario())


def test_a_failed_fsync_fails_the_request_and_rebuilds_the_shard_from_the_log(
        tmp_path: Path, group_commit: GroupCommit, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        shell = Shell(tmp_path, group_commit)
        await shell.runtime.load()
        shard = shell.runtime.shard
        pid, epoch = await begin(shell)
        real = os.fdatasync

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "injected")

        monkeypatch.setattr(os, "fdatasync", failing)
        with pytest.raises(CoordinatorWriteError):
            await shell.call(lambda t: shard.end_txn(t, TXN, pid, epoch, True, 3, NOW))
        monkeypatch.setattr(os, "fdatasync", real)
        # the shard is rebuilt from the log: the transaction is Ongoing again, nothing pending
        await wait_for(lambda: shell.runtime.state is ShardState.ACTIVE and TXN in shell.runtime.shard.transactions
                       and shell.meta().pending is None)
        assert shell.meta().state is S.ONGOING
        assert shell.jobs == []

    asyncio.run(scenario())
