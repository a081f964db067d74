"""`offsetd transactions` (kafka-transactions.sh compatible). First without a broker: option rules
(every bad input is one line and exit 2 before any connection: the address below has nothing
listening), the tables in Kafka's columns, the find-hanging rule. Then against a real broker with
confluent-kafka transactional producers: list, describe, describe-producers, abort (by start
offset and by producer) making a read_committed reader advance, and find-hanging of a transaction
whose coordinator state was lost while the partition kept it open."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker_process import BrokerProcess, wait_for
from clients import consume_all, create_topic, produce
from integration.cluster_helpers import leader_of, wait_settled
from offsetd.admin.errors import ToolError
from offsetd.cli import main as offsetd_main
from offsetd.admin.transactions import (OpenTransaction, ProducerState, TopicPartition, TransactionDescription,
                                        TransactionListing, find_open_transaction, format_describe, format_hanging,
                                        format_list, format_producers, hanging_transactions, open_transactions)
from offsetd.admin.transactions_cli import main
from offsetd.admin.transactions_client import TxnCluster
from offsetd.records.offsets import partition_for

NOWHERE = "127.0.0.1:1"  # nothing listens: a test that reached the cluster would fail with exit 1


# --- option rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    ([], "Command must include exactly one action: list, describe, describe-producers, abort, find-hanging"),
    (["frobnicate"], "argument ACTION: invalid choice: 'frobnicate'"),
    (["describe"], "Missing required argument --transactional-id for describe"),
    (["describe-producers", "--topic", "t"], "Missing required argument --partition for describe-producers"),
    (["describe-producers", "--partition", "0"], "Missing required argument --topic for describe-producers"),
    (["describe-producers", "--topic", "t", "--partition", "-1"], "--partition must not be negative"),
    (["abort", "--topic", "t", "--partition", "0"],
     "abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"),
    (["abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "7"],
     "--start-offset cannot be used with --producer-id"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "7", "--producer-epoch", "0"],
     "Missing required argument --coordinator-epoch for abort (with --producer-id)"),
    (["abort", "--topic", "t", "--partition", "0", "--start-offset", "-2"], "--start-offset must not be negative"),
    (["find-hanging"], "find-hanging takes exactly one of --broker-id and --topic"),
    (["find-hanging", "--broker-id", "1", "--topic", "t"], "find-hanging takes exactly one of --broker-id and --topic"),
    (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition can only be used with --topic"),
    (["find-hanging", "--topic", "t", "--max-transaction-timeout", "0"],
     "--max-transaction-timeout must be a positive number of milliseconds"),
    (["list", "--duration-filter", "-1"], "--duration-filter must not be negative"),
    (["list", "--timeout", "0"], "--timeout must be a positive number of milliseconds"),
    (["describe", "--transactional-id", "x", "--start-offset", "1"], "unrecognized arguments: --start-offset 1"),
])
def test_bad_options_exit_2_with_one_line(capsys, argv: list[str], message: str) -> None:
    assert main(["--bootstrap-server", NOWHERE, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("offsetd transactions: " + message) and captured.err.count("\n") == 1


def test_bootstrap_server_is_required(capsys) -> None:
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "offsetd transactions: Missing required argument --bootstrap-server\n"


def test_connection_options_are_accepted_after_the_action(capsys) -> None:
    """Global options may follow the action; an unreachable cluster is exit 1 with one message."""
    assert main(["list", "--bootstrap-server", NOWHERE, "--timeout", "300"]) == 1
    assert capsys.readouterr().out.startswith(f"Error: Connecting to {NOWHERE} failed: ")


def test_command_config_must_be_readable(capsys, tmp_path) -> None:
    assert main(["--bootstrap-server", NOWHERE, "--command-config", str(tmp_path / "absent.properties"), "list"]) == 2
    assert capsys.readouterr().err == (f"offsetd transactions: Cannot read --command-config file "
                                       f"'{tmp_path / 'absent.properties'}': No such file or directory\n")


def test_offsetd_command_dispatches_to_the_tool(capsys) -> None:
    assert offsetd_main(["transactions", "--bootstrap-server", NOWHERE, "describe"]) == 2
    assert capsys.readouterr().err == "offsetd transactions: Missing required argument --transactional-id for describe\n"


def test_a_broker_without_the_api_is_named() -> None:
    cluster = TxnCluster.__new__(TxnCluster)
    cluster._versions = {0: (0, 12), 27: (1, 1)}
    cluster.require(27)
    with pytest.raises(ToolError, match=r"^The broker does not support DescribeProducers \(API key 61\)"):
        cluster.require(61)


# --- tables ------------------------------------------------------------------------------------------


def test_list_table() -> None:
    listings = [TransactionListing("orders-app", 1, 7, "Ongoing"), TransactionListing("a", 2, 12345, "CompleteCommit")]
    assert format_list(listings) == (
        "TransactionalId Coordinator ProducerId TransactionState\n"
        "a               2           12345      CompleteCommit\n"
        "orders-app      1           7          Ongoing\n")


def test_describe_table_with_and_without_a_transaction() -> None:
    ongoing = TransactionDescription(1, "app", 5, 3, "Ongoing", 60000, 1_000_000,
                                     (TopicPartition("t", 1), TopicPartition("b", 0)))
    assert format_describe(ongoing, 1_002_500) == (
        "CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState TransactionTimeoutMs "
        "CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions\n"
        "1             app             5          3             Ongoing          60000                "
        "1000000                       2500                  b-0,t-1\n")
    empty = TransactionDescription(1, "app", 5, 4, "CompleteCommit", 60000, -1, ())
    assert format_describe(empty, 1_002_500).splitlines()[1].split() == [
        "1", "app", "5", "4", "CompleteCommit", "60000", "None", "None"]


def test_producers_table() -> None:
    producers = [ProducerState(9, 0, 2, 1700000000123, -1, 2), ProducerState(4, 1, 10, 1700000000000, 0, -1)]
    assert format_producers(producers) == (
        "ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp "
        "CurrentTransactionStartOffset\n"
        "4          1             0                      10           1700000000000 None\n"
        "9          0             -1                     2            1700000000123 2\n")


def test_hanging_table_in_whole_minutes() -> None:
    hanging = [OpenTransaction(TopicPartition("orders", 3), ProducerState(77, 2, 4, 1000, 5, 120), 3_659_999)]
    assert format_hanging(hanging) == (
        "Topic  Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration(min)\n"
        "orders 3         77         2             5                120         1000          60\n")


# --- find-hanging rule ---------------------------------------------------------------------------------

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
NOW = 10_000_000


def _producer(pid: int, last_ms: int, start: int = 5, epoch: int = 0) -> ProducerState:
    return ProducerState(pid, epoch, 3, last_ms, 0, start)


def test_open_transactions_are_those_idle_longer_than_the_max_timeout() -> None:
    producers = {T0: [_producer(1, NOW - 901_000), _producer(2, NOW - 900_000), _producer(3, NOW - 2_000_000, start=-1)],
                 T1: [_producer(4, NOW - 5_000_000)]}
    found = open_transactions(producers, NOW, 900_000)
    assert [(c.partition, c.producer.producer_id, c.duration_ms) for c in found] == [
        (T0, 1, 901_000), (T1, 4, 5_000_000)]


@pytest.mark.parametrize("description, hanging", [
    (None, True),                                                                       # id unknown (105)
    (TransactionDescription(1, "x", 1, 0, "Ongoing", 60000, 1, (T0,)), False),          # still in the txn
    (TransactionDescription(1, "x", 1, 0, "PrepareAbort", 60000, 1, (T0,)), False),     # markers on their way
    (TransactionDescription(1, "x", 1, 0, "Ongoing", 60000, 1, (T1,)), True),           # another partition
    (TransactionDescription(1, "x", 1, 0, "CompleteAbort", 60000, -1, ()), True),       # coordinator is done
    (TransactionDescription(1, "x", 1, 0, "Empty", 60000, -1, ()), True),
    (TransactionDescription(1, "x", 2, 0, "Ongoing", 60000, 1, (T0,)), True),           # id has a new pid
])
def test_hanging_rule(description: TransactionDescription | None, hanging: bool) -> None:
    candidate = OpenTransaction(T0, _producer(1, 0), NOW)
    assert hanging_transactions([candidate], {1: "x"}, {"x": description}) == ([candidate] if hanging else [])


def test_a_producer_without_transactional_id_hangs() -> None:
    candidate = OpenTransaction(T0, _producer(1, 0), NOW)
    assert hanging_transactions([candidate], {}, {}) == [candidate]


def test_find_open_transaction_by_start_offset() -> None:
    producers = [_producer(1, 0, start=-1), _producer(2, 0, start=40), _producer(3, 0, start=41)]
    assert find_open_transaction(producers, 41) == producers[2]
    assert find_open_transaction(producers, 39) is None


# --- against a broker ------------------------------------------------------------------------------


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run(capsys, bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """`offsetd transactions --bootstrap-server B ARGV` in-process: (exit status, stdout, stderr)."""
    code = main(["--bootstrap-server", bootstrap, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, bootstrap: str, *argv: str) -> dict:
    code, out, err = run(capsys, bootstrap, "--output", "json", *argv)
    assert code == 0, err
    return json.loads(out)


def table(out: str) -> list[dict[str, str]]:
    """A text table as dicts by header (whitespace-separated; a missing last cell is "")."""
    lines = out.splitlines()
    headers = lines[0].split()
    return [dict(zip(headers, line.split() + [""] * (len(headers) - len(line.split())))) for line in lines[1:]]


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 1, **conf})
    producer.init_transactions(15)
    return producer


def send(producer: Producer, topic: str, values: list[str], partition: int = 0, timestamp: int = 0) -> None:
    """Produce and wait until the broker acknowledged every record."""
    errors: list = []
    for value in values:
        producer.produce(topic, value.encode(), partition=partition, timestamp=timestamp,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(15) == 0 and not errors, errors


def stable_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """ListOffsets LATEST under read_committed: the last stable offset."""
    tp = CkTopicPartition(topic, partition)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
    return futures[tp].result(15).offset


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txncli") / "data").start()
    yield proc
    if proc.alive():
        proc.stop()


def test_list_and_describe_an_open_then_committed_transaction(capsys, txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txl"), _unique("app")
    create_topic(bootstrap, topic, partitions=2)
    producer = txn_producer(bootstrap, txn_id)
    before = int(time.time() * 1000)
    producer.begin_transaction()
    send(producer, topic, ["a"], partition=0)
    send(producer, topic, ["b"], partition=1)

    code, out, err = run(capsys, bootstrap, "list")
    assert code == 0, err
    listed = {row["TransactionalId"]: row for row in table(out)}
    assert listed[txn_id]["TransactionState"] == "Ongoing"
    assert listed[txn_id]["Coordinator"] == "1"

    described = run_json(capsys, bootstrap, "describe", "--transactional-id", txn_id)
    assert described["state"] == "Ongoing" and described["coordinator_id"] == 1
    assert described["producer_id"] == int(listed[txn_id]["ProducerId"]) and described["producer_id"] >= 0
    assert described["transaction_timeout_ms"] == 60000
    assert before <= described["start_time_ms"] <= int(time.time() * 1000)
    assert described["duration_ms"] >= 0
    assert described["topic_partitions"] == [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
    code, out, _ = run(capsys, bootstrap, "describe", "--transactional-id", txn_id)
    assert code == 0 and table(out)[0]["TopicPartitions"] == f"{topic}-0,{topic}-1"

    # the duration filter (ListTransactions v1): an hour-long filter leaves the new transaction out
    assert txn_id not in {r["TransactionalId"] for r in table(run(capsys, bootstrap, "list", "--duration-filter",
                                                                  "3600000")[1])}
    assert txn_id in {r["TransactionalId"] for r in table(run(capsys, bootstrap, "list", "--duration-filter", "0")[1])}
    # the id pattern needs ListTransactions v2 (Kafka 4.1), which the broker does not offer
    code, out, _ = run(capsys, bootstrap, "list", "--transactional-id-pattern", "app-.*")
    assert code == 1 and "ListTransactions failed: UNSUPPORTED_VERSION: " in out and "ListTransactions v2" in out

    started = described["start_time_ms"]
    producer.commit_transaction(15)
    described = run_json(capsys, bootstrap, "describe", "--transactional-id", txn_id)
    # Kafka keeps the last transaction's start time in Complete* (only Empty has none)
    assert (described["state"], described["start_time_ms"], described["topic_partitions"]) == (
        "CompleteCommit", started, [])
    listed = {row["TransactionalId"]: row for row in table(run(capsys, bootstrap, "list")[1])}
    assert listed[txn_id]["TransactionState"] == "CompleteCommit"

    idle_id = _unique("idle")
    idle = txn_producer(bootstrap, idle_id)  # InitProducerId only: Empty, no start time, no partitions
    code, out, _ = run(capsys, bootstrap, "describe", "--transactional-id", idle_id)
    row = table(out)[0]
    assert code == 0 and (row["TransactionState"], row["CurrentTransactionStartTimeMs"], row["TransactionDurationMs"],
                          row["TopicPartitions"]) == ("Empty", "None", "None", "")
    del idle


def test_command_config_properties_are_used(capsys, txn_broker, tmp_path) -> None:
    """A Kafka client properties file (Java syntax; client.id overrides the tool's own) is read and
    given to the client."""
    config = tmp_path / "client.properties"
    config.write_text("# the tool's client\nclient.id=offsetd-txn-test\nrequest.timeout.ms = 9000\n")
    code, out, err = run(capsys, txn_broker.bootstrap, "--command-config", str(config), "list")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]


def test_describe_an_unknown_transactional_id(capsys, txn_broker) -> None:
    code, out, _ = run(capsys, txn_broker.bootstrap, "describe", "--transactional-id", _unique("nobody"))
    assert code == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND: The transactionalId could not be found." in out


def test_describe_producers_shows_the_open_transaction(capsys, txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txp"), _unique("app")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [{"value": b"plain0"}, {"value": b"plain1"}])  # not idempotent: no producer state
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    send(producer, topic, ["t0", "t1", "t2"])
    described = run_json(capsys, bootstrap, "describe", "--transactional-id", txn_id)

    code, out, err = run(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    assert code == 0, err
    assert table(out) == [{"ProducerId": str(described["producer_id"]), "ProducerEpoch": str(described["producer_epoch"]),
                           "LatestCoordinatorEpoch": "-1", "LastSequence": "2", "LastTimestamp": table(out)[0]["LastTimestamp"],
                           "CurrentTransactionStartOffset": "2"}]
    assert abs(int(table(out)[0]["LastTimestamp"]) - time.time() * 1000) < 60_000
    by_broker = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0", "--broker-id", "1")
    assert [p["current_transaction_start_offset"] for p in by_broker["producers"]] == [2]

    producer.commit_transaction(15)
    after = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0")["producers"]
    assert len(after) == 1 and after[0]["current_transaction_start_offset"] is None
    assert after[0]["coordinator_epoch"] >= 0  # the commit marker carried the coordinator's epoch

    code, out, _ = run(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0", "--broker-id", "9")
    assert code == 1 and "Broker 9 is not in the cluster" in out


def test_an_unknown_partition_fails_at_once(capsys, txn_broker) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION is an answer, not retried until --timeout (30 s here)."""
    topic = _unique("absent")
    for argv in (["describe-producers", "--topic", topic, "--partition", "0"],
                 ["abort", "--topic", topic, "--partition", "0", "--start-offset", "0"],
                 ["abort", "--topic", topic, "--partition", "0", "--producer-id", "1", "--producer-epoch", "0",
                  "--coordinator-epoch", "0"],
                 ["find-hanging", "--topic", topic]):
        started = time.monotonic()
        code, out, _ = run(capsys, txn_broker.bootstrap, "--timeout", "30000", *argv)
        assert (code, "UNKNOWN_TOPIC_OR_PARTITION: " in out) == (1, True), out
        assert time.monotonic() - started < 15


def _open_transaction(bootstrap: str, topic: str, txn_id: str) -> Producer:
    """Two plain records (offsets 0, 1), then an open transaction of three (offsets 2-4)."""
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [{"value": b"plain0"}, {"value": b"plain1"}])
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    send(producer, topic, ["t0", "t1", "t2"])
    assert stable_offset(bootstrap, topic) == 2
    return producer


