"""The PostgreSQL engine's partition log: PostgreSQL holds the log, a local segment log caches it.

An append is stored in PostgreSQL first (a fenced statement, storage/postgres_store.py; its
COMMIT with synchronous_commit=on is the durability point, and only then is the append
acknowledged), then written to a local PartitionLog in this broker's `log.dirs` without fsync. A
partition has one statement in flight; appends arriving meanwhile are decided at once against the
log as it will be (storage/append_pipeline.py) and go together as the next statement, so a busy
partition stores many appends per round trip. A statement that fails refuses everything pending.
Reads, time lookups, the time index and compaction planning use that local copy, exactly as the
embedded engine does, so Fetch and the coordinator's load cost what they cost on one node. The copy is always a prefix of the PostgreSQL log: nothing is
written to it that PostgreSQL did not commit first, and what is stored at an offset changes only by
compaction (the leader's cleaner rewrites a range of its copy, and then the same range's rows).

Only the partition's owner appends or reads; other brokers answer NOT_LEADER_OR_FOLLOWER (its
`leader` is False). When a broker claims a partition it brings its copy up to PostgreSQL's end
(`take_leadership`): a copy whose last append does not match PostgreSQL's (the topic was
re-created, or a cleaner rewrote it) is emptied and read again from the log start. Then the copy
takes PostgreSQL's leader-epoch history (the claim wrote its own epoch into it), which
OffsetForLeaderEpoch and Fetch's epoch checks read.

Transactions: markers and transactional batches are appends like any other, so the copy's
producer state (open transactions, LSO, `.txnindex`) follows every append, including those
copied while catching up; the LSO, aborted transactions and producers are the copy's.

A log larger than `local.retention.bytes` is copied from its tail only (not `__` topics, nor
compacted ones, whose readers and cleaner need all of it): what lies below stays in PostgreSQL
and is known by its batch headers, served a chunk at a time (storage/cold_range.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any, Awaitable, Callable

from offsetd.records.batch import InvalidBatch, iter_batches
from offsetd.storage.append_pipeline import AppendPipeline, PendingAppend
from offsetd.storage.cold_range import ColdRange, NotLoaded, needs_whole, scan_headers, tail_start
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import NotLeader, StorageError
from offsetd.storage.log_append import AppendResult, PreparedAppend
from offsetd.storage.log_read import OffsetOutOfRange
from offsetd.storage.log_retention import retention_deletions
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.postgres_store import Claim, Fenced, PostgresStore, StoreUnavailable
from offsetd.storage.transactions import validate_log_batches

log = logging.getLogger("offsetd.storage")

SYNC_ROWS = 500  # appends read per statement while catching up
CLEANED_CHUNK_BYTES = 4 * 1024 * 1024  # cleaned batches read per step before they are stored
LOAD_LOGGED_S = 0.5  # a claim's copy that took this long is logged (with its offsets and time)


class PostgresPartitionLog:
    """A partition stored in PostgreSQL, led by at most one broker; the PartitionLog interface
    (reads and everything else are the local copy's, see the module docstring)."""

    def __init__(self, cache: PartitionLog, store: PostgresStore, topic_id: uuid.UUID, node_id: int,
                 serving: Callable[[], bool], *, tail_only: bool = True) -> None:
        self._cache = cache
        self.store = store
        self.topic_id = topic_id
        self.node_id = node_id
        self._serving = serving  # the broker's lease is valid (its local deadline not passed)
        self.epoch: int | None = None  # the leader epoch while this broker owns the partition
        self._stored_start = 0  # the log start offset PostgreSQL has (retention moves it)
        # Appends decided but not yet stored (one statement in flight, the rest queued behind it);
        # whether someone (an appender's task, or one of its own) is storing them; drain()'s wait.
        self._pipeline: AppendPipeline[asyncio.Future[AppendResult]] = AppendPipeline(cache)
        self._storing = False
        self._stopped: asyncio.Future[None] | None = None
        # Called when PostgreSQL says another broker owns the partition now.
        self.on_fenced: Callable[["PostgresPartitionLog"], None] = lambda plog: None
        # The log's start that only PostgreSQL holds, when the copy kept the tail (cold_range.py);
        # may the copy keep the tail only (not for internal topics); the load of a chunk in flight;
        # called when a chunk arrived (the broker's Fetch long polls read again).
        self._cold: ColdRange | None = None
        self._tail_only = tail_only
        self._cold_loading: asyncio.Task[None] | None = None
        self.on_cold_loaded: Callable[[], None] = lambda: None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    @property
    def leader(self) -> bool:
        """True while this broker owns the partition and its lease is valid."""
        return self.epoch is not None and self._serving()

    @property
    def leader_epoch(self) -> int:
        return -1 if self.epoch is None else self.epoch

    def _check_leader(self) -> int:
        epoch = self.epoch
        if epoch is None or not self._serving():
            if epoch is not None:
                # The lease lapsed while we still hold the partition: another broker may have
                # claimed it since. Give it up; if it is still ours it is claimed again at a new
                # epoch and read again (a shard load or write interrupted here starts over).
                self.epoch = None
                self.on_fenced(self)
            raise NotLeader(f"broker {self.node_id} does not lead {self._cache.topic}-{self._cache.partition}")
        return epoch

    # ---------------------------------------------------------------- ownership

    async def take_leadership(self, claim: Claim, now_ms: int) -> None:
        """Bring the local copy to PostgreSQL's end, then lead at the claim's epoch (after the
        statement of an earlier epoch still in flight, if any, is answered)."""
        await self.drain()
        started = time.monotonic()
        cache = self._cache
        if not cache.opened:  # a copy this broker never made stays unopened: no file for an empty partition
            cache.preload()  # type: ignore[attr-defined]
        # Not leading while the copy is rewritten: no append, read or retention meets it half made
        # (retention would take a tail's start for the log start and delete below it).
        self.epoch = None
        if self._cold is not None:
            self._cold.release()
            self._cold = None
        end = cache.log_end_offset
        # A copy that starts above PostgreSQL's start is a tail an earlier leadership kept: what
        # it knew of the rest is gone with that process, so it is read again.
        consistent = cache.log_start_offset <= claim.start_offset <= end <= claim.next_offset
        if consistent and end > claim.start_offset:
            stored = await self.store.ending_at(self.topic_id, cache.partition, end - 1)
            try:
                consistent = stored is not None and bytes(cache.read(stored[0], len(stored[1]))) == bytes(stored[1])
            except OffsetOutOfRange:  # PostgreSQL's last append starts below what the copy holds
                consistent = False
        if not consistent:
            log.info("%s-%d: local copy [%d, %d) does not match PostgreSQL [%d, %d); reading it again",
                     cache.topic, cache.partition, cache.log_start_offset, end, claim.start_offset,
                     claim.next_offset)
            cache.truncate_fully_and_start_at(claim.start_offset)
        cold, rows = (await self._copy_tail_only(claim, now_ms) if claim.next_offset > cache.log_end_offset
                      else (None, None))
        offset = copied_from = cache.log_end_offset
        while offset < claim.next_offset:
            if rows is None:
                rows = await self.store.read(self.topic_id, cache.partition, offset, SYNC_ROWS)
            if not rows:
                break
            for base, last, data in rows:
                if last < offset:
                    continue
                if base < offset:  # an append straddling the copy's end: the copy was cut mid-append
                    raise StorageError(f"{cache.topic}-{cache.partition}: PostgreSQL has offsets {base}-{last} "
                                       f"where {offset} was expected")
                cache.apply_append(_prepared(cache, data), now_ms)  # base > offset: compacted away
                offset = last + 1
            rows = None
        if cache.log_end_offset != claim.next_offset:
            raise StorageError(f"{cache.topic}-{cache.partition}: caught up to {cache.log_end_offset}, PostgreSQL "
                               f"ends at {claim.next_offset}")
        cache.set_epoch_history(list(claim.history), claim.epoch)
        self._stored_start = claim.start_offset
        self._cold = cold
        self.epoch = claim.epoch
        took = time.monotonic() - started
        if took >= LOAD_LOGGED_S or cold is not None:
            log.info("%s-%d: copied offsets %d-%d from PostgreSQL in %.2f s; leading at epoch %d", cache.topic,
                     cache.partition, copied_from, claim.next_offset - 1, took, claim.epoch)

    async def _copy_tail_only(self, claim: Claim, now_ms: int) -> tuple[ColdRange | None, list[Any] | None]:
        """When the log past the copy's end is larger than local.retention.bytes (and the topic
        may be kept so): restart the copy empty at the tail's first append, with the producer
        state as of there, and return the range left in PostgreSQL (cold_range.py). Else no
        range, and the appends from the copy's end when one read held all of them (a partition
        with little in it costs the one read it always did, not a look at its headers too)."""
        cache = self._cache
        keep = local_retention_bytes(cache.config)
        if keep < 0 or not self._tail_only or cache.config.compacts:
            return None, None
        rest = await self.store.read(self.topic_id, cache.partition, cache.log_end_offset, SYNC_ROWS)
        if len(rest) < SYNC_ROWS and sum(len(row[2]) for row in rest) <= keep:
            return None, rest
        # Every append from the log start: those below the tail are replayed from their headers
        # whatever the copy held (a copy that already holds the tail is kept).
        heads = await self.store.heads(self.topic_id, cache.partition, claim.start_offset)
        start = tail_start([(base, last, size) for base, last, size, _ in heads], keep)
        if start is None or start <= cache.log_end_offset:
            return None, None
        below = [row for row in heads if row[0] < start]
        whole = {}
        for row in below:
            if needs_whole(row):
                read = await self.store.read(self.topic_id, cache.partition, row[0], 1)
                whole[row[0]] = read[0][2]
        producers, cold = scan_headers(below, claim.start_offset, start, now_ms, whole)
        cache.truncate_fully_and_start_at(start)
        cache.producer_state.load_snapshot(producers.to_snapshot())
        log.info("%s-%d: copying the tail [%d, %d) only; [%d, %d) stays in PostgreSQL (%d bytes, %d producers, "
                 "%d aborted transactions)", cache.topic, cache.partition, start, claim.next_offset,
                 claim.start_offset, start, cold.size_bytes, len(producers.producers), len(cold.aborted))
        return cold, None

    def lose_leadership(self) -> None:
        self.epoch = None

    async def drain(self) -> None:
        """Wait until the statement in flight (if any) is stored or fenced; appends queued behind
        it are refused once this broker no longer leads at their epoch."""
        if self._storing:
            if self._stopped is None:
                self._stopped = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._stopped)

    # ------------------------------------------------------------------- writes

    def append(self, records: bytes | bytearray | memoryview, now_ms: int, validated: Any = None, *,
               leader_epoch: int | None = None, sync: bool = False) -> Awaitable[AppendResult]:
        """Decide the append now (after every append still being stored, storage/append_pipeline.py),
        store it in PostgreSQL with whatever is queued with it, then in the local copy; an awaitable
        of the AppendResult, answered once PostgreSQL's COMMIT returned. Refusals (ProduceError,
        InvalidBatch, NotLeader) are raised at once. When nothing is being stored, the caller's
        own await stores the statement (no task to wait for: a loop turn sooner each way)."""
        epoch = self._check_leader()
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        decided = self._pipeline.prepare(bytes(records), validated, epoch, now_ms, future)
        if isinstance(decided, AppendResult):  # an idempotent producer's retry of a batch it sent before
            holder = self._pipeline.holder(decided)
            if holder is None:
                future.set_result(decided)
            else:  # still being stored: answered when it is
                holder.waiter.add_done_callback(lambda done: _copy_outcome(done, future, decided))
            return future
        if self._storing:
            return future
        self._storing = True
        return self._store_own(future)

    async def _store_own(self, mine: "asyncio.Future[AppendResult]") -> AppendResult:
        """Store the statement holding `mine` in the caller's task (what queued behind it goes on
        in a task of its own), then answer."""
        await self._store_pending(mine)
        return mine.result()

    async def _store_pending(self, until: "asyncio.Future[AppendResult] | None" = None) -> None:
        """Store the queued appends, one statement at a time, until none are left or, with
        `until`, until that one is answered (see the module docstring); on a failure every
        pending append is refused and the partition given up."""
        pipeline, cache = self._pipeline, self._cache
        handed_over = False
        try:
            while statement := pipeline.take():
                epoch = statement[0].epoch
                if self.epoch != epoch or any(p.epoch != epoch for p in statement):
                    _refuse(pipeline.fail(), NotLeader(f"broker {self.node_id} no longer leads {cache.topic}-"
                                                       f"{cache.partition} at epoch {epoch}"))
                    break
                first, last = statement[0].prepared.first, statement[-1].prepared.next_offset - 1
                try:
                    await self.store.append(self.topic_id, cache.partition, self.node_id, epoch,
                                            [(p.prepared.first, p.prepared.next_offset - 1, p.prepared.data())
                                             for p in statement])
                except Fenced as exc:
                    log.warning("%s-%d: %s; giving the partition up", cache.topic, cache.partition, exc)
                    self._give_up(epoch)
                    _refuse(pipeline.fail(), NotLeader(str(exc)))
                    break
                except StoreUnavailable as exc:
                    # Not acknowledged (the clients retry), but it may have committed: this copy can
                    # no longer tell where the log ends, so the partition is claimed again, which
                    # reads PostgreSQL's end first.
                    # (info: the store tells the log about the outage itself, once a second)
                    log.info("%s-%d: append of offsets %d-%d has an unknown outcome (%s); claiming the "
                             "partition again", cache.topic, cache.partition, first, last, exc)
                    self._give_up(epoch)
                    _refuse(pipeline.fail(), exc)
                    break
                except asyncio.CancelledError:  # the storing task stopped: the outcome is unknown too
                    self._give_up(epoch)
                    raise
                self._stored(pipeline.stored(), epoch)
                if until is not None and until.done() and not pipeline.idle:
                    handed_over = True
                    asyncio.ensure_future(self._store_pending())
                    return
        finally:
            if not handed_over:
                self._storing = False
                _refuse(pipeline.fail(), StorageError(f"{cache.topic}-{cache.partition}: appends abandoned"))
                stopped, self._stopped = self._stopped, None
                if stopped is not None and not stopped.done():
                    stopped.set_result(None)

    def _stored(self, appends: "list[PendingAppend[asyncio.Future[AppendResult]]]", epoch: int) -> None:
        """PostgreSQL committed `appends`: into the local copy in offset order (while this broker
        still leads at their epoch: else a new claim reads them from PostgreSQL), then answered."""
        cache = self._cache
        for pending in appends:
            prepared = pending.prepared
            result = None
            if self.epoch == epoch:
                try:
                    result = cache.apply_append(prepared, pending.now_ms)
                except Exception as exc:  # whatever the copy does, the append is durable: answered
                    # Stored in PostgreSQL (acknowledged) but not here: this copy is behind, so the
                    # partition is given up and whoever claims it next reads it from PostgreSQL.
                    log.error("%s-%d: local copy failed after PostgreSQL stored the append: %s; giving the "
                              "partition up", cache.topic, cache.partition, exc)
                    self._give_up(epoch)
            if result is None:
                result = AppendResult(prepared.first, prepared.next_offset - 1, -1, cache.log_start_offset)
            if not pending.waiter.done():
                pending.waiter.set_result(result)

    def _give_up(self, epoch: int) -> None:
        """Stop leading (if still at `epoch`) and tell the cluster member, which claims it again
        if it is still ours."""
        if self.epoch == epoch:
            self.epoch = None
            self.on_fenced(self)

    def apply_retention(self, now_ms: int) -> int:
        """Retention runs on the leader's copy; what it deleted is then dropped from PostgreSQL
        too (fenced by the epoch, in the background). Other brokers leave their copies alone.
        The range only PostgreSQL holds goes first; the copy's segments only once it is gone."""
        if not self.leader:
            return 0
        cache, cold = self._cache, self._cold
        removed = 0
        if cold is not None:
            start = cold.retained_start(cache.config, now_ms, cache.size_bytes)
            if start > cold.start:
                log.info("retention moved the log start of %s-%d to %d (PostgreSQL only below %d)",
                         cache.topic, cache.partition, start, cold.end)
                cold.advance(start)
                asyncio.ensure_future(self._advance_start(min(start, cold.end)))
            if cold.start >= cold.end:
                cold.release()
                self._cold = cold = None
        if cold is None:
            removed = cache.apply_retention(now_ms)
            if cache.log_start_offset > self._stored_start:
                asyncio.ensure_future(self._advance_start(cache.log_start_offset))
        else:
            cache.producer_state.expire(now_ms, cache.config.producer_id_expiration_ms)
        self._keep_tail(now_ms)
        return removed

    def _keep_tail(self, now_ms: int) -> None:
        """local.retention.bytes while leading: the copy's oldest sealed segments past it leave the
        copy (their headers and aborted transactions join the range only PostgreSQL holds, which
        still has their appends), as Kafka's tiered storage deletes uploaded local segments."""
        cache = self._cache
        keep = local_retention_bytes(cache.config)
        if keep < 0 or not self._tail_only or cache.config.compacts or not cache.opened:
            return  # (an empty partition's copy stays unopened: no files for 100,000 idle partitions)
        segments = cache.segments
        local = dataclasses.replace(cache.config, retention_ms=-1, retention_bytes=keep)
        count = min(retention_deletions(segments, local, now_ms), len(segments) - 1)  # never the active one
        if count <= 0:
            return
        cold = self._cold or ColdRange(cache.log_start_offset, cache.log_start_offset)
        for seg in segments[:count]:
            for _, h in seg.iter_headers():
                cold.add(h.base_offset, h.last_offset, h.size, h.max_timestamp)
            cold.aborted += cache.transactions.entries(seg.base_offset)
        cold.end = segments[count].base_offset
        self._cold = cold
        for _ in range(count):
            cache.delete_oldest_segment(now_ms)
        log.info("%s-%d: the copy keeps offsets from %d (local.retention.bytes %d); [%d, %d) is read from PostgreSQL",
                 cache.topic, cache.partition, cold.end, keep, cold.start, cold.end)

    async def _advance_start(self, start: int) -> None:
        epoch = self.epoch
        if epoch is None:
            return
        try:
            await self.store.advance_start(self.topic_id, self._cache.partition, self.node_id, epoch, start)
            self._stored_start = max(self._stored_start, start)
        except StorageError as exc:  # tried again after the next retention pass
            log.warning("%s-%d: moving the log start in PostgreSQL: %s", self._cache.topic, self._cache.partition, exc)

    def replace_segments(self, old: list[Any], new_bases: list[int]) -> list[Any]:
        """The log cleaner swapped cleaned segments into the leader's copy: PostgreSQL's rows of
        that offset range are replaced by the cleaned batches too (in the background, fenced by
        the epoch), so the next owner loads the compacted log, not all history."""
        start = old[0].base_offset
        segments = self._cache.segments
        end = next(s.base_offset for s in segments if s.base_offset > old[-1].base_offset and s not in old)
        new = self._cache.replace_segments(old, new_bases)
        if self.epoch is not None:
            asyncio.ensure_future(self._store_cleaned(self.epoch, start, end))
        return new

    async def _store_cleaned(self, epoch: int, start: int, end: int) -> None:
        cache = self._cache
        rows: list[tuple[int, int, bytes]] = []
        offset = start
        try:
            while offset < end:
                chunk = bytes(cache.read(offset, CLEANED_CHUNK_BYTES))
                if not chunk:
                    break
                for pos, h in iter_batches(chunk):
                    if h.base_offset >= end:
                        offset = end
                        break
                    last = h.base_offset + h.last_offset_delta
                    rows.append((h.base_offset, last, chunk[pos : pos + h.size]))
                    offset = last + 1
            await self.store.replace_range(self.topic_id, cache.partition, self.node_id, epoch, start, end, rows)
        except (StorageError, OffsetOutOfRange, Fenced) as exc:  # the next cleaning tries again
            log.warning("%s-%d: storing the cleaned offsets %d-%d in PostgreSQL: %s", cache.topic, cache.partition,
                        start, end, exc)

    # -------------------------------------------------------------------- reads

    @property
    def log_start_offset(self) -> int:
        return self._cold.start if self._cold is not None else self._cache.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The copy's, but with a range below it an open transaction may have begun there
        (cold_range.py). (An unopened copy answers without opening: the lag views ask them all.)"""
        if self._cold is None:
            return self._cache.last_stable_offset
        first = self._cache.producer_state.first_unstable_offset()
        end = self._cache.log_end_offset
        return end if first is None else max(min(first, end), self._cold.start)

    def _cold_range(self, offset: int) -> ColdRange | None:
        """The range only PostgreSQL holds, when `offset` falls in it."""
        self._check_leader()
        cold = self._cold
        if cold is None or offset >= cold.end:
            return None
        if offset < cold.start:
            raise OffsetOutOfRange(offset, cold.start, self._cache.log_end_offset)
        return cold

    def _read_cold(self, cold: ColdRange, offset: int, max_bytes: int, min_one_batch: bool,
                   max_offset: int | None = None) -> tuple[bytes, int]:
        """(appends, the offset after them) from the loaded chunks; (b"", offset) when not loaded
        yet: the chunk is loaded (and the next one, reading ahead), then the long polls wake."""
        read = cold.read(offset, max_bytes, min_one_batch, max_offset)
        if read is None:
            self._load_cold(offset)
            return b"", offset
        ahead = cold.next_to_load(offset)
        if ahead is not None:
            self._load_cold(ahead)
        return read

    def _load_cold(self, offset: int) -> "asyncio.Task[None] | None":
        """Read the chunk from `offset` (unless a read is in flight): that read."""
        if self._cold_loading is None and self._cold is not None:
            self._cold_loading = asyncio.ensure_future(self._load_chunk(self._cold, offset))
        return self._cold_loading

    async def _load_chunk(self, cold: ColdRange, offset: int) -> None:
        try:
            asked = cold.to_load(offset)
            if asked is not None:
                cold.loaded(await self.store.read(self.topic_id, self._cache.partition, *asked))
                self.on_cold_loaded()
        except StorageError as exc:  # the next read asks again
            log.warning("%s-%d: reading offset %d from PostgreSQL: %s", self._cache.topic, self._cache.partition,
                        offset, exc)
        finally:
            self._cold_loading = None

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> Any:
        cold = self._cold_range(offset)
        if cold is not None:
            return self._read_cold(cold, offset, max_bytes, min_one_batch)[0]
        return self._cache.read(offset, max_bytes, min_one_batch=min_one_batch)

    def read_file(self, offset: int, max_bytes: int, *, min_one_batch: bool = True, **options: Any) -> Any:
        cold = self._cold_range(offset)
        if cold is not None:
            return self._read_cold(cold, offset, max_bytes, min_one_batch)[0]
        return self._cache.read_file(offset, max_bytes, min_one_batch=min_one_batch, **options)

    def read_committed(self, offset: int, max_bytes: int, *, min_one_batch: bool = True, **options: Any) -> Any:
        cold = self._cold_range(offset)
        if cold is None:
            return self._cache.read_committed(offset, max_bytes, min_one_batch=min_one_batch, **options)
        data, upper = self._read_cold(cold, offset, max_bytes, min_one_batch, self.last_stable_offset)
        if not data:
            return data, []
        # Aborted transactions ended below the copy, and those ended in it that began below it.
        return data, cold.aborted_transactions(offset, upper) + self._cache.aborted_transactions(offset, upper)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """ListOffsets by time: the range only PostgreSQL holds first (NotLoaded while the append
        it needs is read), then the copy."""
        self._check_leader()
        cold = self._cold
        if cold is not None:
            try:
                found = cold.offset_for_timestamp(ts)
            except NotLoaded as exc:
                exc.loading = self._load_cold(next(b for b, t in zip(cold.bases, cold.max_timestamps) if t >= ts))
                raise
            if found is not None:
                return found
        return self._cache.offset_for_timestamp(ts)

    def max_timestamp(self) -> tuple[int, int]:
        self._check_leader()
        copied = self._cache.max_timestamp()
        below = -1 if self._cold is None else self._cold.max_timestamp()
        if below >= 0 and below >= copied[1]:  # ties go to the earliest record, as Kafka's
            return self.offset_for_timestamp(below) or copied
        return copied


def local_retention_bytes(config: LogConfig) -> int:
    """How much of a log a new owner copies (local.retention.bytes; -2: retention.bytes; -1: all)."""
    return config.retention_bytes if config.local_retention_bytes == -2 else config.local_retention_bytes


def _prepared(cache: PartitionLog, data: bytes) -> PreparedAppend:
    """An append read back from PostgreSQL, to write into the copy as it is, offsets included
    (they were assigned, and the leader epoch patched, before it was stored)."""
    # Markers are stored too: the validation of the log's own writers accepts control batches.
    headers = validate_log_batches(memoryview(data), max(cache.config.max_message_bytes, len(data)))
    if not headers:
        raise InvalidBatch(2, "empty append in PostgreSQL")
    prepared = cache.prepare_append(data, headers, replica=True)
    assert isinstance(prepared, PreparedAppend)  # replicas are never judged duplicates
    return prepared


def _refuse(appends: "list[PendingAppend[asyncio.Future[AppendResult]]]", error: Exception) -> None:
    """Answer appends that were not stored (or whose outcome is unknown) with `error`."""
    for pending in appends:
        if not pending.waiter.done():
            pending.waiter.set_exception(error)


def _copy_outcome(done: "asyncio.Future[AppendResult]", future: "asyncio.Future[AppendResult]",
                  duplicate: AppendResult) -> None:
    """A duplicate's answer once the append it repeats is answered: its offsets, or that append's error."""
    if future.done():
        return
    if done.cancelled():
        future.set_exception(StorageError("the append this one repeats was abandoned"))
    elif done.exception() is not None:
        future.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        future.set_result(duplicate)
