"""The exactly-once workloads (issue 13, transactions): consume-transform-produce, side by side.

``bench/run.py --workloads eos`` runs ``eos``; ``eos-fsyncs`` (offsetd only) counts fsyncs.

* ``eos``: an input topic of ``EosConfig.partitions`` partitions is pre-filled with
  ``EosConfig.records`` records of ``EosConfig.value_size`` B (not timed). Then two loops, each in
  its own process, each an application as one would write it (it blocks in ``consume()``; no
  busy polling), each with its own consumer group (``subscribe()``) and output topic:

  - transactional: a consumer with ``isolation.level=read_committed`` and
    ``enable.auto.commit=false`` and a producer with a ``transactional.id``; one transaction is
    ``EosConfig.per_txn`` records consumed, transformed (value reversed, key = the input's
    ``partition:offset``) and produced to the same partition of the output topic, then
    ``send_offsets_to_transaction(consumer.position(...), consumer.consumer_group_metadata())``
    and ``commit_transaction()``;
  - plain (the same loop without transactions, to show their cost): ``per_txn`` records
    produced by an idempotent producer, ``flush()``, then a synchronous ``commit()`` of the
    positions.

  Each loop runs ``EosConfig.duration_s`` after a first, untimed, round (joining the group,
  ``init_transactions``). Figures: transactions/s and records/s of each loop, and the
  transactional loop's records/s as a share of the plain loop's; the broker's CPU per
  transaction and per plain round (/proc), and the transactional loop's own CPU per transaction
  (its process: Python and librdkafka), the part of a round no broker can remove. Checked after the timed
  section: a read_committed consumer of the output sees every processed record exactly once
  (keys unique, count = records processed) with the value transformed, and the group's
  committed offsets add up to the records processed.
* ``eos-fsyncs`` (offsetd only): the same two loops for a fixed number of rounds while
  ``strace -f -y -e trace=fsync,fdatasync,io_submit`` is attached to the broker; figures: fsync +
  fdatasync calls per transaction and per plain round, in all and by the log synced
  (``__transaction_state``, ``__consumer_offsets``, the data topics, other files), and the
  io_submit calls (group commit's fdatasyncs through native AIO, whose log strace cannot name). strace slows the broker, so this is
  a count, not a speed; it is a separate workload so it cannot colour ``eos``'s figures.
  n/a when strace is not installed.

The loops' clients run in spawned processes (``bench.procs``); everything they use is here.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from bench.clients import process_cpu_s
from bench.procs import ChildError, run_in_child
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import create_topic_and_wait

@dataclass(frozen=True)
class EosConfig:
    """Parameters of the exactly-once workloads."""

    partitions: int = 4
    #: Enough for ``duration_s`` of either loop at a few thousand transactions per second.
    records: int = 300_000
    value_size: int = 100
    per_txn: int = 100
    duration_s: float = 5.0
    #: Rounds of each loop while strace counts (eos-fsyncs).
    fsync_rounds: int = 100
    linger_ms: int = 5
    setup_timeout_s: float = 60.0
    #: Joining the group and the first (untimed) round.
    warmup_timeout_s: float = 60.0
    verify_timeout_s: float = 60.0
    child_slack_s: float = 30.0


# -- client loops (run in child processes) ---------------------------------------------------

#: A round slower than this is counted (librdkafka backs off 100 ms after a retriable error).
SLOW_ROUND_S = 0.05


@dataclass
class LoopResult:
    """What one loop did. ``elapsed_s`` covers the timed rounds (after the first round)."""

    transactional: bool
    rounds: int = 0
    records: int = 0
    elapsed_s: float = 0.0
    #: Every record processed, the untimed first round included.
    total_records: int = 0
    #: The read_committed read-back of the output topic.
    output_records: int = 0
    duplicate_keys: int = 0
    wrong_values: int = 0
    committed_sum: int = -1
    #: Of the timed rounds' time: waiting in consume(); from the first produce() to the end
    #: of the round (produce, offsets, commit).
    consume_s: float = 0.0
    commit_s: float = 0.0
    #: CPU (user + system) of the loop's own process over the timed rounds: Python and
    #: librdkafka's threads, the part of a round no broker can take away.
    client_cpu_s: float = 0.0
    #: Timed rounds that took longer than SLOW_ROUND_S (e.g. a client's retry back-off).
    slow_rounds: int = 0
    #: Start of the process to the end of the first round; the read-back (seconds).
    warmup_s: float = 0.0
    read_back_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def _transform(value: bytes) -> bytes:
    """The "transform" of consume-transform-produce."""
    return value[::-1]


def _input_value(size: int) -> bytes:
    """Every input record's value (not a palindrome, so a missed transform shows)."""
    return b"<" + b"x" * (size - 1)