def _assert_aborted(bootstrap: str, topic: str) -> None:
    """The marker (offset 5) moved the last stable offset to the log end, and a read_committed
    reader skips the aborted records."""
    assert wait_for(lambda: stable_offset(bootstrap, topic) == 6, message="LSO at the log end")
    produce(bootstrap, topic, [{"value": b"after"}])
    values = [m.value() for m in consume_all(bootstrap, topic, [0], 3, **{"isolation.level": "read_committed"})]
    assert values == [b"plain0", b"plain1", b"after"]


def test_abort_by_start_offset(capsys, txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txa"), _unique("app")
    producer = _open_transaction(bootstrap, topic, txn_id)
    code, out, _ = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
    assert code == 1 and f"Could not find any open transaction starting at offset 3 on partition {topic}-0" in out
    pid = run_json(capsys, bootstrap, "describe", "--transactional-id", txn_id)["producer_id"]

    code, out, err = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert code == 0, out + err
    assert out.startswith(f"Aborted the transaction of producer {pid} ")
    _assert_aborted(bootstrap, topic)
    producer.abort_transaction(15)  # the coordinator's own markers find no open transaction: harmless


def test_abort_by_producer(capsys, txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txb"), _unique("app")
    producer = _open_transaction(bootstrap, topic, txn_id)
    [state] = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0")["producers"]
    code, out, err = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", "0",
                         "--producer-id", str(state["producer_id"]), "--producer-epoch", str(state["producer_epoch"]),
                         "--coordinator-epoch", "0")
    assert code == 0, out + err
    _assert_aborted(bootstrap, topic)
    producer.abort_transaction(15)


def test_abort_with_a_stale_epoch_is_refused(capsys, txn_broker) -> None:
    """A second producer with the same transactional id fences the first (a higher epoch: Kafka
    aborts with epoch 1 and hands out 2); an abort naming epoch 0 is refused by the leader (INVALID_PRODUCER_EPOCH) and changes nothing."""
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txe"), _unique("app")
    create_topic(bootstrap, topic)
    first = txn_producer(bootstrap, txn_id)
    first.begin_transaction()
    send(first, topic, ["zombie"])  # offset 0; aborted (marker at 1) when the second producer starts
    second = txn_producer(bootstrap, txn_id)
    second.begin_transaction()
    send(second, topic, ["live"])  # offset 2
    [state] = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0")["producers"]
    assert state["producer_epoch"] >= 1 and state["current_transaction_start_offset"] == 2
    code, out, _ = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", "0", "--producer-id",
                       str(state["producer_id"]), "--producer-epoch", "0", "--coordinator-epoch", "0")
    assert code == 1
    assert out == (f"Error: Aborting the transaction of producer {state['producer_id']} on {topic}-0 failed: "
                   "INVALID_PRODUCER_EPOCH: Producer attempted to produce with an old epoch.\n")
    assert stable_offset(bootstrap, topic) == 2
    second.abort_transaction(15)


