"""Starting an aiokafka client through a broker that is briefly out of reach: :func:`start_client`.

aiokafka's ``start()`` bootstraps once: when no broker answers at that moment — it is restarting, or the
connection was cut — it raises ``KafkaConnectionError("Unable to bootstrap …")`` at once. Clients that are already
running ride such an outage out (they reconnect and retry until their own timeouts), but ``KafkaLog`` starts
short-lived clients all the time (a probe for the high-water mark, a reader, a consumer's own committed offsets, a
group member when a daemon starts or takes over), and one started during a three-second cut failed its caller;
in the Kafka chaos test that was a replica restarting while the broker was cut, whose loops then stopped the
daemon ("component failed").

So once a log has reached its broker, a client's start is retried, with a growing pause, for as long as the log
waits for an append (``append_timeout_s``: the patience it already has for the broker), and only then fails. A log
that never reached it fails at once: a wrong address is a one-line error (``tether run`` exits 2), not minutes of
retries, and a daemon started while the broker is down exits and is restarted by its supervisor.

A failed bootstrap leaves the client as it was before ``start()`` (aiokafka checks for a second start only after
it), so starting it again is what a new client would do, without building one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from aiokafka.errors import KafkaConnectionError

log = structlog.get_logger("tether.kafka")


async def start_client(client: Any, *, within: float, pause: float = 0.25, max_pause: float = 2.0) -> None:
    """``await client.start()``, again after a pause while no broker can be reached, for up to ``within`` seconds;
    then the last ``KafkaConnectionError`` is raised."""
    deadline = time.monotonic() + within
    while True:
        try:
            await client.start()
            return
        except KafkaConnectionError as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("kafka broker unreachable: starting the client again", error=str(exc), retry_in=pause)
        await asyncio.sleep(pause)
        pause = min(pause * 2, max_pause)
