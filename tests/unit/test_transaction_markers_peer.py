"""MarkerWriter's markers for partitions another broker leads (cluster mode): a peer that closes
the connection before answering (killed or restarted since the connection was opened) is retried
like any network error, so the transaction completes instead of staying in Prepare* for ever (found
by `make chaos-cluster`: its transactional.id then answered CONCURRENT_TRANSACTIONS to every call)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from offsetd.protocol.errors import Error
from offsetd.server import transaction_markers
from offsetd.server.transaction_markers import MarkerWriter
from offsetd.transaction.result import MarkerJob


class FlakyPeer:
    """A peer whose first WriteTxnMarkers dies with the connection; later ones are answered."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, Any]]] = []

    async def write_txn_markers(self, node: int, body: dict[str, Any]) -> dict[tuple[str, int], int]:
        self.calls.append((node, body))
        if len(self.calls) == 1:
            raise asyncio.IncompleteReadError(b"", 4)
        return {("out", 0): Error.NONE}


def test_a_peer_closing_the_connection_is_retried(monkeypatch) -> None:
    monkeypatch.setattr(transaction_markers, "RETRY_BACKOFF_S", (0.0,))
    remote_partition = SimpleNamespace(leader=False)
    broker = SimpleNamespace(topics=SimpleNamespace(partition=lambda topic, p: remote_partition,
                                                    get=lambda topic: SimpleNamespace(name=topic)),
                             cluster=SimpleNamespace(leader=lambda topic, p: (2, 7)))
    writer = MarkerWriter(broker, [], clock=lambda: 0)  # type: ignore[arg-type]
    peer = FlakyPeer()
    writer.remote = peer  # type: ignore[assignment]
    job = MarkerJob("app", producer_id=5, producer_epoch=1, commit=True, coordinator_epoch=3,
                    partitions=[("out", 0)])
    asyncio.run(asyncio.wait_for(writer.run(job, lambda: True), 5))
    assert [node for node, _ in peer.calls] == [2, 2]
