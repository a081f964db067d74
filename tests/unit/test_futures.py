"""server/futures.py: `then` chains are futures to asyncio, compute once, and cost one turn."""

from __future__ import annotations

import asyncio

import pytest

from offsetd.server.futures import then


def test_a_chain_answers_one_turn_after_its_source_and_computes_once() -> None:
    calls: list[str] = []

    async def main() -> None:
        source = asyncio.get_running_loop().create_future()
        chained = then(then(source, lambda v: (calls.append("shape"), v + 1)[1]),
                       lambda v: (calls.append("encode"), v * 10)[1])
        assert asyncio.isfuture(chained) and asyncio.ensure_future(chained) is chained
        seen: list[int] = []
        chained.add_done_callback(lambda f: seen.append(f.result()))
        assert not chained.done()
        source.set_result(4)
        assert chained.done() and calls == []  # nothing computed until asked
        await asyncio.sleep(0)  # one turn: the source's done callback is the chain's
        assert seen == [50]
        assert chained.result() == 50 and await chained == 50
        assert calls == ["shape", "encode"]  # each link ran once

    asyncio.run(main())


def test_errors_map_to_answers_or_pass_through_and_a_failing_function_does_not_hang() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        mapped, passed, broken = loop.create_future(), loop.create_future(), loop.create_future()
        answered = then(mapped, lambda v: v, lambda exc: {"error_code": 7})
        raised = then(passed, lambda v: v, lambda exc: None)
        failing = then(broken, lambda v: 1 // v)
        mapped.set_exception(OSError("disk"))
        passed.set_exception(OSError("disk"))
        broken.set_result(0)
        assert await answered == {"error_code": 7}
        with pytest.raises(OSError):
            await raised
        assert isinstance(failing.exception(), ZeroDivisionError)
        with pytest.raises(ZeroDivisionError):
            await failing

    asyncio.run(main())


def test_a_task_waits_for_a_chain_and_cancelling_it_cancels_the_source() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        source = loop.create_future()
        waiter = asyncio.ensure_future(_await(then(source, lambda v: v + 1)))
        await asyncio.sleep(0)
        source.set_result(1)
        assert await waiter == 2
        other = loop.create_future()
        stuck = asyncio.ensure_future(_await(then(other, lambda v: v)))
        await asyncio.sleep(0)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert other.cancelled()

    asyncio.run(main())


async def _await(future: object) -> object:
    return await future  # type: ignore[misc]
