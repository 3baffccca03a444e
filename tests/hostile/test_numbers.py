"""Numbers in hostile text: what ``int()`` reads and Kubernetes does not (``core.integers``).

``'²'.isdigit()`` is true and ``int('²')`` raises; ``int('1_000')`` and ``int()`` of an Arabic-Indic five succeed
where Kubernetes' ``strconv.ParseInt`` fails. A record's causation, a resourceVersion, a ``--until`` offset, a Kafka
URL's port, a JSON patch index and a Gt/Lt label value are each read here with one of the two functions of
``core.integers``: whatever the text, an integer or None — never an exception, and never a number Kubernetes would
not read.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.cli.replay.fold import cause_offset, replay
from tether.adapters.daemon.decision_log import _position
from tether.adapters.kubernetes.executor import ObjectCache
from tether.adapters.log.kafka_config import parse_kafka_url
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.hostile import fuzz_settings
from tether.core.commands import AddFinalizer
from tether.core.envelope import CommandRecord, cause_position
from tether.core.integers import decimal_digits, parse_int64
from tether.core.kube import KubeObject, ObjectMeta, ObjectRef

from .worlds import world

#: Text that ``str.isdigit()`` or ``int()`` takes for a number and Kubernetes does not.
NEAR_NUMBERS = ["²", "\u0665", "1_000", " 5", "5 ", "+5", "-5", "", "0x10", "1e3", "\uff15", "9223372036854775808"]
_GO_INT = re.compile(r"[+-]?[0-9]+")


def numberish() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(NEAR_NUMBERS), st.text(alphabet="0123456789+-_ ²\u0665\uff15x", max_size=22),
                     st.text(max_size=8), st.integers(-(2**64), 2**64).map(str))


@fuzz_settings(examples=200)
@given(text=numberish())
def test_decimal_digits_and_parse_int64_read_only_what_kubernetes_reads(text: str) -> None:
    ascii_digits = text.isascii() and text.isdigit()
    assert decimal_digits(text) == (int(text) if ascii_digits else None)
    go = int(text) if _GO_INT.fullmatch(text) and -(2**63) <= int(text) < 2**63 else None  # strconv.ParseInt
    assert parse_int64(text) == go


@pytest.mark.parametrize("text", NEAR_NUMBERS)
def test_a_causation_or_a_resource_version_that_is_not_ascii_digits_is_no_position(text: str) -> None:
    expected = None if not (text.isascii() and text.isdigit()) else int(text)
    assert cause_offset(f"0:{text}") == expected  # was: ValueError for '²' (tether replay, the executor loop)
    assert (cause_position(f"{text}:7") is None) is (expected is None)
    assert _cache_keeps_version_10_over(text) is (expected is not None and expected < 10)
    assert _position_offset(f"0:{text}") == (f"0:{text}" if expected is None else expected)


def _cache_keeps_version_10_over(rv: str) -> bool:
    """Whether the executor's object cache, holding version 10 of a ConfigMap, keeps it over an observation at ``rv``
    (an older one is ignored; one whose resourceVersion is not a number replaces it)."""
    cache = ObjectCache()
    held = KubeObject(api_version="v1", kind="ConfigMap", metadata=ObjectMeta(name="n", namespace="ns",
                                                                              resource_version="10"))
    cache.observe(held)
    cache.observe(KubeObject(api_version="v1", kind="ConfigMap",
                             metadata=ObjectMeta(name="n", namespace="ns", resource_version=rv)))
    return cache.get(held.key) is held


def _position_offset(causation: str) -> object:
    """The offset the daemon's decision log gives a command caused by ``causation`` (its ``offset`` field)."""
    target = ObjectRef(api_version="v1", kind="ConfigMap", namespace="ns", name="n")
    record = CommandRecord(id="c1", at_ms=0, key="ConfigMap/ns/n", causation=causation, decider="test",
                           command=AddFinalizer(target=target, finalizer="x/y"))
    return _position(record)["offset"]


@pytest.mark.parametrize("port", ["²", "\u0665", "1_000", "+80", ""])
def test_a_kafka_port_that_is_not_ascii_digits_is_refused_with_the_reason(port: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"port {port!r} is not a number from 1 to 65535")):
        parse_kafka_url(f"kafka://broker:{port}/tether")


@pytest.mark.parametrize("value", ["²", "1_000", "-5", " 5", ""])
def test_a_kafka_url_parameter_that_is_not_ascii_digits_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"kafka URL parameter linger_ms={value!r} is not a whole number")):
        parse_kafka_url(f"kafka://broker:9092/tether?linger_ms={value}")
    assert parse_kafka_url("kafka://broker:9092/tether?linger_ms=25").linger_ms == 25


async def test_replay_reads_past_a_command_whose_causation_is_not_a_position(tmp_path: Path) -> None:
    """A command record whose causation only looks like an events position (``0:²``) is not caused by an event, as
    any other causation that is not one: the replay notes it nowhere (it raised before), and the world is the one
    a causation of any other form gives."""
    worlds = []
    for causation in ("0:²", "not-a-position"):
        path = tmp_path / f"{len(worlds)}.db"
        log = await SqliteLog.open(path)
        try:
            h = world()
            await log.append("events", h.events)
            await log.append("commands", h.commands)
            with sqlite3.connect(path) as db:
                changed = db.execute("UPDATE commands SET body = json_set(body, '$.causation', ?), causation = ? "
                                     "WHERE offset = (SELECT min(offset) FROM commands)", (causation, causation))
                assert changed.rowcount == 1
            result = await replay(log, use_snapshot=False)
            assert result.events == len(h.events)
            worlds.append(result.world)
        finally:
            await log.close()
    assert worlds[0] == worlds[1]
