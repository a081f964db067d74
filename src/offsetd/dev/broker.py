"""A real `offsetd serve` subprocess, for tests and `python -m offsetd.dev.cluster`: started with
config overrides, ready once it prints its listening line (waited on with a deadline, not a
blocking read), restartable on the same port and data, stoppable by SIGTERM, SIGKILL or SIGSTOP."""

from __future__ import annotations

import os
import re
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

_LISTENING = re.compile(r"listening on [^:]+:(\d+)")


class LineReader:
    """Lines of a child's pipe read against a deadline (select on the raw descriptor: a blocking
    readline would wait for ever on a child that hangs without printing)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.pipe = pipe
        self.eof = False
        self._pending = b""  # bytes read but not yet a whole line

    @property
    def closed(self) -> bool:
        """Whether rest() has been called (the pipe is closed)."""
        return self.pipe.closed

    def readline(self, deadline: float) -> str | None:
        """The next line (with its newline), or None at EOF (`eof` set) or when `deadline`
        (time.monotonic()) passes."""
        fd = self.pipe.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.eof = True
                return None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    def rest(self) -> list[str]:
        """Every line still to come, up to EOF (the child has exited or is exiting); closes the pipe."""
        data = self._pending + self.pipe.read()
        self._pending = b""
        self.pipe.close()
        return [line + "\n" for line in data.decode(errors="replace").splitlines()]


class BrokerProcess:
    """One broker subprocess; `bootstrap` is its address. Its stderr (the log) goes to `log_path`
    (beside the data dir), its stdout lines to `stdout_lines`."""

    log_level = "INFO"  # --log-level of the started broker

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *, config: Path | None = None,
                 start_new_session: bool = False, open_file_limit: int | None = None) -> None:
        self.data_dir = data_dir
        # RLIMIT_NOFILE (soft and hard) of the child, to try the broker at a small `ulimit -n`
        self.open_file_limit = open_file_limit
        self.overrides = dict(overrides or {})
        self.config = config
        # a new session keeps a terminal's Ctrl-C away from the broker (the dev cluster stops it itself)
        self.start_new_session = start_new_session
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.stdout_lines: list[str] = []
        self._stdout: LineReader | None = None
        self._log: IO[str] | None = None

    @property
    def bootstrap(self) -> str:
        """host:port of its listener (known once started)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process id of the running broker."""
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        """Start it and wait until it listens; the port of the first start is kept for restarts.
        AssertionError (with the log's tail) if it exits first or does not listen in time."""
        return self.launch().wait_listening(timeout)

    def launch(self) -> "BrokerProcess":
        """Start the process without waiting (wait_listening() next): several brokers boot at once."""
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "offsetd.cli", "serve", *([str(self.config)] if self.config else []),
               "--log-level", self.log_level]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        self._log = open(self.log_path, "a")
        limit = self.open_file_limit
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, bufsize=0,
                                     start_new_session=self.start_new_session,
                                     preexec_fn=None if limit is None else
                                     lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        assert self.proc.stdout is not None
        self._stdout = LineReader(self.proc.stdout)
        return self

    def wait_listening(self, timeout: float = 20.0) -> "BrokerProcess":
        """Wait for the launched broker's listening line (its port is then known)."""
        assert self.proc is not None and self._stdout is not None and self._log is not None
        deadline = time.monotonic() + timeout
        while True:
            line = self._stdout.readline(deadline)
            if line is None:
                if self.proc.poll() is not None or self._stdout.eof:
                    self._log.close()
                    raise AssertionError(f"broker exited early (rc={self.proc.wait()}): {self.log()[-2000:]}")
                raise AssertionError(f"broker did not report listening within {timeout}s: {self.log()[-2000:]}")
            self.stdout_lines.append(line)
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                return self

    def log(self) -> str:
        """Everything the broker logged so far (all its starts)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        """Whether the process runs (a SIGSTOPped one too)."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: a clean shutdown (a SIGSTOPped broker is continued to receive it)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)
        rc = self.proc.wait(timeout)
        self._finish()
        return rc

    def kill9(self) -> None:
        """SIGKILL: a crash with no chance to flush."""
        assert self.proc is not None
        self._signal(signal.SIGKILL)
        self.proc.wait(10)
        self._finish()

    def sigstop(self) -> None:
        """SIGSTOP: frozen (a long GC pause, a stuck VM) until sigcont()."""
        self._signal(signal.SIGSTOP)

    def sigcont(self) -> None:
        """SIGCONT: resume after sigstop()."""
        self._signal(signal.SIGCONT)

    def restart(self) -> "BrokerProcess":
        """Stop it (SIGTERM) if it runs, then start it again on the same port and data."""
        if self.alive():
            self.stop()
        return self.start()

    def _signal(self, signum: int) -> None:
        """Send `signum` unless the process is already gone."""
        assert self.proc is not None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def _finish(self) -> None:
        """After exit: keep the rest of stdout and close the log file."""
        if self._stdout is not None and not self._stdout.closed:
            self.stdout_lines.extend(self._stdout.rest())
        if self._log is not None:
            self._log.close()
