"""Starting Kafka clients while the broker is out of reach (adapters/log/kafka_start.py).

aiokafka's ``start()`` fails at once when no broker answers; ``KafkaLog`` starts short-lived clients all the time,
and one started during a broker cut used to fail its caller (a daemon restarting during a cut stopped). A start
is now retried for up to ``append_timeout_s``, on the real broker behind a proxy that is cut and restored.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from tether.adapters.log.kafka import KafkaLog
from tether.adapters.testing.kafka import ProxiedBroker


async def test_a_log_started_while_the_broker_is_cut_starts_once_it_is_back(kafka_broker: ProxiedBroker,
                                                                            kafka_url: str) -> None:
    restored = asyncio.Event()

    async def restore_later() -> None:
        await asyncio.sleep(2)
        await asyncio.to_thread(kafka_broker.proxy.restore)
        restored.set()

    kafka_broker.proxy.cut()
    healer = asyncio.create_task(restore_later())
    try:
        async with KafkaLog(kafka_url, append_timeout_s=60) as log_:
            end = await log_.end("events")  # the producer, the topics' admin client and a probe: each started
            assert restored.is_set()  # (it cannot have connected before: the retries carried it over the cut)
            assert end == {}
    finally:
        await healer
        kafka_broker.proxy.restore()


async def test_a_broker_out_of_reach_longer_than_the_append_timeout_fails_the_start(kafka_broker: ProxiedBroker,
                                                                                   kafka_url: str) -> None:
    kafka_broker.proxy.cut()
    try:
        log_ = KafkaLog(kafka_url, append_timeout_s=1)
        try:
            with pytest.raises(KafkaConnectionError):
                await log_.end("events")
        finally:
            await log_.close()
    finally:
        kafka_broker.proxy.restore()
