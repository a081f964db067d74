"""GroupCoordinatorShard: the sans-IO coordinator of one `__consumer_offsets` partition.

Every operation takes an opaque request token and the time, and returns a CoordinatorResult:
records to append and (token, response) pairs the shell delivers once those records are durable.
Offsets change only through `replay()`, the same function the loader calls; classic-group
membership is ephemeral state the state machine holds, persisted by GroupMetadata records that
only loading replays (Kafka's model). Error codes and their order follow the reference (§ cited).
This module holds the state, replay, loading, the timer loop and the group listings; the APIs
are mixins beside it: offset_ops.py (offsets) and classic_group_ops.py (the classic group protocol).
KIP-848 consumer groups live beside the classic ones in `consumer` (consumer_group_ops.py,
classic_member_ops.py): a group id that has a consumer group is that consumer group (an
offsets-only classic entry may stay beside it for its offsets); the shard routes their records,
timers and classic-protocol members (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) there.
KIP-932 share groups live in `share` (share_group_ops.py); a group id is one kind only: the other
kinds' APIs refuse a share group's id and the share heartbeat refuses theirs.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Hashable, Iterable, Mapping

from ..records.batch import decode_records, parse_header
from ..records.control import CONTROL_ABORT, CONTROL_COMMIT, parse_marker
from ..records.group_metadata_value import GroupMetadataValue, decode_group_metadata_value
from ..records.offset_commit_value import OffsetCommitValue
from ..records.offsets import GroupMetadataKey, OffsetCommitKey, decode_key, encode_key, encode_value
from ..records.share_group_records import TopicPartitionsInfo
from .classic_group_ops import ClassicGroupOperations, JoinRequest, join_error
from .classic_member_ops import ClassicMemberOperations
from .config import GroupCoordinatorConfig
from .consumer_group_ops import ConsumerGroupHeartbeatRequest, TopicsImage
from .errors import GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, NONE
from .group import ClassicGroup, GroupState
from .group_heartbeat import GroupHeartbeatResponse
from .group_migration import GroupMigrationOperations, valid_heartbeat
from .metrics import CoordinatorCounters
from .offset_ops import OffsetOperations
from .offsets_table import OffsetsTable
from .result import CoordinatorResult
from .share_group_ops import ShareGroupHeartbeatRequest, ShareGroupOperations
from .timers import Timers
from .txn_offsets import PendingTxnOffsets, is_offset_commit_key

S = GroupState

# The group types as ListGroups names them (v5 group_type; its types filter, case-insensitive).
GROUP_TYPE_CLASSIC = "classic"
GROUP_TYPE_CONSUMER = "consumer"
GROUP_TYPE_SHARE = "share"


class GroupCoordinatorShard(ClassicGroupOperations, GroupMigrationOperations, OffsetOperations):
    """Groups and committed offsets of one offsets-topic partition (offset APIs: offset_ops.py;
    classic group APIs: classic_group_ops.py, listed first so its member checks are the ones
    offset_ops.py declares; upgrade and downgrade between the group kinds: group_migration.py)."""

    def __init__(self, partition: int, config: GroupCoordinatorConfig) -> None:
        self.partition = partition
        self.config = config
        self.counters = CoordinatorCounters()
        # offsets.retention.minutes set on single groups (ms; -1 = never expire); else config's.
        self.group_retention_ms: dict[str, int] = {}
        # consumer.session.timeout.ms / consumer.heartbeat.interval.ms set on single consumer groups
        self.consumer_group_configs: dict[str, tuple[int | None, int | None]] = {}
        # share.session.timeout.ms / share.heartbeat.interval.ms set on single share groups
        self.share_group_configs: dict[str, tuple[int | None, int | None]] = {}
        self.reset()

    def reset(self) -> None:
        """Forget every group and offset (state that replaying the log rebuilds): at creation, and
        when a write failed and the shell replays the log again, so that what the failed write
        had changed in memory is gone (§5.3). Settings and counters stay."""
        self.groups: dict[str, ClassicGroup] = {}
        # transactional offsets waiting for their marker (KOC §5.4); the table tells it about
        # plain records of its pending keys
        self.txn = PendingTxnOffsets(self._on_offsets_group)
        self.table = OffsetsTable(self._replay_other, self._on_offsets_group, self.txn.keys,
                                  self.txn.plain_record)
        self.txn.store = self.table.store
        # group -> OffsetCommit key bytes -> value bytes, exactly as in the log (the table's)
        self.offsets: dict[str, dict[bytes, bytes]] = self.table.by_group
        self._unreplayed: dict[bytes, int] = self.table.in_flight
        self.skipped_records = 0
        self.timers = Timers()
        self._expiry_warned: set[str] = set()
        self.consumer = ClassicMemberOperations(self.config.consumer, self.consumer_group_configs)
        self.share = ShareGroupOperations(self.config.share, self.share_group_configs)

    # ============================================================================ replay

    def replay(self, key: OffsetCommitKey | GroupMetadataKey, value: OffsetCommitValue | GroupMetadataValue | None) -> None:
        """Apply one record given as objects (tests and tools); see replay_raw."""
        self.replay_raw(encode_key(key), None if value is None else encode_value(value))

    def replay_raw(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of the offsets log, as stored (§5.1): the only way offsets and groups
        change, during operation and loading alike (the loader calls `table.replay` directly).
        Unknown key versions are counted in `skipped_records` and ignored (§4.2)."""
        self.table.replay(key, value)

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None, offset: int) -> None:
        """Apply one record of a batch of `producer_id` at log `offset` (§5.1): an OffsetCommit
        value is pending until its producer's marker; anything else replays as a plain record
        (a tombstone also drops the key's pending offsets)."""
        if producer_id < 0 or value is None or not is_offset_commit_key(key):
            self.table.replay(key, value)
        else:
            self.txn.replay_pending(producer_id, key, value, offset)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` ends its transaction here (§5.4)."""
        self.txn.replay_marker(producer_id, commit)

    def replay_batch(self, batch: bytes | memoryview) -> None:
        """Apply one transactional, control or producer-id batch as read from the log (the
        loader's on_batch): its records with their offsets, or its marker. Control records of
        types other than COMMIT and ABORT are skipped, as readers do."""
        header = parse_header(batch)
        if header.is_control:
            control_type, _ = parse_marker(batch)
            if control_type in (CONTROL_COMMIT, CONTROL_ABORT):
                self.replay_marker(header.producer_id, control_type == CONTROL_COMMIT)
            return
        for record in decode_records(batch):
            if record.key is None:  # a coordinator skips records with no key
                continue
            self.replay_transactional(header.producer_id, record.key, record.value, record.offset)

    def _replay_other(self, key: bytes, value: bytes | None) -> None:
        """A record that is not an offset commit: GroupMetadata, a consumer group's (types 3-8,
        16), a share group's (10-15), or a key version we skip."""
        if key[0] or key[1] != 2:
            if not self.consumer.replay_raw(key, value) and not self.share.replay_raw(key, value):
                self.skipped_records += 1
            return
        group_id = decode_key(key).group  # type: ignore[union-attr]
        if value is None:
            group = self.groups.pop(group_id, None)
            self.table.drop_group(group_id)
            if group is not None:
                self._cancel_group_timers(group)
        else:
            self.groups[group_id] = ClassicGroup.from_record(group_id, decode_group_metadata_value(value))

    def _on_offsets_group(self, group_id: str) -> None:
        """The table saw offsets of a group for the first time: without a GroupMetadata record
        it is an offsets-only (simple) group."""
        if group_id not in self.groups:
            self.groups[group_id] = ClassicGroup(group_id)

    def on_loaded(self, now: int) -> CoordinatorResult:
        """After load (§5.1): every loaded member gets a session timer; groups over
        group.max.size are forced to rebalance."""
        result = CoordinatorResult(replay=False)
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now)
            if len(group.members) > self.config.group_max_size and group.state is S.STABLE:
                self._prepare_rebalance(group, now, result)
        self.consumer.on_loaded(now)
        self.share.on_loaded(now)
        return result

    # ====================================================================== timers

    def next_deadline(self) -> int | None:
        """The earliest deadline of a classic, a consumer or a share group's timer."""
        deadlines = [d for d in (self.timers.next_deadline(), self.consumer.next_deadline(),
                                 self.share.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def fire_timers(self, now: int) -> CoordinatorResult:
        """Run every expired timer; the result may complete parked requests and write records
        (both kinds' records are replayed already: replay=False)."""
        result = CoordinatorResult(replay=False)
        for key in self.timers.pop_expired(now):
            group = self.groups.get(key[1])
            if group is None:
                continue
            self._fire_classic_timer(key, group, now, result)
        expired = self.consumer.fire_timers(now)
        for group_id in sorted({key.group_id for key, _ in expired.records}):  # members removed
            expired.merge(self._maybe_downgrade(group_id, now))
        return result.merge(expired).merge(self.share.fire_timers(now))

    # ============================================================= the two group kinds

    def consumer_group_heartbeat(self, token: Hashable, req: ConsumerGroupHeartbeatRequest, api_version: int,
                                 now: int, topics: TopicsImage) -> CoordinatorResult:
        """ConsumerGroupHeartbeat (consumer_group_ops.py), after the classic side's say (B7): a
        classic group with members is upgraded by a joining member where group_migration.py
        allows it, else answers GROUP_ID_NOT_FOUND; an empty or offsets-only one is taken over, its
        offsets kept (its entry stays beside the consumer group for them). A leave may downgrade."""
        result = CoordinatorResult(replay=False)
        if req.group_id in self.share.groups:
            return result.respond(token, GroupHeartbeatResponse(
                error_code=GROUP_ID_NOT_FOUND, error_message=f"Group {req.group_id} is not a consumer group."))
        if req.group_id not in self.consumer.groups:
            classic = self.groups.get(req.group_id)
            if classic is not None and (classic.members or classic.state not in (S.EMPTY, S.DEAD)):
                if not valid_heartbeat(req, api_version):
                    return self.consumer.consumer_group_heartbeat(token, req, api_version, now, topics)
                upgrade = self._upgrade(classic, topics, now) if req.member_epoch == 0 else None
                if upgrade is None:
                    error = GroupHeartbeatResponse(
                        error_code=GROUP_ID_NOT_FOUND,
                        error_message=f"Group {req.group_id} is not a consumer group.")
                    return result.respond(token, error)
                result = upgrade
        result.merge(self.consumer.consumer_group_heartbeat(token, req, api_version, now, topics))
        if req.member_epoch < 0:
            result.merge(self._maybe_downgrade(req.group_id, now))
        return result

    def join_group(self, token: Hashable, req: JoinRequest, now: int, topics: TopicsImage) -> CoordinatorResult:
        """JoinGroup (classic_group_ops.py) on a group id a consumer group holds: with members, the
        classic member joins it (classic_member_ops.py), and a static one taking the place of the
        last consumer-protocol member turns it classic (Stable, no rebalance); an empty one
        becomes classic (its records tombstoned in Kafka's order, ahead of the join's, its
        offsets kept), B7."""
        if req.group_id in self.share.groups:  # another kind of group: Kafka's answer
            return CoordinatorResult(replay=False).respond(token, join_error(INCONSISTENT_GROUP_PROTOCOL, ""))
        group = self.consumer.groups.get(req.group_id) if req.group_id else None
        if group is None:
            return super().join_group(token, req, now)
        if group.members:
            cfg = self.config
            if not cfg.session_timeout_min_ms <= req.session_timeout_ms <= cfg.session_timeout_max_ms:
                return CoordinatorResult(replay=False).respond(token, join_error(INVALID_SESSION_TIMEOUT,
                                                                                  req.member_id))
            holder_id = group.static_members.get(req.group_instance_id) if req.group_instance_id else None
            replaces_consumer_member = (not req.member_id and holder_id is not None
                                        and group.members[holder_id].classic_member_metadata is None)
            result = self.consumer.classic_join(token, req, now, topics)
            if replaces_consumer_member:  # it may have been the last consumer-protocol member
                result.merge(self._maybe_downgrade(req.group_id, now, rebalance=False))
                classic = self.groups.get(req.group_id)
                if req.group_id not in self.consumer.groups and classic is not None:
                    for answer in (body for t, body in result.completions if t == token):
                        answer["protocol_name"] = classic.protocol_name
            return result
        tombstones = group.group_tombstones()
        for key, value in tombstones:
            self.consumer.replay(key, value)
        result = super().join_group(token, req, now)
        result.records[:0] = tombstones
        return result

    def sync_group(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                   generation: int, protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes], now: int) -> CoordinatorResult:
        """SyncGroup: a consumer group's classic member gets its server-side assignment (the
        leader's `assignments` are not used there); a classic group's as classic_group_ops.py."""
        if group_id and group_id in self.consumer.groups:
            return self.consumer.classic_sync(token, group_id, member_id, instance_id, generation,
                                              protocol_type, protocol_name, now)
        return super().sync_group(token, group_id, member_id, instance_id, generation, protocol_type,
                                  protocol_name, assignments, now)

    def heartbeat(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                  generation: int, now: int) -> CoordinatorResult:
        """Heartbeat of a consumer group's classic member (classic_member_ops.py) or of a classic group's."""
        if group_id and group_id in self.consumer.groups:
            return self.consumer.classic_heartbeat(token, group_id, member_id, instance_id, generation, now)
        return super().heartbeat(token, group_id, member_id, instance_id, generation, now)

    def leave_group(self, token: Hashable, group_id: str | None, members: list[tuple[str, str | None]],
                    now: int) -> CoordinatorResult:
        """LeaveGroup of a consumer group's classic members (classic_member_ops.py) or a classic group's."""
        if group_id and group_id in self.consumer.groups:
            return self.consumer.classic_leave(token, group_id, members)
        return super().leave_group(token, group_id, members, now)

    # ======================================================================== admin

    def describe_group(self, group_id: str, api_version: int = 0) -> dict[str, Any]:
        """DescribeGroups entry (§1.10): metadata only when Stable. A group that is not a classic
        group (unknown, or a consumer group) is "Dead", from v6 (KIP-1043) with
        GROUP_ID_NOT_FOUND and a message saying which (B8)."""
        group = self.groups.get(group_id)
        other_kind = group_id in self.consumer.groups or group_id in self.share.groups
        if group is None or group.state is S.DEAD or other_kind:
            dead = {"error_code": NONE, "group_id": group_id, "group_state": S.DEAD.value,
                    "protocol_type": "", "protocol_data": "", "members": ()}
            if api_version >= 6:
                dead.update(error_code=GROUP_ID_NOT_FOUND, error_message=(
                    f"Group {group_id} is not a classic group." if other_kind
                    else f"Group {group_id} not found."))
            return dead
        stable = group.state is S.STABLE
        return {
            "error_code": NONE, "group_id": group_id, "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                         "member_assignment": m.assignment if stable else b""}
                        for m in group.members.values()],
        }

    def group_ids(self) -> list[str]:
        """Every group id of the shard, classic or consumer (what the retention sweep walks)."""
        return list(self.groups) + [g for g in self.consumer.groups if g not in self.groups]

    def group_overview(self, group_id: str) -> tuple[str, str, int] | None:
        """(state, protocol type, member count) of a consumer or classic group; None if neither."""
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            return consumer.state().value, "consumer", len(consumer.members)
        share = self.share.groups.get(group_id)
        if share is not None:
            return share.state().value, "share", len(share.members)
        group = self.groups.get(group_id)
        return None if group is None else (group.state.value, group.protocol_type or "", len(group.members))

    def list_groups(self, group_type: str = GROUP_TYPE_CLASSIC, group_ids: list[str] | None = None
                    ) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group of one type (classic, consumer or share),
        or of those of `group_ids` that are groups of that type now: ListGroups reads a large shard
        a slice of its group_ids_of_type() at a time, and the groups may change in between."""
        ids = self.group_ids_of_type(group_type) if group_ids is None else group_ids
        # a state's _value_ is its wire string (`.value` goes through enum's descriptor: 0.4 us)
        if group_type == GROUP_TYPE_CLASSIC:
            consumer = self.consumer.groups
            return [(g.group_id, g.protocol_type or "", g.state._value_) for g in map(self.groups.get, ids)
                    if g is not None and g.group_id not in consumer]
        table = self.consumer.groups if group_type == GROUP_TYPE_CONSUMER else self.share.groups
        return [(g.group_id, group_type, g.state()._value_) for g in map(table.get, ids) if g is not None]

    def group_ids_of_type(self, group_type: str) -> list[str]:
        """The ids of the groups of one type (classic: with those of the offsets-only classic entries
        that stand beside a consumer group of the same id, which list_groups leaves out)."""
        if group_type == GROUP_TYPE_CONSUMER:
            return list(self.consumer.groups)
        return list(self.share.groups if group_type == GROUP_TYPE_SHARE else self.groups)

    def share_group_heartbeat(self, token: Hashable, req: ShareGroupHeartbeatRequest, now: int,
                              topics: TopicsImage) -> CoordinatorResult:
        """ShareGroupHeartbeat (share_group_ops.py); a group id a classic or consumer group
        holds is refused with GROUP_ID_NOT_FOUND (no conversion between the kinds, as in Kafka)."""
        classic = self.groups.get(req.group_id)
        if req.group_id in self.consumer.groups or (classic is not None and classic.state is not S.DEAD):
            return CoordinatorResult(replay=False).respond(token, GroupHeartbeatResponse(
                error_code=GROUP_ID_NOT_FOUND, error_message=f"Group {req.group_id} is not a share group."))
        return self.share.share_group_heartbeat(token, req, now, topics)

    def change_share_group_offsets(self, token: Hashable, group_id: str,
                                   altered: dict[uuid.UUID, TopicPartitionsInfo], deleted: frozenset[uuid.UUID],
                                   create: bool) -> CoordinatorResult:
        """Alter/DeleteShareGroupOffsets' group side (share_group_ops.py); a group id a classic or
        consumer group holds answers GROUP_ID_NOT_FOUND."""
        classic = self.groups.get(group_id)
        if group_id in self.consumer.groups or (classic is not None and classic.state is not S.DEAD):
            return CoordinatorResult(replay=False).respond(token, (GROUP_ID_NOT_FOUND, 0))
        return self.share.change_offsets(token, group_id, altered, deleted, create)

    def describe_share_group(self, group_id: str, topic_name: Callable[[uuid.UUID], str]) -> dict[str, Any]:
        """ShareGroupDescribe entry: GROUP_ID_NOT_FOUND for a missing group or one of another kind."""
        described = self.share.describe(group_id, topic_name)
        if described is not None:
            return described
        other = group_id in self.consumer.groups or (group_id in self.groups
                                                     and self.groups[group_id].state is not S.DEAD)
        return {"error_code": GROUP_ID_NOT_FOUND, "group_id": group_id, "group_state": "", "group_epoch": 0,
                "error_message": f"Group {group_id} is not a share group." if other else f"Group {group_id} not found.",
                "assignment_epoch": 0, "assignor_name": "", "members": ()}

    def describe_consumer_group(self, group_id: str, topic_name: Callable[[uuid.UUID], str]) -> dict[str, Any]:
        """ConsumerGroupDescribe entry (B8): 69 for a missing or classic group; else epochs, the
        assignor, and each member's subscription, assignment and target (`topic_name` names the
        topic ids the group's metadata does not know)."""
        group = self.consumer.groups.get(group_id)
        if group is None:
            other_kind = group_id in self.share.groups or (group_id in self.groups
                                                           and self.groups[group_id].state is not S.DEAD)
            message = f"Group {group_id} is not a consumer group." if other_kind else f"Group {group_id} not found."
            return {"error_code": GROUP_ID_NOT_FOUND, "error_message": message, "group_id": group_id,
                    "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": ()}
        known = {tm.topic_id: tm.topic_name for tm in group.subscription_metadata.values()}

        def assignment(partitions: Mapping[uuid.UUID, Iterable[int]]) -> dict[str, Any]:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": known.get(t) or topic_name(t), "partitions": sorted(ps)}
                for t, ps in sorted(partitions.items()) if ps]}

        return {"error_code": NONE, "error_message": None, "group_id": group_id, "group_state": group.state().value,
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": self.consumer.assignor_name(group.members),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": m.subscribed_topic_names,
                             "subscribed_topic_regex": m.subscribed_topic_regex or None,
                             "assignment": assignment(m.assigned_partitions),
                             "target_assignment": assignment(group.target_assignment.get(m.member_id, {})),
                             "member_type": 0 if m.classic_member_metadata else 1} for m in group.members.values()]}