def process_loop(bootstrap: str, in_topic: str, out_topic: str, partitions: int, value_size: int,
                 input_records: int, group: str, transactional: bool, per_txn: int,
                 duration_s: float | None, rounds: int | None,
                 linger_ms: int, warmup_timeout_s: float, verify_timeout_s: float,
                 ready_path: str | None = None, go_path: str | None = None) -> LoopResult:
    """Consume-transform-produce ``per_txn`` records per round, transactionally or not, for
    ``duration_s`` (or ``rounds`` rounds) after one untimed round, or until all
    ``input_records`` are processed; then read the output back.

    With ``ready_path``/``go_path`` (eos-fsyncs): after the first round the child creates
    ``ready_path`` and waits (polling, with the warm-up deadline) for ``go_path`` to exist,
    so the harness can attach strace to the broker between the two; after the timed rounds
    it creates ``ready_path + ".done"`` so the harness stops counting there."""
    import os

    from confluent_kafka import Consumer, KafkaException, Producer

    result = LoopResult(transactional=transactional)
    began = time.monotonic()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    pconf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                                "enable.idempotence": True}
    if transactional:
        pconf["transactional.id"] = f"{group}-txn"
    producer = Producer(pconf)
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None and len(errors) < 5:
            errors.append(f"delivery: {err}")

    try:
        if transactional:
            producer.init_transactions(warmup_timeout_s)
        consumer.subscribe([in_topic])

        def one_round(deadline: float) -> int:
            """One batch of ``per_txn`` records (fewer at the end of the input); returns how
            many were processed."""
            if transactional:
                producer.begin_transaction()
            batch = []
            want = min(per_txn, input_records - result.total_records)
            began_round = time.perf_counter()
            while len(batch) < want:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for msg in consumer.consume(want - len(batch), timeout=min(remaining, 1.0)):
                    if msg.error():
                        raise KafkaException(msg.error())
                    batch.append(msg)
            if len(batch) < want:
                raise RuntimeError(f"{len(batch)} of {want} records before the round's deadline")
            consumed = time.perf_counter()
            result.consume_s += consumed - began_round
            for msg in batch:
                producer.produce(out_topic, _transform(msg.value()),
                                 f"{msg.partition()}:{msg.offset()}".encode(),
                                 partition=msg.partition(), on_delivery=on_delivery)
            # partitions not read from yet have no position (-1001): nothing to commit there
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            if transactional:
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
                producer.commit_transaction()
            else:
                left = producer.flush(max(0.0, deadline - time.monotonic()) + 30)
                if left:
                    raise RuntimeError(f"{left} records undelivered")
                if batch:
                    consumer.commit(offsets=positions, asynchronous=False)
            if errors:
                raise RuntimeError("; ".join(errors))
            result.commit_s += time.perf_counter() - consumed
            result.slow_rounds += time.perf_counter() - began_round > SLOW_ROUND_S
            return len(batch)

        result.total_records = one_round(time.monotonic() + warmup_timeout_s)
        result.consume_s = result.commit_s = 0.0  # the timed rounds' only
        result.slow_rounds = 0
        result.warmup_s = time.monotonic() - began
        if ready_path and go_path:
            open(ready_path, "w").close()
            go_deadline = time.monotonic() + warmup_timeout_s
            while not os.path.exists(go_path):
                if time.monotonic() > go_deadline:
                    raise RuntimeError("no go signal from the harness")
                time.sleep(0.02)  # waiting for a file: no client traffic to block on
        cpu_start = process_cpu_s(os.getpid()) or 0.0
        start = time.perf_counter()
        end = start + duration_s if duration_s is not None else float("inf")
        while time.perf_counter() < end and (rounds is None or result.rounds < rounds):
            if result.total_records >= input_records:
                break
            n = one_round(time.monotonic() + 30.0)
            result.rounds += 1
            result.records += n
            result.total_records += n
        result.elapsed_s = time.perf_counter() - start
        result.client_cpu_s = (process_cpu_s(os.getpid()) or 0.0) - cpu_start
        if ready_path:
            open(ready_path + ".done", "w").close()
        committed = consumer.committed([tp for tp in consumer.assignment()], timeout=verify_timeout_s)
        result.committed_sum = sum(tp.offset for tp in committed if tp.offset >= 0)
    finally:
        consumer.close()
        producer.flush(10)
    began = time.monotonic()
    _read_back(bootstrap, out_topic, partitions, _transform(_input_value(value_size)), result,
               verify_timeout_s)
    result.read_back_s = time.monotonic() - began
    return result


