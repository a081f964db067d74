"""A real `offsetd serve` process for integration tests: started on a free port with a temp data
dir, restartable (same port and data), killable with SIGKILL, its log kept for assertions."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on [^:]+:(\d+)")


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


class BrokerProcess:
    """One broker subprocess; `bootstrap` is its address."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.stdout_lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "offsetd.cli", "serve",
               "--log-level", os.environ.get("OFFSETD_TEST_LOG_LEVEL", "INFO")]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"broker exited early (rc={self.proc.wait()}): {self.log()[-2000:]}")
            self.stdout_lines.append(line)
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                return self
        raise AssertionError("broker did not report listening in time")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self._finish()
        return rc

    def kill9(self) -> None:
        """SIGKILL: a crash with no chance to flush."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._finish()

    def restart(self) -> "BrokerProcess":
        if self.alive():
            self.stop()
        return self.start()

    def _finish(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.stdout_lines.extend(self.proc.stdout.readlines())
            self.proc.stdout.close()
        self._log.close()
