"""Online migration between a classic group and a KIP-848 consumer group (reference B7), a mixin
of GroupCoordinatorShard like classic_group_ops.py.

Upgrade: a consumer-protocol member joining (epoch 0) a non-empty classic group converts it when
`group.consumer.migration.policy` allows it, the protocol type is "consumer", the size fits
`group.consumer.max.size` and every member's subscription and assignment decode. Its members
become classic members of the consumer group at their generation with their current assignments
(records 5, 3, 4, 7, 6, 8), parked Join/Sync requests get REBALANCE_IN_PROGRESS, and the classic
group is written Empty (here a GroupMetadata tombstone would also drop the group's offsets when
loading; the Empty entry keeps them, as for a consumer group that took over an empty group).

Downgrade: when the last consumer-protocol member leaves and the rest are classic members (policy
and `group.max.size` permitting), the consumer group's records are tombstoned and a classic group
with those members and their assignments is written, then rebalances: its members rejoin. When
instead a classic static member's JoinGroup replaces the last consumer-protocol member (the
static member of its instance id), the classic group is written Stable with the newcomer in its
place and no rebalance: the newcomer syncs and gets its predecessor's partitions.
"""

from __future__ import annotations

from ..records.consumer_group_records import ClassicMemberMetadata, ClassicProtocol, TopicMetadata
from ..records.consumer_protocol import (
    encode_consumer_assignment,
    parse_assignment_partitions,
    parse_subscription_topics,
)
from ..records.offsets import GroupMetadataKey
from .classic_group_ops import join_error
from .classic_member_ops import ClassicMemberOperations
from .consumer_assignors import Assignment, TopicId
from .consumer_group import (
    ConsumerGroupMember,
    ConsumerGroupRecord,
    current_assignment_record,
    member_metadata_record,
    metadata_record,
    partition_metadata_record,
    target_member_record,
    target_metadata_record,
)
from .config import GroupCoordinatorConfig
from .consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage, _validate
from .group_heartbeat import GroupRequestRejected
from .errors import REBALANCE_IN_PROGRESS
from .group import CONSUMER_PROTOCOL, ClassicGroup, ClassicGroupMember, GroupState
from .result import CoordinatorResult

UPGRADE_POLICIES = ("bidirectional", "upgrade")
DOWNGRADE_POLICIES = ("bidirectional", "downgrade")