def _read_back(bootstrap: str, topic: str, partitions: int, expected_value: bytes,
               result: LoopResult, timeout_s: float) -> None:
    """Read the output topic with read_committed up to its last stable offsets; count records,
    duplicate keys and values other than ``expected_value``."""
    from confluent_kafka import Consumer, IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps},
                                 isolation_level=IsolationLevel.READ_COMMITTED,
                                 request_timeout=timeout_s)
    ends = {tp.partition: fut.result().offset for tp, fut in futures.items()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-read-back",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
    seen: set[bytes] = set()
    done = {p for p in range(partitions) if ends[p] == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    result.errors.append(f"read-back: {msg.error()}")
                    continue
                result.output_records += 1
                key = msg.key()
                if key in seen:
                    result.duplicate_keys += 1
                seen.add(key)
                if msg.value() != expected_value:
                    result.wrong_values += 1
            # the position, not the last record: a transaction's marker ends the partition
            done |= {tp.partition for tp in consumer.position(tps) if tp.offset >= ends[tp.partition]}
    finally:
        consumer.close()
    if len(done) < partitions:
        result.errors.append(f"read-back incomplete: partitions {sorted(set(range(partitions)) - done)} "
                             f"not read to their end offsets {ends}; {result.output_records} records read")


# -- harness side -----------------------------------------------------------------------------


def _prefill(bootstrap: str, topic: str, ecfg: EosConfig) -> None:
    """Create the input topic and fill it (``records`` values, round-robin over partitions)."""
    from confluent_kafka import Producer

    create_topic_and_wait(bootstrap, topic, ecfg.partitions, ecfg.setup_timeout_s)
    failed: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None and len(failed) < 3:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "on_delivery": on_delivery})
    value = _input_value(ecfg.value_size)
    for i in range(ecfg.records):
        while True:
            try:
                producer.produce(topic, value, partition=i % ecfg.partitions)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(ecfg.setup_timeout_s)
    if left or failed:
        raise WorkloadFailed(f"pre-fill of {topic}: {left} undelivered, errors {failed}")


