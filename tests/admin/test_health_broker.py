"""`group_health` against a real broker: commit histories scripted with confluent-kafka's
`Consumer.commit(offsets=..., asynchronous=False)` for a standalone group, read back from
`__consumer_offsets`, lags reconstructed with ListOffsets by timestamp, graded by Burrow's rules."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker_process import wait_for
from integration.clients import create_topic, produce
from integration.group_helpers import unique
from offsetd.admin.health import EvaluationConfig, Status, format_health, group_health, health_json


def _now_ms() -> int:
    return int(time.time() * 1000)


def _stamped(partition: int, count: int, timestamp: int) -> list[dict]:
    """`count` records for one partition, all with the given CreateTime."""
    return [{"partition": partition, "value": b"v", "timestamp": timestamp} for _ in range(count)]


def test_group_health_grades_scripted_commit_histories(broker):
    """Four partitions, three rounds of commits (every partition in every round, so each window
    spans the whole script):
    p0 catches up 20 -> 35 -> 50 (OK), p1 commits 5 three times (STALL), p2 advances 10 -> 12 -> 14
    while 10 new records arrive after each commit (WARN: lag 40, 48, 56), p3 goes 30 -> 40 -> 20
    (REWIND). The 50 initial records per partition are stamped a minute ago, so the LEO samples
    of 70-100 s ago are 0: the consumer was "recently caught up" and STOP cannot fire."""
    topic, group = unique("health"), unique("ghealth")
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic, partitions=4)
    minute_ago = _now_ms() - 60_000
    produce(bootstrap, topic, [r for p in range(4) for r in _stamped(p, 50, minute_ago)])

    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    rounds = [{0: 20, 1: 5, 2: 10, 3: 30}, {0: 35, 1: 5, 2: 12, 3: 40}, {0: 50, 1: 5, 2: 14, 3: 20}]
    try:
        for i, offsets in enumerate(rounds):
            committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            if i < len(rounds) - 1:
                # New records on p2, stamped after the commit just acknowledged; the next commit
                # waits until the clock has passed that stamp, so ListOffsets by the commit times
                # separates the batches exactly.
                stamp = _now_ms() + 1
                produce(bootstrap, topic, _stamped(2, 10, stamp))
                wait_for(lambda: _now_ms() > stamp, timeout=5, message="the clock to pass the record stamp")
    finally:
        committer.close()

    result = group_health({"bootstrap.servers": bootstrap}, group, 20, EvaluationConfig(min_distance_ms=0))

    assert result.error is None
    by_partition = {p.partition: p for p in result.partitions}
    assert {p: (h.current_offset, h.log_end_offset, h.lag, h.status) for p, h in by_partition.items()} == {
        0: (50, 50, 0, Status.OK),
        1: (5, 50, 45, Status.STALL),
        2: (14, 70, 56, Status.WARN),
        3: (20, 50, 30, Status.REWIND),
    }
    assert {p: [(c.offset, c.lag) for c in h.commits] for p, h in by_partition.items()} == {
        0: [(20, 30), (35, 15), (50, 0)],
        1: [(5, 45), (5, 45), (5, 45)],
        2: [(10, 40), (12, 48), (14, 56)],
        3: [(30, 20), (40, 10), (20, 30)],
    }
    assert all(h.complete == 0.3 and h.topic == topic for h in result.partitions)
    assert (result.status, result.total_lag, result.complete) == (Status.ERR, 131, 0.0)
    assert (result.max_lag.partition, result.max_lag.lag) == (2, 56)

    lines = format_health([result]).split("\n")
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "STATUS"]
    assert [line.split() for line in lines[2:6]] == [
        [group, topic, "0", "50", "50", "0", "OK"], [group, topic, "1", "5", "50", "45", "STALL"],
        [group, topic, "2", "14", "70", "56", "WARN"], [group, topic, "3", "20", "50", "30", "REWIND"]]
    assert lines[8].split() == [group, "ERR", "131", topic, "2", "56", "4", "0.00"]
    [doc] = health_json([result])
    assert (doc["status"], doc["max_lag"]["partition"], [p["status"] for p in doc["partitions"]]) == (
        "ERR", 2, ["OK", "STALL", "WARN", "REWIND"])


def test_group_health_only_counts_commits_since_the_offsets_were_deleted(broker):
    """A group deleted and committed again: the window holds only the commits after the offset
    tombstones, so the old history (a rewind) no longer counts."""
    topic, group = unique("health-del"), unique("ghealth-del")
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, _stamped(0, 20, _now_ms() - 60_000))
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    committer = Consumer(conf)
    for offset in (15, 5):
        committer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    committer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the future resolves
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
    committer = Consumer(conf)
    for offset in (6, 7):
        committer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    committer.close()

    result = group_health({"bootstrap.servers": bootstrap}, group, 20, EvaluationConfig(min_distance_ms=0))
    [partition] = result.partitions
    assert [(c.offset, c.lag) for c in partition.commits] == [(6, 14), (7, 13)]
    assert (partition.status, result.status) == (Status.OK, Status.OK)


def test_unknown_group_is_notfound(broker):
    result = group_health({"bootstrap.servers": broker.bootstrap}, unique("nobody"), 10)
    assert (result.status, result.partitions, result.error) == (Status.NOTFOUND, (), None)
    assert format_health([result]).split("\n")[2].split()[:2] == [result.group, "NOTFOUND"]


def test_unreachable_cluster_is_notfound_with_the_error():
    """No broker listening: NOTFOUND with the client's error, within the timeout, no exception."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    started = time.monotonic()
    result = group_health({"bootstrap.servers": f"127.0.0.1:{port}"}, "g", 2)
    assert result.status is Status.NOTFOUND
    assert result.error
    assert time.monotonic() - started < 10
