"""Classic-protocol members inside a KIP-848 consumer group (reference B7), sans-IO.

A client speaking JoinGroup/SyncGroup/Heartbeat/LeaveGroup joins a consumer group as a member
like any other: its "consumer" protocol subscription feeds the server-side assignor, its record 5
carries ClassicMemberMetadata (session timeout, protocols), its generation is its member epoch.
Its reconciliation goes through rejoins: JoinGroup reports what it still owns (none for an eager
client, the subscription's owned partitions for a cooperative one) and moves it towards the
target as a heartbeat would (consumer_reconciliation.py: revocation before assignment, never two
owners); SyncGroup hands out its current assignment; Heartbeat says REBALANCE_IN_PROGRESS when it
should rejoin to move on.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Hashable

from ..records.consumer_group_records import ClassicMemberMetadata, ClassicProtocol, TopicPartitions
from ..records.consumer_protocol import (
    encode_consumer_assignment,
    parse_subscription_owned_partitions,
    parse_subscription_topics,
)
from .classic_group_ops import JoinRequest, join_error
from .consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupRecord,
    MemberState,
    current_assignment_record,
)
from .consumer_group_ops import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupOperations,
    TopicsImage,
)
from .group_heartbeat import GroupRequestRejected
from .errors import (
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED, NONE,
    REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
)
from .group import CONSUMER_PROTOCOL
from .result import CoordinatorResult


class ClassicMemberOperations(ConsumerGroupOperations):
    """The consumer groups of one shard, with the classic group APIs their classic members use."""

    def _schedule_session(self, group_id: str, member_id: str, now: int) -> None:
        """A classic member's session timeout is its JoinGroup's; the others' the group's."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        classic = member.classic_member_metadata if member is not None else None
        if classic is None:
            super()._schedule_session(group_id, member_id, now)
        else:
            self.timers.schedule(("session", group_id, member_id), now + classic.session_timeout_ms)

    def schedule_sessions(self, group_id: str, now: int) -> None:
        """Arm every member's session timer (a group just converted from a classic one)."""
        for member_id in self.groups[group_id].members:
            self._schedule_session(group_id, member_id, now)

    def cancel_group_timers(self, group: ConsumerGroup) -> None:
        """Forget every member's session, rebalance and sync timers (the group turns classic)."""
        for member_id in group.members:
            self._cancel_member_timers(group.group_id, member_id)
            self.timers.cancel(("sync", group.group_id, member_id))

    # ========================================================================= join

    def classic_join(self, token: Hashable, req: JoinRequest, now: int, topics: TopicsImage) -> CoordinatorResult:
        """JoinGroup into a consumer group: 23 unless "consumer" protocols with a subscription that
        decodes; 25 for a consumer-protocol member's id; a dynamic v4+ member without an id gets
        one with MEMBER_ID_REQUIRED. The member joins (an unknown id is a new member) or rejoins as
        a heartbeat with its owned partitions would; the answer carries its member epoch as
        generation and names no leader (the server assigns); it must sync within its rebalance
        timeout."""
        result = CoordinatorResult(replay=False)
        group = self.groups[req.group_id]  # type: ignore[index]
        subscribed = parse_subscription_topics(req.protocols[0][1]) if req.protocols else None
        if req.protocol_type != CONSUMER_PROTOCOL or subscribed is None:
            return result.respond(token, join_error(INCONSISTENT_GROUP_PROTOCOL, req.member_id))
        member = group.members.get(req.member_id) if req.member_id else None
        if member is not None and member.classic_member_metadata is None:
            return result.respond(token, join_error(UNKNOWN_MEMBER_ID, req.member_id))
        if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
            # v4+: the id first, then the join that uses it creates the member (nothing changes now)
            return result.respond(token, join_error(MEMBER_ID_REQUIRED, str(uuid.uuid4())))
        away = self._static_rejoin(group, req)
        member_id = req.member_id or str(uuid.uuid4())
        epoch = member.member_epoch if member is not None and member.member_epoch > 0 else 0
        heartbeat = ConsumerGroupHeartbeatRequest(
            group_id=group.group_id, member_id=member_id, member_epoch=epoch, instance_id=req.group_instance_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms, subscribed_topic_names=tuple(subscribed),
            topic_partitions=_owned(req.protocols[0][1], topics) if epoch else (),
            client_id=req.client_id, client_host=req.client_host,
            classic_member_metadata=ClassicMemberMetadata(
                req.session_timeout_ms, tuple(ClassicProtocol(n, bytes(m)) for n, m in req.protocols)))
        try:
            records, response = self._heartbeat(heartbeat, now, topics)
        except GroupRequestRejected as reject:
            result.records.extend(away)
            return result.respond(token, join_error(reject.error_code, req.member_id))
        records[:0] = away
        answer = {"error_code": NONE, "generation_id": response.member_epoch, "protocol_type": CONSUMER_PROTOCOL,
                  "protocol_name": req.protocols[0][0], "leader": "", "member_id": member_id, "members": ()}
        result = self._write(records, token, answer)
        self._after_write(heartbeat, response, now)
        # a member that does not sync within its rebalance timeout is removed
        self.timers.schedule(("sync", group.group_id, member_id), now + req.rebalance_timeout_ms)
        return result

    def _static_rejoin(self, group: ConsumerGroup, req: JoinRequest) -> list[ConsumerGroupRecord]:
        """A classic static member's new incarnation (no member id, its instance id held by a
        classic member): the old one is marked away (epoch -2, replayed now) so that the join
        takes over its place and partitions without a rebalance, as a consumer member's would."""
        holder_id = group.static_members.get(req.group_instance_id) if req.group_instance_id else None
        holder = group.members.get(holder_id) if holder_id is not None and not req.member_id else None
        if holder is None or holder.classic_member_metadata is None:
            return []
        record = current_assignment_record(group.group_id, replace(
            holder, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={}))
        self.replay(*record)
        self._cancel_member_timers(group.group_id, holder.member_id)
        return [record]

    # ========================================================================= sync

    def classic_sync(self, token: Hashable, group_id: str, member_id: str, instance_id: str | None,
                     generation: int, protocol_type: str | None, protocol_name: str | None,
                     now: int) -> CoordinatorResult:
        """SyncGroup: the member's current assignment (what the server recorded it owns), encoded
        as a "consumer" protocol Assignment; 22 when the generation is not its member epoch."""
        result = CoordinatorResult(replay=False)
        group = self.groups[group_id]
        member, error = self._classic_member(group, member_id, instance_id, generation)
        protocols = [p.name for p in member.classic_member_metadata.supported_protocols] if member and \
            member.classic_member_metadata else []
        if not error and ((protocol_type is not None and protocol_type != CONSUMER_PROTOCOL)
                          or (protocol_name is not None and protocol_name not in protocols)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error:
            return result.respond(token, {"error_code": error, "protocol_type": None, "protocol_name": None,
                                          "assignment": b""})
        self._schedule_session(group_id, member_id, now)
        self.timers.cancel(("sync", group_id, member_id))
        names = {tm.topic_id: name for name, tm in group.subscription_metadata.items()}
        partitions = {names[t]: sorted(ps) for t, ps in member.assigned_partitions.items() if t in names}  # type: ignore[union-attr]
        return result.respond(token, {"error_code": NONE, "protocol_type": CONSUMER_PROTOCOL,
                                      "protocol_name": protocol_name or protocols[0],
                                      "assignment": encode_consumer_assignment(partitions)})

    # ==================================================================== heartbeat

    def classic_heartbeat(self, token: Hashable, group_id: str, member_id: str, instance_id: str | None,
                          generation: int, now: int) -> CoordinatorResult:
        """Heartbeat: 22 on a generation that is not the member epoch; 27 when the member should
        rejoin: the group moved past its epoch (unless it is revoking, which it rejoins for by
        itself, B7), or all the partitions it waits for were released."""
        result = CoordinatorResult(replay=False)
        group = self.groups[group_id]
        member, error = self._classic_member(group, member_id, instance_id, generation)
        if not error:
            self._schedule_session(group_id, member_id, now)
            if member.state is not MemberState.UNREVOKED_PARTITIONS and (  # type: ignore[union-attr]
                    group.group_epoch > member.member_epoch or self._released(group, member)):  # type: ignore[union-attr, arg-type]
                error = REBALANCE_IN_PROGRESS
        return result.respond(token, {"error_code": error})

    @staticmethod
    def _released(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """A member waiting for partitions (UNRELEASED_PARTITIONS) can now have all of them (one
        rejoin for the lot: an eager client stops reading at each)."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        target = group.target_assignment.get(member.member_id, {})
        return all(group.owner_of(t, p) is None for t, ps in target.items() for p in ps
                   if p not in member.assigned_partitions.get(t, frozenset()))

    # ======================================================================== leave

    def classic_leave(self, token: Hashable, group_id: str, members: list[tuple[str, str | None]]
                      ) -> CoordinatorResult:
        """LeaveGroup: each classic member named (by member id, or instance id alone) is removed
        as a consumer-protocol leave would remove it (group epoch +1); others get 25."""
        group = self.groups[group_id]
        records: list[ConsumerGroupRecord] = []
        answers: list[dict[str, Any]] = []
        for member_id, instance_id in members:
            target = member_id or (group.static_members.get(instance_id, "") if instance_id is not None else "")
            member = group.members.get(target)
            error = NONE
            if member is None or member.classic_member_metadata is None:
                error = UNKNOWN_MEMBER_ID
            elif instance_id is not None and member.instance_id != instance_id:
                error = FENCED_INSTANCE_ID
            else:
                removal = self._remove_member(group, target)
                for key, value in removal:
                    self.replay(key, value)
                self._cancel_member_timers(group_id, target)
                records.extend(removal)
            answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        result = CoordinatorResult(records=records, replay=False)
        return result.respond(token, {"error_code": NONE, "members": answers})

    # ---------------------------------------------------------------------- shared

    @staticmethod
    def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation: int) -> tuple[ConsumerGroupMember | None, int]:
        """(the classic member, NONE) or (None or it, the error: 25, 82, or 22 for a generation
        that is not its member epoch)."""
        member = group.members.get(member_id)
        if member is None or member.classic_member_metadata is None:
            return None, UNKNOWN_MEMBER_ID
        if instance_id is not None and member.instance_id != instance_id:
            return member, FENCED_INSTANCE_ID
        if generation != member.member_epoch:
            return member, ILLEGAL_GENERATION
        return member, NONE


def _owned(metadata: bytes, topics: TopicsImage) -> tuple[TopicPartitions, ...] | None:
    """The partitions a rejoining classic member says it still owns (a cooperative client's
    subscription v1+; an eager one revoked everything before rejoining), by topic id; None
    (holding all it was given) when the subscription does not say."""
    pairs = parse_subscription_owned_partitions(metadata)
    if pairs is None:
        return None
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic, partition in pairs:
        entry = topics.topics.get(topic)
        if entry is not None:
            by_topic.setdefault(entry[0], []).append(partition)
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
