"""A process's resources as Linux's /proc tells them (proc(5)): what the benches and the soak
sample of a broker, PostgreSQL or a client."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_s", "open_fds", "rss_mb"]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | None, *, children: bool = False) -> float | None:
    """utime + stime of process `pid` so far (every thread), in seconds; with `children`, plus
    those of its children that exited and were waited for. None without a pid or once it is gone."""
    if pid is None:
        return None
    try:
        # The fields after the command's closing ')': utime and stime are the 12th and 13th
        # (14 and 15 in proc(5), which counts from the pid), cutime and cstime the next two.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def rss_mb(pid: int) -> float:
    """The process's resident set (VmRSS), MiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_fds(pid: int) -> int:
    """The process's open descriptors."""
    return len(os.listdir(f"/proc/{pid}/fd"))
