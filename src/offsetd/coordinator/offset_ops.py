"""The offset APIs of GroupCoordinatorShard: OffsetCommit, TxnOffsetCommit, OffsetFetch,
OffsetDelete, DeleteGroups and the retention sweep (KOC §1.1-§1.5, §2, §5.4).

A mixin: GroupCoordinatorShard (shard.py) holds the state these methods read (`groups`,
`offsets`, `table`, `txn`, `config`, `counters`); the member checks they share with the
membership APIs (`_validate_member`, `_schedule_heartbeat`) come from classic_group_ops.py.
Offsets change only by replay.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Hashable, Iterable

from ..records.offset_commit_value import OffsetCommitValue, decode_offset_commit_value, offset_commit_value_bytes
from ..records.offsets import GroupMetadataKey, OffsetCommitKey, decode_key, encode_key, offset_commit_key
from .config import GroupCoordinatorConfig
from .errors import (
    COORDINATOR_NOT_AVAILABLE, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, ILLEGAL_GENERATION,
    INVALID_GROUP_ID, NON_EMPTY_GROUP, NONE, OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID, UNSTABLE_OFFSET_COMMIT,
)
from .group import ClassicGroup, ClassicGroupMember, GroupState
from .metrics import CoordinatorCounters
from .offsets_table import OffsetsTable
from .result import CoordinatorResult
from .txn_offsets import PendingTxnOffsets

if TYPE_CHECKING:
    from .consumer_group_ops import ConsumerGroupOperations
    from .share_group_ops import ShareGroupOperations
    from .timers import Timers

log = logging.getLogger("offsetd.coordinator")

S = GroupState
TopicPartition = tuple[str, int]
FetchRow = tuple[int, int, int, str]  # partition, offset, leader epoch, metadata
EXPIRY_WARNING_MS = 24 * 3600 * 1000  # a log warning this long before a group's offsets expire


def metadata_length(metadata: str | None) -> int:
    """Length as Java's String.length(): UTF-16 code units (§1.1 step 10)."""
    if metadata is None:
        return 0
    return len(metadata) if metadata.isascii() else len(metadata.encode("utf-16-le")) // 2


def _commit_time(value: OffsetCommitValue) -> int:
    """An offset's own commit time (what a consumer group's retention counts from)."""
    return value.commit_timestamp


def _nothing(topic: str) -> bool:
    """No topic is subscribed (an Empty classic group)."""
    return False


def _tp(key: bytes) -> TopicPartition:
    k = decode_key(key)
    return k.topic, k.partition  # type: ignore[union-attr]


