"""Chaining asyncio futures by callback: the commit path's replies need no coroutine or task.

A chained asyncio future costs a turn of the event loop per link (each done callback is
scheduled with call_soon), and a commit's reply is three links deep (the shard's token, the
handler's shape, the encoding). Under load a turn serves dozens of requests, so every link adds
milliseconds to each reply. `then` therefore gives a `Mapped` future: the function runs when its
result is asked for, and its done callbacks are the source future's, one turn however deep.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Generator, Generic, TypeVar

__all__ = ["Mapped", "then"]

T = TypeVar("T")

_UNSET: Any = object()


class Mapped(Generic[T]):
    """fn(the source's result), computed once on first use; asyncio treats it as a future
    (`asyncio.isfuture`, awaitable in a task, `ensure_future` returns it as it is)."""

    _asyncio_future_blocking = False  # asyncio's mark of a future (and a task's wait flag)

    def __init__(self, source: Any, fn: Callable[[Any], T],
                 on_error: Callable[[BaseException], T | None] | None) -> None:
        self._source = source
        self._fn = fn
        self._on_error = on_error
        self._value: Any = _UNSET
        self._error: BaseException | None = None

    def _settle(self) -> None:
        if self._value is not _UNSET or self._error is not None:
            return
        exc = self._source.exception()  # raises CancelledError / InvalidStateError as the source does
        try:
            if exc is None:
                self._value = self._fn(self._source.result())
                return
            answer = self._on_error(exc) if self._on_error is not None else None
        except Exception as fn_exc:  # the reply could not be made: the request fails, it does not hang
            self._error = fn_exc
            return
        if answer is None:
            self._error = exc
        else:
            self._value = answer

    def done(self) -> bool:
        return self._source.done()

    def cancelled(self) -> bool:
        return self._source.cancelled()

    def result(self) -> T:
        self._settle()
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self) -> BaseException | None:
        self._settle()
        return self._error

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._source.get_loop()

    def add_done_callback(self, callback: Callable[[Any], object], *,
                          context: contextvars.Context | None = None) -> None:
        self._source.add_done_callback(lambda _source: callback(self), context=context)

    def cancel(self, msg: Any = None) -> bool:
        return self._source.cancel(msg)

    def __await__(self) -> Generator[Any, None, T]:
        if not self.done():
            self._asyncio_future_blocking = True
            yield self  # a task waits for it as for any future
        return self.result()

    __iter__ = __await__


def then(future: Any, fn: Callable[[Any], T],
         on_error: Callable[[BaseException], T | None] | None = None) -> Mapped[T]:
    """A future of fn(result). An exception of `future` becomes on_error(exception) when that
    gives a value (an error response), else passes through unchanged."""
    return Mapped(future, fn, on_error)
