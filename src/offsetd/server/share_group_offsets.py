"""DescribeShareGroupOffsets (90) v0-1 (reference share-groups.md §6): a share group's start
offset per partition, from what the share coordinator holds (server/share_state.py), and v1's
lag, the log end minus the start offset minus the records already done past it
(DeliveryCompleteCount; -1 while unknown)."""

from __future__ import annotations

from typing import Any

from ..broker.broker import Broker
from ..protocol.errors import Error
from ..security.authorization import Op, Res, access
from .share_state import ShareStatePersister

Body = dict[str, Any]


def describe_share_group_offsets(broker: Broker, persister: ShareStatePersister, ctx: Any, req: Any) -> Body:
    """Per group: DESCRIBE on it or GROUP_AUTHORIZATION_FAILED; `topics` null means every
    topic the group has state for; a partition without state answers start offset -1."""
    acc = access(broker, ctx)
    groups = []
    for group in req.groups:
        if acc is not None and not acc.allows(Op.DESCRIBE, Res.GROUP, group.group_id):
            groups.append({"group_id": group.group_id, "topics": (), "error_code": Error.GROUP_AUTHORIZATION_FAILED,
                           "error_message": None})
            continue
        states = persister.states_of(group.group_id)
        if group.topics is None:
            wanted: dict[str, list[int]] = {}
            for _, topic_id, partition in sorted(states, key=lambda k: (str(k[1]), k[2])):
                topic = broker.topics.by_id(topic_id)
                if topic is not None:
                    wanted.setdefault(topic.name, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in group.topics}
        topics = []
        for name, partitions in wanted.items():
            topic = broker.topics.get(name)
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
        groups.append({"group_id": group.group_id, "topics": topics, "error_code": 0, "error_message": None})
    return {"throttle_time": 0, "groups": groups}


def _row(index: int, start: int, epoch: int, lag: int, error: int = 0) -> Body:
    return {"partition_index": index, "start_offset": start, "leader_epoch": epoch, "lag": lag,
            "error_code": error, "error_message": None}
