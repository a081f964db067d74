"""Appends queued behind the statement in flight (storage/append_pipeline.py) and the PostgreSQL
engine's log storing them (storage/postgres_log.py) over an in-memory store whose statements the
test lets return: offsets follow on, producer rules see the pending appends, one statement carries
everything queued, an answer only after its statement, and a failure refuses everything pending."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, clock  # noqa: F401 (clock: fixture)

from offsetd.records.batch import build_batch
from offsetd.records.control import build_marker_batch
from offsetd.storage import PartitionLog, ProduceError
from offsetd.storage.append_pipeline import AppendPipeline
from offsetd.storage.log_append import AppendResult, PreparedAppend
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import NotLeader
from offsetd.storage.postgres_log import PostgresPartitionLog
from offsetd.storage.postgres_store import Claim, Fenced, StoreUnavailable


def idem(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = False) -> bytes:
    """An idempotent producer's batch of `n` records from sequence `seq`."""
    return build_batch([(b"k", f"v{seq + i}".encode(), T0, []) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, attributes=0x10 if transactional else 0)


def plain(n: int = 1) -> bytes:
    return build_batch([(b"k", b"v", T0, []) for _ in range(n)])


def open_log(path: Path, clock: FakeClock) -> PartitionLog:
    return PartitionLog.open(path, "topic", 0, LogConfig(), clock.now)


def queue(pipeline: AppendPipeline[int], records: bytes, now: int, waiter: int = 0) -> PreparedAppend:
    pending = pipeline.prepare(records, None, 1, now, waiter)
    assert not isinstance(pending, AppendResult)
    return pending.prepared


def store(log: PartitionLog, pipeline: AppendPipeline[int], now: int) -> list[int]:
    """The statement in flight returns: its appends into the log; their base offsets."""
    return [log.apply_append(p.prepared, now).base_offset for p in pipeline.stored()]


# ----------------------------------------------------------------------------- sans-IO


def test_offsets_follow_the_pending_appends_and_a_statement_takes_what_queued(tmp_path: Path,
                                                                                clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    assert queue(pipeline, plain(3), clock.now).first == 0
    assert [p.prepared.first for p in pipeline.take()] == [0]  # in flight
    assert queue(pipeline, plain(2), clock.now).first == 3  # queued behind it
    assert queue(pipeline, plain(1), clock.now).first == 5
    assert (pipeline.end, log.log_end_offset) == (6, 0)
    assert store(log, pipeline, clock.now) == [0]
    assert [p.prepared.first for p in pipeline.take()] == [3, 5]  # one statement
    assert store(log, pipeline, clock.now) == [3, 5]
    assert pipeline.idle and pipeline.take() == [] and log.log_end_offset == 6 == pipeline.end


def test_a_statement_takes_at_most_its_size_of_the_queue(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    sizes = [queue(pipeline, plain(n), clock.now).size for n in (1, 2, 3)]
    assert [p.prepared.first for p in pipeline.take(sizes[0] + sizes[1])] == [0, 1]
    store(log, pipeline, clock.now)
    assert [p.prepared.first for p in pipeline.take(1)] == [3]  # one, however large
    store(log, pipeline, clock.now)
    assert pipeline.idle and log.log_end_offset == 6


def test_sequences_are_judged_after_the_pending_batches(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(7, 0), clock.now)  # 0-1 in the log: sequences 0-1
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    queue(pipeline, idem(7, 2), clock.now)
    pipeline.take()
    queue(pipeline, idem(7, 4), clock.now)  # follows the batch in flight
    with pytest.raises(ProduceError) as exc:
        pipeline.prepare(idem(7, 9), None, 1, clock.now, 0)
    assert exc.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: 6 expected
    assert queue(pipeline, idem(7, 6), clock.now).first == 6
    assert log.producer_state.producers[7].last_seq == 1  # the log's state waits for the store
    store(log, pipeline, clock.now)
    pipeline.take()
    store(log, pipeline, clock.now)
    assert (log.producer_state.producers[7].last_seq, log.log_end_offset) == (7, 8)


def test_a_pending_transaction_is_seen_by_the_next_batch(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    queue(pipeline, idem(3, 0, transactional=True), clock.now)
    pipeline.take()
    with pytest.raises(ProduceError) as exc:  # non-transactional while its transaction is open
        pipeline.prepare(idem(3, 2), None, 1, clock.now, 0)
    assert exc.value.error_code == 48
    queue(pipeline, build_marker_batch(3, 0, True, 0, T0), clock.now)  # the commit marker, queued
    queue(pipeline, idem(3, 2), clock.now)  # after the marker: allowed
    assert log.ongoing_transaction(3) is None  # nothing stored yet


def test_a_duplicate_of_a_pending_batch_names_its_holder(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    queue(pipeline, plain(4), clock.now, waiter=1)
    queue(pipeline, idem(5, 0, n=3), clock.now, waiter=2)  # 4-6
    pipeline.take()
    retry = pipeline.prepare(idem(5, 0, n=3), None, 1, clock.now, 3)
    assert isinstance(retry, AppendResult) and retry.duplicate and (retry.base_offset, retry.last_offset) == (4, 6)
    holder = pipeline.holder(retry)
    assert holder is not None and holder.waiter == 2 and pipeline.end == 7  # nothing queued for it
    store(log, pipeline, clock.now)
    again = pipeline.prepare(idem(5, 0, n=3), None, 1, clock.now, 4)
    assert isinstance(again, AppendResult) and pipeline.holder(again) is None  # in the log now


def test_a_failed_statement_refuses_everything_pending_and_forgets_it(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(9, 0), clock.now)  # 0-1
    pipeline: AppendPipeline[int] = AppendPipeline(log)
    queue(pipeline, idem(9, 2), clock.now, waiter=1)
    pipeline.take()
    queue(pipeline, idem(9, 4), clock.now, waiter=2)
    assert [p.waiter for p in pipeline.fail()] == [1, 2]
    assert pipeline.idle and pipeline.end == 2
    # the producer retries: judged on the log again (sequence 2 follows 1, not a duplicate)
    assert queue(pipeline, idem(9, 2), clock.now).first == 2


# ------------------------------------------------------------------- the engine's log


class GatedStore:
    """The PostgresStore calls of a partition's leader, in memory; each append statement waits
    until the test lets it return (`release`) or fail (`release(error)`)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.statements: list[tuple[list[tuple[int, int, bytes]], asyncio.Future[None]]] = []

    async def append(self, topic_id, partition, node_id, epoch, appends) -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.statements.append((appends, gate))
        await gate
        self.rows.extend(appends)

    def release(self, error: Exception | None = None) -> list[tuple[int, int]]:
        """Let the oldest waiting statement return (or raise `error`): its (base, last) offsets."""
        appends, gate = next((a, g) for a, g in self.statements if not g.done())
        if error is None:
            gate.set_result(None)
        else:
            gate.set_exception(error)
        return [(base, last) for base, last, _ in appends]

    async def read(self, topic_id, partition, offset, limit=500):
        return [r for r in self.rows if r[1] >= offset][:limit]

    async def ending_at(self, topic_id, partition, last_offset):
        return next(((b, d) for b, last, d in self.rows if last == last_offset), None)


async def _leading(tmp_path: Path, clock: FakeClock, store: GatedStore) -> tuple[PostgresPartitionLog, list[object]]:
    fenced: list[object] = []
    plog = PostgresPartitionLog(open_log(tmp_path, clock), store, uuid.uuid4(), 1, lambda: True)
    plog.on_fenced = fenced.append
    await plog.take_leadership(Claim(1, 0, 0, ((1, 0),)), clock.now)
    return plog, fenced


def send(plog: PostgresPartitionLog, records: bytes, now: int) -> "asyncio.Future[AppendResult]":
    """Start an append (the first of an idle log stores its statement in its own await)."""
    return asyncio.ensure_future(plog.append(records, now))


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_appends_wait_for_their_own_statement_and_queue_into_one(tmp_path: Path, clock: FakeClock) -> None:
    async def scenario() -> None:
        store = GatedStore()
        plog, _ = await _leading(tmp_path, clock, store)
        first = send(plog, plain(2), clock.now)
        await _turns()
        later = [send(plog, idem(4, 0), clock.now), send(plog, idem(4, 2), clock.now),
                 send(plog, plain(1), clock.now)]
        retry = send(plog, idem(4, 0), clock.now)  # a duplicate of a batch not stored yet
        await _turns()
        assert len(store.statements) == 1 and not first.done()
        assert store.release() == [(0, 1)]
        await _turns()
        assert first.result().base_offset == 0 and plog.log_end_offset == 2
        assert not any(f.done() for f in [*later, retry])  # their statement is in flight
        assert store.release() == [(2, 3), (4, 5), (6, 6)]  # one statement
        await _turns()
        assert [f.result().base_offset for f in later] == [2, 4, 6]
        assert retry.result().duplicate and retry.result().base_offset == 2
        assert plog.log_end_offset == 7 and len(store.statements) == 2
        assert bytes(plog.read(0, 1 << 20)) == b"".join(d for _, _, d in store.rows)  # a prefix, all of it

    asyncio.run(scenario())


@pytest.mark.parametrize("error", [Fenced("another owner"), StoreUnavailable("PostgreSQL: down")])
def test_a_failed_statement_refuses_it_and_everything_queued(tmp_path: Path, clock: FakeClock,
                                                              error: Exception) -> None:
    async def scenario() -> None:
        store = GatedStore()
        plog, fenced = await _leading(tmp_path, clock, store)
        stored = send(plog, plain(1), clock.now)
        await _turns()
        store.release()
        in_flight = send(plog, plain(2), clock.now)
        await _turns()
        queued = [send(plog, plain(1), clock.now), send(plog, idem(8, 0), clock.now)]
        store.release(error)
        await _turns()
        assert stored.result().base_offset == 0
        expected = NotLeader if isinstance(error, Fenced) else StoreUnavailable
        for future in [in_flight, *queued]:
            with pytest.raises(expected):
                future.result()
        assert (plog.leader, fenced, len(store.statements)) == (False, [plog], 2)
        assert plog.log_end_offset == 1  # the copy holds only what was stored
        with pytest.raises(NotLeader):
            send(plog, plain(1), clock.now)

    asyncio.run(scenario())


def test_lost_leadership_refuses_the_queue_and_a_new_claim_waits_for_the_statement(tmp_path: Path,
                                                                                   clock: FakeClock) -> None:
    async def scenario() -> None:
        store = GatedStore()
        plog, _ = await _leading(tmp_path, clock, store)
        in_flight = send(plog, plain(2), clock.now)
        await _turns()
        queued = send(plog, plain(1), clock.now)
        plog.lose_leadership()
        claim = asyncio.ensure_future(plog.take_leadership(Claim(2, 2, 0, ((1, 0), (2, 2))), clock.now))
        await _turns()
        assert not claim.done()  # the statement of epoch 1 is still in flight
        store.release()  # stored before the claim: acknowledged, read back by the claim
        await _turns(6)
        await claim
        assert in_flight.result().base_offset == 0
        with pytest.raises(NotLeader):
            queued.result()
        assert (plog.leader_epoch, plog.log_end_offset, len(store.statements)) == (2, 2, 1)

    asyncio.run(scenario())
