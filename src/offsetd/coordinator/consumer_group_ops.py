"""ConsumerGroupHeartbeat (API 68 v0-1) for the KIP-848 consumer groups of one shard, sans-IO.

Every operation takes the time (and the broker's topic view where it needs one) and returns a
CoordinatorResult: the records to append, already replayed into the groups (Kafka applies a
write's records at once and rolls them back if the write fails; here the shell resets and
reloads the partition then), and the response. `replay` is the only code that changes group
state. Session and rebalance timeouts are ephemeral timers the shell drives via fire_timers.
Validation and error codes follow the reference, B2; the join, leave and static paths B4.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Hashable, Mapping

from ..records.consumer_group_records import (
    ClassicMemberMetadata,
    ConsumerGroupKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupValue,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
)
from .consumer_assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, AssignmentMemberSpec, TopicId
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupRecord,
    MemberState,
    assignment_of,
    current_assignment_record,
    member_metadata_record,
    metadata_record,
    partition_metadata_record,
    regex_record,
    target_member_record,
    target_metadata_record,
    topic_partitions_of,
)
from .config import ConsumerGroupConfig
from .consumer_reconciliation import reconcile
from .errors import (
    FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST, UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR,
)
from .group_heartbeat import GroupHeartbeatResponse, GroupRequestRejected
from .result import CoordinatorResult
from .timers import Timers

REGEX_REFRESH_INTERVAL_MS = 10_000
"""A group's regular expressions are resolved again at most this often (B5)."""

# RE2J (what Kafka compiles with) has no lookaround and no backreferences; Python's re does.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=")


@dataclass(frozen=True)
class TopicsImage:
    """The broker's topics as the coordinator sees them: name -> (topic id, partition count);
    `version` changes whenever a topic is created, deleted or grows (it dates resolved regexes)."""

    topics: Mapping[str, tuple[TopicId, int]] = field(default_factory=dict)
    version: int = 0


