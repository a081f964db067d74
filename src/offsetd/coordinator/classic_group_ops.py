"""The classic group protocol of GroupCoordinatorShard: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, and the member and rebalance timers behind them (KOC §1.6-§1.9).

A mixin, like offset_ops.py: GroupCoordinatorShard (shard.py) holds the state these methods read
(`groups`, `timers`, `config`, `counters`); membership is ephemeral state persisted only by the
GroupMetadata records these operations return. A second group type lives beside it the same way.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Hashable

from ..records.offsets import GroupMetadataKey
from .config import GroupCoordinatorConfig
from .errors import (
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NONE,
    REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
)
from .group import ClassicGroup, ClassicGroupMember, GroupState
from .metrics import CoordinatorCounters
from .result import CoordinatorResult
from .timers import Timers

log = logging.getLogger("offsetd.coordinator")

S = GroupState


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """The fields of a JoinGroup request the coordinator uses (version-independent)."""

    group_id: str | None
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # v4+: MEMBER_ID_REQUIRED handshake


class ClassicGroupOperations:
    """Classic group APIs of one shard (mixed into GroupCoordinatorShard)."""

    config: GroupCoordinatorConfig
    counters: CoordinatorCounters
    groups: dict[str, ClassicGroup]
    timers: Timers

    def abandon_parked(self, error: int) -> CoordinatorResult:
        """Answer every parked JoinGroup and SyncGroup with `error`: the shard is about to forget
        its groups (the partition moved to another broker, or memory is rebuilt from the log) and
        nothing else would answer them; their clients would wait out their rebalance timeout, and
        every later request on the same connection behind them (Kafka answers NOT_COORDINATOR
        when it unloads a group)."""
        result = CoordinatorResult()
        for group in self.groups.values():
            if not isinstance(group, ClassicGroup):  # a consumer group answers at once, parks nothing
                continue
            for member in group.members.values():
                if member.join_token is not None:
                    result.respond(member.join_token, join_error(error, member.member_id))
                    member.join_token = None
                if member.sync_token is not None:
                    result.respond(member.sync_token, _sync_error(error))
                    member.sync_token = None
        return result

    # ====================================================================== timers

    def _fire_classic_timer(self, key: tuple, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        """One expired timer of a classic group: a member's session or a pending member's
        deadline, the end of the join phase, or the sync deadline."""
        kind = key[0]
        if kind == "heartbeat":
            member = group.members.get(key[2])
            if member is not None and member.join_token is None and member.sync_token is None:
                log.info("member %s of group %s: session timeout, removing", member.member_id, group.group_id)
                self._remove_member_and_update(group, member, now, result)
        elif kind == "pending":
            if group.discard_pending_member(key[2]):
                if group.state is S.PREPARING_REBALANCE:
                    self._try_complete_join(group, now, result)
        elif kind == "join":
            self._on_join_timer(group, now, result)
        elif kind == "sync":
            self._on_sync_timeout(group, now, result)

    def _schedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember, now: int) -> None:
        self.timers.schedule(("heartbeat", group.group_id, member.member_id), now + member.session_timeout_ms)

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        for member_id in list(group.members) + list(group.pending_members):
            self.timers.cancel(("heartbeat", group.group_id, member_id))
            self.timers.cancel(("pending", group.group_id, member_id))
        self.timers.cancel(("join", group.group_id))
        self.timers.cancel(("sync", group.group_id))

    # ================================================================= membership

    def _validate_member(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        """Static/dynamic member validation shared by Join, Sync, Heartbeat, Leave, Commit."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if known != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    def join_group(self, token: Hashable, req: JoinRequest, now: int) -> CoordinatorResult:
        """JoinGroup (§1.6): responses come when the join phase completes, or at once on error."""
        result = CoordinatorResult(replay=False)
        if not req.group_id:
            return result.respond(token, join_error(INVALID_GROUP_ID, req.member_id))
        cfg = self.config
        if not cfg.session_timeout_min_ms <= req.session_timeout_ms <= cfg.session_timeout_max_ms:
            return result.respond(token, join_error(INVALID_SESSION_TIMEOUT, req.member_id))
        group = self.groups.get(req.group_id)
        created = group is None
        if group is None:
            if req.member_id:
                return result.respond(token, join_error(UNKNOWN_MEMBER_ID, req.member_id))
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp=now)
            # A new group is persisted at once, as Kafka writes its "empty" GroupMetadata record.
            result.records.append((GroupMetadataKey(group.group_id), group.to_record()))
        error = NONE
        if group.state is S.DEAD:
            error = COORDINATOR_NOT_AVAILABLE
        elif not self._accepts_size(group, req.member_id):
            error = GROUP_MAX_SIZE_REACHED
        elif not group.supports_protocols(req.protocol_type, req.protocols):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error:
            if created:  # roll the creation back: nothing was joined
                del self.groups[req.group_id]
                result.records.clear()
            result.respond(token, join_error(error, req.member_id))
            member = group.members.get(req.member_id)
            if error == GROUP_MAX_SIZE_REACHED and member is not None:  # Kafka drops the member
                self._remove_member_and_update(group, member, now, result)
            return result
        if not req.member_id:
            self._join_unknown_member(group, token, req, now, result)
        else:
            self._join_known_member(group, token, req, now, result)
        return result

    def _accepts_size(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size (§1.6)."""
        limit = self.config.group_max_size
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.join_token is not None) or group.awaiting_join() < limit
        return member_id in group.members or len(group.members) < limit

    def _join_unknown_member(self, group: ClassicGroup, token: Hashable, req: JoinRequest, now: int,
                             result: CoordinatorResult) -> None:
        new_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member(group, token, req, old_id, new_id, now, result)
                return
            self._add_member_and_rebalance(group, token, req, new_id, now, result)
        elif req.require_known_member_id:
            group.add_pending_member(new_id)
            self.timers.schedule(("pending", group.group_id, new_id), now + req.session_timeout_ms)
            result.respond(token, join_error(MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, token, req, new_id, now, result)

    def _replace_static_member(self, group: ClassicGroup, token: Hashable, req: JoinRequest, old_id: str,
                               new_id: str, now: int, result: CoordinatorResult) -> None:
        """A static member rejoined with an unknown member id: it takes over its old place; the
        old id is fenced. In Stable with unchanged protocols there is no rebalance (KIP-345)."""
        old = group.members[old_id]
        if old.join_token is not None:  # the old incarnation's parked join is fenced
            result.respond(old.join_token, join_error(FENCED_INSTANCE_ID, old_id))
            old.join_token = None
        if old.sync_token is not None:
            result.respond(old.sync_token, _sync_error(FENCED_INSTANCE_ID))
            old.sync_token = None
        self.timers.cancel(("heartbeat", group.group_id, old_id))
        unchanged = old.matches(req.protocols)
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)  # type: ignore[arg-type]
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        if group.state is S.STABLE and unchanged:
            self._schedule_heartbeat(group, member, now)
            result.records.append((GroupMetadataKey(group.group_id), group.to_record()))
            result.respond(token, self._join_response(group, member, include_members=False))
            return
        if group.state is S.COMPLETING_REBALANCE and unchanged:
            self._schedule_heartbeat(group, member, now)
            result.respond(token, self._join_response(group, member, include_members=group.leader_id == new_id))
            return
        member.protocols = req.protocols
        member.join_token = token
        self._maybe_prepare_rebalance(group, now, result)

    def _join_known_member(self, group: ClassicGroup, token: Hashable, req: JoinRequest, now: int,
                           result: CoordinatorResult) -> None:
        if group.discard_pending_member(req.member_id):
            self.timers.cancel(("pending", group.group_id, req.member_id))
            self._add_member_and_rebalance(group, token, req, req.member_id, now, result)
            return
        error = self._validate_member(group, req.member_id, req.group_instance_id)
        if error:
            result.respond(token, join_error(error, req.member_id))
            return
        member = group.members[req.member_id]
        if group.state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, token, req, now, result)
        elif group.state is S.COMPLETING_REBALANCE:
            if member.matches(req.protocols):  # a resend of the join: same answer as before
                result.respond(token, self._join_response(group, member, include_members=group.leader_id == member.member_id))
            else:
                self._update_member_and_rebalance(group, member, token, req, now, result)
        elif group.state is S.STABLE:
            if group.leader_id == member.member_id or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, token, req, now, result)
            else:
                result.respond(token, self._join_response(group, member, include_members=False))
        else:  # Empty: no members, so validation above already failed
            result.respond(token, join_error(UNKNOWN_MEMBER_ID, req.member_id))

    def _add_member_and_rebalance(self, group: ClassicGroup, token: Hashable, req: JoinRequest, member_id: str,
                                  now: int, result: CoordinatorResult) -> None:
        member = ClassicGroupMember(
            member_id=member_id, group_instance_id=req.group_instance_id, client_id=req.client_id,
            client_host=req.client_host, rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms, protocol_type=req.protocol_type,
            protocols=list(req.protocols), join_token=token, is_new=True)
        group.add(member)
        if group.state is S.PREPARING_REBALANCE:
            group.new_member_added = True
        self._maybe_prepare_rebalance(group, now, result)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember, token: Hashable,
                                     req: JoinRequest, now: int, result: CoordinatorResult) -> None:
        if member.join_token is not None and member.join_token != token:
            # A second join from the same member replaces the first (the client gave up on it).
            result.respond(member.join_token, join_error(UNKNOWN_MEMBER_ID, member.member_id))
        member.protocols = list(req.protocols)
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        member.join_token = token
        self.timers.cancel(("heartbeat", group.group_id, member.member_id))
        self._maybe_prepare_rebalance(group, now, result)

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, now, result)
        else:
            self._try_complete_join(group, now, result)

    def _prepare_rebalance(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        """Enter PreparingRebalance: parked syncs fail with 27; the join timer starts (§1.6, §1.7)."""
        if group.state is S.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_token is not None:
                    result.respond(member.sync_token, _sync_error(REBALANCE_IN_PROGRESS))
                    member.sync_token = None
        self.timers.cancel(("sync", group.group_id))
        group.clear_pending_sync()
        initial = group.state is S.EMPTY
        log.info("preparing to rebalance group %s in state %s with old generation %d (%d members)",
                 group.group_id, group.state.value, group.generation, len(group.members))
        group.transition(S.PREPARING_REBALANCE, now)
        timeout = group.rebalance_timeout_ms()
        if initial and self.config.initial_rebalance_delay_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            group.initial_delay_remaining_ms = max(timeout - delay, 0)
            group.new_member_added = False
            self.timers.schedule(("join", group.group_id), now + delay)
            return
        group.initial_delay_remaining_ms = -1
        self.timers.schedule(("join", group.group_id), now + timeout)
        self._try_complete_join(group, now, result)

    def _on_join_timer(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        if group.state is not S.PREPARING_REBALANCE:
            return
        remaining = group.initial_delay_remaining_ms
        if remaining >= 0 and group.new_member_added and remaining > 0:
            # Initial delay: members keep arriving, wait a little longer (up to the rebalance timeout).
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay
            group.new_member_added = False
            self.timers.schedule(("join", group.group_id), now + delay)
            return
        self._complete_join(group, now, result)

    def _try_complete_join(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        """Complete the join phase once every member has rejoined (not during the initial delay)."""
        if group.state is S.PREPARING_REBALANCE and group.initial_delay_remaining_ms < 0 and group.all_joined():
            self._complete_join(group, now, result)

    def _complete_join(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation."""
        self.timers.cancel(("join", group.group_id))
        group.initial_delay_remaining_ms = -1
        for member in [m for m in group.members.values() if m.join_token is None]:
            log.info("member %s of group %s did not rejoin in time, removing", member.member_id, group.group_id)
            group.remove(member.member_id)
            self.timers.cancel(("heartbeat", group.group_id, member.member_id))
        for member_id in list(group.pending_members):
            self.timers.cancel(("pending", group.group_id, member_id))
        group.clear_pending_members()
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(S.EMPTY, now)
            group.compute_subscribed_topics()
            result.records.append((GroupMetadataKey(group.group_id), group.to_record()))
            return
        group.protocol_name = group.select_protocol()
        log.info("stabilized group %s generation %d (%d members, protocol %s)", group.group_id,
                 group.generation, len(group.members), group.protocol_name)
        group.transition(S.COMPLETING_REBALANCE, now)
        group.compute_subscribed_topics()
        group.await_sync()
        for member in group.members.values():
            token, member.join_token = member.join_token, None
            member.is_new = False
            result.respond(token, self._join_response(group, member, include_members=member.member_id == group.leader_id))
            self._schedule_heartbeat(group, member, now)
        self.timers.schedule(("sync", group.group_id), now + group.rebalance_timeout_ms())

    def _join_response(self, group: ClassicGroup, member: ClassicGroupMember, include_members: bool) -> dict[str, Any]:
        members = ()
        if include_members:
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata(group.protocol_name)} for m in group.members.values()]
        return {"error_code": NONE, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": group.leader_id or "",
                "member_id": member.member_id, "members": members}

    def _on_sync_timeout(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        """Members that never sent SyncGroup in time are removed and the group rebalances (§1.7)."""
        if not group.is_in(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            log.info("member %s of group %s did not sync in time, removing", member_id, group.group_id)
            member = group.members.get(member_id)
            if member is not None:
                self._drop_member(group, member, result)
        self._after_member_removed(group, now, result)

    def _drop_member(self, group: ClassicGroup, member: ClassicGroupMember, result: CoordinatorResult) -> None:
        """Remove a member, failing its parked requests (§1.6: join completed with 25 and "")."""
        if member.join_token is not None:
            result.respond(member.join_token, join_error(UNKNOWN_MEMBER_ID, ""))
        if member.sync_token is not None:
            result.respond(member.sync_token, _sync_error(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self.timers.cancel(("heartbeat", group.group_id, member.member_id))

    def _after_member_removed(self, group: ClassicGroup, now: int, result: CoordinatorResult) -> None:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, result)
        elif group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, result)

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicGroupMember, now: int,
                                  result: CoordinatorResult) -> None:
        self._drop_member(group, member, result)
        self._after_member_removed(group, now, result)

    # ========================================================================== sync

    def sync_group(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                   generation: int, protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes], now: int) -> CoordinatorResult:
        """SyncGroup (§1.7): followers wait for the leader, whose assignment is persisted."""
        result = CoordinatorResult(replay=False)
        if not group_id:
            return result.respond(token, _sync_error(INVALID_GROUP_ID))
        group = self.groups.get(group_id)
        if group is None:
            return result.respond(token, _sync_error(UNKNOWN_MEMBER_ID))
        if group.state is S.DEAD:
            return result.respond(token, _sync_error(COORDINATOR_NOT_AVAILABLE))
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return result.respond(token, _sync_error(error))
        if generation != group.generation:
            return result.respond(token, _sync_error(ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            return result.respond(token, _sync_error(INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        if group.state is S.PREPARING_REBALANCE:
            return result.respond(token, _sync_error(REBALANCE_IN_PROGRESS))
        if group.state is S.EMPTY:
            return result.respond(token, _sync_error(UNKNOWN_MEMBER_ID))
        self._schedule_heartbeat(group, member, now)
        if group.state is S.STABLE:
            group.synced(member_id)
            return result.respond(token, self._sync_response(group, member))
        # CompletingRebalance
        if member.sync_token is not None and member.sync_token != token:
            result.respond(member.sync_token, _sync_error(REBALANCE_IN_PROGRESS))
        member.sync_token = token
        group.synced(member_id)
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            log.info("assignment received from leader %s for group %s generation %d", member_id,
                     group.group_id, group.generation)
            group.transition(S.STABLE, now)
            if not group.pending_sync:  # else the deadline set at join completion still applies
                self.timers.cancel(("sync", group.group_id))
            self.counters.completed_rebalances += 1
            result.records.append((GroupMetadataKey(group.group_id), group.to_record()))
            for m in group.members.values():
                if m.sync_token is not None:
                    result.respond(m.sync_token, self._sync_response(group, m))
                    m.sync_token = None
        return result

    @staticmethod
    def _sync_response(group: ClassicGroup, member: ClassicGroupMember) -> dict[str, Any]:
        return {"error_code": NONE, "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "assignment": member.assignment}

    # ===================================================================== heartbeat

    def heartbeat(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                  generation: int, now: int) -> CoordinatorResult:
        """Heartbeat (§1.8)."""
        result = CoordinatorResult(replay=False)
        return result.respond(token, {"error_code": self._heartbeat(group_id, member_id, instance_id, generation, now)})

    def _heartbeat(self, group_id: str | None, member_id: str, instance_id: str | None, generation: int,
                   now: int) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.state is S.EMPTY:
            return UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.members[member_id], now)
        return REBALANCE_IN_PROGRESS if group.state is S.PREPARING_REBALANCE else NONE

    # ========================================================================= leave

    def leave_group(self, token: Hashable, group_id: str | None, members: list[tuple[str, str | None]],
                    now: int) -> CoordinatorResult:
        """LeaveGroup (§1.9); the response is {error_code, members:[{member_id, group_instance_id,
        error_code}]} (the v0-2 shaping is the API layer's job)."""
        result = CoordinatorResult(replay=False)
        if not group_id:
            return result.respond(token, {"error_code": INVALID_GROUP_ID, "members": []})
        group = self.groups.get(group_id)
        if group is None:
            return result.respond(token, {"error_code": NONE, "group_missing": True, "members": [
                {"member_id": m, "group_instance_id": i, "error_code": UNKNOWN_MEMBER_ID} for m, i in members]})
        if group.state is S.DEAD:
            return result.respond(token, {"error_code": COORDINATOR_NOT_AVAILABLE, "members": []})
        answers = []
        removed = False
        for member_id, instance_id in members:
            error = NONE
            if not member_id:
                target = group.static_members.get(instance_id) if instance_id is not None else None
                if target is None:
                    error = UNKNOWN_MEMBER_ID
                else:
                    self._drop_member(group, group.members[target], result)
                    removed = True
            elif group.discard_pending_member(member_id):
                self.timers.cancel(("pending", group.group_id, member_id))
                removed = True
            else:
                error = self._validate_member(group, member_id, instance_id)
                if not error:
                    self._drop_member(group, group.members[member_id], result)
                    removed = True
            answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        if removed:
            self._after_member_removed(group, now, result)
        return result.respond(token, {"error_code": NONE, "members": answers})


def join_error(error: int, member_id: str) -> dict[str, Any]:
    """A JoinGroup response carrying only an error."""
    return {"error_code": error, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "member_id": member_id, "members": ()}


def _sync_error(error: int) -> dict[str, Any]:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}
