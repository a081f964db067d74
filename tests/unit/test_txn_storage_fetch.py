"""read_committed reads: Fetch (broker/fetch.py) and ListOffsets bounded by the last stable
offset, AbortedTransactions, the zero-copy path and down-conversion of control batches."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from offsetd.broker.broker import Broker
from offsetd.broker.fetch import read_fetch
from offsetd.broker.fetch_down_convert import convert_partition
from offsetd.broker.list_offsets import handle_list_offsets
from offsetd.config import BrokerConfig
from offsetd.records.batch import build_batch, iter_batches
from offsetd.records.control import build_marker_batch
from offsetd.storage.file_records import FileRecords

T0 = 1_700_000_000_000


def _txn(pid: int, n: int = 1, size: int = 10, ts: int = T0) -> bytes:
    return build_batch([(None, b"x" * size, ts + i, ()) for i in range(n)], producer_id=pid, producer_epoch=0,
                       attributes=0x10)


def _plain(ts: int = T0, size: int = 10) -> bytes:
    return build_batch([(None, b"p" * size, ts, ())])


def _broker(tmp_path) -> Broker:
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path)}), T0)
    broker.topics.create("t", 1, {}, T0)
    return broker


def _fetch(broker: Broker, offset: int, isolation: int, version: int = 12, max_bytes: int = 50 << 20) -> dict:
    p = SimpleNamespace(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes, log_start_offset=-1)
    req = SimpleNamespace(max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes, isolation_level=isolation,
                          session_id=0, session_epoch=-1, topics=(SimpleNamespace(topic="t", partitions=(p,)),))
    return read_fetch(broker, req, version).body["responses"][0]["partitions"][0]


def _offsets(records) -> list[int]:
    data = bytes(records.read()) if isinstance(records, FileRecords) else bytes(records)
    return [h.base_offset for _, h in iter_batches(data)]


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(tmp_path) -> None:
    broker = _broker(tmp_path)
    log = broker.topics.partition("t", 0)
    log.append(_txn(1), T0)  # 0 aborted below
    log.append(_plain(), T0)  # 1
    log.append(build_marker_batch(1, 0, False, 0, T0), T0)  # 2
    log.append(_plain(), T0)  # 3
    log.append(_txn(2), T0)  # 4 open: the LSO
    log.append(_plain(), T0)  # 5
    committed = _fetch(broker, 0, 1)
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (6, 4)
    assert _offsets(committed["records"]) == [0, 1, 2, 3]
    assert committed["aborted_transactions"] == [{"producer_id": 1, "first_offset": 0}]
    uncommitted = _fetch(broker, 0, 0)
    assert uncommitted["last_stable_offset"] == 4 and uncommitted["aborted_transactions"] is None
    assert _offsets(uncommitted["records"]) == [0, 1, 2, 3, 4, 5]
    # at the LSO nothing is returned, not even a first batch
    at_lso = _fetch(broker, 4, 1)
    assert (bytes(at_lso["records"]), at_lso["aborted_transactions"]) == (b"", [])
    # a fetch from past the aborted transaction is not told about it
    assert _fetch(broker, 3, 1)["aborted_transactions"] == []
    log.append(build_marker_batch(2, 0, True, 0, T0), T0)  # 6: commit releases everything
    after = _fetch(broker, 4, 1)
    assert (_offsets(after["records"]), after["last_stable_offset"]) == ([4, 5, 6], 7)


def test_read_committed_with_a_tiny_budget_still_respects_the_lso(tmp_path) -> None:
    broker = _broker(tmp_path)
    log = broker.topics.partition("t", 0)
    log.append(_txn(1, size=500), T0)  # 0 open
    entry = _fetch(broker, 0, 1, max_bytes=1)  # min-one-batch would return it if not for the LSO
    assert bytes(entry["records"]) == b"" and entry["last_stable_offset"] == 0


def test_zero_copy_read_respects_the_lso(tmp_path) -> None:
    broker = _broker(tmp_path)
    log = broker.topics.partition("t", 0)
    for _ in range(10):
        log.append(_plain(size=20_000), T0)  # 200 KB below the LSO: sent with sendfile
    log.append(_txn(1, size=20_000), T0)  # 10 open
    log.append(_plain(size=20_000), T0)  # 11
    entry = _fetch(broker, 0, 1)
    assert isinstance(entry["records"], FileRecords)
    assert _offsets(entry["records"]) == list(range(10))
    entry["records"].close()


def test_list_offsets_under_read_committed(tmp_path) -> None:
    broker = _broker(tmp_path)
    log = broker.topics.partition("t", 0)
    log.append(_plain(ts=T0), T0)  # 0
    log.append(_txn(1, ts=T0 + 100), T0)  # 1 open
    log.append(_plain(ts=T0 + 200), T0)  # 2

    def ask(timestamp: int, isolation: int) -> tuple[int, int]:
        req = SimpleNamespace(isolation_level=isolation, topics=(SimpleNamespace(
            name="t", partitions=(SimpleNamespace(partition_index=0, timestamp=timestamp),)),))
        p = handle_list_offsets(broker, req, 2, T0)["topics"][0]["partitions"][0]
        return p["offset"], p["timestamp"]

    assert ask(-1, 1)[0] == 1 and ask(-1, 0)[0] == 3
    assert ask(T0, 1) == (0, T0)
    assert ask(T0 + 50, 1) == (-1, -1)  # the hit (offset 1) is at the LSO
    assert ask(T0 + 50, 0) == (1, T0 + 100)
    assert ask(-3, 1) == (-1, -1) and ask(-3, 0) == (2, T0 + 200)


def test_down_conversion_drops_control_batches() -> None:
    marker_at = len(_txn(1))
    marker = (1).to_bytes(8, "big") + build_marker_batch(1, 0, True, 0, T0)[8:]  # at offset 1
    data = _txn(1) + marker
    converted = convert_partition({"records": data, "error_code": 0}, 1, 0)
    data_only = convert_partition({"records": data[:marker_at], "error_code": 0}, 1, 0)
    assert converted["error_code"] == 0 and converted["records"].startswith(data_only["records"][:40])
    only_marker = convert_partition({"records": data[marker_at:], "error_code": 0}, 1, 1)
    assert only_marker["records"] == b""
