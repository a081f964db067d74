"""ShareCoordinatorShard: the sans-IO share coordinator of one `__share_group_state` partition.

It keeps, per share-partition (group, topic id, partition), the window its leader persisted:
state epoch, leader epoch, start offset and the state batches. Operations answer with an error
code and the records to append; state changes only through `replay()`, which the loader calls
too, so a broker that takes the partition over rebuilds the same state from the log.

Rules (reference share-groups.md §5):
* Initialize writes a fresh ShareSnapshot (snapshot epoch = previous + 1, or 0).
* Write appends a ShareUpdate until `snapshot_update_records` updates follow the last snapshot,
  then a merged ShareSnapshot with the next snapshot epoch.
* Read with a higher leader epoch writes an update carrying it.
* Delete writes a tombstone of the ShareSnapshot key.
* Fencing: a leader epoch below the recorded one is FENCED_LEADER_EPOCH; a write or initialize
  with a lower state epoch is FENCED_STATE_EPOCH; a share-partition never initialized is
  INVALID_REQUEST for read and write.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from ..records.share_state_records import (
    SHARE_SNAPSHOT, SHARE_UPDATE, ShareSnapshotValue, ShareStateKey, ShareUpdateValue, StateBatch, decode_key,
    decode_value, encode_key, encode_value,
)
from .state_batches import combine

NONE = 0
INVALID_REQUEST = 42
FENCED_LEADER_EPOCH = 74
FENCED_STATE_EPOCH = 124

SharePartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)
Record = tuple[bytes, bytes | None]               # (key, value or None for a tombstone)


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """What the coordinator holds for one share-partition: the replay of its snapshot and the
    updates after it."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1
    updates_since_snapshot: int = 0


class ShareCoordinatorShard:
    """The share-partitions whose state lives in one `__share_group_state` partition."""

    def __init__(self, partition: int, snapshot_update_records: int = 500) -> None:
        self.partition = partition
        self.snapshot_update_records = snapshot_update_records
        self.states: dict[SharePartitionKey, SharePartitionState] = {}

    # ---------------------------------------------------------------------------- replay

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of the log: a snapshot replaces the state, an update merges into it,
        a tombstone of the snapshot key forgets the share-partition."""
        k = decode_key(key)
        sp = (k.group_id, k.topic_id, k.partition)
        v = decode_value(k, value)
        if v is None:
            if k.record_type == SHARE_SNAPSHOT:
                self.states.pop(sp, None)
            return
        if isinstance(v, ShareSnapshotValue):
            self.states[sp] = SharePartitionState(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                                                  v.create_timestamp, v.write_timestamp, v.state_batches,
                                                  v.delivery_complete_count)
            return
        state = self.states.get(sp)
        if state is None:
            return  # an update without its snapshot (cut off by retention): nothing to merge into
        start = state.start_offset if v.start_offset == -1 else v.start_offset
        self.states[sp] = replace(
            state, leader_epoch=v.leader_epoch, start_offset=start,
            state_batches=combine(state.state_batches, v.state_batches, start),
            delivery_complete_count=(state.delivery_complete_count if v.delivery_complete_count == -1
                                     else v.delivery_complete_count),
            updates_since_snapshot=state.updates_since_snapshot + 1)

    # ---------------------------------------------------------------------------- operations

    def initialize(self, sp: SharePartitionKey, state_epoch: int, start_offset: int, now_ms: int
                   ) -> tuple[int, list[Record]]:
        """InitializeShareGroupState: a fresh snapshot at `start_offset` (-1: the leader applies
        share.auto.offset.reset when it first reads it). A known start offset starts the count of
        records done past it at 0, so the lag is known at once (-1 otherwise), as Kafka does."""
        state = self.states.get(sp)
        if state is not None and state_epoch < state.state_epoch:
            return FENCED_STATE_EPOCH, []
        snapshot = ShareSnapshotValue(0 if state is None else state.snapshot_epoch + 1, state_epoch,
                                      -1 if state is None else state.leader_epoch, start_offset, now_ms, now_ms, (),
                                      0 if start_offset >= 0 else -1)
        return NONE, [self._record(SHARE_SNAPSHOT, sp, snapshot)]

    def read(self, sp: SharePartitionKey, leader_epoch: int) -> tuple[int, SharePartitionState | None, list[Record]]:
        """ReadShareGroupState by a (new) leader: the state, and a record when the epoch moved on."""
        state = self.states.get(sp)
        if state is None:
            return INVALID_REQUEST, None, []
        if leader_epoch < state.leader_epoch:
            return FENCED_LEADER_EPOCH, None, []
        if leader_epoch == state.leader_epoch:
            return NONE, state, []
        update = ShareUpdateValue(state.snapshot_epoch, leader_epoch, -1, ())
        return NONE, state, [self._record(SHARE_UPDATE, sp, update)]

    def write(self, sp: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: tuple[StateBatch, ...], now_ms: int, delivery_complete_count: int = -1
              ) -> tuple[int, list[Record]]:
        """WriteShareGroupState from the leader: the changed batches (start offset -1: unchanged)."""
        state = self.states.get(sp)
        if state is None:
            return INVALID_REQUEST, []
        if leader_epoch < state.leader_epoch:
            return FENCED_LEADER_EPOCH, []
        if state_epoch < state.state_epoch:
            return FENCED_STATE_EPOCH, []
        if state.updates_since_snapshot < self.snapshot_update_records:
            update = ShareUpdateValue(state.snapshot_epoch, leader_epoch, start_offset, batches,
                                      delivery_complete_count)
            return NONE, [self._record(SHARE_UPDATE, sp, update)]
        start = state.start_offset if start_offset == -1 else start_offset
        complete = state.delivery_complete_count if delivery_complete_count == -1 else delivery_complete_count
        snapshot = ShareSnapshotValue(state.snapshot_epoch + 1, state.state_epoch, leader_epoch, start,
                                      state.create_timestamp, now_ms, combine(state.state_batches, batches, start),
                                      complete)
        return NONE, [self._record(SHARE_SNAPSHOT, sp, snapshot)]

    def delete(self, sp: SharePartitionKey) -> tuple[int, list[Record]]:
        """DeleteShareGroupState (the group or the topic is gone): a tombstone of the snapshot key."""
        if sp not in self.states:
            return NONE, []
        return NONE, [(encode_key(ShareStateKey(SHARE_SNAPSHOT, *sp)), None)]

    @staticmethod
    def _record(record_type: int, sp: SharePartitionKey, value: ShareSnapshotValue | ShareUpdateValue) -> Record:
        return encode_key(ShareStateKey(record_type, *sp)), encode_value(value)