def _loop(bootstrap: str, broker_name: str, in_topic: str, ecfg: EosConfig, transactional: bool,
          run_id: str, duration_s: float | None, rounds: int | None, **kw: str) -> LoopResult:
    """Run one loop in a child process and check its result."""
    kind = "txn" if transactional else "plain"
    out_topic = f"eos-out-{kind}-{run_id}"
    create_topic_and_wait(bootstrap, out_topic, ecfg.partitions, ecfg.setup_timeout_s)
    budget = (duration_s or 0) + ecfg.warmup_timeout_s * 2 + ecfg.verify_timeout_s * 2
    try:
        res = run_in_child(process_loop, (
            bootstrap, in_topic, out_topic, ecfg.partitions, ecfg.value_size, ecfg.records,
            f"eos-{kind}-{run_id}",
            transactional, ecfg.per_txn, duration_s, rounds, ecfg.linger_ms,
            ecfg.warmup_timeout_s, ecfg.verify_timeout_s, kw.get("ready_path"), kw.get("go_path"),
        ), timeout_s=budget + ecfg.child_slack_s)
    except ChildError as exc:
        raise WorkloadFailed(f"{kind} loop: {exc}", exc.detail) from exc
    problems = list(res.errors)
    if res.output_records != res.total_records:
        problems.append(f"output has {res.output_records} records, {res.total_records} processed")
    if res.duplicate_keys:
        problems.append(f"{res.duplicate_keys} input records in the output more than once")
    if res.wrong_values:
        problems.append(f"{res.wrong_values} output values not transformed")
    if res.committed_sum != res.total_records:
        problems.append(f"committed offsets add up to {res.committed_sum}, "
                        f"{res.total_records} records processed")
    if res.rounds == 0:
        problems.append("no timed round")
    if problems:
        raise WorkloadFailed(f"{kind} loop: " + "; ".join(problems))
    print(f"  [{broker_name}] eos {kind}: {res.rounds} rounds, {res.records:,} records in "
          f"{res.elapsed_s:.2f} s (per round: {1000 * res.consume_s / res.rounds:.2f} ms consuming, "
          f"{1000 * res.commit_s / res.rounds:.2f} ms producing and committing; "
          f"{res.slow_rounds} rounds over {1000 * SLOW_ROUND_S:.0f} ms; first round "
          f"{res.warmup_s:.2f} s, read-back of "
          f"{res.output_records:,} {res.read_back_s:.2f} s)", flush=True)
    return res


def eos_workload(ecfg: EosConfig, bootstrap: str, broker_name: str,
                 broker_pid: int | None = None) -> dict[str, Metric]:
    """Pre-fill the input, run the transactional loop, then the plain one (see the module); the
    broker's CPU time (/proc/<pid>/stat) is read either side of each loop's timed rounds."""
    import tempfile

    run_id = uuid.uuid4().hex[:8]
    in_topic = f"eos-in-{run_id}"
    began = time.monotonic()
    _prefill(bootstrap, in_topic, ecfg)
    print(f"  [{broker_name}] eos: {ecfg.records:,} input records written in "
          f"{time.monotonic() - began:.1f} s", flush=True)
    cpu: dict[str, float | None] = {}

    def sample(name: str) -> Callable[[], None]:
        return lambda: cpu.__setitem__(name, process_cpu_s(broker_pid))

    with tempfile.TemporaryDirectory(prefix="eos-") as scratch:
        txn = _loop_marked(bootstrap, broker_name, in_topic, ecfg, True, run_id, ecfg.duration_s, None, scratch,
                           sample("txn0"), sample("txn1"))
        plain = _loop_marked(bootstrap, broker_name, in_topic, ecfg, False, run_id, ecfg.duration_s, None,
                             scratch, sample("plain0"), sample("plain1"))
    txn_rate = txn.records / max(txn.elapsed_s, 1e-9)
    plain_rate = plain.records / max(plain.elapsed_s, 1e-9)
    metrics = {
        "eos_txn_per_s": Metric(f"eos: transactions ({ecfg.per_txn} records)", "txn/s",
                                txn.rounds / max(txn.elapsed_s, 1e-9)),
        "eos_records_per_s": Metric("eos: records, transactional", "records/s", txn_rate),
        "eos_plain_rounds_per_s": Metric(f"eos: plain rounds ({ecfg.per_txn} records, "
                                         "produce + sync commit)", "rounds/s",
                                         plain.rounds / max(plain.elapsed_s, 1e-9)),
        "eos_plain_records_per_s": Metric("eos: records, plain", "records/s", plain_rate),
        "eos_txn_vs_plain_pct": Metric("eos: transactional records/s as a share of plain",
                                       "%", 100.0 * txn_rate / max(plain_rate, 1e-9)),
    }
    for kind, res, label in (("txn", txn, "transaction"), ("plain", plain, "plain round")):
        before, after = cpu.get(kind + "0"), cpu.get(kind + "1")
        if before is not None and after is not None:
            metrics[f"eos_broker_cpu_ms_per_{kind}"] = Metric(
                f"eos: broker CPU per {label}", "ms", 1000 * (after - before) / max(res.rounds, 1), False)
    metrics["eos_client_cpu_ms_per_txn"] = Metric(
        "eos: client CPU per transaction (the loop's process)", "ms",
        1000 * txn.client_cpu_s / max(txn.rounds, 1), False)
    return metrics