def test_find_hanging_skips_a_transaction_its_coordinator_knows(capsys, txn_broker) -> None:
    """An open transaction idle longer than --max-transaction-timeout (1 ms here) is a candidate,
    but its id lists the partition as Ongoing: not hanging (every step of the search runs)."""
    bootstrap = txn_broker.bootstrap
    topic, txn_id = _unique("txf"), _unique("app")
    create_topic(bootstrap, topic)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    send(producer, topic, ["old"])
    for argv in (["--topic", topic], ["--topic", topic, "--partition", "0"], ["--broker-id", "1"]):
        assert run_json(capsys, bootstrap, "find-hanging", *argv, "--max-transaction-timeout", "1") == {"hanging": []}
    code, out, _ = run(capsys, bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "1")
    assert (code, out.split()) == (0, ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                       "StartOffset", "LastTimestamp", "Duration(min)"])
    code, out, _ = run(capsys, bootstrap, "find-hanging", "--topic", topic, "--partition", "5")
    assert code == 1 and f"Partition {topic}-5 does not exist" in out
    producer.abort_transaction(15)


# A transactional producer in its own process: it opens a transaction on partition 0 (one record),
# prints "open" and waits to be killed.
_PRODUCER = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, topic, txn_id = sys.argv[1:4]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"hanging", partition=0)
    assert p.flush(15) == 0
    print("open", flush=True)
    sys.stdin.read()
