"""A partition's leader-epoch history (KIP-101, KIP-320): from which offset on each leader epoch
wrote, and the `leader-epoch-checkpoint` text Kafka keeps it in.

Sans-IO: the history is plain data, changed by `assign` (a new leader epoch, or a batch of a newer
epoch appended), `truncate_from_end` (the log lost its tail) and `truncate_from_start` (retention
or a new log start); `end_offset_for` answers OffsetForLeaderEpoch and a Fetch's divergence check
as Kafka does. The file format (Kafka's, so its tools read it): a version line `0`, a count line,
then one `epoch startOffset` line per epoch, oldest first. Reading and writing the file is the
caller's (storage/partition_log.py).
"""

from __future__ import annotations

from bisect import bisect_right

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0

EpochEntry = tuple[int, int]  # (leader epoch, start offset)


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition, both strictly increasing."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self.assign(epoch, start)

    @property
    def entries(self) -> list[EpochEntry]:
        """The history, oldest epoch first."""
        return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch known, UNDEFINED_EPOCH when the history is empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` writes from `start_offset` on; True when the history changed.

        Entries that would break monotonicity (an epoch at least as new, or a start at least as
        late, as the new one) are dropped first: the new entry is the truth about the log's tail.
        Negative epochs (batches written without one) are not history."""
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log now ends at `end_offset`: epochs starting there or later are gone."""
        changed = False
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: the epoch holding it starts there, older ones go."""
        keep = bisect_right(self._starts, start_offset) - 1  # the last entry starting at or before it
        if keep < 0 or (keep == 0 and self._starts[0] == start_offset):
            return False
        del self._epochs[:keep]
        del self._starts[:keep]
        self._starts[0] = start_offset
        return True

    def clear(self) -> None:
        """Forget everything (the log was emptied and restarted)."""
        self._epochs.clear()
        self._starts.clear()

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote `offset`, UNDEFINED_EPOCH when it is older than the history."""
        index = bisect_right(self._starts, offset) - 1
        return self._epochs[index] if index >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEntry:
        """(epoch, end offset) for a requested `epoch`, as Kafka answers it: the latest epoch ends at
        the log end; an older one ends where the next newer epoch starts, reported under the
        newest epoch not above the requested one (or the requested one itself when it is older
        than the whole history); an unknown newer epoch, or UNDEFINED_EPOCH, gives
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)  # the first entry of a newer epoch
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end = self._starts[higher]
        return (self._epochs[higher - 1] if higher > 0 else epoch), end

    # ----------------------------------------------------------------- the checkpoint file

    def to_checkpoint(self) -> str:
        """The `leader-epoch-checkpoint` text of this history."""
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines.extend(f"{epoch} {start}" for epoch, start in zip(self._epochs, self._starts))
        return "\n".join(lines) + "\n"

    @classmethod
    def from_checkpoint(cls, text: str) -> "LeaderEpochCache":
        """Parse a `leader-epoch-checkpoint`; ValueError when it is not one (wrong version, a
        count that does not match, a line that is not two integers)."""
        lines = text.splitlines()
        if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise ValueError("not a version 0 leader-epoch-checkpoint")
        count = int(lines[1])
        body = [line for line in lines[2:] if line.strip()]
        if count != len(body):
            raise ValueError(f"leader-epoch-checkpoint announces {count} entries, holds {len(body)}")
        entries: list[EpochEntry] = []
        for line in body:
            epoch, start = line.split()
            entries.append((int(epoch), int(start)))
        return cls(entries)
