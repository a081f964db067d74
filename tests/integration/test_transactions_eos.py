"""Exactly-once consume-transform-produce through real clients (confluent-kafka, aiokafka,
kafka-python 3.0) against a real broker: the application (tests/txn_app.py, a subprocess) is
killed with SIGKILL mid-transaction, or frozen with SIGSTOP and resumed as a zombie; a new
instance with the same transactional.id fences the old one and finishes the work; a
read_committed reader of the output sees each input exactly once and the group's committed
offsets count every input."""

from __future__ import annotations

import signal

import pytest

from clients import create_topic
from txn_clients import BROKER_OVERRIDES, TxnApp, committed_offsets, end_offsets, fill_input, read_topic

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CLIENTS = ["confluent", "aiokafka", "kafka-python"]
PARTITIONS = 2
PER_PARTITION = 150
INPUTS = PARTITIONS * PER_PARTITION


def _setup(broker, name: str) -> tuple[str, str, set[bytes]]:
    """Input (filled) and output topics for one test."""
    in_topic, out_topic = f"{name}-in", f"{name}-out"
    create_topic(broker.bootstrap, in_topic, partitions=PARTITIONS)
    create_topic(broker.bootstrap, out_topic, partitions=PARTITIONS)
    return in_topic, out_topic, fill_input(broker.bootstrap, in_topic, PARTITIONS, PER_PARTITION)


def _app(client: str, broker, in_topic: str, out_topic: str, name: str, hold_after: int | None = None) -> TxnApp:
    return TxnApp(client, broker.bootstrap, in_topic, out_topic, group=f"{name}-group", txn_id=f"{name}-txn",
                  inputs=INPUTS, per_txn=20, hold_after=hold_after)


def _assert_exactly_once(broker, out_topic: str, name: str, keys: set[bytes], aborted: int) -> None:
    """read_committed: every input once, transformed, in its input's partition; read_uncommitted:
    also the `aborted` records; the group committed every input; no transaction left open."""
    committed = read_topic(broker.bootstrap, out_topic, PARTITIONS, committed=True)
    assert sorted(k for _, k, _ in committed) == sorted(keys)
    assert all(v == (b"value-" + k)[::-1] and p == int(k.split(b"-")[0]) for p, k, v in committed)
    everything = read_topic(broker.bootstrap, out_topic, PARTITIONS, committed=False)
    assert len(everything) == INPUTS + aborted
    assert committed_offsets(broker.bootstrap, f"{name}-group", f"{name}-in", PARTITIONS) == \
        {p: PER_PARTITION for p in range(PARTITIONS)}
    assert end_offsets(broker.bootstrap, out_topic, PARTITIONS, committed=True) == \
        end_offsets(broker.bootstrap, out_topic, PARTITIONS, committed=False)


def _assert_lso_held_back(broker, topic: str, held: int) -> None:
    """The open transaction's records are all below the high watermarks and at or above the
    last stable offsets (it is the only open one and nothing follows it)."""
    lso = end_offsets(broker.bootstrap, topic, PARTITIONS, committed=True)
    hw = end_offsets(broker.bootstrap, topic, PARTITIONS, committed=False)
    assert sum(hw.values()) - sum(lso.values()) == held > 0, (hw, lso, held)


@pytest.mark.parametrize("client", CLIENTS)
def test_app_killed_mid_transaction_then_replaced(broker_factory, client):
    """kill -9 with a transaction open (records acknowledged, offsets not sent); the next
    instance's init aborts it and carries on from the last committed offsets."""
    broker = broker_factory(BROKER_OVERRIDES)
    name = f"kill-{client}"
    in_topic, out_topic, keys = _setup(broker, name)
    first = _app(client, broker, in_topic, out_topic, name, hold_after=3)
    second = None
    try:
        held = int(first.wait_line("IN_TXN").split()[1])
        assert len([ln for ln in first.lines if ln.startswith("COMMITTED ")]) == 3
        _assert_lso_held_back(broker, out_topic, held)
        first.kill9()
        second = _app(client, broker, in_topic, out_topic, name)
        assert second.wait_line("DONE", timeout=90) == f"DONE {INPUTS}"
        assert second.wait_exit() == 0
        _assert_exactly_once(broker, out_topic, name, keys, aborted=held)
    finally:
        first.close()
        if second is not None:
            second.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_zombie_resumed_after_sigstop_is_fenced(broker_factory, client):
    """The old instance is frozen (SIGSTOP) with a transaction open; a new one with the same
    transactional.id takes over and finishes; the old one resumed (SIGCONT) tries to commit
    its transaction and gets a fencing error, and nothing of its transaction is visible."""
    broker = broker_factory(BROKER_OVERRIDES)
    name = f"zombie-{client}"
    in_topic, out_topic, keys = _setup(broker, name)
    zombie = _app(client, broker, in_topic, out_topic, name, hold_after=3)
    second = None
    try:
        held = int(zombie.wait_line("IN_TXN").split()[1])
        _assert_lso_held_back(broker, out_topic, held)
        zombie.signal(signal.SIGSTOP)
        second = _app(client, broker, in_topic, out_topic, name)
        assert second.wait_line("DONE", timeout=90) == f"DONE {INPUTS}"
        assert second.wait_exit() == 0
        zombie.signal(signal.SIGCONT)
        zombie.say("commit")
        result = zombie.wait_line("RESULT", timeout=60)
        assert result.startswith("RESULT FENCED "), result
        _assert_exactly_once(broker, out_topic, name, keys, aborted=held)
    finally:
        zombie.close()
        if second is not None:
            second.close()
