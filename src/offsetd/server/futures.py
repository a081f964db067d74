"""Chaining asyncio futures by callback: the commit path's replies need no coroutine or task."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def then(future: "asyncio.Future[Any]", fn: Callable[[Any], T],
         on_error: Callable[[BaseException], T | None] | None = None) -> "asyncio.Future[T]":
    """A future of fn(result). An exception of `future` becomes on_error(exception) when that
    gives a value (an error response), else passes through unchanged."""
    chained: asyncio.Future[T] = future.get_loop().create_future()

    def done(f: "asyncio.Future[Any]") -> None:
        exc = f.exception()
        if exc is None:
            chained.set_result(fn(f.result()))
            return
        answer = on_error(exc) if on_error is not None else None
        if answer is None:
            chained.set_exception(exc)
        else:
            chained.set_result(answer)

    future.add_done_callback(done)
    return chained
