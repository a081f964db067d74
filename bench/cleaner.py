"""Log cleaner throughput on a 100 MB `__consumer_offsets`-like partition (offsetd only; Tansu
has no comparable cleaner). A measurement, not a test: `.venv/bin/python bench/cleaner.py`."""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from offsetd.records.batch import build_batch
from offsetd.records.scan import scan_key_values
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import OffsetCommitKey, encode_key, encode_value
from offsetd.storage import LogConfig, PartitionLog
from offsetd.storage.cleaner import LogCleaner

T0 = 1_700_000_000_000


def build_offsets_partition(root: Path, total_bytes: int, *, groups: int = 2000, topics: int = 5,
                            partitions: int = 4, batch_records: int = 20, tombstones: float = 0.02,
                            segment_bytes: int = 10 << 20) -> tuple[PartitionLog, int]:
    """A `__consumer_offsets`-like partition: groups commit random partitions, some expire."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_bytes)
    log = PartitionLog.open(root, "__consumer_offsets", 0, config, T0)
    rnd = random.Random(7)
    keys = [encode_key(OffsetCommitKey(f"group-{g:05d}", f"topic-{t:03d}", p))
            for g in range(groups) for t in range(topics) for p in range(partitions)]
    per_group = topics * partitions
    now, offset = T0, 0
    while log.size_bytes < total_bytes:
        g = rnd.randrange(groups)
        recs = []
        for _ in range(batch_records):
            key = keys[g * per_group + rnd.randrange(per_group)]
            value = None if rnd.random() < tombstones else encode_value(OffsetCommitValue(offset, 5, "", now))
            recs.append((key, value, now, []))
            offset += 1
        log.append(build_batch(recs), now)
        now += 1
    log.roll(now)
    return log, now


def key_values(log: PartitionLog) -> dict[bytes | None, bytes | None]:
    """The latest value of every key, by replaying the whole log."""
    state: dict[bytes | None, bytes | None] = {}
    data = log.read(log.log_start_offset, 1 << 40)
    scan_key_values(data, state.__setitem__)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()
    for batch_records in (20, 1):
        with tempfile.TemporaryDirectory() as tmp:
            log, now = build_offsets_partition(Path(tmp), args.megabytes << 20, batch_records=batch_records)
            before, size = key_values(log), log.size_bytes
            wall = time.perf_counter()
            plan = LogCleaner().clean(log, now)
            wall = time.perf_counter() - wall
            after = {k: v for k, v in key_values(log).items() if v is not None}
            assert after == {k: v for k, v in before.items() if v is not None}, "cleaning changed the data"
            st = plan.stats
            print(f"cleaner, {batch_records}-record batches: {size / 1e6:.1f} MB -> {log.size_bytes / 1e6:.2f} MB, "
                  f"{st.records_read} records, {st.map_keys} keys: {st.source_bytes / 1e6 / wall:.1f} MB/s")
            log.close()


if __name__ == "__main__":
    main()