class GroupMigrationOperations:
    """Upgrade and downgrade between the two group kinds (mixed into GroupCoordinatorShard, which
    also brings ClassicGroupOperations' timers and rebalance)."""

    config: GroupCoordinatorConfig
    groups: dict[str, ClassicGroup]
    consumer: ClassicMemberOperations

    # ========================================================================= upgrade

    def _upgrade(self, classic: ClassicGroup, topics: TopicsImage, now: int) -> CoordinatorResult | None:
        """Convert a non-empty classic group into a consumer group (records written and replayed,
        parked requests answered 27); None when B7 does not allow it (the caller answers 69)."""
        cfg = self.config.consumer
        if (cfg.migration_policy not in UPGRADE_POLICIES or classic.protocol_type != CONSUMER_PROTOCOL
                or not classic.members or len(classic.members) > cfg.max_size):
            return None
        members = [_converted(classic, m, topics) for m in classic.members.values()]
        if any(m is None for m in members):
            return None
        g, epoch = classic.group_id, classic.generation
        subscribed = {n for m in members for n in m.subscribed_topic_names}  # type: ignore[union-attr]
        metadata = {n: TopicMetadata(topics.topics[n][0], n, topics.topics[n][1])
                    for n in subscribed if n in topics.topics}
        records: list[ConsumerGroupRecord] = [member_metadata_record(g, m) for m in members]  # type: ignore[arg-type]
        records += [metadata_record(g, epoch), partition_metadata_record(g, metadata)]
        records += [target_member_record(g, m.member_id, m.assigned_partitions) for m in members]  # type: ignore[union-attr]
        records.append(target_metadata_record(g, epoch))
        records += [current_assignment_record(g, m) for m in members]  # type: ignore[arg-type]
        for key, value in records:
            self.consumer.replay(key, value)
        result = CoordinatorResult(records=list(records), replay=False)
        for m in classic.members.values():
            if m.join_token is not None:
                result.respond(m.join_token, join_error(REBALANCE_IN_PROGRESS, m.member_id))
            if m.sync_token is not None:
                result.respond(m.sync_token, {"error_code": REBALANCE_IN_PROGRESS, "protocol_type": None,
                                              "protocol_name": None, "assignment": b""})
        self._cancel_group_timers(classic)  # type: ignore[attr-defined]
        empty = self.groups[g] = ClassicGroup(g, state_timestamp=now, generation=epoch)
        result.records.append((GroupMetadataKey(g), empty.to_record()))
        self.consumer.schedule_sessions(g, now)
        return result

    # ======================================================================= downgrade

    def _maybe_downgrade(self, group_id: str, now: int, rebalance: bool = True) -> CoordinatorResult:
        """After a member left a consumer group (or a classic static member replaced one): if only
        classic members remain (and the policy, group.max.size and a protocol they all support
        allow it), convert it back to a classic group, which rebalances at once after a leave and
        stays Stable after a replacement. Otherwise nothing."""
        result = CoordinatorResult(replay=False)
        group = self.consumer.groups.get(group_id)
        if (group is None or not group.members or self.config.consumer.migration_policy not in DOWNGRADE_POLICIES
                or len(group.members) > self.config.group_max_size
                or any(m.classic_member_metadata is None for m in group.members.values())):
            return result
        names = {tm.topic_id: name for name, tm in group.subscription_metadata.items()}
        # Members at the highest epoch heartbeat into the rebalance (27); a straggler gets 22.
        classic = ClassicGroup(group_id, state=GroupState.STABLE, state_timestamp=now,
                               protocol_type=CONSUMER_PROTOCOL,
                               generation=max(m.member_epoch for m in group.members.values()))
        for m in group.members.values():
            meta = m.classic_member_metadata
            classic.add(ClassicGroupMember(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=meta.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL,  # type: ignore[union-attr]
                protocols=[(p.name, p.metadata) for p in meta.supported_protocols],  # type: ignore[union-attr]
                assignment=encode_consumer_assignment(
                    {names[t]: sorted(ps) for t, ps in m.assigned_partitions.items() if t in names})))
        if not classic.candidate_protocols():
            return result
        classic.protocol_name = classic.select_protocol()
        classic.compute_subscribed_topics()
        self.consumer.cancel_group_timers(group)
        tombstones = group.group_tombstones()
        for key, value in tombstones:
            self.consumer.replay(key, value)
        old = self.groups.get(group_id)
        if old is not None:
            self._cancel_group_timers(old)  # type: ignore[attr-defined]
        self.groups[group_id] = classic
        result.records.extend(tombstones)
        result.records.append((GroupMetadataKey(group_id), classic.to_record()))
        for member in classic.members.values():
            self._schedule_heartbeat(classic, member, now)  # type: ignore[attr-defined]
        if rebalance:
            self._prepare_rebalance(classic, now, result)  # type: ignore[attr-defined]
        return result


def valid_heartbeat(req: ConsumerGroupHeartbeatRequest, api_version: int) -> bool:
    """The heartbeat passes B2's request checks: an invalid one converts nothing and gets its
    INVALID_REQUEST from the heartbeat itself."""
    try:
        _validate(req, api_version)
    except GroupRequestRejected:
        return False
    return True


def _converted(classic: ClassicGroup, member: ClassicGroupMember, topics: TopicsImage) -> ConsumerGroupMember | None:
    """A classic group's member as a classic member of a consumer group at the group's generation,
    owning its current assignment; None if its subscription or assignment does not decode."""
    metadata = member.metadata(classic.protocol_name) if classic.protocol_name else (
        member.protocols[0][1] if member.protocols else None)
    subscribed = parse_subscription_topics(metadata)
    assigned = parse_assignment_partitions(member.assignment)
    if subscribed is None or assigned is None:
        return None
    return ConsumerGroupMember(
        member_id=member.member_id, instance_id=member.group_instance_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=tuple(sorted(set(subscribed))),
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        classic_member_metadata=ClassicMemberMetadata(
            member.session_timeout_ms, tuple(ClassicProtocol(n, bytes(d)) for n, d in member.protocols)),
        member_epoch=classic.generation, previous_member_epoch=classic.generation,
        assigned_partitions=_by_topic_id(assigned, topics))


def _by_topic_id(pairs: list[tuple[str, int]], topics: TopicsImage) -> Assignment:
    """(topic name, partition) pairs as {topic id: partitions}; unknown topics dropped."""
    out: dict[TopicId, set[int]] = {}
    for name, partition in pairs:
        entry = topics.topics.get(name)
        if entry is not None and 0 <= partition < entry[1]:
            out.setdefault(entry[0], set()).add(partition)
    return {t: frozenset(ps) for t, ps in out.items()}
