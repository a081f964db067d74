"""The health of one log directory (`log.dirs`), and the error a failed write becomes.

A failed append or flush has already been undone by the partition log (nothing of it is in
memory or, as far as the OS lets us, on disk). What is left to decide is whether the directory
can still be trusted:

* EMFILE / ENFILE (out of file descriptors): yes, and the request is answered KAFKA_STORAGE_ERROR;
  a file could not be opened, nothing was written.
* ENOSPC / EDQUOT (a full disk or quota): yes. The write was cut back to the last good end, so
  the log is exactly what was acknowledged; writes are refused with KAFKA_STORAGE_ERROR until
  space is freed, then succeed again without a restart.
* Anything else (EIO, EROFS, a failed fsync, an undo that could not cut the file back): no.
  After a failed fsync the kernel may already have dropped the dirty pages it could not write,
  so what the files hold is unknowable. The directory goes offline, as Kafka takes a failed log
  directory offline: its partitions answer KAFKA_STORAGE_ERROR, the rest of the broker keeps
  serving, and a restart (which recovers the logs from disk) brings it back.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

__all__ = ["KAFKA_STORAGE_ERROR", "LogDirectory", "NotLeader", "StorageError"]

log = logging.getLogger("offsetd.storage")

KAFKA_STORAGE_ERROR = 56
# Errors that say "no room", not "the device lies": the directory stays online.
_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
# Out of file descriptors: an open failed, nothing was written or lost; never takes a directory offline.
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


class StorageError(Exception):
    """A write to a partition log failed and was undone, or its directory is offline."""

    error_code = KAFKA_STORAGE_ERROR


class NotLeader(Exception):
    """This broker does not lead the partition (cluster mode): NOT_LEADER_OR_FOLLOWER."""

    error_code = 6


class LogDirectory:
    """Online / offline state and failure counts of one log directory, shared by its logs."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offline_reason: str | None = None
        self.failed_writes = 0  # every failed append or flush, for the metrics
        self._failing = 0  # failures since the last successful write (one log line per episode)

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None

    def check(self) -> None:
        """Raise StorageError when the directory is offline (no write is attempted then)."""
        if self.offline_reason is not None:
            raise StorageError(f"log directory {self.path} is offline since {self.offline_reason}; "
                               "restart the broker once the device is fixed")

    def succeeded(self) -> None:
        """A write went through: ends a run of out-of-space failures (and says so once)."""
        if self._failing:
            log.warning("log directory %s: writes succeed again after %d failed", self.path, self._failing)
            self._failing = 0

    def failed(self, exc: OSError, what: str, *, undone: bool = True) -> StorageError:
        """Record a failed write (`what` names it) and return the error to raise. `undone` is
        False when cutting the log back failed too: then even a full disk takes it offline."""
        self.failed_writes += 1
        self._failing += 1
        if exc.errno in _OUT_OF_DESCRIPTORS:
            if self._failing == 1:
                log.error("log directory %s: %s failed: %s; raise `ulimit -n` or lower log.max.open.files",
                          self.path, what, exc)
            return StorageError(f"{what} failed: {exc.strerror or exc}")
        if exc.errno in _OUT_OF_SPACE and undone:
            if self._failing == 1:
                log.error("log directory %s: %s failed: %s; refusing writes until space is freed", self.path,
                          what, exc)
            return StorageError(f"{what} failed: {exc.strerror or exc}")
        if self.offline_reason is None:
            self.offline_reason = f"{what} failed: {exc}"
            log.error("log directory %s is now OFFLINE: %s failed: %s%s; its partitions answer "
                      "KAFKA_STORAGE_ERROR until the broker is restarted", self.path, what, exc,
                      "" if undone else " (and could not be cut back)")
        return StorageError(f"{what} failed: {exc.strerror or exc}; log directory {self.path} is offline")
