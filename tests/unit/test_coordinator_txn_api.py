"""TxnOffsetCommit and require_stable OffsetFetch on the wire side (`server/group_api.GroupApi`),
over a real shard runtime and partition log (KOC §1.2, §1.3; reference A5): unknown partitions,
group id checks, the coordinator's state, the transaction verifier hook, per-version errors."""

from __future__ import annotations

import asyncio
from inspect import isawaitable
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest
from coordinator_helpers import make_config

from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.server.coordinator_runtime import ShardRuntime, ShardState
from offsetd.server.group_api import GroupApi, RequestContext
from offsetd.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000
PID, EPOCH = 31, 2
G = "g"
# §0
UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 3, 14, 15
INVALID_GROUP_ID, INVALID_TXN_STATE, UNSTABLE_OFFSET_COMMIT = 24, 48, 88


class _Topics:
    """The broker's topic registry, as GroupApi asks it: topic "t" has partitions 0-3."""

    def get(self, topic: str) -> object | None:
        return NS(partitions=[object()] * 4) if topic == "t" else None

    def partition(self, topic: str, partition: int) -> object | None:
        return object() if topic == "t" and 0 <= partition < 4 else None


class Wire:
    """A GroupApi over one shard runtime (one offsets partition) and its log on disk."""

    def __init__(self, path: Path) -> None:
        self.plog = PartitionLog.open(path, "__consumer_offsets", 0, LogConfig(cleanup_policy="compact"), NOW)
        self.runtime = ShardRuntime(GroupCoordinatorShard(0, make_config()), self.plog, fsync=False, clock=lambda: NOW)
        self.api = GroupApi(NS(topics=_Topics()), [self.runtime])  # type: ignore[arg-type]
        self.verified: list[tuple] = []

    async def txn_commit(self, version: int, partitions: list[tuple[str, int, int]], group_id: str | None = G,
                         **fields: Any) -> dict[tuple[str, int], int]:
        topics = {}
        for topic, partition, offset in partitions:
            topics.setdefault(topic, []).append(NS(partition_index=partition, committed_offset=offset,
                                                   committed_leader_epoch=-1, committed_metadata=None))
        req = NS(transactional_id="tx", group_id=group_id, producer_id=PID, producer_epoch=EPOCH,
                 topics=[NS(name=t, partitions=ps) for t, ps in topics.items()], **fields)
        body = self.api.txn_offset_commit(RequestContext("c", "/h", version), req)
        body = await body if isawaitable(body) else body
        return {(t["name"], p["partition_index"]): p["error_code"] for t in body["topics"] for p in t["partitions"]}

    async def fetch(self, require_stable: bool) -> list[tuple[int, int, int]]:
        req = NS(group_id=G, topics=[NS(name="t", partition_indexes=[0, 1])], require_stable=require_stable)
        body = self.api.offset_fetch(RequestContext("c", "/h", 7), req)
        body = await body if isawaitable(body) else body
        assert body["error_code"] == 0
        return [(p["partition_index"], p["committed_offset"], p["error_code"]) for p in body["topics"][0]["partitions"]]

    def verifier(self, code: int) -> None:
        def verify(txn_id: str, producer_id: int, epoch: int, topic: str, partition: int) -> int:
            self.verified.append((txn_id, producer_id, epoch, topic, partition))
            return code
        self.api.txn_verifier = verify


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_txn_offset_commit_is_pending_until_the_marker_and_require_stable_says_88(tmp_path: Path) -> None:
    async def scenario() -> None:
        wire = Wire(tmp_path)
        await wire.runtime.load()
        wire.verifier(0)
        answer = await wire.txn_commit(3, [("t", 0, 10), ("nope", 0, 1), ("t", 9, 1)], generation_id=-1,
                                       member_id="", group_instance_id=None)
        assert answer == {("t", 0): 0, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION, ("t", 9): UNKNOWN_TOPIC_OR_PARTITION}
        assert wire.verified == [("tx", PID, EPOCH, "__consumer_offsets", 0)]
        assert await wire.fetch(require_stable=False) == [(0, -1, 0), (1, -1, 0)]
        assert await wire.fetch(require_stable=True) == [(0, -1, UNSTABLE_OFFSET_COMMIT), (1, -1, 0)]
        await wire.runtime.write_marker(PID, EPOCH, True, 0)
        assert await wire.fetch(require_stable=True) == [(0, 10, 0), (1, -1, 0)]
        wire.plog.close()

    run(scenario())


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_a_refusing_verifier_answers_its_code_for_every_partition_and_writes_nothing(tmp_path: Path,
                                                                                      version: int) -> None:
    async def scenario() -> None:
        wire = Wire(tmp_path)
        await wire.runtime.load()
        wire.verifier(INVALID_TXN_STATE)
        answer = await wire.txn_commit(version, [("t", 0, 10), ("t", 1, 11)])
        assert answer == {("t", 0): INVALID_TXN_STATE, ("t", 1): INVALID_TXN_STATE}
        assert wire.plog.log_end_offset == 0 and not wire.runtime.shard.has_open_transaction(G)
        wire.plog.close()

    run(scenario())


