"""What a coordinator operation returns: records to append, and responses to deliver once the
records are durable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

from ..records.consumer_group_records import ConsumerGroupKey, ConsumerGroupValue
from ..records.group_metadata_value import GroupMetadataValue
from ..records.offset_commit_value import OffsetCommitValue
from ..records.offsets import GroupMetadataKey, OffsetCommitKey

Key = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey
Value = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | None  # None: tombstone
# (key, value) objects, or the pair already encoded (OffsetCommit's records: the commit path
# encodes each once, and the shell appends the bytes as they are)
Record = tuple[Key, Value] | tuple[bytes, bytes | None]

# A response body (a dict, or an operation's response dataclass such as the consumer-group
# heartbeat's), or a function computing it at delivery time (a read that must see the state after
# the writes it waited for): the shell tells them apart by `callable`.
Response = Any


@dataclass
class CoordinatorResult:
    """Records (appended atomically, in order) and (token, response) completions.

    `replay` tells the shell to replay the records after they are durable: true for offset
    records and tombstones; false for GroupMetadata values of live classic groups, whose
    in-memory state the state machine already holds (Kafka does the same), and for consumer-group
    records, which the operation replayed at once (a failed write resets and reloads the shard).
    `barrier` makes a result with no records still wait for every earlier pending write.
    `producer_id` >= 0 makes the records one transactional batch of (producer_id,
    producer_epoch), written on its own, pending until the producer's marker (KOC §5.4).
    `marker` (producer id, producer epoch, commit, coordinator epoch): a transaction marker
    the shell writes as its own control batch (ShardRuntime.write_marker); no records then.
    """

    records: list[Record] = field(default_factory=list)
    completions: list[tuple[Hashable, Response]] = field(default_factory=list)
    replay: bool = True
    barrier: bool = False
    producer_id: int = -1
    producer_epoch: int = -1
    marker: tuple[int, int, bool, int] | None = None

    def respond(self, token: Hashable, response: Response) -> "CoordinatorResult":
        self.completions.append((token, response))
        return self

    def merge(self, other: "CoordinatorResult") -> "CoordinatorResult":
        """Fold another result's records and completions into this one (same replay mode)."""
        self.records.extend(other.records)
        self.completions.extend(other.completions)
        return self
