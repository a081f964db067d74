"""MarkerWriter's markers for partitions another broker leads (cluster mode), both found by `make
chaos-cluster`: a peer that closes the connection before answering (killed or restarted since the
connection was opened) is retried like any network error, so the transaction completes instead of
staying in Prepare* for ever (its transactional.id answered CONCURRENT_TRANSACTIONS to every call);
and a peer that answers UNKNOWN_TOPIC_OR_PARTITION for a partition this broker's catalogue still
has (it has just restarted and not read the catalogue) is asked again, where the marker used to be
dropped as if the partition were deleted: the aborted transaction's records then read as committed
once the next transaction of the producer committed. And the usual case, a marker of this broker's
own `__consumer_offsets` partition: waited for by callbacks, retried when it failed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from offsetd.coordinator.write_errors import CoordinatorWriteError
from offsetd.protocol.errors import Error
from offsetd.server import transaction_markers
from offsetd.server.coordinator_runtime import ShardState
from offsetd.server.transaction_markers import MarkerWriter
from offsetd.transaction.result import MarkerJob


class FlakyPeer:
    """A peer whose first WriteTxnMarkers fails with `first` (raised, or the partition's error
    code); later ones are answered."""

    def __init__(self, first: BaseException | int) -> None:
        self.first = first
        self.calls: list[tuple[int, dict[str, Any]]] = []

    async def write_txn_markers(self, node: int, body: dict[str, Any]) -> dict[tuple[str, int], int]:
        self.calls.append((node, body))
        if len(self.calls) == 1:
            if isinstance(self.first, BaseException):
                raise self.first
            return {("out", 0): self.first}
        return {("out", 0): Error.NONE}


@pytest.mark.parametrize("first", [asyncio.IncompleteReadError(b"", 4), Error.UNKNOWN_TOPIC_OR_PARTITION],
                         ids=["connection-closed", "peer-without-the-topic"])
def test_the_marker_is_sent_again(monkeypatch, first: BaseException | int) -> None:
    monkeypatch.setattr(transaction_markers, "RETRY_BACKOFF_S", (0.0,))
    remote_partition = SimpleNamespace(leader=False)
    broker = SimpleNamespace(topics=SimpleNamespace(partition=lambda topic, p: remote_partition,
                                                    get=lambda topic: SimpleNamespace(name=topic)),
                             cluster=SimpleNamespace(leader=lambda topic, p: (2, 7)))
    writer = MarkerWriter(broker, [], clock=lambda: 0)  # type: ignore[arg-type]
    peer = FlakyPeer(first)
    writer.remote = peer  # type: ignore[assignment]
    job = MarkerJob("app", producer_id=5, producer_epoch=1, commit=True, coordinator_epoch=3,
                    partitions=[("out", 0)])
    asyncio.run(asyncio.wait_for(writer.run(job, lambda: True), 5))
    assert [node for node, _ in peer.calls] == [2, 2]


class OffsetsShard:
    """A `__consumer_offsets` shard runtime whose marker writes complete when the test says:
    each write_marker gives the next future of `writes`."""

    def __init__(self) -> None:
        self.state = ShardState.ACTIVE
        self.writes: list[asyncio.Future[None]] = []

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> Any:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writes.append(future)
        return future


def test_a_local_offsets_marker_is_waited_for_without_a_task(monkeypatch) -> None:
    """The usual end of a transaction: the marker of the group's `__consumer_offsets` partition is a
    future of the shard's write; run() waits for it with a future of its own (no coroutine, no
    task), and only a marker that failed is retried (then through the coroutine)."""
    monkeypatch.setattr(transaction_markers, "RETRY_BACKOFF_S", (0.0,))

    async def scenario() -> None:
        shard = OffsetsShard()
        led_here = SimpleNamespace(leader=True)
        broker = SimpleNamespace(topics=SimpleNamespace(partition=lambda topic, p: led_here))
        writer = MarkerWriter(broker, [shard], clock=lambda: 0)  # type: ignore[arg-type,list-item]
        job = MarkerJob("app", producer_id=5, producer_epoch=1, commit=True, coordinator_epoch=3,
                        partitions=[("__consumer_offsets", 0)])
        pending = writer.run(job, lambda: True)
        assert asyncio.isfuture(pending) and not isinstance(pending, asyncio.Task)
        await asyncio.sleep(0)
        assert not pending.done() and len(shard.writes) == 1
        shard.writes[0].set_result(None)
        await asyncio.wait_for(pending, 5)
        # a shard that was loading: the marker is written again, and then the job is done
        pending = writer.run(job, lambda: True)
        shard.writes[1].set_exception(CoordinatorWriteError(Error.COORDINATOR_LOAD_IN_PROGRESS, "loading"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while len(shard.writes) < 3:  # the retry writes the marker again
            assert loop.time() < deadline, f"{len(shard.writes)} marker writes"
            await asyncio.sleep(0.001)
        assert not pending.done()
        shard.writes[2].set_result(None)
        await asyncio.wait_for(pending, 5)

    asyncio.run(scenario())