""")


def test_find_and_abort_a_hanging_transaction(capsys, broker) -> None:
    """The coordinator loses a transaction the partition still holds open (its producer was
    killed, then the broker restarted without `__transaction_state`): find-hanging reports it,
    abort --start-offset ends it and read_committed readers move past it."""
    bootstrap = broker.bootstrap
    topic, txn_id = _unique("txh"), _unique("app")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [{"value": b"plain0"}, {"value": b"plain1"}])
    child = subprocess.Popen([sys.executable, "-c", _PRODUCER, bootstrap, topic, txn_id], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "open\n"
        [state] = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", "0")["producers"]
        assert state["current_transaction_start_offset"] == 2
    finally:
        child.kill()
        child.wait(10)
    broker.stop()
    state_dirs = list(Path(broker.data_dir).glob("__transaction_state-*"))
    assert state_dirs, sorted(p.name for p in Path(broker.data_dir).iterdir())
    for path in state_dirs:
        shutil.rmtree(path)
    broker.start()

    def hanging() -> list[dict]:
        code, out, _ = run(capsys, bootstrap, "--output", "json", "find-hanging", "--topic", topic,
                           "--max-transaction-timeout", "1")
        return json.loads(out)["hanging"] if code == 0 else []

    [found] = wait_for(hanging, timeout=20, message="find-hanging to report the transaction")
    assert (found["topic"], found["partition"], found["producer_id"], found["producer_epoch"]) == (
        topic, 0, state["producer_id"], state["producer_epoch"])
    assert found["current_transaction_start_offset"] == 2 and found["duration_ms"] > 1
    code, out, _ = run(capsys, bootstrap, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "1")
    rows = [r for r in table(out) if r["Topic"] == topic]
    assert code == 0 and [(r["Partition"], r["ProducerId"], r["StartOffset"], r["Duration(min)"]) for r in rows] == [
        ("0", str(state["producer_id"]), "2", "0")]
    # with the default maximum (15 minutes) a transaction opened seconds ago is not a candidate
    assert run_json(capsys, bootstrap, "find-hanging", "--topic", topic) == {"hanging": []}
    assert stable_offset(bootstrap, topic) == 2

    code, out, err = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert code == 0, out + err
    assert wait_for(lambda: stable_offset(bootstrap, topic) == 4, message="LSO past the marker")
    assert hanging() == []
    produce(bootstrap, topic, [{"value": b"after"}])
    values = [m.value() for m in consume_all(bootstrap, topic, [0], 3, **{"isolation.level": "read_committed"})]
    assert values == [b"plain0", b"plain1", b"after"]


# --- on three brokers (cluster mode on PostgreSQL) ----------------------------------------------------

CLUSTER = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
           "offsets.topic.num.partitions": "12", "transaction.state.log.num.partitions": "6"}


def test_on_three_brokers_each_request_goes_where_kafka_sends_it(capsys, pg_dsn, cluster_factory) -> None:
    """Transactional ids and partitions spread over three brokers (where rendezvous hashing puts
    them): list asks every broker (Coordinator = the __transaction_state leader of the id),
    describe asks the id's coordinator, describe-producers and abort ask each partition's leader."""
    cluster = cluster_factory(pg_dsn, overrides=CLUSTER)
    wait_settled(cluster, 3)
    bootstrap = cluster.bootstrap
    topic = _unique("txc")
    create_topic(bootstrap, topic, partitions=3)
    wait_for(lambda: all(leader_of(bootstrap, topic, p) in (1, 2, 3) for p in range(3)), timeout=20,
             message="a leader for every partition")
    txn_ids = [_unique("app") for _ in range(6)]
    producers = []
    for i, txn_id in enumerate(txn_ids):  # two open transactions per partition, at offsets 0 and 1
        producer = txn_producer(bootstrap, txn_id)
        producer.begin_transaction()
        send(producer, topic, [txn_id], partition=i % 3)
        producers.append(producer)

    listed = {row["TransactionalId"]: row for row in table(run(capsys, bootstrap, "list")[1])}
    for txn_id in txn_ids:
        coordinator = leader_of(bootstrap, "__transaction_state", partition_for(txn_id, 6))
        assert (listed[txn_id]["TransactionState"], listed[txn_id]["Coordinator"]) == ("Ongoing", str(coordinator))
        described = run_json(capsys, bootstrap, "describe", "--transactional-id", txn_id)
        assert (described["coordinator_id"], described["producer_id"]) == (coordinator,
                                                                           int(listed[txn_id]["ProducerId"]))
        assert described["topic_partitions"] == [{"topic": topic, "partition": txn_ids.index(txn_id) % 3}]

    for node in (1, 2, 3):  # each broker's partitions, asked of it: all six are known to their ids
        hanging = run_json(capsys, bootstrap, "find-hanging", "--broker-id", str(node), "--max-transaction-timeout", "1")
        assert hanging == {"hanging": []}
    leaders = {p: leader_of(bootstrap, topic, p) for p in range(3)}
    for p in range(3):
        found = run_json(capsys, bootstrap, "describe-producers", "--topic", topic, "--partition", str(p))["producers"]
        assert sorted(s["current_transaction_start_offset"] for s in found) == [0, 1]
        assert stable_offset(bootstrap, topic, p) == 0
        for start in (1, 0):
            code, out, err = run(capsys, bootstrap, "abort", "--topic", topic, "--partition", str(p),
                                 "--start-offset", str(start))
            assert code == 0, (leaders[p], out, err)
        assert wait_for(lambda: stable_offset(bootstrap, topic, p) == 4, message=f"LSO of partition {p} at its end")
    for producer in producers:
        producer.abort_transaction(15)