def test_an_asynchronous_verifier_is_awaited(tmp_path: Path) -> None:
    async def scenario() -> None:
        wire = Wire(tmp_path)
        await wire.runtime.load()

        async def verify(*args: Any) -> int:
            await asyncio.sleep(0)
            return 0

        wire.api.txn_verifier = verify
        assert await wire.txn_commit(2, [("t", 0, 10)]) == {("t", 0): 0}
        assert wire.runtime.shard.pending_partitions(G) == [("t", 0)]
        wire.plog.close()

    run(scenario())


@pytest.mark.parametrize("version,code,expected", [(3, 13, COORDINATOR_LOAD_IN_PROGRESS), (1, 13, COORDINATOR_NOT_AVAILABLE),
                                                   (3, 6, 16), (4, 120, 120), (3, 47, 47)])
def test_verifier_codes_are_remapped_like_write_errors(tmp_path: Path, version: int, code: int, expected: int) -> None:
    """§0.1: NETWORK_EXCEPTION from verification -> 14 (then 15 before v2, §1.2); 6 -> 16; the
    transaction errors pass through."""
    async def scenario() -> None:
        wire = Wire(tmp_path)
        await wire.runtime.load()
        wire.verifier(code)
        assert await wire.txn_commit(version, [("t", 0, 10)]) == {("t", 0): expected}
        wire.plog.close()

    run(scenario())


@pytest.mark.parametrize("group_id", [None, ""])
def test_null_or_empty_group_id_is_invalid(tmp_path: Path, group_id: str | None) -> None:
    async def scenario() -> None:
        wire = Wire(tmp_path)
        await wire.runtime.load()
        assert await wire.txn_commit(3, [("t", 0, 1), ("x", 0, 1)], group_id=group_id) == {
            ("t", 0): INVALID_GROUP_ID, ("x", 0): UNKNOWN_TOPIC_OR_PARTITION}
        wire.plog.close()

    run(scenario())


@pytest.mark.parametrize("version,expected", [(0, COORDINATOR_NOT_AVAILABLE), (1, COORDINATOR_NOT_AVAILABLE),
                                              (2, COORDINATOR_LOAD_IN_PROGRESS), (5, COORDINATOR_LOAD_IN_PROGRESS)])
def test_loading_coordinator_is_15_before_v2(tmp_path: Path, version: int, expected: int) -> None:
    """§1.2: for v < 2, COORDINATOR_LOAD_IN_PROGRESS is rewritten to COORDINATOR_NOT_AVAILABLE."""
    async def scenario() -> None:
        wire = Wire(tmp_path)  # never loaded
        assert wire.runtime.state is ShardState.LOADING
        assert await wire.txn_commit(version, [("t", 0, 1)]) == {("t", 0): expected}
        wire.plog.close()

    run(scenario())
