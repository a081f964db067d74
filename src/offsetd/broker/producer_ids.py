"""Producer id allocation for InitProducerId, unique across restarts.

Ids are handed out from blocks of BLOCK_SIZE; the end of the current block is persisted before
any id in it is used, so a crash skips at most the rest of a block and never repeats an id.
"""

from __future__ import annotations

from pathlib import Path

from ..storage.durable_file import write_durably

BLOCK_SIZE = 1000


class ProducerIdManager:
    """Allocates producer ids from a persisted block counter in `<log.dirs>/producer-ids`."""

    def __init__(self, root: Path) -> None:
        self._path = root / "producer-ids"
        self._next = int(self._path.read_text().strip()) if self._path.exists() else 0
        self._block_end = self._next

    def allocate(self) -> int:
        """A fresh producer id."""
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            write_durably(self._path, f"{self._block_end}\n")
        pid = self._next
        self._next += 1
        return pid
