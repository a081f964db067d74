"""Group commit across partitions (server/group_commit.py): a coordinator batch is written on the
event loop, fdatasync'ed off it (native AIO, or a thread), and only then in the log and
acknowledged. Real partition logs on disk; where a test holds or fails the fdatasync it uses the
threads (os.fdatasync is wrapped); the power-loss test runs both ways, keeping each .log file's
content as of its last fsync and putting exactly that back, as a machine that lost power would."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from coordinator_helpers import NONE, make_config
from storage_helpers import T0, crash

from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.coordinator.write_errors import NOT_COORDINATOR, CoordinatorWriteError
from offsetd.records.batch import build_batch, decode_records, iter_batches
from offsetd.server.aio_fsync import AioFsync
from offsetd.server.coordinator_runtime import ShardRuntime, new_token
from offsetd.server.group_commit import GroupCommit
from offsetd.storage import LogConfig, PartitionLog, file_pool, partition_log
from offsetd.storage.coordinator_journal import journal_paths, read_journals, restore_journaled
from offsetd.storage.file_pool import FilePool, PooledFile
from offsetd.storage.log_dir import StorageError

TOPIC = "__consumer_offsets"
WAIT_S = 10.0  # the longest any test waits for a thread or the loop


def open_log(path: Path, partition: int = 0) -> PartitionLog:
    return PartitionLog.open(path, TOPIC, partition, LogConfig(cleanup_policy="compact", preallocate=True), T0)


def batch(tag: str) -> bytes:
    return build_batch([(b"k", tag.encode(), T0, [])])


def values(plog: PartitionLog) -> list[bytes]:
    data = plog.read(plog.log_start_offset, 1 << 20)
    return [r.value for pos, h in iter_batches(data) for r in decode_records(data[pos:pos + h.size])]


@pytest.fixture
def group_commit() -> Any:
    """Group commit on threads, whose fdatasync the tests can wrap."""
    gc = GroupCommit(aio=False)
    yield gc
    gc.stop()


@pytest.fixture(params=["aio", "threads", "journal", "journal-threads"])
def any_group_commit(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Group commit through native AIO (where the kernel allows it), on threads, and through the
    coordinators' journal in `tmp_path`: with native AIO (its rounds O_DIRECT | O_DSYNC writes) and
    on threads (written through the page cache, then fdatasync'ed). The journal never rolls here, so
    no segment is fsynced and a power loss leaves the restore everything to do
    (test_coordinator_journal.py rolls it)."""
    gc = GroupCommit(aio=not request.param.endswith("threads"),
                     journal=tmp_path if request.param.startswith("journal") else None)
    yield gc
    gc.stop()


def hold_fsyncs(monkeypatch: pytest.MonkeyPatch, gate: Callable[[], None]) -> None:
    """Every fdatasync first calls `gate()` (on the thread that syncs)."""
    real = os.fdatasync

    def held(fd: int) -> None:
        gate()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", held)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the loop until `condition()`; fail after WAIT_S."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


# ------------------------------------------------------------------------ the partition log


def test_a_batch_is_not_in_the_log_until_its_fsync_returned(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch("a"), T0, sync=True)
    pending = plog.begin_append(batch("b"), T0)
    assert plog.log_end_offset == 1 and values(plog) == [b"a"]  # written, not readable
    with pytest.raises(ValueError):  # one batch awaits its fsync: no other append meanwhile
        plog.append(batch("c"), T0)
    plog.roll(T0)  # nor a roll (sealing would cut the batch off): a no-op
    assert len(plog.segments) == 1
    os.fdatasync(pending.segment.file.fileno())
    result = plog.finish_append(pending)
    assert (result.base_offset, plog.log_end_offset, values(plog)) == (1, 2, [b"a", b"b"])
    assert not plog.active_segment.dirty  # that fsync covered it
    crash(plog)
    assert values(open_log(tmp_path)) == [b"a", b"b"]


def test_a_failed_fsync_cuts_the_batch_off_and_takes_the_directory_offline(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch("a"), T0, sync=True)
    pending = plog.begin_append(batch("b"), T0)
    with pytest.raises(StorageError):
        plog.finish_append(pending, OSError(errno.EIO, "fsync failed"))
    assert plog.log_dir.offline  # the kernel may have dropped the pages it could not write
    assert plog.log_end_offset == 1 and values(plog) == [b"a"]
    assert os.path.getsize(plog.active_segment.log_path) == plog.active_segment.size  # cut off
    crash(plog)
    assert values(open_log(tmp_path)) == [b"a"]


