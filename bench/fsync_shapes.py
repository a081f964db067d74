"""What one round of coordinator writes costs the disk, in the shapes group commit could take: N
preallocated files each written and fdatasync'ed at once (one per partition, on threads, as
native AIO runs them), or the same bytes appended to one preallocated file and fdatasync'ed once
(the coordinators' journal, storage/coordinator_journal.py). Prints the round's p50 / p90.

    .venv/bin/python bench/fsync_shapes.py --files 1 4 16 50 --rounds 500

Run in the directory to measure (default: a temporary one under ./data-bench). The journal's design
rests on this: docs/performance.md, "The coordinators' journal".
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ENTRY = 200  # bytes a partition's commit adds per round (a batch of a few offsets)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples.sort()
    return samples[len(samples) // 2] * 1e3, samples[len(samples) * 9 // 10] * 1e3


def _preallocated(directory: Path, name: str, size: int) -> int:
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, bytes(size), 0)
    os.fsync(fd)
    return fd


def measure(directory: Path, files: int, rounds: int, pool: ThreadPoolExecutor) -> tuple[float, float, float, float]:
    """(per-file p50, p90, journal p50, p90) in ms for rounds that write ENTRY bytes per file."""
    size = rounds * ENTRY * files + (1 << 20)
    fds = [_preallocated(directory, f"p{i}", rounds * ENTRY + 4096) for i in range(files)]
    journal = _preallocated(directory, "journal", size)
    per_file: list[float] = []
    shared: list[float] = []
    entry = b"x" * ENTRY
    try:
        for r in range(rounds):
            for fd in fds:
                os.pwrite(fd, entry, r * ENTRY)
            start = time.perf_counter()
            list(pool.map(os.fdatasync, fds))
            per_file.append(time.perf_counter() - start)
            start = time.perf_counter()
            os.pwrite(journal, entry * files, r * ENTRY * files)
            os.fdatasync(journal)
            shared.append(time.perf_counter() - start)
    finally:
        for fd in (*fds, journal):
            os.close(fd)
    return (*_percentiles(per_file), *_percentiles(shared))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1, 4, 16, 50], help="partitions written per round")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir in ./data-bench)")
    args = parser.parse_args()
    base = args.dir or Path("data-bench")
    base.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="fsync-shapes-", dir=base))
    print(f"{'partitions':>10} | {'one fdatasync each, at once p50 / p90 ms':>42} | {'one journal p50 / p90 ms':>26}")
    try:
        with ThreadPoolExecutor(max(args.files)) as pool:
            for files in args.files:
                a50, a90, j50, j90 = measure(directory, files, args.rounds, pool)
                print(f"{files:>10} | {a50:>31.3f} / {a90:<8.3f} | {j50:>15.3f} / {j90:<8.3f}", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if args.dir is None and not any(base.iterdir()):
            base.rmdir()


if __name__ == "__main__":
    main()
