"""Starting Kafka clients while the broker is out of reach (adapters/log/kafka_start.py).

aiokafka's ``start()`` fails at once when no broker answers; ``KafkaLog`` starts short-lived clients all the time,
and one started during a broker cut used to fail its caller (a daemon restarting during a cut stopped). Once a log
has reached its broker, a start is retried for up to ``append_timeout_s``; a log that never reached it fails at
once. On the real broker behind a proxy that is cut and restored.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from tether.adapters.log.kafka import KafkaLog
from tether.adapters.testing.kafka_broker import ProxiedBroker


async def _restore_after(broker: ProxiedBroker, seconds: float, restored: asyncio.Event) -> None:
    await asyncio.sleep(seconds)
    await asyncio.to_thread(broker.proxy.restore)
    restored.set()


async def test_a_client_started_during_a_cut_starts_once_the_broker_is_back(kafka_broker: ProxiedBroker,
                                                                           kafka_url: str) -> None:
    restored = asyncio.Event()
    async with KafkaLog(kafka_url, append_timeout_s=60) as log_:
        await log_.start()  # reached once
        kafka_broker.proxy.cut()
        healer = asyncio.create_task(_restore_after(kafka_broker, 2, restored))
        try:
            end = await log_.end("events")  # a probe client, started during the cut
            assert restored.is_set()  # (it cannot have connected before: the retries carried it over the cut)
            assert end == {}
        finally:
            await healer
            kafka_broker.proxy.restore()


async def test_a_broker_out_of_reach_longer_than_the_append_timeout_fails_the_start(kafka_broker: ProxiedBroker,
                                                                                   kafka_url: str) -> None:
    async with KafkaLog(kafka_url, append_timeout_s=1) as log_:
        await log_.start()
        kafka_broker.proxy.cut()
        try:
            with pytest.raises(KafkaConnectionError):
                await log_.end("events")
        finally:
            kafka_broker.proxy.restore()


async def test_a_log_that_never_reached_its_broker_fails_at_once(kafka_broker: ProxiedBroker, kafka_url: str) -> None:
    # (a wrong address is a one-line error, not minutes of retries: the broker coming back 2 s later is not waited
    # for)
    restored = asyncio.Event()
    kafka_broker.proxy.cut()
    healer = asyncio.create_task(_restore_after(kafka_broker, 2, restored))
    log_ = KafkaLog(kafka_url, append_timeout_s=60)
    try:
        with pytest.raises(KafkaConnectionError):
            await log_.start()
        assert not restored.is_set()
    finally:
        await log_.close()
        await healer
