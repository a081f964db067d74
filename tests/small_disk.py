"""A real full disk for tests, the chaos harness and the bench: a small tmpfs mounted over a
directory (the suite runs as root, as CI does), filled with a filler file until writes fail with
ENOSPC, then freed."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any

_CHUNKS = (1 << 16, 1 << 12, 1 << 8, 1)


class SmallDisk:
    """`size` of tmpfs at `path` (with room for at most `inodes` files and directories, when
    given): mounted by mount() or while a `with` block runs."""

    def __init__(self, path: Path, size: str = "8m", inodes: int | None = None) -> None:
        self.path = Path(path)
        self.size = size
        self.options = f"size={size}" + ("" if inodes is None else f",nr_inodes={inodes}")
        self.filler = self.path / "filler"
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", self.options, "tmpfs", str(self.path)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"a full disk needs a tmpfs, and `mount -t tmpfs -o {self.options} tmpfs "
                               f"{self.path}` failed (rc={done.returncode}, euid={os.geteuid()}; it needs "
                               f"root): {(done.stderr or done.stdout).strip()}")
        self.mounted = True

    def unmount(self) -> None:
        if not self.mounted:
            return
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)  # still in use: lazily
        self.mounted = False

    def __enter__(self) -> "SmallDisk":
        self.mount()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unmount()

    def fill(self) -> int:
        """Write the filler until the disk is full (ENOSPC for every size down to one byte);
        returns the bytes written."""
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

    def breathe(self, nbytes: int) -> None:
        """Give `nbytes` back (cut the filler's end); the next fill() takes them again."""
        os.truncate(self.filler, max(0, self.filler.stat().st_size - nbytes))

    def free(self) -> None:
        """Delete the filler: the space is back at once."""
        self.filler.unlink(missing_ok=True)

    def usage(self) -> tuple[int, int]:
        """(used, total) bytes."""
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize
