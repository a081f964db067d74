"""A real `offsetd serve` process for integration tests (offsetd.dev.broker's, at the log level
$OFFSETD_TEST_LOG_LEVEL): started on a free port with a temp data dir, restartable (same port and
data), killable with SIGKILL, pausable with SIGSTOP, its log kept for assertions."""

from __future__ import annotations

import os
import time

from offsetd.dev.broker import BrokerProcess as _BrokerProcess


def wait_for(condition, timeout: float = 10.0, interval: float = 0.02, message: str = "condition"):
    """Poll `condition()` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class BrokerProcess(_BrokerProcess):
    """One broker subprocess; `bootstrap` is its address."""

    log_level = os.environ.get("OFFSETD_TEST_LOG_LEVEL", "INFO")