class OffsetOperations:
    """Offset APIs of one shard (mixed into GroupCoordinatorShard)."""

    config: GroupCoordinatorConfig
    counters: CoordinatorCounters
    groups: dict[str, ClassicGroup]
    offsets: dict[str, dict[bytes, bytes]]
    table: OffsetsTable
    txn: PendingTxnOffsets
    timers: "Timers"
    group_retention_ms: dict[str, int]
    _unreplayed: dict[bytes, int]
    _expiry_warned: set[str]
    consumer: "ConsumerGroupOperations"
    share: "ShareGroupOperations"

    def _validate_member(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        raise NotImplementedError

    def _schedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember, now: int) -> None:
        raise NotImplementedError

    # ======================================================================= offsets

    def _validate_commit(self, group: ClassicGroup | None, member_id: str, instance_id: str | None,
                         generation: int, version: int, transactional: bool = False) -> int:
        """§1.1 steps 7-8: the OffsetCommit result matrix, first match wins. A transactional
        commit (§1.2, KIP-447) gets 22 for a missing group in every version, and skips the
        "no member info in a non-empty group" and the CompletingRebalance rules."""
        if group is None:
            if generation < 0:
                return NONE
            return GROUP_ID_NOT_FOUND if version >= 9 and not transactional else ILLEGAL_GENERATION
        if group.state is S.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is S.EMPTY:
            return NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return ILLEGAL_GENERATION
        elif group.state is not S.EMPTY and not transactional:
            return UNKNOWN_MEMBER_ID
        if group.state is S.COMPLETING_REBALANCE and not transactional:
            return REBALANCE_IN_PROGRESS
        return NONE

    def commit_offsets(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                       generation: int, offsets: list[tuple[str, int, int, int, str | None]],
                       retention_time_ms: int, version: int, now: int) -> CoordinatorResult:
        """OffsetCommit (§1.1). `offsets` is (topic, partition, offset, leader_epoch, metadata[,
        commit_timestamp]) for partitions the API layer found to exist; the response maps
        (topic, partition) to an error."""
        result = CoordinatorResult(replay=True)
        if group_id is None:
            return result.respond(token, {(t, p): INVALID_GROUP_ID for t, p, *_ in offsets})
        group = self.groups.get(group_id)
        consumer = self.consumer.groups.get(group_id)
        if group_id in self.share.groups:  # a share group keeps no committed offsets (Kafka's 69)
            error = GROUP_ID_NOT_FOUND
        elif consumer is not None:  # a consumer group's members and epochs (B7)
            error = consumer.validate_offset_commit(member_id, generation, version)
        else:
            error = self._validate_commit(group, member_id, instance_id, generation, version)
        if error:
            return result.respond(token, {(t, p): error for t, p, *_ in offsets})
        if group is not None and group.is_in(S.STABLE, S.PREPARING_REBALANCE) and member_id in group.members:
            self._schedule_heartbeat(group, group.members[member_id], now)
        expire = now + retention_time_ms if retention_time_ms != -1 else -1
        errors: dict[TopicPartition, int] = {}
        limit = self.config.metadata_max_bytes
        records, written = result.records, self.table.written
        # The hot path of every commit: records go out encoded (no key or value objects), each
        # key marked written in the table at once.
        for row in offsets:
            if len(row) == 5:
                topic, partition, offset, epoch, metadata = row
                committed_at = now
            else:  # an OffsetCommit v1 commit timestamp replaces now unless it is -1 (§1.1 step 11)
                topic, partition, offset, epoch, metadata, stamp = row
                committed_at = now if stamp == -1 else stamp
            if metadata and metadata_length(metadata) > limit:
                errors[(topic, partition)] = OFFSET_METADATA_TOO_LARGE
                continue
            errors[(topic, partition)] = NONE
            key = offset_commit_key(group_id, topic, partition)
            written(key)
            records.append((key, offset_commit_value_bytes(offset, epoch, metadata, committed_at, expire)))
        self.counters.offset_commits += len(records)
        self._expiry_warned.discard(group_id)
        return result.respond(token, errors)

    def txn_offset_commit(self, token: Hashable, group_id: str | None, member_id: str, instance_id: str | None,
                          generation: int, offsets: list[tuple[str, int, int, int, str | None]],
                          producer_id: int, producer_epoch: int, now: int) -> CoordinatorResult:
        """TxnOffsetCommit (§1.2, reference A5): `offsets` is (topic, partition, offset,
        leader_epoch, metadata) for partitions that exist; v0-2 requests carry generation -1,
        member "" and no instance id. The records are written as one transactional batch of
        (producer_id, producer_epoch) and stay pending until its marker (§5.4). The response
        maps (topic, partition) to an error."""
        result = CoordinatorResult(replay=True, producer_id=producer_id, producer_epoch=producer_epoch)
        if not group_id:  # unlike OffsetCommit, "" is rejected too
            return result.respond(token, {(t, p): INVALID_GROUP_ID for t, p, *_ in offsets})
        consumer = self.consumer.groups.get(group_id)
        if group_id in self.share.groups:  # a share group keeps no committed offsets (Kafka's 69)
            error = GROUP_ID_NOT_FOUND
        elif consumer is not None:
            error = consumer.validate_offset_commit(member_id, generation, -1, transactional=True)
        else:
            error = self._validate_commit(self.groups.get(group_id), member_id, instance_id, generation, -1,
                                          transactional=True)
        if error:
            return result.respond(token, {(t, p): error for t, p, *_ in offsets})
        errors: dict[TopicPartition, int] = {}
        limit = self.config.metadata_max_bytes
        for topic, partition, offset, epoch, metadata in offsets:
            if metadata_length(metadata) > limit:
                errors[(topic, partition)] = OFFSET_METADATA_TOO_LARGE
                continue
            errors[(topic, partition)] = NONE
            result.records.append((OffsetCommitKey(group_id, topic, partition), OffsetCommitValue(
                offset=offset, leader_epoch=epoch, metadata=metadata or "", commit_timestamp=now,
                expire_timestamp=-1)))
        return result.respond(token, errors)

    def fetch_stable_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                             ) -> list[tuple[str, list[tuple[int, int, int, str, int]]]]:
        """OffsetFetch with require_stable (§1.3, §5.4): fetch_offsets' rows with an error each;
        a partition with a pending transactional offset is (-1, -1, "", UNSTABLE_OFFSET_COMMIT).
        A whole-group fetch lists the group's pending-only partitions too (as 88)."""
        pending = {_tp(key) for key in self.txn.pending_keys(group_id)}
        rows = self.fetch_offsets(group_id, topics)
        if topics is None and pending:
            by_topic = {topic: dict((row[0], row) for row in parts) for topic, parts in rows}
            for topic, partition in pending:
                by_topic.setdefault(topic, {})[partition] = (partition, -1, -1, "")
            rows = sorted((topic, sorted(parts.values())) for topic, parts in by_topic.items())
        return [(topic, [(p, -1, -1, "", UNSTABLE_OFFSET_COMMIT) if (topic, p) in pending else (p, o, e, m, NONE)
                         for p, o, e, m in parts]) for topic, parts in rows]

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, int, int, str]]]]:
        """OffsetFetch (§1.3) for one group: [(topic, [(partition, offset, epoch, metadata)])];
        unknown groups and partitions give -1/-1/"" (no GROUP_ID_NOT_FOUND for classic groups)."""
        group = self.groups.get(group_id)
        stored = self.offsets.get(group_id, {}) if group is not None and group.state is not S.DEAD else {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
            for key, raw in stored.items():
                k = decode_key(key)
                value = decode_offset_commit_value(raw)
                by_topic.setdefault(k.topic, []).append(  # type: ignore[union-attr]
                    (k.partition, value.offset, value.leader_epoch, value.metadata))  # type: ignore[union-attr]
            return sorted((topic, sorted(rows)) for topic, rows in by_topic.items())
        answer = []
        for topic, partitions in topics:
            rows = []
            for partition in partitions:
                raw = stored.get(encode_key(OffsetCommitKey(group_id, topic, partition)))
                if raw is None:
                    rows.append((partition, -1, -1, ""))
                else:
                    value = decode_offset_commit_value(raw)
                    rows.append((partition, value.offset, value.leader_epoch, value.metadata))
            answer.append((topic, rows))
        return answer

    def committed_partitions(self, group_id: str) -> list[TopicPartition]:
        """(topic, partition) of every offset the group has committed."""
        return [(k.topic, k.partition) for k in map(decode_key, self.offsets.get(group_id, {}))]  # type: ignore[union-attr]

    def has_open_transaction(self, group_id: str) -> bool:
        """Whether a transactional offset of the group waits for its marker (§5.4)."""
        return self.txn.has_open_transaction(group_id)

    def pending_partitions(self, group_id: str) -> list[TopicPartition]:
        """(topic, partition) of every pending transactional offset of the group, sorted."""
        return sorted(_tp(key) for key in self.txn.pending_keys(group_id))

    # ======================================================================= deletion

    def delete_groups(self, token: Hashable, group_ids: list[str]) -> CoordinatorResult:
        """DeleteGroups (§1.5): Empty groups get offset tombstones (committed offsets, then
        partitions with only a pending transactional offset) then a group tombstone."""
        result = CoordinatorResult(replay=True)
        errors: dict[str, int] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            consumer = self.consumer.groups.get(group_id)
            share = self.share.groups.get(group_id)
            if consumer is not None or share is not None:  # B7, share groups alike: 68 unless Empty
                errors[group_id] = NON_EMPTY_GROUP if (consumer or share).members else NONE  # type: ignore[union-attr]
            elif group is None or group.state is S.DEAD:
                errors[group_id] = GROUP_ID_NOT_FOUND
            elif group.state is not S.EMPTY:
                errors[group_id] = NON_EMPTY_GROUP
            else:
                errors[group_id] = NONE
            if errors[group_id] == NONE:
                committed = self.offsets.get(group_id, {})
                for key in [*committed, *(k for k in self.txn.pending_keys(group_id) if k not in committed)]:
                    # committed offsets, then pending-only partitions: each gets one tombstone
                    topic, partition = _tp(key)
                    result.records.append((OffsetCommitKey(group_id, topic, partition), None))
                if consumer is not None:
                    result.records.extend(consumer.group_tombstones())
                if share is not None:
                    result.records.extend(share.group_tombstones())
                if group is not None:
                    result.records.append((GroupMetadataKey(group_id), None))
        return result.respond(token, errors)

    def delete_offsets(self, token: Hashable, group_id: str | None,
                       topics: list[tuple[str, list[int]]]) -> CoordinatorResult:
        """OffsetDelete (§1.4, §3): {error_code, topics: {topic: {partition: error}}}."""
        result = CoordinatorResult(replay=True)
        if not group_id:
            return result.respond(token, {"error_code": INVALID_GROUP_ID, "topics": {}})
        group = self.groups.get(group_id)
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:  # a consumer group refuses its subscribed topics (B7)
            is_subscribed: Callable[[str], bool] = consumer.subscribed_topics().__contains__
        elif group is None or group.state is S.DEAD or group_id in self.share.groups:
            return result.respond(token, {"error_code": GROUP_ID_NOT_FOUND, "topics": {}})
        elif group.state is not S.EMPTY and group.protocol_type != "consumer":
            return result.respond(token, {"error_code": NON_EMPTY_GROUP, "topics": {}})
        else:
            is_subscribed = group.is_subscribed_to_topic if group.state is not S.EMPTY else _nothing
        stored = self.offsets.get(group_id, {})
        answer: dict[str, dict[int, int]] = {}
        for topic, partitions in topics:
            subscribed = is_subscribed(topic)
            answer[topic] = {}
            for partition in partitions:
                if subscribed:
                    answer[topic][partition] = GROUP_SUBSCRIBED_TO_TOPIC
                    continue
                answer[topic][partition] = NONE
                key = OffsetCommitKey(group_id, topic, partition)
                raw_key = encode_key(key)
                if raw_key in stored or raw_key in self.txn.keys:  # committed, or only pending (§1.4)
                    result.records.append((key, None))
        self.counters.offset_deletions += len(result.records)
        return result.respond(token, {"error_code": NONE, "topics": answer})

    # ==================================================================== expiration

    def retention_ms(self, group_id: str) -> int:
        """The group's offsets retention: its own setting, else offsets.retention.minutes."""
        return self.group_retention_ms.get(group_id, self.config.retention_ms)

    def _expiry_base(self, group: ClassicGroup) -> Callable[[OffsetCommitValue], int] | None:
        """§2 ClassicGroup.offsetExpirationCondition: the time retention counts from, or None
        when nothing of this group may expire now."""
        if not group.protocol_type:  # simple (standalone) group: each offset by its own commit
            return lambda value: value.commit_timestamp
        if group.state is S.EMPTY:  # all offsets together, retention after the group emptied
            since = group.state_timestamp
            return (lambda value: since) if since != -1 else (lambda value: value.commit_timestamp)
        if (group.protocol_type == "consumer" and group.state is S.STABLE
                and group.subscribed_topics is not None):  # KIP-496: unsubscribed topics only
            return lambda value: value.commit_timestamp
        return None

    def expiry_times(self, group_id: str) -> dict[TopicPartition, int | None]:
        """When each committed offset of the group will expire if nothing changes (ms), or None
        for "not while the group stays as it is" (subscribed, rebalancing, or retention -1).
        The sweep uses the same answer: an offset expires once now >= its time (inclusive)."""
        stored = self.offsets.get(group_id)
        rule = self.expiry_rule(group_id)
        if rule is None or not stored:
            return {}
        times: dict[TopicPartition, int | None] = {}
        for key, raw in stored.items():
            k = decode_key(key)
            times[(k.topic, k.partition)] = rule(key, k.topic, decode_offset_commit_value(raw))  # type: ignore[union-attr]
        return times

    def expiry_rule(self, group_id: str) -> Callable[[bytes, str, OffsetCommitValue], int | None] | None:
        """expiry_times for one offset at a time: (key bytes, its topic, its decoded value) -> when
        it expires, or None. For readers that keep decoded offsets of their own (the lag view);
        None when the group does not exist."""
        group = self.groups.get(group_id)
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:  # each offset by its commit time; subscribed topics never (B7)
            base: Callable[[OffsetCommitValue], int] | None = _commit_time
            is_subscribed: Callable[[str], bool] = consumer.subscribed_topics().__contains__
        elif group is not None:
            base = self._expiry_base(group)
            is_subscribed = group.is_subscribed_to_topic
        else:
            return None
        retention = self.retention_ms(group_id)

        def expires(key: bytes, topic: str, value: OffsetCommitValue) -> int | None:
            if (base is None or is_subscribed(topic) or key in self._unreplayed
                    or key in self.txn.keys):  # a pending transactional offset keeps it (§2 step 1.3)
                return None
            if value.expire_timestamp != -1:  # explicit retention from OffsetCommit v2-v4 wins
                return value.expire_timestamp
            return None if retention < 0 else base(value) + retention
        return expires

    def expire_offsets(self, now: int, group_ids: Iterable[str]) -> CoordinatorResult:
        """One chunk of the retention sweep (§2): tombstones for expired offsets, and a group
        tombstone for an Empty group left with no offsets. The shell calls this for bounded
        chunks of `self.groups` so a large shard never stalls the event loop."""
        result = CoordinatorResult(replay=True)
        warn: list[tuple[str, int, int]] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            consumer = self.consumer.groups.get(group_id)
            if group is None and consumer is None:
                continue
            times = self.expiry_times(group_id)
            expired = [tp for tp, at in times.items() if at is not None and now >= at]
            for topic, partition in expired:
                result.records.append((OffsetCommitKey(group_id, topic, partition), None))
            self.counters.offset_expirations += len(expired)
            if expired:
                log.info("group %s: %d offsets expired", group_id, len(expired))
            # an empty group left with no offsets goes (a consumer group's records in Kafka's order)
            empty = not consumer.members if consumer is not None else (
                group is not None and group.state is S.EMPTY and not group.pending_members)
            if len(expired) == len(times) and empty and not self.txn.has_open_transaction(group_id):
                if consumer is not None:
                    result.records.extend(consumer.group_tombstones())
                if group is not None:
                    result.records.append((GroupMetadataKey(group_id), None))
                self._expiry_warned.discard(group_id)
                continue
            upcoming = [at for tp, at in times.items() if at is not None and now < at]
            if upcoming and min(upcoming) - now <= EXPIRY_WARNING_MS and group_id not in self._expiry_warned:
                self._expiry_warned.add(group_id)
                warn.append((group_id, len(upcoming), min(upcoming)))
        if len(warn) <= 5:  # a handful by name; a crowd in one line, never thousands of lines
            for group_id, count, first in warn:
                log.warning("group %s: %d offsets will expire within a day (first at %d ms since epoch)",
                            group_id, count, first)
        else:
            log.warning("%d groups have offsets expiring within a day, e.g. %s", len(warn),
                        ", ".join(g for g, _, _ in warn[:5]))
        return result

    def on_partitions_deleted(self, topic: str, partitions: Iterable[int]) -> CoordinatorResult:
        """Tombstones for every group's offsets on deleted partitions, with no retention wait,
        including offsets whose commit is still being written (their tombstone follows it) and
        pending transactional ones (§2)."""
        result = CoordinatorResult(replay=True)
        doomed = set(partitions)
        keys = {key for stored in self.offsets.values() for key in stored} | set(self._unreplayed) | set(self.txn.keys)
        for key in keys:
            k = decode_key(key)
            if k.topic == topic and k.partition in doomed:  # type: ignore[union-attr]
                result.records.append((k, None))  # type: ignore[arg-type]
        return result


