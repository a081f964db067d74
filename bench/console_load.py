"""Console page load for a big group: one real broker, a topic of 100 partitions, a group that
made 10,000 commits (100 rounds of a commit covering every partition, records produced between
rounds so the lag moves), then:

* the API answers the group page reads (`/v1/lag?group=`, `/v1/groups/{g}/history` at the default
  600 points and at 300, about what the page asks for on a 1400 px wide window): wall ms and the
  broker's CPU ms per answer (from /proc), median of `--repeat`;
* the whole page in headless Chromium (tests/console_browser.py): from navigation to the
  partition table, both charts and the history drawn, median of `--repeat`.

    .venv/bin/python bench/console_load.py [--partitions 100] [--rounds 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from console_browser import Browser  # noqa: E402

from offsetd.dev.broker import BrokerProcess  # noqa: E402
from offsetd.dev.proc_stats import cpu_s  # noqa: E402

_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")
GROUP = "bench-console"
TOPIC = "bench-console-orders"


def cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far (ms)."""
    return 1000 * (cpu_s(pid) or 0.0)


def fill(bootstrap: str, partitions: int, rounds: int, per_round: int) -> int:
    """The topic, its records and the group's commits (partitions x rounds); returns commits made."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    produced = [0] * partitions
    commits = 0
    for r in range(rounds):
        for p in range(partitions):
            for _ in range(per_round):
                producer.produce(TOPIC, b"x" * 100, partition=p)
            produced[p] += per_round
        producer.flush(30)
        # Each partition's consumer is behind by a different, changing amount.
        offsets = [TopicPartition(TOPIC, p, max(0, produced[p] - (p * 7 + r * 3) % (3 * per_round)))
                   for p in range(partitions)]
        consumer.commit(offsets=offsets, asynchronous=False)
        commits += partitions
    consumer.close()
    return commits


def timed_get(url: str, pid: int) -> tuple[float, float, int]:
    """(wall ms, broker CPU ms, bytes) of one GET."""
    cpu, start = cpu_ms(pid), time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000, cpu_ms(pid) - cpu, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=10, help="records produced per partition per round")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="console-load-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"metrics.listener": "http://127.0.0.1:0",
                                                     "group.initial.rebalance.delay.ms": "0"}).start()
        try:
            deadline = time.monotonic() + 20
            while not (match := _LISTENING.search(broker.log())):
                if time.monotonic() > deadline:
                    raise SystemExit("the broker did not log its metrics URL")
                time.sleep(0.05)
            url = match.group(1)
            started = time.perf_counter()
            commits = fill(broker.bootstrap, args.partitions, args.rounds, args.per_round)
            print(f"filled: {args.partitions} partitions, {commits} commits in {time.perf_counter() - started:.1f} s")
            results: dict[str, list[tuple[float, float, int]]] = {}
            for name, path in (("lag", f"/v1/lag?group={GROUP}"), ("history", f"/v1/groups/{GROUP}/history"),
                               ("history300", f"/v1/groups/{GROUP}/history?points=300")):
                results[name] = [timed_get(url + path, broker.pid) for _ in range(args.repeat)]
            history = json.loads(urllib.request.urlopen(f"{url}/v1/groups/{GROUP}/history", timeout=60).read())
            assert sum(p["commit_count"] for p in history["partitions"]) == commits, "history lost commits"
            for name, rows in results.items():
                print(f"GET {name:10s} wall {statistics.median(r[0] for r in rows):7.1f} ms   broker CPU "
                      f"{statistics.median(r[1] for r in rows):7.1f} ms   {rows[0][2] / 1024:7.1f} KiB")
            with Browser(Path(tmp) / "chromium") as browser:
                loads = []
                for _ in range(args.repeat):
                    browser.goto("about:blank")
                    start = time.perf_counter()
                    browser.goto(f"{url}/console/#/group/{GROUP}")
                    browser.wait_for(f"document.querySelectorAll('#partitions tbody tr').length === {args.partitions}"
                                     " && document.querySelector('#lag-chart svg path.series')"
                                     " && document.querySelector('#time-chart svg')", timeout=60, interval=0.01)
                    loads.append((time.perf_counter() - start) * 1000)
                assert browser.errors == [], browser.errors
            print(f"page load (navigation to table + charts drawn): median {statistics.median(loads):.0f} ms, "
                  f"max {max(loads):.0f} ms over {len(loads)}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
