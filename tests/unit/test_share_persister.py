"""The share coordinator in cluster mode without processes: its state APIs (83-87) answer
NOT_COORDINATOR for a `__share_group_state` partition this broker does not own (and
COORDINATOR_NOT_AVAILABLE before the topic exists), serve it once owned and loaded; the
persister asks the owner of the moment, a peer over the wire or this broker, and retries a
coordinator error until the owner answers."""

from __future__ import annotations

import asyncio
import struct
import uuid
from types import SimpleNamespace
from typing import Any

from offsetd.protocol.errors import Error
from offsetd.server.coordinator_runtime import ShardState
from offsetd.server.share_persister import READ, SharePersister
from offsetd.server.share_state import SHARE_STATE_TOPIC, ShareStatePersister, share_state_partition
from offsetd.server.share_state_api import ShareStateApi

TOPIC_ID = uuid.UUID(int=7)
SP = ("g", TOPIC_ID, 0)
PARTITIONS = 3


class StateLog:
    """A `__share_group_state` partition's log as the runtimes use it: appends kept in memory."""

    def __init__(self) -> None:
        self.leader = False
        self.log_start_offset = self.log_end_offset = 0
        self.batches: list[bytes] = []

    def append(self, records: bytes, now_ms: int, validated: object = None, *, sync: bool) -> None:
        self.batches.append(struct.pack(">q", self.log_end_offset) + records[8:])  # its base offset
        self.log_end_offset += 1  # one record a batch here

    def read(self, offset: int, max_bytes: int) -> bytes:
        return b"".join(self.batches[offset:])


class Topics:
    def __init__(self, topic: Any) -> None:
        self.topic = topic

    def get(self, name: str) -> Any:
        return self.topic if name == SHARE_STATE_TOPIC else None


class View:
    """Leaders as the membership loop would report them: one owner for every partition."""

    def __init__(self, owner: int) -> None:
        self.owner = owner

    def leader(self, topic: Any, partition: int) -> tuple[int, int]:
        return (self.owner, 1) if topic is not None else (-1, -1)


def _coordinator() -> tuple[ShareStatePersister, list[StateLog], Any]:
    logs = [StateLog() for _ in range(PARTITIONS)]
    topic = SimpleNamespace(partitions=logs)
    broker = SimpleNamespace(topics=Topics(topic), cluster=View(owner=2))
    config = SimpleNamespace(get=lambda key: False)
    coordinator = ShareStatePersister(broker, config, lambda: 1000, num_partitions=PARTITIONS, local=False)
    return coordinator, logs, broker


def _request(**partition: int) -> Any:
    return SimpleNamespace(group_id=SP[0], topics=[SimpleNamespace(
        topic_id=TOPIC_ID, partitions=[SimpleNamespace(partition=SP[2], **partition)])])


def _codes(body: dict) -> list[int]:
    return [p["error_code"] for t in body["results"] for p in t["partitions"]]


def test_the_state_apis_answer_not_coordinator_for_a_partition_owned_elsewhere() -> None:
    async def run() -> None:
        coordinator, logs, broker = _coordinator()
        api = ShareStateApi(broker, coordinator)
        asked: list[bool] = []
        coordinator.create_state_topic = lambda: asked.append(True)
        assert _codes(await api.read(None, _request(leader_epoch=0))) == [Error.COORDINATOR_NOT_AVAILABLE]
        assert asked  # the topic is asked for in the catalogue
        coordinator.add_runtimes(SimpleNamespace(partitions=logs), owned=False)
        for call in (api.read(None, _request(leader_epoch=0)), api.read_summary(None, _request(leader_epoch=0)),
                     api.initialize(None, _request(state_epoch=0, start_offset=5)), api.delete(None, _request())):
            assert _codes(await call) == [Error.NOT_COORDINATOR]
        runtime = coordinator.runtimes[share_state_partition(SP, PARTITIONS)]
        runtime.plog.leader = True
        runtime.state = ShardState.LOADING
        assert _codes(await api.read(None, _request(leader_epoch=0))) == [Error.COORDINATOR_LOAD_IN_PROGRESS]
        await runtime.load()  # claimed: loaded from its (empty) log, then served
        assert _codes(await api.initialize(None, _request(state_epoch=0, start_offset=5))) == [Error.NONE]
        body = await api.read(None, _request(leader_epoch=1))
        assert body["results"][0]["partitions"][0]["start_offset"] == 5
        runtime.unload()  # another broker owns it now: its state is forgotten
        assert _codes(await api.read(None, _request(leader_epoch=1))) == [Error.NOT_COORDINATOR]
        runtime.plog.leader = True
        await runtime.load()  # and claimed back: the state is replayed from the log
        assert (await coordinator.summary(SP))[1].start_offset == 5
    asyncio.run(run())


class Peer:
    """A peer client: answers NOT_COORDINATOR `refusals` times, then a state."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.requests: list[tuple[int, int, dict]] = []

    async def request(self, node: int, api_key: int, version: int, body: dict) -> Any:
        self.requests.append((node, api_key, body))
        code = Error.NOT_COORDINATOR if len(self.requests) <= self.refusals else Error.NONE
        partition = SimpleNamespace(error_code=code, state_epoch=4, start_offset=9, state_batches=())
        return SimpleNamespace(results=[SimpleNamespace(partitions=[partition])])


def test_the_persister_asks_the_owner_and_retries_until_it_answers() -> None:
    async def run() -> None:
        coordinator, logs, broker = _coordinator()
        coordinator.add_runtimes(SimpleNamespace(partitions=logs), owned=False)
        peer = Peer(refusals=2)
        persister = SharePersister(broker, coordinator, node_id=1, remote=peer, deadline_s=5)
        error, state = await persister.read(SP, 3)
        assert (error, state.state_epoch, state.start_offset) == (Error.NONE, 4, 9)
        assert [(node, api) for node, api, _ in peer.requests] == [(2, READ)] * 3
        assert peer.requests[0][2] == {"group_id": "g", "topics": [
            {"topic_id": TOPIC_ID, "partitions": [{"partition": 0, "leader_epoch": 3}]}]}
        # ownership moved here: the local share coordinator answers, the peer is not asked
        broker.cluster.owner = 1
        runtime = coordinator.runtimes[share_state_partition(SP, PARTITIONS)]
        runtime.plog.leader = True
        await runtime.load()
        assert await persister.initialize(SP, 0, 11) == Error.NONE
        assert (await persister.read(SP, 3))[1].start_offset == 11
        assert len(peer.requests) == 3
        # an owner that never answers: the coordinator error once the deadline passes
        broker.cluster.owner = 2
        persister.deadline_s = 0.3
        peer.refusals = 1000
        assert (await persister.read(SP, 3))[0] == Error.NOT_COORDINATOR
    asyncio.run(run())
