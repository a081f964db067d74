"""How a broker's ownership loop claims and loads partitions (cluster/member.py, issue #26): a
round ends only when every batch of claims it started has finished, even when one failed (a round
that ended early let the next claim the same partitions again and load them twice, seen at 100,000
partitions), and a load PostgreSQL did not answer is tried again rather than handed back.

The store and the server are stand-ins that record calls: this drives the loop's orchestration,
not PostgreSQL (tests/integration/test_cluster_*.py run it against a real one)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import offsetd.cluster.member as member_module
from offsetd.cluster.member import ClusterMember
from offsetd.storage.postgres_store import Claim, StoreUnavailable

TOPIC = uuid.UUID(int=7)


class Store:
    """Claims succeed after `delay_s`, except the batch holding a key in `failing`."""

    def __init__(self, failing: set[tuple[uuid.UUID, int]], delay_s: float) -> None:
        self.failing = failing
        self.delay_s = delay_s
        self.claimed: list[tuple[uuid.UUID, int]] = []

    async def claim(self, keys: list[tuple[uuid.UUID, int]], node_id: int, incarnation: uuid.UUID) -> dict:
        if self.failing & set(keys):
            raise StoreUnavailable("PostgreSQL (claim): TimeoutError: ")
        await asyncio.sleep(self.delay_s)
        self.claimed.extend(keys)
        return {key: Claim(epoch=2, next_offset=0, start_offset=0, history=((2, 0),)) for key in keys}


class Server:
    """Loads fail with StoreUnavailable `unavailable` times, then succeed."""

    def __init__(self, unavailable: int = 0) -> None:
        self.unavailable = unavailable
        self.loads = 0

    def urgent(self, key: tuple[uuid.UUID, int]) -> bool:
        return False

    async def gained(self, key: tuple[uuid.UUID, int], claim: Claim) -> bool:
        self.loads += 1
        if self.loads <= self.unavailable:
            raise StoreUnavailable("PostgreSQL (read): TimeoutError: ")
        return True


def member(store: Store, server: Server) -> ClusterMember:
    broker = ClusterMember(store=store, node_id=1, host="127.0.0.1", port=9092, ttl_ms=3000,  # type: ignore[arg-type]
                           heartbeat_ms=1000, callbacks=server)  # type: ignore[arg-type]
    broker.lease.renewed(broker.clock())
    return broker


def test_a_failed_batch_of_claims_ends_the_round_only_after_the_others_finish(monkeypatch) -> None:
    monkeypatch.setattr(member_module, "CLAIM_BATCH", 2)
    keys = [(TOPIC, p) for p in range(6)]
    store = Store(failing={keys[0]}, delay_s=0.05)
    broker = member(store, Server())

    async def run() -> None:
        with pytest.raises(StoreUnavailable):
            await broker._claim_all(keys)
    asyncio.run(run())
    # The two batches that succeeded were claimed and loaded before the round gave up.
    assert sorted(store.claimed) == keys[2:]
    assert sorted(broker.owned) == keys[2:]


def test_a_load_postgresql_did_not_answer_is_tried_again() -> None:
    server = Server(unavailable=2)
    broker = member(Store(failing=set(), delay_s=0), server)
    key = (TOPIC, 0)
    broker.owned[key] = 2
    claim = Claim(epoch=2, next_offset=0, start_offset=0, history=((2, 0),))
    assert asyncio.run(broker._gain(key, claim)) is True
    assert server.loads == 3


def test_a_load_of_a_partition_no_longer_ours_is_not_tried_again() -> None:
    server = Server(unavailable=5)
    broker = member(Store(failing=set(), delay_s=0), server)
    key = (TOPIC, 0)
    broker.owned[key] = 3  # claimed again at a later epoch meanwhile
    claim = Claim(epoch=2, next_offset=0, start_offset=0, history=((2, 0),))
    assert asyncio.run(broker._gain(key, claim)) is False
    assert server.loads == 1