#: One fsync/fdatasync call in ``strace -f -y`` output: the descriptor's path in <>.
_SYNC_CALL = re.compile(r"\b(?:fsync|fdatasync)\(\d+<(?P<path>[^>]*)>")
#: One io_submit call (group commit's fdatasyncs through native AIO: the synced descriptor is
#: inside the iocb, so strace cannot name the log).
_AIO_CALL = re.compile(r"\bio_submit\(")
#: What the counts are broken down by: the log directory's topic (else "other"), and "aio".
SYNC_KINDS = ("__transaction_state", "__consumer_offsets", "data", "other", "aio")


def _count_syncs(trace: str, data_topic_prefix: str = "eos-") -> dict[str, int]:
    """fsync + fdatasync calls in ``strace -f -y`` output, by :data:`SYNC_KINDS` (the
    directory of the synced file: a ``__transaction_state-N`` or ``__consumer_offsets-N``
    partition, a partition of a topic named ``data_topic_prefix...``, anything else), and the
    io_submit calls (native AIO fdatasyncs, "aio")."""
    counts = dict.fromkeys(SYNC_KINDS, 0)
    for match in _SYNC_CALL.finditer(trace):
        parent = match["path"].rsplit("/", 2)[-2] if match["path"].count("/") >= 2 else ""
        kind = next((k for k in SYNC_KINDS[:2] if parent.startswith(k + "-")),
                    "data" if parent.startswith(data_topic_prefix) else "other")
        counts[kind] += 1
    counts["aio"] = len(_AIO_CALL.findall(trace))
    return counts


