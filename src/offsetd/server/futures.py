"""Chaining asyncio futures by callback: the commit path's replies need no coroutine or task."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def then(future: "asyncio.Future[Any]", fn: Callable[[Any], T]) -> "asyncio.Future[T]":
    """A future of fn(result); an exception of `future` passes through unchanged."""
    chained: asyncio.Future[T] = future.get_loop().create_future()

    def done(f: "asyncio.Future[Any]") -> None:
        exc = f.exception()
        if exc is not None:
            chained.set_exception(exc)
        else:
            chained.set_result(fn(f.result()))

    future.add_done_callback(done)
    return chained
