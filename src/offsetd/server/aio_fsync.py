"""fdatasync through Linux native AIO (`IOCB_CMD_FDSYNC`, kernel 4.18+), for group commit; and
the coordinators' journal's O_DIRECT | O_DSYNC writes (`IOCB_CMD_PWRITE`), durable on completion.

An fdatasync on a Python thread has to take the GIL back when it returns, and then hands it to the
event loop again: with many partitions syncing at once, the loop waits for those threads after each
of its own system calls (measured on this project's VM: a 200-byte pwrite beside 4 to 16 threads in
fdatasync loops has a p99 of 1.1-1.9 ms, beside as many processes 0.03-0.25 ms). Here the loop
submits the fsync (`io_submit`, which only queues it), the kernel's workers run it, and its
completion is counted on an eventfd the loop watches: no Python thread is involved. Linux only (x86-64 and arm64 system call numbers); `AioFsync()` raises OSError
where the kernel or its sandbox refuses native AIO, and the caller uses threads instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import itertools
import os
from typing import Callable

__all__ = ["AioFsync"]

# io_setup, io_destroy, io_getevents, io_submit
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_PWRITE = 1
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1  # signal aio_resfd (an eventfd) on completion


class _Iocb(ctypes.Structure):
    """struct iocb of <linux/aio_abi.h> (little-endian field order)."""

    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
                ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
                ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
                ("aio_resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    """struct io_event: the request's aio_data and its result (0, or -errno)."""

    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class AioFsync:
    """One AIO context and its eventfd; `submit(fd, on_done)` calls back with the fsync's outcome."""

    def __init__(self, depth: int = 128) -> None:
        numbers = _SYSCALLS.get(os.uname().machine) if os.name == "posix" and hasattr(os, "eventfd") else None
        if numbers is None or ctypes.sizeof(_Iocb) != 64 or ctypes.sizeof(ctypes.c_long) != 8:
            raise OSError(errno.ENOSYS, "native AIO fsync is only used on 64-bit Linux")
        self._setup, self._destroy, self._getevents, self._submit = numbers
        self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long
        self._ctx = ctypes.c_ulong(0)
        if self._syscall(ctypes.c_long(self._setup), ctypes.c_long(depth), ctypes.byref(self._ctx)) < 0:
            raise _last_error("io_setup")
        self._depth = depth
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._events = (_IoEvent * depth)()
        self._ids = itertools.count(1)
        # request id -> its completion callback, the loop that submitted it and the bytes a write
        # must have written (0 for an fsync)
        self._waiting: dict[int, tuple[Callable[[OSError | None], None], asyncio.AbstractEventLoop, int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # One iocb for every submission: io_submit copies it into the kernel's request (the
        # iocb's address only comes back in the completion event), so it is reused at once.
        self._iocb = _Iocb(aio_lio_opcode=_IOCB_CMD_FDSYNC, aio_flags=_IOCB_FLAG_RESFD, aio_resfd=self._efd)
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._submit_args = (ctypes.c_long(self._submit), self._ctx, ctypes.c_long(1), self._iocbs)
        self._no_wait = _Timespec(0, 0)
        self._getevents_args = (ctypes.c_long(self._getevents), self._ctx, ctypes.c_long(0), ctypes.c_long(depth),
                                self._events, ctypes.byref(self._no_wait))

    def submit(self, fd: int, on_done: Callable[[OSError | None], None]) -> None:
        """Submit an fdatasync of `fd` (in order after every write already made to it); raises
        OSError when the kernel refuses it (EAGAIN: as many in flight as the context holds).
        on_done(None, or the OSError) is called straight from the reading of its completion, not
        a turn of the event loop later as a future's callback would be (under load a turn serves
        dozens of requests, so each turn a reply waits for costs milliseconds)."""
        self._start(_IOCB_CMD_FDSYNC, fd, 0, 0, 0, on_done)

    def submit_write(self, fd: int, address: int, length: int, offset: int,
                     on_done: Callable[[OSError | None], None]) -> None:
        """Submit a write of `length` bytes at `address` to `fd` at `offset`; with an O_DIRECT |
        O_DSYNC descriptor the kernel queues it to the device itself (no worker thread, no second
        system call for the fsync) and it is durable when it completes. The memory must stay as
        it is until then. on_done as for submit; a short write is an EIO."""
        self._start(_IOCB_CMD_PWRITE, fd, address, length, offset, on_done)

    def _start(self, opcode: int, fd: int, address: int, length: int, offset: int,
               on_done: Callable[[OSError | None], None]) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._watch(loop)
        request = next(self._ids)
        iocb = self._iocb
        iocb.aio_data = request
        iocb.aio_lio_opcode = opcode
        iocb.aio_fildes = fd
        iocb.aio_buf = address
        iocb.aio_nbytes = length
        iocb.aio_offset = offset
        if self._syscall(*self._submit_args) != 1:
            raise _last_error("io_submit")
        self._waiting[request] = (on_done, loop, length)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read completions on `loop` (a new loop replaces the previous one: tests run several)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._efd)
        loop.add_reader(self._efd, self._reap)
        self._loop = loop

    def _reap(self) -> None:
        """Call back every finished fsync (the eventfd said some are)."""
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        events, args = self._events, self._getevents_args
        while True:
            count = self._syscall(*args)
            if count < 0:
                if ctypes.get_errno() == errno.EINTR:
                    continue
                raise _last_error("io_getevents")
            for event in events[:count]:
                on_done, loop, length = self._waiting.pop(event.data)
                if loop.is_closed():  # an earlier loop's (tests run several)
                    continue
                try:
                    on_done(_outcome(event.res, length))
                except Exception as exc:  # one completion's failure must not lose the others'
                    loop.call_exception_handler({"message": "fsync completion failed", "exception": exc})
            if count < self._depth:
                return

    def close(self) -> None:
        """Wait for the fsyncs in flight (io_destroy does) and release the context."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._efd)
        self._syscall(ctypes.c_long(self._destroy), self._ctx)
        os.close(self._efd)


def _outcome(res: int, length: int) -> OSError | None:
    """A completion's result as on_done takes it: None, the -errno it carries, or a short write."""
    if res < 0:
        return OSError(-res, os.strerror(-res))
    if res < length:
        return OSError(errno.EIO, f"short write: {res} of {length} bytes")
    return None


def _last_error(call: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call}: {os.strerror(code)}")