def _loop_marked(bootstrap: str, broker_name: str, in_topic: str, ecfg: EosConfig, transactional: bool,
                 run_id: str, duration_s: float | None, rounds: int | None, scratch: str,
                 on_start: Callable[[], None], on_stop: Callable[[], None]) -> LoopResult:
    """Run a loop (``duration_s`` or ``rounds`` timed rounds) with ``on_start()`` called in the
    harness after the loop's first round and before its timed rounds, and ``on_stop()`` after
    them (before the loop leaves its group and reads back): what they measure is the timed rounds'."""
    import os
    import threading

    kind = "txn" if transactional else "plain"
    ready, go = f"{scratch}/{kind}.ready", f"{scratch}/{kind}.go"
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["res"] = _loop(bootstrap, broker_name, in_topic, ecfg, transactional, run_id, duration_s,
                               rounds, ready_path=ready, go_path=go)
        except BaseException as exc:  # re-raised in the harness thread
            box["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + ecfg.setup_timeout_s + ecfg.warmup_timeout_s
    while not os.path.exists(ready):
        thread.join(0.05)
        if not thread.is_alive() or time.monotonic() > deadline:
            break
    if not os.path.exists(ready):
        thread.join(ecfg.warmup_timeout_s)
        if "exc" in box:
            raise box["exc"]  # type: ignore[misc]
        raise WorkloadFailed(f"{kind} loop never finished its first round")
    on_start()
    try:
        open(go, "w").close()
        # stop measuring when the rounds are over (leaving the group afterwards writes too)
        done_deadline = time.monotonic() + ecfg.warmup_timeout_s + (duration_s or 30.0 * (rounds or 1))
        while thread.is_alive() and not os.path.exists(ready + ".done"):
            if time.monotonic() > done_deadline:
                break
            thread.join(0.02)
    finally:
        on_stop()
    thread.join(ecfg.warmup_timeout_s + ecfg.verify_timeout_s * 2 + ecfg.child_slack_s)
    if "exc" in box:
        raise box["exc"]  # type: ignore[misc]
    if "res" not in box:
        raise WorkloadFailed(f"{kind} loop did not finish")
    return box["res"]  # type: ignore[return-value]


def _syncs_during(bootstrap: str, broker_name: str, in_topic: str, ecfg: EosConfig, transactional: bool,
                  run_id: str, broker_pid: int, scratch: str) -> tuple[dict[str, int], int]:
    """(fsync + fdatasync calls of the broker by kind, rounds) over ``fsync_rounds`` rounds of
    a loop."""
    kind = "txn" if transactional else "plain"
    trace_path = f"{scratch}/{kind}.strace"
    box: dict[str, subprocess.Popen[str]] = {}

    def attach() -> None:
        strace = box["strace"] = subprocess.Popen(
            ["strace", "-f", "-y", "-e", "trace=fsync,fdatasync,io_submit", "-o", trace_path, "-p", str(broker_pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # strace says "Process N attached" on stderr once it is tracing; only then go on
        assert strace.stderr is not None
        first = strace.stderr.readline()
        if "attached" not in first:
            raise WorkloadFailed(f"strace did not attach: {first.strip()}")

    def detach() -> None:
        if "strace" in box:
            box["strace"].send_signal(signal.SIGINT)
            box["strace"].communicate(timeout=30)

    res = _loop_marked(bootstrap, broker_name, in_topic, ecfg, transactional, run_id, None, ecfg.fsync_rounds,
                       scratch, attach, detach)
    with open(trace_path) as trace:
        syncs = _count_syncs(trace.read())
    if not any(syncs.values()):  # offsetd syncs every commit: none counted means strace saw nothing
        raise WorkloadFailed(f"strace counted no fsync in the {kind} loop's {res.rounds} rounds")
    return syncs, res.rounds


def eos_fsyncs_workload(ecfg: EosConfig, bootstrap: str, broker_name: str,
                        broker_pid: int | None = None) -> dict[str, Metric]:
    """fsync + fdatasync calls per transaction and per plain round (see the module)."""
    import tempfile

    if shutil.which("strace") is None:
        raise WorkloadFailed("strace is not installed")
    assert broker_pid is not None
    run_id = uuid.uuid4().hex[:8]
    in_topic = f"eos-in-{run_id}"
    small = dataclasses.replace(ecfg, records=ecfg.per_txn * (ecfg.fsync_rounds + 1) * 2)
    _prefill(bootstrap, in_topic, small)
    with tempfile.TemporaryDirectory(prefix="eos-fsyncs-") as scratch:
        txn_syncs, txn_rounds = _syncs_during(bootstrap, broker_name, in_topic, small, True, run_id, broker_pid, scratch)
        plain_syncs, plain_rounds = _syncs_during(bootstrap, broker_name, in_topic, small, False, run_id, broker_pid,
                                                  scratch)
    metrics = {
        "eos_fsyncs_per_txn": Metric("eos: broker fsync+fdatasync+AIO fdatasync per transaction", "calls",
                                     sum(txn_syncs.values()) / max(txn_rounds, 1), False),
        "eos_fsyncs_per_plain_round": Metric("eos: broker fsync+fdatasync+AIO fdatasync per plain round", "calls",
                                             sum(plain_syncs.values()) / max(plain_rounds, 1), False),
    }
    for label, syncs, rounds in (("transaction", txn_syncs, txn_rounds), ("plain round", plain_syncs, plain_rounds)):
        for kind, count in syncs.items():
            if not count:
                continue
            key = f"eos_fsyncs_per_{label.replace(' ', '_')}_{kind.strip('_')}"
            metrics[key] = Metric(f"eos: ... of them on {kind} per {label}", "calls",
                                  count / max(rounds, 1), False)
    return metrics


def eos_workloads(cfg: BenchConfig, ecfg: EosConfig | None = None) -> list[Workload]:
    """The exactly-once workloads, in run order."""
    ecfg = ecfg or EosConfig()
    return [
        Workload("eos", partial(eos_workload, ecfg), wants_pid=True),
        Workload("eos-fsyncs", partial(eos_fsyncs_workload, ecfg), brokers=("offsetd",),
                 not_applicable="offsetd only (Tansu here keeps everything in memory)",
                 wants_pid=True),
    ]
