"""Where zero-copy Fetch starts to pay: the sender's CPU per Fetch response (8 partitions, one of
them with records) built the plain way (pread, encode into the frame, write) against the zero-copy
way (dup'd descriptors, SplitFrame, header writes + sendfile), over TCP loopback with a thread
draining the other end. Prints the best of 5 per size; fetch.ZERO_COPY_MIN_BYTES comes from it.

    .venv/bin/python bench/zero_copy_threshold.py
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from offsetd.protocol.encoder import SplitFrame, encode_response  # noqa: E402
from offsetd.records.batch import build_batch  # noqa: E402
from offsetd.storage.log_config import LogConfig  # noqa: E402
from offsetd.storage.partition_log import PartitionLog  # noqa: E402

FETCH, VERSION = 1, 12
SIZES = [2048, 8192, 16384, 32768, 65536, 262144, 1 << 20]


def _body(records: Any, partitions: int = 8) -> dict[str, Any]:
    parts = [{"partition_index": i, "high_watermark": 1, "records": records if i == 0 else b""}
             for i in range(partitions)]
    return {"responses": [{"topic": "t", "partitions": parts}]}


def _send_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _plain(plog: PartitionLog, fd: int, size: int) -> None:
    frame = encode_response(FETCH, VERSION, 1, _body(plog.read(0, size)))
    assert isinstance(frame, bytes)
    _send_all(fd, frame)


def _zero_copy(plog: PartitionLog, fd: int, size: int) -> None:
    frame = encode_response(FETCH, VERSION, 1, _body(plog.read_file(0, size)))
    assert isinstance(frame, SplitFrame)
    for part in frame.parts:
        if isinstance(part, bytes):
            _send_all(fd, part)
            continue
        for src, pos, length in part.ranges:
            while length:
                sent = os.sendfile(fd, src, pos, length)
                pos, length = pos + sent, length - sent
    frame.close()


def _best_us(fn: Callable[[PartitionLog, int, int], None], plog: PartitionLog, fd: int, size: int) -> float:
    rounds = max(30, 5_000_000 // size)
    best = float("inf")
    for _ in range(5):
        fn(plog, fd, size)
        start = time.thread_time()  # this thread's CPU, system time of its syscalls included
        for _ in range(rounds):
            fn(plog, fd, size)
        best = min(best, (time.thread_time() - start) / rounds * 1e6)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plog = PartitionLog.open(Path(tmp) / "t-0", "t", 0, LogConfig(), lambda: 1000)
        batch = build_batch([(None, b"x" * 100, 1000, [])] * 10)  # 100-byte records, as the bench
        for _ in range(3000):
            plog.append(batch, now_ms=1000)
        server = socket.create_server(("127.0.0.1", 0))
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
        threading.Thread(target=lambda: [None for _ in iter(lambda: receiver.recv(1 << 20), b"")],
                         daemon=True).start()
        for size in SIZES:
            plain = _best_us(_plain, plog, sender.fileno(), size)
            zero = _best_us(_zero_copy, plog, sender.fileno(), size)
            print(f"{size:>8} B: pread+encode+write {plain:8.1f} us   sendfile {zero:8.1f} us   "
                  f"ratio {zero / plain:.2f}", flush=True)
        sender.close()
        plog.close()


if __name__ == "__main__":
    main()
