"""MarkerWriter's markers for partitions another broker leads (cluster mode), both found by `make
chaos-cluster`: a peer that closes the connection before answering (killed or restarted since the
connection was opened) is retried like any network error, so the transaction completes instead of
staying in Prepare* for ever (its transactional.id answered CONCURRENT_TRANSACTIONS to every call);
and a peer that answers UNKNOWN_TOPIC_OR_PARTITION for a partition this broker's catalogue still
has (it has just restarted and not read the catalogue) is asked again, where the marker used to be
dropped as if the partition were deleted: the aborted transaction's records then read as committed
once the next transaction of the producer committed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from offsetd.protocol.errors import Error
from offsetd.server import transaction_markers
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
