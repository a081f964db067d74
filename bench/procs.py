"""Run client code in spawned child processes, so clients don't share the harness' interpreter
(and its GIL) and several clients can run truly in parallel.

``spawn`` (not ``fork``) is used because the harness itself has loaded librdkafka, whose
background threads do not survive a fork.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any, TypeVar

T = TypeVar("T")

_CTX = mp.get_context("spawn")


class ChildError(RuntimeError):
    """A child raised, crashed, or missed its deadline. ``detail`` holds the child's
    traceback when there is one."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


def _child_main(results: Queue[Any], index: int, target: Callable[..., Any], args: tuple) -> None:
    try:
        results.put((index, True, target(*args)))
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put((index, False, traceback.format_exc()))


def run_in_children(
    target: Callable[..., T], args_list: Sequence[tuple], timeout_s: float
) -> list[T]:
    """Run ``target(*args)`` for each ``args`` in its own spawned process, all concurrently.

    Returns the results in the order of ``args_list``. ``target`` must be a module-level
    function and its arguments and result must be picklable. Raises :class:`ChildError` if a
    child raises, dies, or has not reported within ``timeout_s``; children still running
    then are killed. Timing belongs inside ``target`` (start-up of the interpreter is not
    part of any measurement).
    """
    results_q: Queue[Any] = _CTX.Queue()
    procs = [
        _CTX.Process(target=_child_main, args=(results_q, i, target, args), daemon=True)
        for i, args in enumerate(args_list)
    ]
    results: dict[int, T] = {}
    deadline = time.monotonic() + timeout_s
    try:
        for proc in procs:
            proc.start()
        while len(results) < len(procs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildError(f"{target.__name__}: no result within {timeout_s:.0f} s")
            try:
                index, ok, payload = results_q.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                for i, proc in enumerate(procs):
                    if i not in results and proc.exitcode not in (None, 0):
                        raise ChildError(
                            f"{target.__name__}: child {i} died with exit code {proc.exitcode}"
                        ) from None
                continue
            if not ok:
                last = next((ln for ln in reversed(payload.splitlines()) if ln.strip()), "?")
                raise ChildError(f"{target.__name__}: child {index} raised {last}", payload)
            results[index] = payload
    finally:
        for proc in procs:
            if proc.pid is None:
                continue  # never started
            proc.join(timeout=5 if len(results) == len(procs) else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        results_q.close()
    return [results[i] for i in range(len(procs))]


def start_barrier(parties: int) -> Barrier:
    """A barrier the children of one :func:`run_in_children` call can pass as an argument
    (it must come from the same spawn context), so their timed sections start together.
    Children should call ``barrier.wait(timeout)``: a missing party then breaks the barrier
    for everyone instead of hanging."""
    return _CTX.Barrier(parties)


def run_in_child(target: Callable[..., T], args: tuple, timeout_s: float) -> T:
    """:func:`run_in_children` for a single child."""
    return run_in_children(target, [args], timeout_s)[0]