def test_a_batch_whose_log_closed_meanwhile_is_not_taken_in(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    pending = plog.begin_append(batch("a"), T0)
    plog.close()  # shutdown while its fsync ran: close() cuts the batch off with the zeros
    with pytest.raises(ValueError):
        plog.finish_append(pending)
    assert values(open_log(tmp_path)) == []


def own_pool(plog: PartitionLog) -> FilePool:
    """Move the active segment's .log to a pool of one file of its own (opening another closes it)."""
    file = plog.active_segment.file
    file.release()
    file.pool = FilePool(1)
    return file.pool


def test_a_failed_sync_by_the_pool_meanwhile_cuts_the_batch_off(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool closed the segment's descriptor while the batch awaited its fsync, and the fsync it
    ran first failed: that batch is never acknowledged, even when the caller's own fsync returned."""
    plog = open_log(tmp_path)
    plog.append(batch("a"), T0, sync=True)
    pool = own_pool(plog)
    pending = plog.begin_append(batch("b"), T0)

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "fsync failed")

    monkeypatch.setattr(file_pool, "_sync", failing)
    PooledFile(tmp_path / "other", os.O_RDWR, pool).fileno()  # closes the segment's descriptor
    assert not pending.segment.file.is_open and pending.segment.file.error is not None
    with pytest.raises(StorageError):
        plog.finish_append(pending)
    assert plog.log_dir.offline and values(plog) == [b"a"]


def test_begin_append_patches_the_leader_epoch_and_saves_a_new_one_first(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.lead_next_epoch()
    pending = plog.begin_append(batch("a"), T0)
    assert (plog.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"  # before the batch is durable
    os.fdatasync(pending.segment.file.fileno())
    plog.finish_append(pending)
    data = plog.read(0, 1 << 20)
    assert [h.partition_leader_epoch for _, h in iter_batches(data)] == [0]


def test_begin_append_fsyncs_a_new_logs_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(partition_log, "_fsync_dir", synced.append)
    plog = open_log(tmp_path)
    assert synced == []  # not at creation: by the first flush, or by the first deferred append
    plog.begin_append(batch("a"), T0)
    assert synced == [plog.dir]


# ------------------------------------------------------------------------ group commit


def test_the_fsyncs_of_different_partitions_run_at_once(tmp_path: Path, group_commit: GroupCommit,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four partitions' fsyncs each wait until all four have started: only overlapping fsyncs pass."""
    plogs = [open_log(tmp_path, p) for p in range(4)]
    all_started = threading.Barrier(len(plogs), timeout=WAIT_S)
    hold_fsyncs(monkeypatch, all_started.wait)

    async def main() -> list[Any]:
        return await asyncio.gather(*(group_commit.append(plog, batch(str(p)), T0) for p, plog in enumerate(plogs)))

    results = asyncio.run(main())
    assert [r.base_offset for r in results] == [0, 0, 0, 0]
    assert [values(plog) for plog in plogs] == [[b"0"], [b"1"], [b"2"], [b"3"]]


class Shard:
    """A coordinator shard and its runtime on a partition log of its own, with group commit."""

    def __init__(self, path: Path, partition: int, group_commit: GroupCommit) -> None:
        self.plog = open_log(path, partition)
        self.runtime = ShardRuntime(GroupCoordinatorShard(partition, make_config()), self.plog, fsync=True,
                                    clock=lambda: T0, group_commit=group_commit)

    def commit(self, group: str, offset: int) -> "asyncio.Future[Any]":
        """A standalone commit of group/t/0: its response once durable."""
        token = new_token()
        self.runtime.submit(self.runtime.shard.commit_offsets(token, group, "", None, -1,
                                                              [("t", 0, offset, -1, None)], -1, 9, T0))
        return token

    def committed(self, group: str) -> int:
        return self.runtime.shard.fetch_offsets(group, [("t", [0])])[0][1][0][1]


def test_the_loop_serves_while_an_fsync_runs_and_a_later_batch_waits_for_it(
        tmp_path: Path, group_commit: GroupCommit, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first commit's fsync is held, the loop keeps turning; a second commit to the same
    partition is neither written nor answered before the first is durable and answered."""
    release = threading.Event()
    hold_fsyncs(monkeypatch, lambda: release.wait(WAIT_S))
    shard = Shard(tmp_path, 0, group_commit)
    answered: list[str] = []

    async def main() -> None:
        await shard.runtime.load()
        await until(lambda: not shard.runtime._writing, "the load's writes")
        start = shard.plog.log_end_offset
        first = shard.commit("g", 1)
        first.add_done_callback(lambda _: answered.append("first"))
        await until(lambda: shard.plog._pending is not None, "the first batch in its fsync")
        second = shard.commit("g", 2)
        second.add_done_callback(lambda _: answered.append("second"))
        for _ in range(20):  # the loop turns meanwhile
            await asyncio.sleep(0)
        assert not first.done() and not second.done() and shard.plog.log_end_offset == start
        release.set()
        assert await first == {("t", 0): NONE} and await second == {("t", 0): NONE}
        assert answered == ["first", "second"] and shard.plog.log_end_offset == start + 2
        assert shard.committed("g") == 2

    asyncio.run(main())


def test_a_failed_fsync_fails_its_commits_and_none_is_acknowledged(
        tmp_path: Path, group_commit: GroupCommit, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = Shard(tmp_path, 0, group_commit)
    failing = threading.Event()

    def gate() -> None:
        if failing.is_set():
            raise OSError(errno.EIO, "fsync failed")

    hold_fsyncs(monkeypatch, gate)

    async def main() -> None:
        await shard.runtime.load()
        assert await shard.commit("g", 1) == {("t", 0): NONE}
        failing.set()
        with pytest.raises(CoordinatorWriteError) as failed:
            await shard.commit("g", 2)
        assert failed.value.error_code == NOT_COORDINATOR  # KAFKA_STORAGE_ERROR, remapped (§0.1)
        await until(lambda: not shard.runtime._writing, "the shard to settle")
        assert shard.committed("g") == 1

    asyncio.run(main())
    crash(shard.plog)
    restarted = Shard(tmp_path, 0, group_commit)
    asyncio.run(restarted.runtime.load())
    assert restarted.committed("g") == 1


def test_a_thread_syncs_its_own_descriptor_when_the_pool_closes_the_segments(
        tmp_path: Path, group_commit: GroupCommit, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop closes the segment's pooled descriptor (an eviction) while a thread fsyncs the
    batch: the thread holds a duplicate of its own, so the fsync and the append succeed."""
    release = threading.Event()
    on_threads: list[int] = []

    def gate() -> None:
        if threading.current_thread() is not threading.main_thread():  # not the pool's own sync
            release.wait(WAIT_S)

    hold_fsyncs(monkeypatch, gate)
    plog = open_log(tmp_path)
    pool = own_pool(plog)
    pooled = plog.active_segment.file.fileno()
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (on_threads.append(fd), real(fd))[1])

    async def main() -> Any:
        appended = asyncio.ensure_future(group_commit.append(plog, batch("a"), T0))
        await until(lambda: bool(on_threads), "the fsync on its thread")
        PooledFile(tmp_path / "other", os.O_RDWR, pool).fileno()  # closes the segment's descriptor
        assert not plog.active_segment.file.is_open
        release.set()
        return await appended

    assert asyncio.run(main()).base_offset == 0
    assert on_threads[0] != pooled and values(plog) == [b"a"]


class PowerLoss:
    """What each .log file held when its last fsync began; `cut()` puts exactly that back (a
    file never fsynced loses everything), as page cache lost with the power would leave it. The
    fsyncs are slow (2 ms), so a batch acknowledged before its fsync returned would show."""

    def __init__(self, directory: Path, group_commit: GroupCommit, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = directory
        self.synced: dict[str, bytes] = {}
        self.lock = threading.Lock()
        for name in ("fsync", "fdatasync"):  # on the loop (closing, rolling) and on threads
            monkeypatch.setattr(os, name, self._keeping(getattr(os, name)))
        if group_commit._aio is not None:  # native AIO: kept when the kernel said it completed
            monkeypatch.setattr(group_commit._aio, "submit", self._keeping_aio(group_commit._aio.submit))
        journal = group_commit.journal
        if journal is not None and journal._write is not None:  # its O_DSYNC writes: as they complete
            monkeypatch.setattr(journal, "_write", self._keeping_write(journal._write))

    def _content(self, fd: int) -> tuple[str, bytes | None]:
        path = os.readlink(f"/proc/self/fd/{fd}")
        return path, os.pread(fd, os.fstat(fd).st_size, 0) if path.endswith(".log") else None

    def _keep(self, path: str, content: bytes | None) -> None:
        if content is not None:
            with self.lock:
                self.synced[path] = content

    def _keeping(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            time.sleep(0.002)
            path, content = self._content(fd)
            real(fd)
            self._keep(path, content)
        return sync

    def _keeping_aio(self, submit: Callable[[int, Callable[[OSError | None], None]], None]) -> Callable[..., None]:
        def slow_submit(fd: int, on_done: Callable[[OSError | None], None]) -> None:
            path, content = self._content(fd)

            def done(error: OSError | None) -> None:
                if error is not None:
                    on_done(error)
                    return

                def kept() -> None:
                    self._keep(path, content)
                    on_done(None)
                asyncio.get_running_loop().call_later(0.002, kept)

            submit(fd, done)
        return slow_submit

    def _keeping_write(self, write: Callable[..., None]) -> Callable[..., None]:
        """An O_DIRECT | O_DSYNC write: its bytes (what it was given) are kept once it completes."""
        def slow_write(fd: int, address: int, length: int, offset: int,
                       on_done: Callable[[OSError | None], None]) -> None:
            path, data = os.readlink(f"/proc/self/fd/{fd}"), ctypes.string_at(address, length)

            def done(error: OSError | None) -> None:
                if error is not None:
                    on_done(error)
                    return

                def kept() -> None:
                    with self.lock:
                        content = bytearray(self.synced.get(path, b""))
                        content.extend(bytes(max(0, offset + length - len(content))))
                        content[offset:offset + length] = data
                        self.synced[path] = bytes(content)
                    on_done(None)
                asyncio.get_running_loop().call_later(0.002, kept)

            write(fd, address, length, offset, done)
        return slow_write

    def cut(self) -> None:
        for path in self.directory.rglob("*.log"):
            path.write_bytes(self.synced.get(str(path), b""))


@pytest.mark.parametrize("seed", [24, 25])
def test_every_acknowledged_commit_survives_a_power_loss(tmp_path: Path, any_group_commit: GroupCommit,
                                                         monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """200 groups on 8 partitions commit increasing offsets at once, for many loop turns; at a
    random moment the power goes (no close, unsynced writes dropped). After loading again, each
    group's offset is at least its last acknowledged one, and one that was sent."""
    group_commit = any_group_commit
    power = PowerLoss(tmp_path, group_commit, monkeypatch)
    shards = [Shard(tmp_path, p, group_commit) for p in range(8)]
    rng = random.Random(seed)
    groups = [f"g{i}" for i in range(200)]
    acked: dict[str, int] = {}
    sent: dict[str, set[int]] = {g: set() for g in groups}

    async def committer(group: str) -> None:
        shard = shards[int(group[1:]) % len(shards)]
        for offset in range(1, 1_000_000):
            sent[group].add(offset)
            try:
                await shard.commit(group, offset)
            except asyncio.CancelledError:
                return
            acked[group] = offset

    async def main() -> None:
        for shard in shards:
            await shard.runtime.load()
        tasks = [asyncio.ensure_future(committer(g)) for g in groups]
        await until(lambda: sum(acked.values()) > 2_000 + rng.randrange(2_000), "commits")
        for shard in shards:  # the power goes: nothing more is written, what is on disk is all there is
            crash(shard.plog)
        power.cut()
        for task in tasks:
            task.cancel()

    asyncio.run(main())
    restarted = [Shard(tmp_path, p, group_commit) for p in range(8)]
    if group_commit.journal is not None:  # as the broker's start-up does (broker/topics.py)
        restored = restore_journaled({f"{TOPIC}-{s.runtime.shard.partition}": s.plog for s in restarted},
                                     read_journals(journal_paths(tmp_path)), T0)
        assert group_commit.journal.rounds > 0 and restored > 0  # the power loss cut something off

    async def load() -> None:
        for shard in restarted:
            await shard.runtime.load()

    asyncio.run(load())
    for group in groups:
        committed = restarted[int(group[1:]) % len(restarted)].committed(group)
        assert committed >= acked.get(group, -1), f"{group}: acknowledged {acked[group]}, recovered {committed}"
        assert committed == -1 or committed in sent[group]


def test_native_aio_fsyncs_complete_and_refusals_go_to_a_thread(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """AioFsync on this project's Linux machines: many fsyncs at once complete; a file the kernel
    cannot fsync that way is refused at once (OSError); group commit then syncs on a thread."""
    aio = AioFsync()
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT, 0o644) for i in range(20)]
    read_end, write_end = os.pipe()

    async def main() -> None:
        for fd in fds:
            os.pwrite(fd, b"x" * 100, 0)
        outcomes: list[OSError | None] = []
        for fd in fds:
            aio.submit(fd, outcomes.append)
        await until(lambda: len(outcomes) == len(fds), "the fsyncs' completions")
        assert outcomes == [None] * len(fds)
        with pytest.raises(OSError):
            aio.submit(read_end, outcomes.append)

    try:
        asyncio.run(main())
    finally:
        aio.close()
        for fd in [*fds, read_end, write_end]:
            os.close(fd)
    group_commit = GroupCommit(aio=True)
    assert group_commit._aio is not None

    def refused(fd: int, on_done: Any) -> None:
        raise OSError(errno.EAGAIN, "the context is full")

    monkeypatch.setattr(group_commit._aio, "submit", refused)
    plog = open_log(tmp_path / "log")
    try:
        assert asyncio.run(group_commit.append(plog, batch("a"), T0)).base_offset == 0
    finally:
        group_commit.stop()
    crash(plog)
    assert values(open_log(tmp_path / "log")) == [b"a"]
