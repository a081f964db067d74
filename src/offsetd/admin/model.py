"""Plain data the `offsetd groups` tool passes between its cluster layer and its views: topic
partitions, committed offsets, group listings and descriptions, with Kafka's display names for
group states and types. Nothing here talks to a cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from offsetd.lag.compute import LogBounds  # noqa: F401  (re-exported: the tools' row types use it)


class TP(NamedTuple):
    """A topic partition; `str()` is Kafka's `TopicPartition.toString()` (`topic-partition`)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Committed:
    """A group's committed offset for one partition (leader epoch None when not recorded)."""

    offset: int
    leader_epoch: int | None = None



# Kafka's `GroupState.toString()` names, keyed by the lower-case spelling users type in
# `--list --state stable,empty` (Kafka parses that list case-insensitively).
GROUP_STATES: dict[str, str] = {name.lower(): name for name in (
    "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")}

# `--list --type` accepts the two consumer-group types (classic protocol, KIP-848 consumer).
GROUP_TYPES: dict[str, str] = {"classic": "Classic", "consumer": "Consumer"}

# States in which a group has no members, so its offsets may be changed by an admin client.
INACTIVE_STATES = frozenset({"Empty", "Dead"})

# States Kafka's describe reports as "is rebalancing".
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})


@dataclass(frozen=True)
class GroupListing:
    """One row of ListGroups."""

    group: str
    state: str
    type: str


@dataclass(frozen=True)
class Member:
    """A group member as DescribeGroups / ConsumerGroupDescribe report it; the epoch, target
    assignment and protocol of a consumer group's member only when ConsumerGroupDescribe was
    asked (None otherwise, and for classic groups)."""

    consumer_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TP, ...]
    member_epoch: int | None = None
    target_assignment: tuple[TP, ...] | None = None
    upgraded: bool | None = None
    """True for a consumer-protocol member, False for a classic-protocol one in a consumer group."""


@dataclass(frozen=True)
class Coordinator:
    """The broker coordinating a group."""

    id: int
    host: str
    port: int


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups for one group; a group that does not exist is state `Dead`, no members. A
    consumer group's epochs when ConsumerGroupDescribe was asked (None otherwise)."""

    group: str
    state: str
    type: str
    assignment_strategy: str
    coordinator: Coordinator | None
    members: tuple[Member, ...] = field(default_factory=tuple)
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None
