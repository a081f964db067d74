"""The broker killed with SIGKILL in the middle of a consume-transform-produce transaction
(tests/txn_app.py with confluent-kafka, records produced and offsets sent, EndTxn not sent), or
right after commit_transaction returned, and restarted on the same data: the transaction is then
either complete or aborted, never partly visible to read_committed, and an OffsetFetch with
require_stable never returns its pending offsets."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from broker_process import wait_for
from clients import create_topic
from txn_clients import BROKER_OVERRIDES, TxnApp, committed_offsets, end_offsets, fill_input, read_topic

PARTITIONS = 2
PER_PARTITION = 100
INPUTS = PARTITIONS * PER_PARTITION
COMMITS_BEFORE = 2
#: The app's transaction.timeout.ms where the broker is to abort it (the broker checks every 200 ms).
TIMEOUT_MS = 3000
OVERRIDES = {**BROKER_OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


class Scenario:
    """Topics, the app holding its third transaction open (offsets sent), and what it saw."""

    def __init__(self, broker, name: str, txn_timeout_ms: int = 60000) -> None:
        self.broker, self.name = broker, name
        self.input, self.output, self.group = f"{name}-in", f"{name}-out", f"{name}-group"
        create_topic(broker.bootstrap, self.input, partitions=PARTITIONS)
        create_topic(broker.bootstrap, self.output, partitions=PARTITIONS)
        self.keys = fill_input(broker.bootstrap, self.input, PARTITIONS, PER_PARTITION)
        self.app = TxnApp("confluent", broker.bootstrap, self.input, self.output, self.group, f"{name}-txn",
                          INPUTS, per_txn=20, hold_after=COMMITS_BEFORE, hold_with_offsets=True,
                          txn_timeout_ms=txn_timeout_ms)
        committed = [ln for ln in self._lines_until("IN_TXN") if ln.startswith("COMMITTED ")]
        assert len(committed) == COMMITS_BEFORE
        self.before = _all_partitions(TxnApp.positions(committed[-1]))
        self.held_line = self.app.lines[-1]
        self.held = int(self.held_line.split()[1])
        self.pending = _all_partitions(TxnApp.positions(self.held_line))
        assert _count(self.pending) - _count(self.before) == self.held > 0

    def _lines_until(self, prefix: str) -> list[str]:
        self.app.wait_line(prefix)
        return self.app.lines

    def offsets(self, require_stable: bool) -> dict[int, int | str]:
        return committed_offsets(self.broker.bootstrap, self.group, self.input, PARTITIONS, require_stable)

    def visible(self) -> list[tuple[int, bytes, bytes]]:
        """The output as read_committed reads it, checked to hold the held transaction's
        records all or none: returns it."""
        records = read_topic(self.broker.bootstrap, self.output, PARTITIONS, committed=True)
        assert len({k for _, k, _ in records}) == len(records), "a record twice"
        assert len(records) in (_count(self.before), _count(self.pending)), \
            f"{len(records)} records visible: neither before ({self.before}) nor after ({self.pending}) the txn"
        return records

    def check_offsets_never_pending(self) -> dict[int, int | str]:
        """OffsetFetch without require_stable shows the last committed offsets; with it, each
        partition is the committed offset or UNSTABLE_OFFSET_COMMIT, never the pending one
        unless that is committed too."""
        plain = self.offsets(require_stable=False)
        stable = self.offsets(require_stable=True)
        for p in range(PARTITIONS):
            assert plain[p] in (self.before[p], self.pending[p]), (plain, self.before, self.pending)
            assert stable[p] in (plain[p], "UNSTABLE_OFFSET_COMMIT"), (stable, plain)
        return stable

    def close(self) -> None:
        self.app.close()


def _all_partitions(positions: dict[int, int]) -> dict[int, int]:
    """Positions of every input partition (-1001, librdkafka's "none", where none was committed)."""
    return {p: positions.get(p, -1001) for p in range(PARTITIONS)}


def _count(positions: dict[int, int]) -> int:
    """Input records consumed up to `positions` (the input's offsets start at 0, no gaps)."""
    return sum(max(o, 0) for o in positions.values())


def _records_of(records: list[tuple[int, bytes, bytes]]) -> dict[int, int]:
    """How many output records each partition holds."""
    return {p: sum(1 for q, _, _ in records if q == p) for p in range(PARTITIONS)}


def _consumer_committed(s: Scenario, timeout: float) -> dict[int, int]:
    """committed() of a read_committed confluent-kafka consumer of the group (OffsetFetch with
    require_stable; librdkafka retries UNSTABLE_OFFSET_COMMIT until `timeout`)."""
    consumer = Consumer({"bootstrap.servers": s.broker.bootstrap, "group.id": s.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(s.input, p) for p in range(PARTITIONS)], timeout=timeout)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


def _stable(s: Scenario) -> bool:
    """Nothing open on the output (LSO = HW) and no pending offsets (require_stable answers). Not
    check_offsets_never_pending(): while the markers land, its two fetches may see the offset
    before (plain) and after (stable) the commit."""
    lso = end_offsets(s.broker.bootstrap, s.output, PARTITIONS, committed=True)
    hw = end_offsets(s.broker.bootstrap, s.output, PARTITIONS, committed=False)
    return lso == hw and "UNSTABLE_OFFSET_COMMIT" not in s.offsets(require_stable=True).values()


def test_broker_killed_before_end_txn_then_committed(broker_factory):
    """kill -9 with the transaction open (records and offsets pending); after the restart it
    is still open (LSO held back, offsets pending), and the app's commit_transaction completes
    it: all its records and its offsets, at once."""
    broker = broker_factory(OVERRIDES)
    s = Scenario(broker, "crash-open-commit")
    try:
        broker.kill9()
        broker.start()
        assert len(s.visible()) == _count(s.before)
        # every partition the transaction sent an offset for is pending (librdkafka sends each
        # assigned partition's position, changed or not)
        assert s.check_offsets_never_pending() == \
            {p: "UNSTABLE_OFFSET_COMMIT" if s.pending[p] >= 0 else s.before[p] for p in range(PARTITIONS)}
        lso = end_offsets(broker.bootstrap, s.output, PARTITIONS, committed=True)
        hw = end_offsets(broker.bootstrap, s.output, PARTITIONS, committed=False)
        assert sum(hw.values()) - sum(lso.values()) == s.held
        # a read_committed consumer's committed() (require_stable) waits rather than answer
        with pytest.raises(KafkaException) as raised:
            _consumer_committed(s, timeout=2.0)
        assert raised.value.args[0].code() == KafkaError._TIMED_OUT
        s.app.say("commit")
        assert s.app.wait_line("RESULT", timeout=60) == "RESULT COMMITTED"
        wait_for(lambda: _stable(s), timeout=30, message="the commit's markers")
        records = s.visible()
        assert _records_of(records) == {p: max(s.pending[p], 0) for p in range(PARTITIONS)}
        assert s.offsets(require_stable=True) == s.pending
        assert _consumer_committed(s, timeout=15.0) == s.pending
    finally:
        s.close()


def test_broker_killed_before_end_txn_then_timed_out(broker_factory):
    """kill -9 with the transaction open, and the app dies too: after the restart the broker
    aborts the transaction when its timeout passes; none of its records is ever visible and
    the group keeps the offsets committed before it."""
    broker = broker_factory(OVERRIDES)
    s = Scenario(broker, "crash-open-timeout", txn_timeout_ms=TIMEOUT_MS)
    try:
        s.app.kill9()
        broker.kill9()
        broker.start()

        def aborted() -> bool:
            assert len(s.visible()) == _count(s.before)
            return _stable(s)

        wait_for(aborted, timeout=30, message="the timeout's abort")
        assert _records_of(s.visible()) == {p: max(s.before[p], 0) for p in range(PARTITIONS)}
        assert s.offsets(require_stable=True) == s.before
        everything = read_topic(broker.bootstrap, s.output, PARTITIONS, committed=False)
        assert len(everything) == _count(s.before) + s.held
    finally:
        s.close()


@pytest.mark.parametrize("restart", ["kill9", "sigterm"])
def test_broker_killed_right_after_commit(broker_factory, restart):
    """commit_transaction returned, then the broker is killed at once (or stopped cleanly):
    after the restart the transaction is complete (markers re-sent from PrepareCommit if they
    were not all written): all records visible, the offsets committed."""
    broker = broker_factory(OVERRIDES)
    s = Scenario(broker, f"crash-after-commit-{restart}")
    try:
        s.app.say("commit")
        assert s.app.wait_line("RESULT", timeout=60) == "RESULT COMMITTED"
        if restart == "kill9":
            broker.kill9()
        else:
            broker.stop()
        broker.start()
        s.check_offsets_never_pending()
        s.visible()
        wait_for(lambda: _stable(s), timeout=30, message="the commit's markers")
        assert _records_of(s.visible()) == {p: max(s.pending[p], 0) for p in range(PARTITIONS)}
        assert s.offsets(require_stable=True) == s.pending
    finally:
        s.close()
