"""What PostgreSQL alone spends to store a partition's appends (cluster mode's data path), without
brokers or clients on the box: the store's own statements (storage/postgres_appends.py) on its own
schema, one partition, one statement at a time as a partition's log sends them, against a fresh
`LocalPostgres` (fsync and synchronous_commit on). Prints MB/s, statements/s and PostgreSQL's CPU
(utime + stime of that server's processes, /proc) per MB and per statement, for appends of --sizes bytes,
--per appends per statement.

    .venv/bin/python bench/pg_append_cost.py --sizes 16000 46000 200000 --per 1 2 4 --mb 100

The cluster's produce figure (docs/performance.md) compares this with what PostgreSQL spends there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make src importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import asyncpg  # noqa: E402

from offsetd.dev.postgres import LocalPostgres, children_of, postmaster_pid  # noqa: E402
from offsetd.dev.proc_stats import cpu_s  # noqa: E402
from offsetd.storage import postgres_appends, postgres_store  # noqa: E402


def postgres_cpu_s(pg: LocalPostgres) -> float:
    """CPU seconds of this server so far: the postmaster, its exited backends (waited for, so in
    its children's counters) and the running ones (as bench/cluster_partition_scale.py counts)."""
    master = postmaster_pid(pg.data_dir)
    if master is None:
        return 0.0
    return (cpu_s(master, children=True) or 0.0) + sum(cpu_s(pid) or 0.0 for pid in children_of(master))


async def measure(pg: LocalPostgres, size: int, per: int, mb: int) -> str:
    conn = await asyncpg.connect(host="127.0.0.1", port=pg.port, user="postgres", database="postgres")
    try:
        await conn.execute(postgres_store.SCHEMA)
        topic_id = uuid.uuid4()
        await conn.execute("INSERT INTO offsetd_topic VALUES ($1, $2, 1, '{}', false)", f"t-{topic_id}", topic_id)
        await conn.execute("INSERT INTO offsetd_partition (topic_id, partition, owner, epoch) VALUES ($1, 0, 1, 1)",
                           topic_id)
        data = os.urandom(size // 2).hex().encode()  # as bench/clients.py's produce values: hex, no codec
        statements = max(1, mb * 1_000_000 // size // per)
        offset = 0
        cpu0, began = postgres_cpu_s(pg), time.perf_counter()
        for _ in range(statements):
            appends = [(offset + 10 * i, offset + 10 * i + 9, data) for i in range(per)]
            if per == 1:
                await conn.execute(postgres_appends._APPEND, topic_id, 0, 1, 1, *appends[0])
            else:
                stored = await conn.fetch(
                    postgres_appends._APPEND_PARTITIONS, [topic_id], [0], [1], [offset], [offset + 10 * per], 1,
                    [topic_id] * per, [0] * per, [a[0] for a in appends], [a[1] for a in appends],
                    [a[2] for a in appends])
                assert len(stored) == per, stored
            offset += 10 * per
        elapsed, cpu = time.perf_counter() - began, postgres_cpu_s(pg) - cpu0
        stored_mb = statements * per * size / 1e6
        return (f"appends of {size:>8,} B, {per} per statement: {stored_mb / elapsed:6.1f} MB/s, "
                f"{statements / elapsed:6.0f} statements/s, PostgreSQL {cpu / elapsed:4.2f} cores, "
                f"{1000 * cpu / stored_mb:5.1f} ms CPU per MB, {1e6 * cpu / statements:5.0f} µs per statement")
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="PostgreSQL's cost of cluster mode's appends, alone.")
    p.add_argument("--sizes", type=int, nargs="+", default=[16_000, 46_000, 200_000], help="bytes per append")
    p.add_argument("--per", type=int, nargs="+", default=[1, 2, 4], help="appends per statement")
    p.add_argument("--mb", type=int, default=100, help="MB stored per figure")
    args = p.parse_args(argv)
    for size in args.sizes:
        for per in args.per:
            pg = LocalPostgres().start()
            try:
                print(asyncio.run(measure(pg, size, per, args.mb)), flush=True)
            finally:
                pg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
