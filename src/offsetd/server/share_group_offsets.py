"""A share group's offsets for admins (reference share-groups.md §6): DescribeShareGroupOffsets
(90) v0-1 from what the share coordinator holds (server/share_state.py), with v1's lag (the log
end minus the start offset minus the records already done past it, DeliveryCompleteCount; -1
while unknown); AlterShareGroupOffsets (91) v0, new start offsets initialized through the share
coordinator; DeleteShareGroupOffsets (92) v0, the share-partitions' state deleted. Alter and
delete ask the group's shard first (only an empty group; alter creates a missing one) and then
make the leaders' side (server/share_fetch_api.py) forget the group's windows, so the next
fetch reads the new state. The group's share-partitions are those its shard lists as initialized
(record 15) and those this broker's share coordinator holds; their state comes from the share
coordinator owning each (server/share_persister.py: in cluster mode, often another broker).

In cluster mode these requests reach the group coordinator; the partitions' leaders on other
brokers forget their windows when they next read the state epoch the alter or delete bumped
(a write at an older state epoch is fenced there)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Awaitable, Callable, Iterable

from ..broker.broker import Broker
from ..coordinator.write_errors import CoordinatorWriteError
from ..protocol.errors import Error
from ..records.share_group_records import TopicPartitionsInfo
from ..security.authorization import Op, Res, access
from ..share.shard import SharePartitionKey, SharePartitionState
from .coordinator_runtime import new_token
from .group_api import GroupApi
from .share_fetch_api import ShareFetchApi
from .share_persister import SharePersister

Body = dict[str, Any]
LAG_DEADLINE_S = 1.0


class ShareGroupOffsetsApi:
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets, and the
    share state DeleteGroups leaves behind."""

    def __init__(self, broker: Broker, persister: SharePersister, groups: GroupApi,
                 share_api: ShareFetchApi) -> None:
        self.broker = broker
        self.persister = persister
        self.groups = groups
        self.share_api = share_api

    async def describe(self, ctx: Any, req: Any) -> Body:
        """Per group: DESCRIBE on it or GROUP_AUTHORIZATION_FAILED; `topics` null means every
        topic the group has state for; a partition without state answers start offset -1."""
        if self.share_api.refusal:
            return {"throttle_time": 0, "groups": [{"group_id": g.group_id, "topics": (), "error_code":
                                                    Error.UNSUPPORTED_VERSION,
                                                    "error_message": self.share_api.refusal} for g in req.groups]}
        acc = access(self.broker, ctx)
        groups = []
        for group in req.groups:
            if acc is not None and not acc.allows(Op.DESCRIBE, Res.GROUP, group.group_id):
                groups.append({"group_id": group.group_id, "topics": (), "error_code": Error.GROUP_AUTHORIZATION_FAILED,
                               "error_message": None})
                continue
            groups.append({"group_id": group.group_id, "topics": await self._described(group), "error_code": 0,
                           "error_message": None})
        return {"throttle_time": 0, "groups": groups}

    def _share_partitions(self, group_id: str) -> set[SharePartitionKey]:
        """The group's share-partitions: record 15's initialized topics (when this broker
        coordinates the group) and what the local share coordinator holds for it."""
        keys = set(self.persister.states_of(group_id))
        runtime = self.groups.runtime_for(group_id)
        group = None if self.groups.state_error(runtime) else runtime.shard.share.groups.get(group_id)
        if group is not None:
            keys |= {(group_id, t.topic_id, p) for t in group.state_metadata.initialized_topics for p in t.partitions}
        return keys

    async def _states(self, keys: Iterable[SharePartitionKey], deadline_s: float | None = None
                      ) -> dict[SharePartitionKey, SharePartitionState]:
        """The state of each share-partition with one, from the share coordinator owning it
        (`deadline_s`: how long to retry one whose coordinator is moving)."""
        wanted = sorted(keys, key=lambda k: (str(k[1]), k[2]))
        answers = await asyncio.gather(*(self.persister.summary(key, deadline_s) for key in wanted))
        return {key: state for key, (_, state) in zip(wanted, answers) if state is not None}

    async def share_states(self, group_id: str) -> dict[SharePartitionKey, SharePartitionState]:
        """The group's share-partitions as the lag view shows them: those whose share coordinator
        answers within LAG_DEADLINE_S (a scrape does not wait out a failover)."""
        return await self._states(self._share_partitions(group_id), LAG_DEADLINE_S)

    async def _described(self, group: Any) -> list[Body]:
        keys = self._share_partitions(group.group_id)
        if group.topics is not None:
            for t in group.topics:
                topic = self.broker.topics.get(t.topic_name)
                if topic is not None:
                    keys |= {(group.group_id, topic.topic_id, p) for p in t.partitions}
        states = await self._states(keys)
        if group.topics is None:
            wanted: dict[str, list[int]] = {}
            for _, topic_id, partition in sorted(states, key=lambda k: (str(k[1]), k[2])):
                topic = self.broker.topics.by_id(topic_id)
                if topic is not None:
                    wanted.setdefault(topic.name, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in group.topics}
        topics = []
        for name, partitions in wanted.items():
            topic = self.broker.topics.get(name)
            rows = []
            for index in partitions:
                if topic is None or not 0 <= index < len(topic.partitions):
                    rows.append(_row(index, -1, -1, -1, Error.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                state = states.get((group.group_id, topic.topic_id, index))
                if state is None:
                    rows.append(_row(index, -1, -1, -1))
                    continue
                end = topic.partitions[index].log_end_offset
                done = state.delivery_complete_count
                lag = -1 if done < 0 else max(end - state.start_offset - done, 0)
                rows.append(_row(index, state.start_offset, state.leader_epoch, lag))
            topics.append({"topic_name": name, "topic_id": topic.topic_id if topic is not None else None,
                           "partitions": rows})
        return topics

    async def alter(self, ctx: Any, req: Any) -> Body:
        """AlterShareGroupOffsets v0: READ on the group (top level) and on each topic (its
        partitions); unknown topics and partitions 3; then the shard (an empty group, created if
        missing, its epoch bumped) and the share coordinator's initialize at that state epoch."""
        refused = self._refused(ctx, Op.READ, req.group_id)
        if refused is not None:
            return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "responses": ()}
        acc = access(self.broker, ctx)
        responses: list[Body] = []
        altered: dict[uuid.UUID, TopicPartitionsInfo] = {}
        offsets: list[tuple[uuid.UUID, int, int]] = []
        for t in req.topics:
            topic = self.broker.topics.get(t.topic_name)
            denied = acc is not None and not acc.allows(Op.READ, Res.TOPIC, t.topic_name)
            rows = []
            for p in t.partitions:
                if denied:
                    rows.append(_alter_row(p.partition_index, Error.TOPIC_AUTHORIZATION_FAILED))
                elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                    rows.append(_alter_row(p.partition_index, Error.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    rows.append(_alter_row(p.partition_index, 0))
                    offsets.append((topic.topic_id, p.partition_index, p.start_offset))
                    info = altered.get(topic.topic_id)
                    altered[topic.topic_id] = TopicPartitionsInfo(
                        topic.topic_id, t.topic_name, (*(info.partitions if info else ()), p.partition_index))
            responses.append({"topic_name": t.topic_name, "topic_id": topic.topic_id if topic and not denied else None,
                              "partitions": rows})
        error, epoch = await self._change(req.group_id, altered, frozenset(), create=True)
        if error:
            return {"throttle_time": 0, "error_code": error, "error_message": _message(error, req.group_id),
                    "responses": ()}
        failed: dict[tuple[uuid.UUID, int], int] = {}
        for topic_id, index, start in offsets:
            sp_key = (req.group_id, topic_id, index)
            _, stored = await self.persister.summary(sp_key)
            state_epoch = epoch if stored is None else max(epoch, stored.state_epoch + 1)
            code = await self.persister.initialize(sp_key, state_epoch, start)
            if code:
                failed[(topic_id, index)] = code
        self.share_api.forget_group(req.group_id)
        for response in responses:
            for row in response["partitions"]:
                code = failed.get((response["topic_id"], row["partition_index"]))
                if code:
                    row["error_code"] = code
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}

    async def delete(self, ctx: Any, req: Any) -> Body:
        """DeleteShareGroupOffsets v0: DELETE on the group (top level), READ on each topic; a
        topic unknown or without state for the group 3; then the shard (an empty group) and a
        tombstone of each of the topic's share-partitions."""
        refused = self._refused(ctx, Op.DELETE, req.group_id)
        if refused is not None:
            return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "responses": ()}
        acc = access(self.broker, ctx)
        states = await self._states(self._share_partitions(req.group_id))
        responses: list[Body] = []
        deleted: set[uuid.UUID] = set()
        for t in req.topics:
            topic = self.broker.topics.get(t.topic_name)
            if acc is not None and not acc.allows(Op.READ, Res.TOPIC, t.topic_name):
                responses.append(_delete_row(t.topic_name, None, Error.TOPIC_AUTHORIZATION_FAILED))
            elif topic is None:
                responses.append(_delete_row(t.topic_name, None, Error.UNKNOWN_TOPIC_OR_PARTITION))
            elif not any(key[1] == topic.topic_id for key in states):
                responses.append(_delete_row(t.topic_name, topic.topic_id, Error.UNKNOWN_TOPIC_OR_PARTITION,
                                             "There is no offset information to delete."))
            else:
                responses.append(_delete_row(t.topic_name, topic.topic_id, 0))
                deleted.add(topic.topic_id)
        error, _ = await self._change(req.group_id, {}, frozenset(deleted), create=False)
        if error:
            return {"throttle_time": 0, "error_code": error, "error_message": _message(error, req.group_id),
                    "responses": ()}
        for sp_key in [key for key in states if key[1] in deleted]:
            await self.persister.delete(sp_key)
        self.share_api.forget_group(req.group_id)
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}

    def groups_deleting(self, group_ids: list[str]) -> Callable[[list[str]], Awaitable[None]]:
        """DeleteGroups is deleting these groups: their share-partitions, taken now (the group's
        records go with it), and what deletes the state of those deleted (a share group's id only
        has any) and makes the leaders forget their windows."""
        keys = {group_id: self._share_partitions(group_id) for group_id in group_ids}

        async def deleted(done: list[str]) -> None:
            for group_id in done:
                for sp_key in keys.get(group_id, ()):
                    await self.persister.delete(sp_key)
                self.share_api.forget_group(group_id)
        return deleted

    def _refused(self, ctx: Any, op: Any, group_id: str | None) -> tuple[int, str | None] | None:
        """The request-level answers: share groups off, the group's ACL, an empty id."""
        if self.share_api.refusal:
            return Error.UNSUPPORTED_VERSION, self.share_api.refusal
        acc = access(self.broker, ctx)
        if acc is not None and not acc.allows(op, Res.GROUP, group_id or ""):
            return Error.GROUP_AUTHORIZATION_FAILED, None
        if not group_id:
            return Error.INVALID_GROUP_ID, None
        return None

    async def _change(self, group_id: str, altered: dict[uuid.UUID, TopicPartitionsInfo],
                      deleted: frozenset[uuid.UUID], create: bool) -> tuple[int, int]:
        """The group's shard: (error code, group epoch), once its records are durable."""
        runtime = self.groups.runtime_for(group_id)
        error = self.groups.state_error(runtime)
        if error:
            return error, 0
        token = new_token()
        runtime.submit(runtime.shard.change_share_group_offsets(token, group_id, altered, deleted, create))
        try:
            return await token
        except CoordinatorWriteError as exc:  # the group's records were not written
            return exc.error_code, 0


def _message(error: int, group_id: str) -> str | None:
    return {Error.NON_EMPTY_GROUP: f"Share group {group_id} is not empty.",
            Error.GROUP_ID_NOT_FOUND: f"Share group {group_id} not found."}.get(error)


def _row(index: int, start: int, epoch: int, lag: int, error: int = 0) -> Body:
    return {"partition_index": index, "start_offset": start, "leader_epoch": epoch, "lag": lag,
            "error_code": error, "error_message": None}


def _alter_row(index: int, error: int) -> Body:
    return {"partition_index": index, "error_code": error, "error_message": None}


def _delete_row(name: str, topic_id: uuid.UUID | None, error: int, message: str | None = None) -> Body:
    return {"topic_name": name, "topic_id": topic_id, "error_code": error, "error_message": message}
