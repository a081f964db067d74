"""ShareGroupHeartbeat (API 76 v1) for the KIP-932 share groups of one shard, sans-IO.

Every operation takes the time (and the broker's topic view where it needs one) and returns a
CoordinatorResult: the records to append, already replayed into the groups (as the consumer
groups' operations do), and the response. `replay` is the only code that changes group state;
session timeouts are ephemeral timers the shell drives via fire_timers. Validation, error codes
and epochs follow share-groups.md §2: the client names its member, a member's epoch jumps to the
assignment epoch at once (nothing to revoke: partitions are shared), and the `simple` assignor
hands every subscribed partition out.

One simplification: a subscribed topic's share-partitions count as initialized as soon as the
group subscribes (record 15 lists them at once); Kafka assigns them only after the share
coordinator answered InitializeShareGroupState, one heartbeat later.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable

from ..records.share_group_records import (
    ShareGroupKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupValue,
    TopicPartitionsInfo,
    decode_key,
    decode_value,
)
from .config import ShareGroupConfig
from .consumer_group import topic_partitions_of
from .consumer_group_ops import TopicsImage
from .errors import FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, \
    NON_EMPTY_GROUP, NONE, UNKNOWN_MEMBER_ID
from .result import CoordinatorResult
from .group_heartbeat import GroupHeartbeatResponse, GroupRequestRejected
from .share_assignor import simple_assign
from .share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ShareGroup,
    ShareGroupMember,
    ShareGroupRecord,
    current_assignment_record,
    member_metadata_record,
    metadata_record,
    state_metadata_record,
    target_member_record,
    target_metadata_record,
)
from .timers import Timers

MAX_MEMBER_ID_LENGTH = 36
"""Longest member id a share member may name itself with (clients send a 22-char base64 uuid)."""


@dataclass(frozen=True)
class ShareGroupHeartbeatRequest:
    """ShareGroupHeartbeat request fields (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""  # from the request header and the connection (record 10)
    client_host: str = ""


def member_id_error(member_id: str) -> str | None:
    """Why a client-chosen member id is refused (INVALID_REQUEST), or None when it is fine."""
    if not member_id:
        return "MemberId can't be empty."
    if len(member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters."
    return None


def _validate(req: ShareGroupHeartbeatRequest) -> None:
    """The INVALID_REQUEST checks of §2, in Kafka's order."""
    problem = member_id_error(req.member_id)
    if problem is None and not req.group_id.strip():
        problem = "GroupId can't be empty."
    if problem is None and req.rack_id is not None and not req.rack_id.strip():
        problem = "RackId can't be empty."
    if problem is None and req.member_epoch == 0 and not req.subscribed_topic_names:
        problem = "SubscribedTopicNames must be set and non-empty when joining (epoch 0)."
    if problem is None and req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        problem = f"MemberEpoch {req.member_epoch} is invalid."
    if problem is not None:
        raise GroupRequestRejected(INVALID_REQUEST, problem)


def metadata_hash(topics: dict[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partition count): a change
    of it bumps the group epoch (our own digest; Kafka's is not reproduced)."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topics):
        topic_id, count = topics[name]
        h.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


class ShareGroupOperations:
    """The share groups of one `__consumer_offsets` partition and the heartbeat that drives them."""

    def __init__(self, config: ShareGroupConfig | None = None,
                 group_configs: dict[str, tuple[int | None, int | None]] | None = None) -> None:
        self.config = config or ShareGroupConfig()
        # share.session.timeout.ms / share.heartbeat.interval.ms set on single groups (the shell's)
        self.group_configs = {} if group_configs is None else group_configs
        self.groups: dict[str, ShareGroup] = {}
        self.timers = Timers()

    def _session_timeout_ms(self, group_id: str) -> int:
        return self.group_configs.get(group_id, (None, None))[0] or self.config.session_timeout_ms

    def _heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_configs.get(group_id, (None, None))[1] or self.config.heartbeat_interval_ms

    # ========================================================================== replay

    def replay(self, key: ShareGroupKey, value: ShareGroupValue | None) -> None:
        """Apply one share-group record: the only change to group state, in operation and when loading."""
        group = self.groups.get(key.group_id)
        if type(key) is ShareGroupMetadataKey and value is None:
            if group is not None:
                del self.groups[key.group_id]
                for member_id in group.members:
                    self.timers.cancel((key.group_id, member_id))
            return
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = ShareGroup(key.group_id)
        group.replay(key, value)

    def replay_raw(self, key: bytes, value: bytes | None) -> bool:
        """Apply one record as stored; False when its key type is not a share-group one (10-15)."""
        decoded = decode_key(key)
        if decoded is None:
            return False
        self.replay(decoded, decode_value(decoded, value))
        return True

    def on_loaded(self, now: int) -> None:
        """After loading: every member gets a fresh session timer (timers are not in the log)."""
        for group in self.groups.values():
            for member_id in group.members:
                self.timers.schedule((group.group_id, member_id), now + self._session_timeout_ms(group.group_id))

    def _write(self, records: list[ShareGroupRecord]) -> CoordinatorResult:
        """Replay the records at once and package them."""
        for key, value in records:
            self.replay(key, value)
        return CoordinatorResult(records=records, replay=False)  # type: ignore[arg-type]

    # ========================================================================== timers

    def next_deadline(self) -> int | None:
        """The earliest session deadline, for the shell's sleep."""
        return self.timers.next_deadline()

    def fire_timers(self, now: int) -> CoordinatorResult:
        """Members whose session timed out are fenced: removed as a leave would remove them."""
        records: list[ShareGroupRecord] = []
        for group_id, member_id in self.timers.pop_expired(now):  # type: ignore[misc]
            group = self.groups.get(group_id)
            if group is not None and member_id in group.members:
                fenced = self._remove_member(group, member_id)
                for key, value in fenced:
                    self.replay(key, value)
                records.extend(fenced)
        return CoordinatorResult(records=records, replay=False)  # type: ignore[arg-type]

    # ======================================================================= heartbeat

    def share_group_heartbeat(self, token: Hashable, req: ShareGroupHeartbeatRequest, now: int,
                              topics: TopicsImage) -> CoordinatorResult:
        """ShareGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1)."""
        try:
            _validate(req)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                records, response = self._leave(req)
            else:
                records, response = self._heartbeat(req, topics)
        except GroupRequestRejected as reject:
            error = GroupHeartbeatResponse(error_code=reject.error_code, error_message=reject.message)
            return CoordinatorResult(replay=False).respond(token, error)
        result = self._write(records).respond(token, response)
        key = (req.group_id, req.member_id)
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            self.timers.cancel(key)
        else:
            self.timers.schedule(key, now + self._session_timeout_ms(req.group_id))
        return result

    def _leave(self, req: ShareGroupHeartbeatRequest) -> tuple[list[ShareGroupRecord], GroupHeartbeatResponse]:
        """Epoch -1: the member's records are tombstoned and the group epoch moves on."""
        group = self.groups.get(req.group_id)
        if group is None:
            raise GroupRequestRejected(GROUP_ID_NOT_FOUND, f"Share group {req.group_id} not found.")
        if req.member_id not in group.members:
            raise GroupRequestRejected(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
        response = GroupHeartbeatResponse(member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
        return self._remove_member(group, req.member_id), response

    @staticmethod
    def _remove_member(group: ShareGroup, member_id: str) -> list[ShareGroupRecord]:
        """Tombstones 14, 13, 10 of the member, then the group epoch + 1 (record 11)."""
        return [*group.member_tombstones(member_id),
                metadata_record(group.group_id, group.group_epoch + 1, group.metadata_hash)]

    def _heartbeat(self, req: ShareGroupHeartbeatRequest,
                   topics: TopicsImage) -> tuple[list[ShareGroupRecord], GroupHeartbeatResponse]:
        """Join or heartbeat: update the member, then the group epoch, then the target
        assignment; the member's epoch and partitions then jump to the target's."""
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise GroupRequestRejected(GROUP_ID_NOT_FOUND, f"Share group {req.group_id} not found.")
            group = ShareGroup(req.group_id)  # created by replaying its first records
        member = group.members.get(req.member_id)
        if member is None:
            if req.member_epoch != 0:
                raise GroupRequestRejected(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
            if len(group.members) >= self.config.max_size:
                raise GroupRequestRejected(GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of "
                                                      f"{self.config.max_size} members.")
            member = ShareGroupMember(req.member_id)
            new_member = True
        else:
            new_member = False
            _check_epoch(member, req.member_epoch)

        records: list[ShareGroupRecord] = []
        updated = _updated_member(member, req)
        if new_member or updated.metadata_value() != member.metadata_value():
            records.append(member_metadata_record(group.group_id, updated))
        members = dict(group.members)
        members[updated.member_id] = updated
        subscribed = {n: topics.topics[n] for m in members.values() for n in m.subscribed_topic_names
                      if n in topics.topics}
        digest = metadata_hash(subscribed)
        group_epoch = group.group_epoch
        if new_member or updated.subscribed_topic_names != member.subscribed_topic_names \
                or digest != group.metadata_hash:
            group_epoch += 1
            records.append(metadata_record(group.group_id, group_epoch, digest))
        targets = group.target_assignment
        if group_epoch > group.assignment_epoch:
            targets = simple_assign(
                {m.member_id: frozenset(subscribed[n][0] for n in m.subscribed_topic_names if n in subscribed)
                 for m in members.values()},
                {topic_id: count for topic_id, count in subscribed.values()}, group.target_assignment)
            for m in sorted(targets):
                if targets[m] != group.target_assignment.get(m):
                    records.append(target_member_record(group.group_id, m, targets[m]))
            records.append(target_metadata_record(group.group_id, group_epoch))
        assignment_epoch = max(group_epoch, group.assignment_epoch)
        target = targets.get(updated.member_id, {})
        reconciled = updated
        if updated.member_epoch != assignment_epoch or updated.assigned_partitions != target:
            reconciled = replace(updated, previous_member_epoch=updated.member_epoch, member_epoch=assignment_epoch,
                                 assigned_partitions=target)
        if new_member or reconciled != updated:
            records.append(current_assignment_record(group.group_id, reconciled))
        records.extend(self._initialized_topics(group, subscribed))  # last, as Kafka's comes after
        send_assignment = (req.member_epoch == 0 or req.subscribed_topic_names is not None
                           or reconciled.assigned_partitions != member.assigned_partitions)
        response = GroupHeartbeatResponse(
            member_id=req.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms(group.group_id),
            assignment=topic_partitions_of(reconciled.assigned_partitions) if send_assignment else None)
        return records, response

    @staticmethod
    def _initialized_topics(group: ShareGroup, subscribed: dict[str, tuple[uuid.UUID, int]]) -> list[ShareGroupRecord]:
        """Record 15 when a subscribed topic (or a new partition of one) is not listed as
        initialized yet; topics listed before stay (their share state lives on)."""
        old = group.state_metadata
        initialized = {t.topic_id: t for t in old.initialized_topics}
        for name, (topic_id, count) in subscribed.items():
            initialized[topic_id] = TopicPartitionsInfo(topic_id, name, tuple(range(count)))
        value = ShareGroupStatePartitionMetadataValue(
            old.initializing_topics, tuple(initialized[t] for t in sorted(initialized)), old.deleting_topics)
        return [] if value == old else [state_metadata_record(group.group_id, value)]

    # ========================================================================== admin

    def change_offsets(self, token: Hashable, group_id: str, altered: dict[uuid.UUID, TopicPartitionsInfo],
                       deleted: frozenset[uuid.UUID], create: bool) -> CoordinatorResult:
        """The group's side of AlterShareGroupOffsets (`create`, `altered`) and
        DeleteShareGroupOffsets (`deleted`), answering (error code, group epoch): only an empty
        group (NON_EMPTY_GROUP); a missing one is created by an alter, GROUP_ID_NOT_FOUND for a
        delete. An alter bumps the group epoch (record 11), the state epoch the share coordinator
        is initialized with, as Kafka does; record 15 lists the altered topics as initialized and
        drops the deleted ones."""
        group = self.groups.get(group_id)
        if group is None and not create:
            return CoordinatorResult(replay=False).respond(token, (GROUP_ID_NOT_FOUND, 0))
        if group is not None and group.members:
            return CoordinatorResult(replay=False).respond(token, (NON_EMPTY_GROUP, 0))
        group = group or ShareGroup(group_id)
        records: list[ShareGroupRecord] = []
        epoch = group.group_epoch
        if create:
            epoch += 1
            records.append(metadata_record(group_id, epoch, group.metadata_hash))
        old = group.state_metadata
        initialized = {t.topic_id: t for t in old.initialized_topics if t.topic_id not in deleted}
        for topic_id, info in altered.items():
            before = initialized.get(topic_id)
            partitions = set(info.partitions) | set(before.partitions if before is not None else ())
            initialized[topic_id] = TopicPartitionsInfo(topic_id, info.topic_name, tuple(sorted(partitions)))
        value = ShareGroupStatePartitionMetadataValue(
            old.initializing_topics, tuple(initialized[t] for t in sorted(initialized)), old.deleting_topics)
        if value != old:
            records.append(state_metadata_record(group_id, value))
        return self._write(records).respond(token, (NONE, epoch))


    def describe(self, group_id: str, topic_name: Callable[[uuid.UUID], str]) -> dict[str, Any] | None:
        """ShareGroupDescribe's entry for a share group (None: not a share group here)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        names = {t.topic_id: t.topic_name for t in group.state_metadata.initialized_topics}

        def assignment(member: ShareGroupMember) -> dict[str, Any]:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": names.get(t) or topic_name(t), "partitions": sorted(ps)}
                for t, ps in sorted(member.assigned_partitions.items()) if ps]}

        return {"error_code": NONE, "error_message": None, "group_id": group_id, "group_state": group.state().value,
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": self.config.assignor,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": m.subscribed_topic_names, "assignment": assignment(m)}
                            for m in group.members.values()]}


def _check_epoch(member: ShareGroupMember, epoch: int) -> None:
    """FENCED_MEMBER_EPOCH unless the epoch is 0 (a rejoin), the member's, or its previous one
    (the response that bumped it was lost)."""
    if epoch == 0 or epoch == member.member_epoch:
        return
    if epoch > member.member_epoch:
        raise GroupRequestRejected(FENCED_MEMBER_EPOCH, f"The share group member's epoch ({epoch}) is ahead of the "
                                           f"coordinator's ({member.member_epoch}); it must rejoin.")
    if epoch != member.previous_member_epoch:
        raise GroupRequestRejected(FENCED_MEMBER_EPOCH, f"The share group member's epoch ({epoch}) is behind the "
                                           f"coordinator's ({member.member_epoch}) and is not its previous "
                                           f"one ({member.previous_member_epoch}); it must rejoin.")


def _updated_member(member: ShareGroupMember, req: ShareGroupHeartbeatRequest) -> ShareGroupMember:
    """The member with the request's non-null fields applied (null: unchanged)."""
    changes: dict[str, object] = {}
    if req.client_id:
        changes["client_id"] = req.client_id
    if req.client_host:
        changes["client_host"] = req.client_host
    if req.rack_id is not None:
        changes["rack_id"] = req.rack_id
    if req.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
    return replace(member, **changes)  # type: ignore[arg-type]
