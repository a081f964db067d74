"""A real full disk for tests: a small tmpfs mounted over a test directory (the suite runs as
root, as CI does), filled with a filler file until writes fail with ENOSPC, then freed."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any

_CHUNKS = (1 << 16, 1 << 12, 1 << 8, 1)


class SmallDisk:
    """`size` bytes of tmpfs at `path` while the `with` block runs."""

    def __init__(self, path: Path, size: str = "8m") -> None:
        self.path = Path(path)
        self.size = size
        self.filler = self.path / "filler"

    def __enter__(self) -> "SmallDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"cannot mount a tmpfs at {self.path} (the suite needs root): {done.stderr}")
        return self

    def __exit__(self, *exc: Any) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=True)

    def fill(self) -> int:
        """Write the filler until the disk is full (ENOSPC for every size down to one byte)."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in _CHUNKS:
                data = bytes(chunk)
                while True:
                    try:
                        written += os.write(fd, data)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Delete the filler: the space is back at once."""
        self.filler.unlink(missing_ok=True)
