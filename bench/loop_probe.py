"""How long a broker's event loop stalls, as a client sees it: a child process sends a small request
(FindCoordinator v4) every few ms on its own connection and reports when each was sent and how long
its answer took; the slowest answer to a probe sent during some other request is how long every
other client waited meanwhile. A process, not a thread, so the bench decoding a large answer does
not hold the probe back (the GIL); `time.monotonic` is one clock for both processes on Linux.
Also: waiting for a seeded broker's offsets load (what the scale benches start from)."""

from __future__ import annotations

import multiprocessing
import queue
import time
from typing import Any

from bench.brokers import BrokerLauncher
from bench.workload_steps import percentile

PROBE_INTERVAL_S = 0.005


def _probe(bootstrap: str, interval_s: float, stopping: Any, samples: Any) -> None:
    """Child process: FindCoordinator every interval_s until told to stop; (sent at, seconds to the answer) each."""
    from kio.index import load_request_schema

    from bench.raw_client import RawConnection

    conn = RawConnection(bootstrap, timeout=600)
    body = load_request_schema(10, 4)(key_type=0, coordinator_keys=("probe",))
    while not stopping.is_set():
        sent = time.monotonic()
        conn.call(10, 4, body)
        samples.put((sent, time.monotonic() - sent))
        time.sleep(interval_s)
    conn.close()


class LoopProbe:
    """The probing child process and the samples it reported."""

    def __init__(self, bootstrap: str, interval_s: float = PROBE_INTERVAL_S) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with client threads
        self._stopping = context.Event()
        self._queue: Any = context.Queue()
        self._process = context.Process(target=_probe, args=(bootstrap, interval_s, self._stopping, self._queue),
                                        daemon=True)
        self.samples: list[tuple[float, float]] = []

    def start(self) -> None:
        self._process.start()

    def worst(self, start: float, end: float, timeout_s: float = 600.0) -> tuple[float, float]:
        """(max, median) in ms of the answers to probes sent in [start, end), once a probe sent at
        `end` or later has answered (the one held up longest answers only after the stall)."""
        deadline = time.monotonic() + timeout_s
        while not self.samples or self.samples[-1][0] < end:
            try:
                self.samples.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise TimeoutError("the probe stopped answering") from None
        rtts = sorted(rtt * 1000 for sent, rtt in self.samples if start <= sent < end) or [0.0]
        return rtts[-1], percentile(rtts, 50)

    def stop(self) -> None:
        self._stopping.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def wait_for_load(broker: BrokerLauncher, timeout_s: float) -> float:
    """Seconds from the process start until the broker logs its offsets load."""
    log = broker.workdir / "broker.log"  # type: ignore[operator]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if b"loaded __consumer_offsets:" in log.read_bytes():
            return time.monotonic() - broker.started_at  # type: ignore[operator]
        time.sleep(0.5)
    raise TimeoutError("the broker did not log its offsets load")