@dataclass(frozen=True)
class ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat request fields (None or -1: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: tuple[TopicPartitions, ...] | None = None
    client_id: str = ""  # from the request header and the connection (record 5); "" keeps the old
    client_host: str = ""
    classic_member_metadata: ClassicMemberMetadata | None = None  # a classic member's JoinGroup (B7)


def _validate(req: ConsumerGroupHeartbeatRequest, api_version: int) -> None:
    """The INVALID_REQUEST rows of B2, in Kafka's order and with its messages."""
    epoch = req.member_epoch
    if not req.member_id and (api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH):
        raise GroupRequestRejected(INVALID_REQUEST, "MemberId can't be empty.")
    if not req.group_id.strip():
        raise GroupRequestRejected(INVALID_REQUEST, "GroupId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise GroupRequestRejected(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise GroupRequestRejected(INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise GroupRequestRejected(INVALID_REQUEST,
                          "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    if req.instance_id is not None and not req.instance_id.strip():
        raise GroupRequestRejected(INVALID_REQUEST, "InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise GroupRequestRejected(INVALID_REQUEST, "RackId can't be empty.")
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is None:
        raise GroupRequestRejected(INVALID_REQUEST, "InstanceId can't be null.")
    if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise GroupRequestRejected(INVALID_REQUEST, "MemberEpoch is invalid.")


def _compile_regex(regex: str) -> re.Pattern[str]:
    """Compile a subscription regex; INVALID_REGULAR_EXPRESSION if RE2J would refuse it."""
    if _NOT_RE2.search(regex):
        raise GroupRequestRejected(INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                                  f"expression: lookarounds and backreferences are not supported.")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise GroupRequestRejected(INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                                  f"expression: {exc}.") from None


class ConsumerGroupOperations:
    """The consumer groups of one `__consumer_offsets` partition and the heartbeat that drives them."""

    def __init__(self, config: ConsumerGroupConfig | None = None,
                 group_configs: dict[str, tuple[int | None, int | None]] | None = None) -> None:
        self.config = config or ConsumerGroupConfig()
        # group id -> its own (session timeout, heartbeat interval) in ms, None: the config's
        self.group_configs = {} if group_configs is None else group_configs
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers = Timers()
        self._rebalance_epochs: dict[tuple[str, str], int] = {}
        # group id -> (topics image version, group epoch) at which its subscribed topics and
        # regexes were last found current: a heartbeat changing nothing skips recomputing them.
        self._current_at: dict[str, tuple[int, int]] = {}

    # ========================================================================== replay

    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        """Apply one consumer-group record: the only change to group state, in operation and
        when loading."""
        group = self.groups.get(key.group_id)
        if type(key) is ConsumerGroupMetadataKey and value is None:
            self._current_at.pop(key.group_id, None)
            if group is not None:
                del self.groups[key.group_id]
                for member_id in group.members:
                    self._cancel_member_timers(key.group_id, member_id)
            return
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = ConsumerGroup(key.group_id)
        group.replay(key, value)

    def replay_raw(self, key: bytes, value: bytes | None) -> bool:
        """Apply one record as stored in `__consumer_offsets`; False when its key type is not a
        consumer-group one (3-8, 16), so the caller routes it elsewhere."""
        decoded = decode_key(key)
        if decoded is None:
            return False
        self.replay(decoded, decode_value(decoded, value))
        return True

    def on_loaded(self, now: int) -> None:
        """After loading: every member gets a fresh session timer, and one revoking partitions a
        fresh rebalance timer (timers are not in the log)."""
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group.group_id, member.member_id, now)
                if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch >= 0:
                    self._rebalance_epochs[(group.group_id, member.member_id)] = member.member_epoch
                    self.timers.schedule(("rebalance", group.group_id, member.member_id),
                                         now + member.rebalance_timeout_ms)

    def _write(self, records: list[ConsumerGroupRecord], token: Hashable,
               response: GroupHeartbeatResponse) -> CoordinatorResult:
        """Replay the records at once, then package them with the response."""
        for key, value in records:
            self.replay(key, value)
        result = CoordinatorResult(records=records, replay=False)
        return result.respond(token, response)

    # ========================================================================== timers

    def next_deadline(self) -> int | None:
        """The earliest timer deadline, for the shell's sleep."""
        return self.timers.next_deadline()

    def fire_timers(self, now: int) -> CoordinatorResult:
        """Session timeouts and rebalance timeouts that expired: each removes its member."""
        records: list[ConsumerGroupRecord] = []
        for kind, group_id, member_id in self.timers.pop_expired(now):  # type: ignore[misc]
            group = self.groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                continue
            if kind == "rebalance":
                epoch = self._rebalance_epochs.pop((group_id, member_id), None)
                if member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != epoch:
                    continue
            self._cancel_member_timers(group_id, member_id)
            fenced = self._remove_member(group, member_id)  # type: ignore[arg-type]
            for key, value in fenced:
                self.replay(key, value)
            records.extend(fenced)
        return CoordinatorResult(records=records, replay=False)

    def _schedule_session(self, group_id: str, member_id: str, now: int) -> None:
        """(Re-)arm a member's session timeout."""
        own = self.group_configs.get(group_id, (None, None))[0]
        self.timers.schedule(("session", group_id, member_id), now + (own or self.config.session_timeout_ms))

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        """Forget a member's session and rebalance timers."""
        self.timers.cancel(("session", group_id, member_id))
        self.timers.cancel(("rebalance", group_id, member_id))
        self._rebalance_epochs.pop((group_id, member_id), None)

    # ======================================================================= heartbeat

    def consumer_group_heartbeat(self, token: Hashable, req: ConsumerGroupHeartbeatRequest, api_version: int,
                                 now: int, topics: TopicsImage) -> CoordinatorResult:
        """ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1, -2)."""
        try:
            _validate(req, api_version)
            if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
                raise GroupRequestRejected(UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                                                    f"Supported assignors: {', '.join(self.config.assignors)}.")
            if req.member_epoch < 0:
                records, response = self._leave(req)
            else:
                records, response = self._heartbeat(req, now, topics)
        except GroupRequestRejected as reject:
            error = GroupHeartbeatResponse(error_code=reject.error_code, error_message=reject.message)
            return CoordinatorResult(replay=False).respond(token, error)
        result = self._write(records, token, response)
        self._after_write(req, response, now)
        return result

    def _after_write(self, req: ConsumerGroupHeartbeatRequest, response: GroupHeartbeatResponse,
                     now: int) -> None:
        """Timers follow the replayed state: the session timer re-arms on each heartbeat, the
        rebalance timer runs while the member has partitions to revoke."""
        group_id, member_id = req.group_id, response.member_id or req.member_id
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or response.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            self._cancel_member_timers(group_id, member_id)
            return
        self._schedule_session(group_id, member_id, now)
        key = (group_id, member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch >= 0:
            if self._rebalance_epochs.get(key) != member.member_epoch:
                self._rebalance_epochs[key] = member.member_epoch
                self.timers.schedule(("rebalance", group_id, member_id), now + member.rebalance_timeout_ms)
        else:
            self._rebalance_epochs.pop(key, None)
            self.timers.cancel(("rebalance", group_id, member_id))

    # --------------------------------------------------------------------------- leave

    def _leave(self, req: ConsumerGroupHeartbeatRequest) -> tuple[list[ConsumerGroupRecord],
                                                                   GroupHeartbeatResponse]:
        """Epoch -1 removes the member and bumps the group epoch; -2 (static) only marks it
        away, keeping its partitions."""
        group = self.groups.get(req.group_id)
        if group is None:
            raise GroupRequestRejected(GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise GroupRequestRejected(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
        else:
            member = self._static_member(group, req)
        response = GroupHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Its partitions stay reserved for its return; those it was revoking are freed.
            away = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={})
            return [current_assignment_record(group.group_id, away)], response
        return self._remove_member(group, member.member_id), response

    def _static_member(self, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupMember:
        """The member holding req.instance_id: 25 if none, 82 if it is another member id."""
        member_id = group.static_members.get(req.instance_id)  # type: ignore[arg-type]
        if member_id is None:
            raise GroupRequestRejected(UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if member_id != req.member_id:
            raise GroupRequestRejected(FENCED_INSTANCE_ID, f"Instance id {req.instance_id} belongs to member {member_id}.")
        return group.members[member_id]

    def _remove_member(self, group: ConsumerGroup, member_id: str) -> list[ConsumerGroupRecord]:
        """Tombstones 8, 7, 5 of the member; 16 if it was its regex's last user; 4 if the
        subscribed topics change; and the group epoch +1 (B4)."""
        member = group.members[member_id]
        records = group.member_tombstones(member_id)
        regex = member.subscribed_topic_regex
        resolved = dict(group.resolved_regexes)
        if regex and regex in resolved and group.regex_users(regex, ignoring=member_id) == 0:
            records.append(regex_record(group.group_id, regex, None))
            del resolved[regex]
        others = [m for m in group.members.values() if m.member_id != member_id]
        metadata = self._subscribed_metadata_from(others, resolved, group.subscription_metadata)
        if metadata != group.subscription_metadata:
            records.append(partition_metadata_record(group.group_id, metadata))
        records.append(metadata_record(group.group_id, group.group_epoch + 1))
        return records

    @staticmethod
    def _subscribed_metadata_from(members: list[ConsumerGroupMember],
                                  resolved: Mapping[str, ConsumerGroupRegularExpressionValue],
                                  known: Mapping[str, TopicMetadata]) -> dict[str, TopicMetadata]:
        """The subscribed topics still known to the group, after members went away."""
        names = _subscribed_names(members, resolved)
        return {n: tm for n, tm in known.items() if n in names}

    # ----------------------------------------------------------------------- heartbeat

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int,
                   topics: TopicsImage) -> tuple[list[ConsumerGroupRecord], GroupHeartbeatResponse]:
        """Join or heartbeat: update the member, then the group epoch, then the target
        assignment, then reconcile the member towards it (B3, B4)."""
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise GroupRequestRejected(GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
            group = ConsumerGroup(req.group_id)  # created by replaying its first records
        member_id = req.member_id or str(uuid.uuid4())  # v0 may ask the server for an id
        if member_id not in group.members and len(group.members) >= self.config.max_size:
            raise GroupRequestRejected(GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                                                  f"{self.config.max_size} members.")
        member, replaced = self._member_for(group, req, member_id)
        owned = None if req.topic_partitions is None else assignment_of(req.topic_partitions)
        if req.member_epoch > 0:
            self._check_epoch(member, req.member_epoch, owned)

        records: list[ConsumerGroupRecord] = []
        if replaced is not None:
            records.extend(group.member_tombstones(replaced.member_id))
        updated = _updated_member(member, req)
        new_member = member_id not in group.members
        if new_member or replaced is not None or updated.metadata_value() != member.metadata_value():
            records.append(member_metadata_record(group.group_id, updated))
        changed = (new_member and replaced is None) or _subscription_changed(member, updated)
        steady = self._current_at.get(group.group_id) == (topics.version, group.group_epoch)
        if not changed and replaced is None and steady:
            assignment_epoch, targets = group.assignment_epoch, group.target_assignment
        else:
            members = {m.member_id: m for m in group.members.values() if replaced is None or m is not replaced}
            members[member_id] = updated
            group_epoch, resolved, metadata = self._update_group_epoch(group, members, changed, now, topics, records)
            assignment_epoch, targets = self._update_target_assignment(
                group, members, member_id, replaced, group_epoch, resolved, metadata, records)
            if all(v.version == topics.version for v in resolved.values()):
                self._current_at[group.group_id] = (topics.version, group_epoch)

        def held_by_other(topic_id: TopicId, partition: int) -> bool:
            """Whether a member other than this one (or the one it replaces) holds the partition."""
            owner = group.owner_of(topic_id, partition)
            return owner is not None and owner != member_id and (replaced is None or owner != replaced.member_id)

        start = updated
        if req.member_epoch == 0 and replaced is None:  # a (re)join: the member starts from scratch
            start = replace(updated, member_epoch=0, state=MemberState.STABLE, partitions_pending_revocation={})
        reconciled = reconcile(start, assignment_epoch, targets.get(member_id, {}), owned, held_by_other)
        if new_member or replaced is not None or not reconciled.same_assignment(member):
            records.append(current_assignment_record(group.group_id, reconciled))

        full = (req.rebalance_timeout_ms != -1 and req.topic_partitions is not None
                and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send_assignment = (req.member_epoch == 0 or full
                           or reconciled.assigned_partitions != member.assigned_partitions)
        response = GroupHeartbeatResponse(
            member_id=member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.group_configs.get(group.group_id, (None, None))[1]
            or self.config.heartbeat_interval_ms,
            assignment=topic_partitions_of(reconciled.assigned_partitions) if send_assignment else None)
        return records, response

    def _update_group_epoch(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                            subscription_changed: bool, now: int, topics: TopicsImage,
                            records: list[ConsumerGroupRecord],
                            ) -> tuple[int, dict[str, ConsumerGroupRegularExpressionValue], dict[str, TopicMetadata]]:
        """Records 16, 4 and 3 as needed: the group epoch moves when a subscription, a resolved
        regex or the subscribed topics' metadata changed. Returns (epoch, regexes, metadata)."""
        resolved, regex_records, regex_changed = self._resolve_regexes(group, members, now, topics)
        records.extend(regex_records)
        bump = subscription_changed or regex_changed
        metadata = _subscribed_metadata(members.values(), resolved, topics)
        if metadata != group.subscription_metadata:
            records.append(partition_metadata_record(group.group_id, metadata))
            bump = True
        if not bump:
            return group.group_epoch, resolved, metadata
        records.append(metadata_record(group.group_id, group.group_epoch + 1))
        return group.group_epoch + 1, resolved, metadata

    def _update_target_assignment(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                                  member_id: str, replaced: ConsumerGroupMember | None, group_epoch: int,
                                  resolved: Mapping[str, ConsumerGroupRegularExpressionValue],
                                  metadata: Mapping[str, TopicMetadata], records: list[ConsumerGroupRecord],
                                  ) -> tuple[int, dict[str, Assignment]]:
        """Records 7 and 6: a static member's new incarnation inherits its predecessor's target;
        a group epoch ahead of the assignment epoch recomputes every member's. Returns the
        assignment epoch and the targets."""
        targets = group.target_assignment
        if replaced is not None:
            targets = dict(targets)
            targets[member_id] = targets.pop(replaced.member_id, {})
            records.append(target_member_record(group.group_id, member_id, targets[member_id]))
        if group_epoch <= group.assignment_epoch:
            return group.assignment_epoch, targets
        new_targets = self._assign(members, targets, metadata, resolved)
        for m in sorted(new_targets):
            if m not in targets or new_targets[m] != targets[m]:
                records.append(target_member_record(group.group_id, m, new_targets[m]))
        records.append(target_metadata_record(group.group_id, group_epoch))
        return group_epoch, new_targets

    def _member_for(self, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest,
                    member_id: str) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(the member as stored, or a new one; the static member it replaces, if any)."""
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if req.member_epoch != 0:
                    raise GroupRequestRejected(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
                return ConsumerGroupMember(member_id), None
            return member, None
        if req.member_epoch != 0:
            return self._static_member(group, req), None
        holder_id = group.static_members.get(req.instance_id)
        if holder_id is None:
            existing = group.members.get(member_id)
            return (existing or ConsumerGroupMember(member_id)), None
        holder = group.members[holder_id]
        if holder_id == member_id:
            return holder, None  # a static member rejoining with its own id: a fresh join
        if holder.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupRequestRejected(UNRELEASED_INSTANCE_ID, f"Static member {holder_id} with instance id {req.instance_id} "
                                                  f"is not released yet.")
        # The new incarnation takes the old one's place and partitions: no rebalance.
        return replace(holder, member_id=member_id), holder

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Assignment | None) -> None:
        """FENCED_MEMBER_EPOCH unless the epoch is the member's, or its previous one with owned
        partitions all still assigned (the bump's response was lost)."""
        if epoch > member.member_epoch:
            raise GroupRequestRejected(FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({epoch}) "
                                               f"than the one known by the group coordinator "
                                               f"({member.member_epoch}).")
        if epoch < member.member_epoch:
            lost_bump = epoch == member.previous_member_epoch and owned is not None and _is_subset(
                owned, member.assigned_partitions)
            if not lost_bump:
                raise GroupRequestRejected(FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                                                   f"({epoch}) than the one known by the group coordinator "
                                                   f"({member.member_epoch}).")

    def _resolve_regexes(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                         now: int, topics: TopicsImage,
                         ) -> tuple[dict[str, ConsumerGroupRegularExpressionValue], list[ConsumerGroupRecord], bool]:
        """Resolve regexes new to the group at once, refresh stale ones at most every 10 s,
        tombstone those no member uses any more. Returns (resolved, records, changed)."""
        resolved = dict(group.resolved_regexes)
        records: list[ConsumerGroupRecord] = []
        changed = False
        in_use = {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}
        for regex in sorted(in_use):
            old = resolved.get(regex)
            if old is not None and (old.version == topics.version or now - old.timestamp < REGEX_REFRESH_INTERVAL_MS):
                continue
            pattern = _compile_regex(regex)
            names = tuple(sorted(n for n in topics.topics if pattern.fullmatch(n)))
            value = ConsumerGroupRegularExpressionValue(names, topics.version, now)
            resolved[regex] = value
            records.append(regex_record(group.group_id, regex, value))
            changed |= old is None or old.topics != names
        for regex in sorted(set(resolved) - in_use):
            del resolved[regex]
            records.append(regex_record(group.group_id, regex, None))
        return resolved, records, changed

    def assignor_name(self, members: Mapping[str, ConsumerGroupMember]) -> str:
        """The group's assignor: the ServerAssignor most members name (ties: the first
        configured), else the default (B5; ConsumerGroupDescribe's AssignorName)."""
        votes = Counter(m.server_assignor for m in members.values() if m.server_assignor is not None)
        name = self.config.assignors[0] if self.config.assignors else DEFAULT_ASSIGNOR
        if votes:
            best = max(votes.values())
            name = next(a for a in self.config.assignors if votes.get(a) == best)
        return name

    def _assign(self, members: Mapping[str, ConsumerGroupMember], targets: Mapping[str, Assignment],
                metadata: Mapping[str, TopicMetadata],
                resolved: Mapping[str, ConsumerGroupRegularExpressionValue]) -> dict[str, Assignment]:
        """A new target for every member with the group's assignor (assignor_name)."""
        name = self.assignor_name(members)
        ids = {n: tm.topic_id for n, tm in metadata.items()}
        counts = {tm.topic_id: tm.num_partitions for tm in metadata.values()}
        specs = {
            m.member_id: AssignmentMemberSpec(
                frozenset(ids[n] for n in _subscribed_names([m], resolved) if n in ids),
                targets.get(m.member_id, {}))
            for m in members.values()
        }
        return ASSIGNORS[name](specs, counts)


def _is_subset(owned: Assignment, assigned: Assignment) -> bool:
    """Every owned partition is assigned."""
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _updated_member(member: ConsumerGroupMember, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupMember:
    """The member with the request's non-null fields applied (null or -1: unchanged)."""
    changes: dict[str, object] = {}
    if req.client_id:
        changes["client_id"] = req.client_id
    if req.client_host:
        changes["client_host"] = req.client_host
    if req.instance_id is not None:
        changes["instance_id"] = req.instance_id
    if req.rack_id is not None:
        changes["rack_id"] = req.rack_id
    if req.rebalance_timeout_ms != -1:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
    if req.subscribed_topic_regex is not None:
        changes["subscribed_topic_regex"] = req.subscribed_topic_regex  # "" is kept: it means none
    if req.server_assignor is not None:
        changes["server_assignor"] = req.server_assignor
    if req.classic_member_metadata is not None:
        changes["classic_member_metadata"] = req.classic_member_metadata
    return replace(member, **changes)  # type: ignore[arg-type]


def _subscription_changed(old: ConsumerGroupMember, new: ConsumerGroupMember) -> bool:
    """Names or regex differ (what bumps the group epoch)."""
    return (old.subscribed_topic_names != new.subscribed_topic_names
            or old.subscribed_topic_regex != new.subscribed_topic_regex)


def _subscribed_names(members, resolved: Mapping[str, ConsumerGroupRegularExpressionValue]) -> set[str]:
    """Subscribed set = names ∪ topics the members' regexes resolved to (B5)."""
    names: set[str] = set()
    for m in members:
        names.update(m.subscribed_topic_names)
        if m.subscribed_topic_regex and m.subscribed_topic_regex in resolved:
            names.update(resolved[m.subscribed_topic_regex].topics)
    return names


def _subscribed_metadata(members, resolved: Mapping[str, ConsumerGroupRegularExpressionValue],
                         topics: TopicsImage) -> dict[str, TopicMetadata]:
    """Record 4's content: every subscribed topic that exists, with its id and partition count."""
    out = {}
    for name in _subscribed_names(members, resolved):
        entry = topics.topics.get(name)
        if entry is not None:
            out[name] = TopicMetadata(entry[0], name, entry[1])
    return out
