"""Stopping an aiokafka consumer without a stray ``CancelledError``: :func:`stop_consumer`.

**The defect it works around** (aiokafka 0.14, ``Fetcher.close``): stopping a consumer cancels the fetcher's
pending fetch tasks and then awaits each one bare (``x.cancel(); await x``). A fetch whose request failed — the
broker unreachable, its connection cut — sleeps ``retry_backoff_ms`` in its error handler, outside the
``except CancelledError`` that guards the request; cancelled there, it ends *cancelled*, and awaiting it raises
``CancelledError`` out of ``consumer.stop()`` — in a task that nobody cancelled, and before ``stop()`` has closed
the consumer's client (its connections and metadata task would stay open).

``CancelledError`` is a ``BaseException``: the ``contextlib.suppress(Exception)`` around ``stop()`` let it through,
and so did every ``except Exception`` above it. That is how a broker cut killed the Kafka chaos test's leader:
the metrics reporter's lag reading (``KafkaLog.end`` → a probe consumer, stopped right after its answer) met a
probe whose other fetch was in its backoff; the ``CancelledError`` went through ``set_lag``'s ``except Exception``,
ended the loops' ``gather`` and the daemon's ``run`` (``Task.exception()`` of a cancelled task raises), and the
process exited with a traceback — the leader gone because a lag gauge could not be read.

**What this does.** A ``CancelledError`` out of ``stop()`` is passed on only when the calling task is itself
being cancelled (``Task.cancelling()``: the daemon stopping, a timeout); otherwise it is aiokafka's own, and the
rest of what ``stop()`` would have done is finished here: the remaining fetch tasks cancelled and awaited (their
outcomes gathered, not raised), then the client closed. That part reaches into aiokafka's private attributes
(``_fetcher._fetch_task`` and ``._pending_tasks``, ``_client``), each looked up with a default, so a release that
renames them only makes the clean-up less complete, never raises. Any other failure to stop is logged at debug
and dropped, as before: a consumer being discarded has nothing left to lose.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

log = structlog.get_logger("tether.kafka")


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_consumer(consumer: Any) -> None:
    """``consumer.stop()``, with aiokafka's stray ``CancelledError`` absorbed and its clean-up finished (module
    doc); a cancellation of the calling task still goes through."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        log.debug("aiokafka raised CancelledError while stopping a consumer (a fetch in its retry backoff); "
                  "finishing the stop")
        await _finish_stop(consumer)
    except Exception as error:
        log.debug("stopping a consumer failed", error=repr(error)[:200])


async def _finish_stop(consumer: Any) -> None:
    """What ``AIOKafkaConsumer.stop()`` does from the fetcher's close on, once that raised: the fetch tasks it did
    not get to (its routine too, should the raise have come before it), then the client."""
    fetcher = getattr(consumer, "_fetcher", None)
    tasks = [getattr(fetcher, "_fetch_task", None), *getattr(fetcher, "_pending_tasks", ())]
    pending = [task for task in tasks if isinstance(task, asyncio.Task) and not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)  # (a cancellation of ours still raises here)
    client = getattr(consumer, "_client", None)
    if client is not None:
        with contextlib.suppress(Exception):
            await client.close()


__all__ = ["stop_consumer"]
