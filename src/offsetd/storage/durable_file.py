"""Replacing a small file so that a crash leaves either the old or the new content, never a mix
or nothing: write a temp file, fsync it, rename it over the target, fsync the directory."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a directory so created/removed/renamed entries are durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Atomically and durably replace `path` with `data` (str is written as UTF-8). `durable`
    False leaves out the two fsyncs: atomic still (the old content or the new after a crash of
    the process), for a file a power loss may take back (a cache of state kept elsewhere)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
