"""A fake-clock harness for the sans-IO consumer-group heartbeat (tests/unit/test_consumer_group_*.py).

Error codes are written down as numbers from the reference (transactions-and-kip848.md, TL;DR
table), not imported, so the tests check the code against the specification. `Harness.log` is
what `__consumer_offsets` would hold; `replayed()` loads it into fresh operations, through the
byte codecs, to prove that replay alone rebuilds the state.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from offsetd.coordinator.config import ConsumerGroupConfig
from offsetd.coordinator.consumer_group_ops import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupOperations,
    TopicsImage,
)
from offsetd.coordinator.group_heartbeat import GroupHeartbeatResponse
from offsetd.records.consumer_group_records import TopicPartitions, decode_key, decode_value, encode_key, encode_value

NONE = 0
GROUP_ID_NOT_FOUND = 69
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
INVALID_REGULAR_EXPRESSION = 128

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA2)
REBALANCE_MS = 30_000


def tps(assignment: dict[uuid.UUID, set[int]] | None) -> tuple[TopicPartitions, ...] | None:
    """Request form of {topic id: partitions}."""
    if assignment is None:
        return None
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def as_dict(topic_partitions: tuple[TopicPartitions, ...] | None) -> dict[uuid.UUID, set[int]] | None:
    if topic_partitions is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in topic_partitions if tp.partitions}


@dataclass
class Harness:
    """Consumer-group operations with a fake clock, a topic image and the records they wrote."""

    config: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    now: int = 0
    topics: TopicsImage = field(default_factory=lambda: TopicsImage({"foo": (FOO, 6), "bar": (BAR, 3)}, 1))
    log: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ops = ConsumerGroupOperations(self.config)
        self.last_records: list = []

    def heartbeat(self, api_version: int = 1, **fields) -> GroupHeartbeatResponse:
        fields.setdefault("group_id", "g")
        req = ConsumerGroupHeartbeatRequest(**fields)
        result = self.ops.consumer_group_heartbeat("t", req, api_version, self.now, self.topics)
        self.last_records = list(result.records)
        self.log.extend(result.records)
        (token, response), = result.completions
        assert token == "t"
        return response

    def join(self, member_id: str, topics: tuple[str, ...] = ("foo",), **fields) -> GroupHeartbeatResponse:
        fields.setdefault("rebalance_timeout_ms", REBALANCE_MS)
        return self.heartbeat(member_id=member_id, member_epoch=0, subscribed_topic_names=topics,
                              topic_partitions=(), **fields)

    def advance(self, ms: int) -> list:
        self.now += ms
        result = self.ops.fire_timers(self.now)
        self.log.extend(result.records)
        return list(result.records)

    def group(self, group_id: str = "g"):
        return self.ops.groups[group_id]

    def replayed(self) -> ConsumerGroupOperations:
        """Fresh operations rebuilt from the log, every record through its bytes."""
        fresh = ConsumerGroupOperations(self.config)
        for key, value in self.log:
            k = decode_key(encode_key(key))
            fresh.replay(k, decode_value(k, None if value is None else encode_value(value)))
        return fresh


class Client:
    """A well-behaved member: it reports what it owns and gives up revoked partitions at once."""

    def __init__(self, harness: Harness, member_id: str, topics: tuple[str, ...] = ("foo",), **join_fields) -> None:
        self.h = harness
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.response = harness.join(member_id, topics, **join_fields)
        self._absorb(self.response)

    def _absorb(self, response: GroupHeartbeatResponse) -> None:
        assert response.error_code == NONE, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = as_dict(response.assignment)  # type: ignore[assignment]

    def beat(self, **fields) -> GroupHeartbeatResponse:
        fields.setdefault("topic_partitions", tps(self.owned))
        self.response = self.h.heartbeat(member_id=self.member_id, member_epoch=self.epoch, **fields)
        self._absorb(self.response)
        return self.response
