"""Log lines that a flood must not turn into a flood of lines: at most `per_second` lines a
second, the rest counted and summed up in one line when the next second begins. A storm of
garbage connections costs the event loop a counter increment each, not a formatted log record."""

from __future__ import annotations

import logging
import time
from typing import Callable


class LogLimiter:
    """Rate-limited logging of one kind of event on `logger`."""

    def __init__(self, logger: logging.Logger, per_second: int, what: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.clock = clock
        self.per_second = per_second
        self.what = what  # e.g. "connections closed": names the suppressed lines in the summary
        self._second = 0
        self._logged = 0
        self._suppressed = 0

    def log(self, level: int, msg: str, *args: object) -> None:
        if not self.logger.isEnabledFor(level):
            return
        second = int(self.clock())
        if second != self._second:
            if self._suppressed:
                self.logger.warning("... and %d more %s in the last %d s (not logged one by one)",
                                    self._suppressed, self.what, max(second - self._second, 1))
            self._second, self._logged, self._suppressed = second, 0, 0
        if self._logged < self.per_second:
            self._logged += 1
            self.logger.log(level, msg, *args)
        else:
            self._suppressed += 1
