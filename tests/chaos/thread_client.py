"""One of harness.py's client threads, an idempotent producer or a committer, run in a process of
its own by the cluster chaos harness (cluster_workers.ThreadClientWorker): a librdkafka crash or
hang is then a client's, killed and started again, not the harness's (a segfault inside librdkafka
took the harness down twice when they ran in it). The thread's code is harness.py's; its History is
client_events.EventHistory, which sends each operation to the harness as event lines.

    python tests/chaos/thread_client.py --kind producer|committer --index I --process N --bootstrap B
        --topic T --commit-topic C --partitions P [--rate R] [--commit-interval S] [--metadata-bytes M]
        [--start-value V]

A line `stop` on stdin (or its end) stops it: the thread winds down within its timeouts.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import threading
from pathlib import Path

from client_events import EventHistory
from harness import ChaosConfig, ClientState, CommitWorker, ProducerWorker


def main() -> None:
    """Parse the arguments, run the client's work until stdin says stop."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=["producer", "committer"], required=True)
    for name in ("--index", "--process", "--partitions"):
        p.add_argument(name, type=int, required=True)
    for name in ("--bootstrap", "--topic", "--commit-topic"):
        p.add_argument(name, required=True)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--commit-interval", type=float, default=0.1)
    p.add_argument("--metadata-bytes", type=int, default=256)
    p.add_argument("--start-value", type=int, default=0, help="committer: the last value a previous process sent")
    a = p.parse_args()
    faulthandler.register(signal.SIGUSR1)  # the harness asks where a silent client hangs
    config = ChaosConfig(run_dir=Path("."), topic=a.topic, commit_topic=a.commit_topic, partitions=a.partitions,
                         producer_rate=a.rate, commit_interval=a.commit_interval, commit_metadata_bytes=a.metadata_bytes)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    history, state = EventHistory(a.metadata_bytes), ClientState()
    common = (history, 0, a.bootstrap, config, state, stop)
    if a.kind == "producer":
        worker: ProducerWorker | CommitWorker = ProducerWorker(a.index, *common)
        worker.name = f"p{a.index}-{a.process}"  # its producer instances (p0-2.1, ...) unique over processes
    else:
        worker = CommitWorker(a.index, *common)
        state.last_value[worker.group] = a.start_value  # values keep rising over processes
    worker.work()


if __name__ == "__main__":
    main()
