"""The coordinators' journal (storage/coordinator_journal.py, server/journal_commit.py): the
appends of many coordinator partitions made durable by one fdatasync of one file, what start-up
restores from it, its rolls to new files, a full disk and a failed fdatasync. Real partition logs
and journal files on disk; the group commit runs on threads where a test wraps os.fdatasync."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import T0, crash
from test_group_commit import WAIT_S, PowerLoss, batch, hold_fsyncs, open_log, until, values

from offsetd.broker.topics import TopicRegistry
from offsetd.records.batch import TRANSACTIONAL_MASK, build_batch, iter_batches
from offsetd.records.control import build_marker_batch
from offsetd.config import BrokerConfig
from offsetd.server.group_commit import GroupCommit
from offsetd.storage import PartitionLog
from offsetd.storage.coordinator_journal import (
    JournalFile,
    encode_entry,
    journal_paths,
    read_journals,
    restore_journaled,
)
from offsetd.storage.log_dir import StorageError

TOPIC = "__consumer_offsets"


def name(p: int) -> str:
    return f"{TOPIC}-{p}"


def journaled(tmp_path: Path, **kwargs: Any) -> GroupCommit:
    return GroupCommit(aio=False, journal=tmp_path, **kwargs)


def test_an_entry_reads_back_and_a_damaged_tail_ends_the_file(tmp_path: Path) -> None:
    path = tmp_path / "coordinator-journal-00000000000000000001.log"
    first, second = batch("a"), batch("b")
    data = encode_entry(b"__consumer_offsets-3", [first]) + encode_entry(b"__consumer_offsets-4", [second])
    path.write_bytes(data + bytes(100))  # the zero-filled tail
    assert read_journals([path]) == {name(3): [first], name(4): [second]}
    damaged = bytearray(data)
    damaged[-5] ^= 0xFF  # the second entry's CRC no longer matches
    path.write_bytes(bytes(damaged))
    assert read_journals([path]) == {name(3): [first]}
    path.write_bytes(data[:-3])  # a torn last entry
    assert read_journals([path]) == {name(3): [first]}


def test_an_append_journaled_again_at_the_same_offset_replaces_the_earlier_one(tmp_path: Path) -> None:
    """An entry whose batch was cut off (never acknowledged) and whose offset was written again:
    the later entry wins, with what followed the earlier one dropped too."""
    plog = open_log(tmp_path / "src")
    at = [plog.begin_append(batch(tag), T0) for tag in ("a",)][0]
    cut = at.prepared.data()
    plog.abandon_append(at)
    again = plog.begin_append(batch("b"), T0)
    kept = again.prepared.data()
    path = tmp_path / "coordinator-journal-00000000000000000001.log"
    path.write_bytes(encode_entry(b"p-0", [cut]) + encode_entry(b"p-0", [kept]))
    assert read_journals([path]) == {"p-0": [kept]}


def appends_as_written(path: Path, tags: str) -> list[bytes]:
    """One append per tag to a log at `path`: each as its segment (and the journal) holds it."""
    source, written = open_log(path), []
    for tag in tags:
        pending = source.begin_append(batch(tag), T0)
        written.append(pending.prepared.data())
        source.finish_append(pending)
    return written


def test_restore_appends_what_the_log_lost_with_its_own_offsets(tmp_path: Path) -> None:
    written = appends_as_written(tmp_path / "a", "abcd")
    lost = open_log(tmp_path / "b")  # holds only the first two: the power loss took the rest
    for data in written[:2]:
        lost.append(data, T0, sync=True)
    assert restore_journaled({name(0): lost}, {name(0): written}, T0) == 2
    assert values(lost) == [b"a", b"b", b"c", b"d"] and lost.log_end_offset == 4
    assert not lost.active_segment.dirty  # fsynced before the journal may go
    assert restore_journaled({name(0): lost}, {name(0): written}, T0) == 0  # all there: nothing twice


def test_one_round_serves_the_appends_of_every_partition_written_meanwhile(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """While the journal's first fdatasync is held, appends to eight partitions queue; they all go
    in the next round: two fdatasyncs for nine partitions (each segment's own: none)."""
    release = threading.Event()
    synced: list[str] = []
    real = os.fdatasync

    def held(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        release.wait(WAIT_S)
        real(fd)

    gc = journaled(tmp_path)
    plogs = [open_log(tmp_path, p) for p in range(10)]

    async def main() -> list[Any]:
        await gc.append(plogs[9], batch("9"), T0)  # the journal file is made (and fsynced) now
        monkeypatch.setattr(os, "fdatasync", held)
        first = asyncio.ensure_future(gc.append(plogs[0], batch("0"), T0))
        await until(lambda: bool(synced), "the first round's fdatasync")
        rest = [asyncio.ensure_future(gc.append(plog, batch(str(p)), T0)) for p, plog in enumerate(plogs[1:9], 1)]
        for _ in range(20):  # the loop turns meanwhile: they queue behind the round in flight
            await asyncio.sleep(0)
        assert not any(f.done() for f in rest) and len(synced) == 1
        release.set()
        return await asyncio.gather(first, *rest)

    try:
        results = asyncio.run(main())
    finally:
        gc.stop()
    assert [r.base_offset for r in results] == [0] * 9
    assert gc.journal is not None and gc.journal.rounds == 3
    assert all("coordinator-journal-" in path for path in synced) and len(synced) == 2
    assert all(plog.active_segment.dirty for plog in plogs)  # durable through the journal only
    for p, plog in enumerate(plogs):  # a power loss now: the segments lose everything unsynced
        crash(plog)
        os.truncate(plog.active_segment.log_path, 0)
    reopened = {name(p): open_log(tmp_path, p) for p in range(10)}
    restore_journaled(reopened, read_journals(journal_paths(tmp_path)), T0)
    assert [values(plog) for plog in reopened.values()] == [[str(p).encode()] for p in range(10)]


@pytest.mark.parametrize("aio", [False, True], ids=["threads", "aio-direct"])
def test_the_journal_rolls_once_the_segments_it_covers_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   aio: bool) -> None:
    """A small journal rolls many times; a power loss after 40 appends (every .log file back to
    what it held at its last fsync, or O_DSYNC write) loses none of them: what the removed files
    held was in the segments' fsynced part, the rest is in the last file. On threads the rounds
    are written through the page cache; with native AIO each new file's rounds are direct writes."""
    gc = GroupCommit(aio=aio, journal=tmp_path, journal_bytes=4096)
    assert gc.journal is not None and (gc.journal._write is not None) == aio
    power = PowerLoss(tmp_path, gc, monkeypatch)
    plogs = [open_log(tmp_path, p) for p in range(3)]

    async def main() -> None:
        for i in range(40):
            await gc.append(plogs[i % 3], batch(f"{i:03}" * 100), T0)
        await until(lambda: len(journal_paths(tmp_path)) == 1, "the last roll's segment fsyncs")

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    paths = journal_paths(tmp_path)
    assert len(paths) == 1 and int(paths[0].name[20:-4]) > 3  # the older files are gone
    assert 0 < sum(len(a) for a in read_journals(paths).values()) < 40  # only what came since the roll
    for plog in plogs:
        crash(plog)
    power.cut()
    reopened = {name(p): open_log(tmp_path, p) for p in range(3)}
    restore_journaled(reopened, read_journals(journal_paths(tmp_path)), T0)
    assert [len(values(reopened[name(p)])) for p in range(3)] == [14, 13, 13]
    assert values(reopened[name(1)])[-1] == b"037" * 100


def test_a_roll_keeps_the_old_file_when_a_segment_it_covers_was_not_made_durable(tmp_path: Path) -> None:
    """The pool's fdatasync before it closed a segment's descriptor failed: what the old file holds
    may exist nowhere else, so it stays for the next start-up."""
    gc = journaled(tmp_path, journal_bytes=4096)
    failing, other = open_log(tmp_path, 0), open_log(tmp_path, 1)

    async def main() -> None:
        await gc.append(failing, batch("x" * 3000), T0)
        failing.active_segment.file.error = OSError(errno.EIO, "injected")
        for tag in "yzwv":  # two appends past 4096 bytes: each file rolls after its second
            await gc.append(other, batch(tag * 3000), T0)
        # file 2 covers `other` only: it goes once its segment is fsynced; file 1 stays
        await until(lambda: [int(p.name[20:-4]) for p in journal_paths(tmp_path)] == [1, 3], "file 2 removed")

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    assert read_journals(journal_paths(tmp_path)[:1]) == {name(0): [batch_at(failing, 0)],
                                                          name(1): [batch_at(other, 0)]}


def test_a_full_disk_for_the_journal_falls_back_to_the_segments_fsync(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    gc = journaled(tmp_path)
    plog = open_log(tmp_path)

    def full(self: JournalFile, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async def main() -> Any:
        await gc.append(plog, batch("a"), T0)  # the journal file exists now
        monkeypatch.setattr(JournalFile, "reserve", full)
        return await gc.append(plog, batch("b"), T0)

    try:
        result = asyncio.run(main())
    finally:
        gc.stop()
    assert result.base_offset == 1 and values(plog) == [b"a", b"b"]
    assert not plog.active_segment.dirty and not plog.log_dir.offline  # fsynced itself; still serving
    assert read_journals(journal_paths(tmp_path)) == {name(0): [batch_at(plog, 0)]}  # nothing half-written


def batch_at(plog: PartitionLog, offset: int) -> bytes:
    return plog.read(offset, 1)


@pytest.mark.parametrize("failing", ["fdatasync", "write"])
def test_a_failed_write_or_fdatasync_of_the_journal_takes_the_directory_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """The entry may be in the journal (whole, or part of it), so its offset must never be
    written again; a failed write is answered a turn later, as a failed fdatasync is. (Even a
    full disk reported by the fdatasync: the journal never grows at that point.)"""
    gc = journaled(tmp_path)
    plog = open_log(tmp_path)

    def fail(*_: Any) -> None:
        raise OSError(errno.ENOSPC if failing == "fdatasync" else errno.EIO, "injected")

    async def main() -> None:
        await gc.append(plog, batch("a"), T0)
        if failing == "fdatasync":
            hold_fsyncs(monkeypatch, fail)
        else:
            monkeypatch.setattr(JournalFile, "write", fail)
        with pytest.raises(StorageError):
            await gc.append(plog, batch("b"), T0)

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    assert plog.log_dir.offline and values(plog) == [b"a"] and plog.log_end_offset == 1


def test_start_up_restores_the_journal_before_the_coordinators_lead(tmp_path: Path) -> None:
    """A broker's log directory after a power loss: the internal topics' logs get back what the
    journal holds, are led at their next epoch, and the journal files are gone."""
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    topics = TopicRegistry(config, T0)
    topic = topics.create(TOPIC, 2, {"cleanup.policy": "compact", "preallocate": "true"}, T0, internal=True)
    gc = journaled(tmp_path)

    async def main() -> None:
        for tag in "abc":
            await gc.append(topic.partitions[1], batch(tag), T0)

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    epoch = topic.partitions[1].leader_epoch
    for plog in topic.partitions:  # the power goes: the segments were never fsynced since
        crash(plog)
    os.truncate(topic.partitions[1].active_segment.log_path, 0)
    again = TopicRegistry(config, T0).get(TOPIC)
    assert again is not None and values(again.partitions[1]) == [b"a", b"b", b"c"]
    assert again.partitions[1].leader_epoch == epoch + 1
    assert journal_paths(tmp_path) == []


def test_a_clean_shutdown_removes_the_journal(tmp_path: Path) -> None:
    """Every coordinator segment is fsynced by the close: a partition directory removed while the
    broker is stopped stays removed (nothing brings it back from the journal)."""
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    topics = TopicRegistry(config, T0)
    topic = topics.create(TOPIC, 1, {"cleanup.policy": "compact", "preallocate": "true"}, T0, internal=True)
    gc = journaled(tmp_path)
    asyncio.run(gc.append(topic.partitions[0], batch("a"), T0))
    gc.stop()
    assert len(journal_paths(tmp_path)) == 1
    topics.close()
    assert journal_paths(tmp_path) == []


def test_a_log_behind_everything_the_journal_holds_is_left_as_it_is(tmp_path: Path) -> None:
    """Journaled appends from offset 2 on, a log that ends at 0 (its directory was replaced):
    nothing is appended, rather than a log with a hole."""
    written = appends_as_written(tmp_path / "a", "abcd")
    replaced = open_log(tmp_path / "b")
    assert restore_journaled({name(0): replaced}, {name(0): written[2:]}, T0) == 0
    assert replaced.log_end_offset == 0 and values(replaced) == []


def test_staged_rounds_write_whole_blocks_and_the_file_reads_as_if_written_through_the_page_cache(
        tmp_path: Path) -> None:
    """A round written O_DIRECT | O_DSYNC rewrites the block the previous one ended in (its bytes
    unchanged) and pads with zeros to a whole block; entries of every size, across blocks and
    past the buffer's first size, read back in order, as the page-cache path writes them."""
    direct, plain = JournalFile(tmp_path, 1, direct=True), JournalFile(tmp_path, 2)
    assert direct.direct and not plain.direct  # this project's file system takes O_DIRECT
    batches = [[batch(f"v{p}-{i}" * (1 + p * 37 % 500)) for i in range(p % 4 + 1)] for p in range(40)]
    batches.insert(20, [batch("x" * 100_000)])  # more than the buffer's first 64 KiB
    for p, appends in enumerate(batches):
        data = b"".join(encode_entry(name(p % 3).encode(), [b]) for b in appends)
        assert not direct.reserve(len(data)) and not plain.reserve(len(data))  # within the first zero-fill
        address, length, offset = direct.stage(data)
        assert address % 4096 == 0 and offset % 4096 == 0 and length % 4096 == 0
        assert offset <= direct.position - len(data) and offset + length >= direct.position
        with direct.staged(length) as staged:
            assert os.pwrite(direct.direct_fileno(), staged, offset) == length
        plain.write(data)
    assert direct.position == plain.position > 200_000
    assert direct.path.read_bytes() == plain.path.read_bytes()
    last = {name(p % 3): [appends[-1]] for p, appends in enumerate(batches)}  # every batch at offset 0
    assert read_journals([direct.path]) == last  # the last entry of each partition: the file reads to its end
    direct.remove()
    plain.remove()


def test_a_file_system_that_refuses_o_direct_writes_gets_them_through_the_page_cache(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A direct write completing with EINVAL (nothing written: a file system that opens O_DIRECT
    but refuses its writes) is not a failed disk: that round and every later one are written
    through the page cache and fdatasync'ed, and nothing is lost or taken offline."""
    gc = GroupCommit(journal=tmp_path)  # native AIO: its rounds are direct writes
    journal = gc.journal
    assert journal is not None and journal._write is not None
    refused: list[int] = []

    def refuse(fd: int, address: int, length: int, offset: int, on_done: Any) -> None:
        refused.append(length)
        asyncio.get_running_loop().call_soon(on_done, OSError(errno.EINVAL, "Invalid argument"))

    journal._write = refuse
    plog = open_log(tmp_path)

    async def main() -> None:
        for tag in "abc":
            await gc.append(plog, batch(tag), T0)

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    assert len(refused) == 1 and journal._write is None  # asked once, then not again
    assert values(plog) == [b"a", b"b", b"c"]
    assert [len(v) for v in read_journals(journal_paths(tmp_path)).values()] == [3]
    assert "O_DIRECT writes refused" in caplog.text


def txn_batch(first_seq: int, *tags: str) -> bytes:
    """Records of producer 7's transaction (epoch 0)."""
    return build_batch([(b"k", t.encode(), T0, []) for t in tags], producer_id=7, producer_epoch=0,
                       base_sequence=first_seq, attributes=TRANSACTIONAL_MASK)


@pytest.mark.parametrize("kept, end", [
    ("first", 3),  # the second batch and the marker lost: the marker closes what is left, at offset 2
    ("both", 5),  # only the marker lost: back at its own offset, 4
    ("nothing", 0),  # the transaction's records lost too: nothing to close, nothing appended
])
def test_start_up_restores_a_data_partitions_lost_marker_while_its_transaction_is_open(
        tmp_path: Path, kept: str, end: int) -> None:
    """A transaction's marker in a data partition is appended without an fsync and journaled; after
    a power loss that cut it off the segment (with what followed it), start-up appends it again, so
    the transaction does not stay open with every read_committed reader held at its start."""
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    plog = TopicRegistry(config, T0).create("data", 1, {}, T0).partitions[0]
    first, second = txn_batch(0, "a", "b"), txn_batch(2, "c", "d")
    plog.append(first, T0)
    plog.append(second, T0)
    marked = plog.append(build_marker_batch(7, 0, True, 0, T0), T0)
    assert (marked.base_offset, plog.last_stable_offset) == (4, 5)
    gc = journaled(tmp_path)

    async def main() -> None:
        durable: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        gc.persist(plog, plog.read(4, 1 << 10), durable.set_result)
        assert await durable is None

    try:
        asyncio.run(main())
    finally:
        gc.stop()
    crash(plog)
    cut = {"first": len(first), "both": len(first) + len(second), "nothing": 0}[kept]
    os.truncate(plog.active_segment.log_path, cut)
    again = TopicRegistry(config, T0).get("data")
    assert again is not None
    restored = again.partitions[0]
    assert (restored.log_end_offset, restored.last_stable_offset) == (end, end)  # no transaction left open
    data = restored.read(0, 1 << 20)
    headers = [h for _, h in iter_batches(data)]
    control = {"first": [False, True], "both": [False, False, True], "nothing": []}[kept]
    assert [h.is_control for h in headers] == control
    assert journal_paths(tmp_path) == []
