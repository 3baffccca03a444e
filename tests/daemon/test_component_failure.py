"""How the daemon judges a component task that ended (``component_failure``): a failure is one line for the log,
whatever way the task ended — an exception, or a ``CancelledError`` raised inside it, which ``Task.exception()``
re-raises (that is how a stray one from aiokafka crashed ``tether run`` with a traceback, kafka_stop.py)."""

from __future__ import annotations

import asyncio

from tether.adapters.daemon.daemon import component_failure


async def _ended(coro: object) -> asyncio.Task[None]:
    task = asyncio.create_task(coro)  # type: ignore[arg-type]
    await asyncio.wait([task])
    return task


async def test_a_stray_cancelled_error_is_a_failure_not_a_crash() -> None:
    async def stray() -> None:
        raise asyncio.CancelledError  # what aiokafka's consumer.stop() let out, with nothing cancelling the task

    task = await _ended(stray())
    assert task.cancelled()
    failure = component_failure(task)  # Task.exception() would raise CancelledError here
    assert failure is not None and "CancelledError" in failure


async def test_an_exception_is_a_failure_and_a_normal_end_is_not() -> None:
    async def broken() -> None:
        raise RuntimeError("the log refuses every later call")

    async def finished() -> None:
        return None

    assert component_failure(await _ended(broken())) == "RuntimeError('the log refuses every later call')"
    assert component_failure(await _ended(finished())) is None
