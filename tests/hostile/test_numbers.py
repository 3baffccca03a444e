"""Numbers in hostile text: what ``int()`` reads and Kubernetes does not (``core.integers``).

``'²'.isdigit()`` is true and ``int('²')`` raises; ``int('1_000')`` and ``int()`` of an Arabic-Indic five succeed
where Kubernetes' ``strconv.ParseInt`` fails. A record's causation, a resourceVersion, a ``--until`` offset, a Kafka
URL's port, a JSON patch index and a Gt/Lt label value are each read here with one of the two functions of
``core.integers``: whatever the text, an integer or None — never an exception, and never a number Kubernetes would
not read. And ``int()`` refuses text of more than 4300 digits (``sys.get_int_max_str_digits``): such a number is no
number to those functions, and no crash where resourceVersions are compared or quantities read.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.cli.replay.rebuild import cause_offset, replay
from tether.adapters.daemon.decision_log import _position
from tether.adapters.kubernetes.executor import ObjectCache
from tether.adapters.log.kafka_config import parse_kafka_url
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.hostile import fuzz_settings
from tether.core.commands import AddFinalizer
from tether.core.envelope import CommandRecord, cause_position
from tether.core.integers import decimal_digits, parse_int64
from tether.core.kube import KubeObject, ObjectMeta, ObjectRef, trim
from tether.core.quantity import InvalidQuantity, milli_value
from tether.core.world.member_state import parse_node
from tether.projections.versions import stale

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


#: More digits than ``int()`` converts.
HUGE = "1" * 5000


def test_a_number_of_more_digits_than_int_converts_is_no_number_and_no_crash() -> None:
    assert decimal_digits(HUGE) is None
    assert parse_int64(HUGE) is None and parse_int64(f"-{HUGE}") is None
    assert cause_offset(f"0:{HUGE}") is None and cause_position(f"{HUGE}:7") is None  # (raised ValueError)
    assert _position_offset(f"0:{HUGE}") == f"0:{HUGE}"


@given(new=st.from_regex(r"0*[0-9]{1,4}", fullmatch=True), old=st.from_regex(r"0*[0-9]{1,4}", fullmatch=True))
def test_resource_versions_of_ascii_digits_are_compared_as_numbers(new: str, old: str) -> None:
    assert stale(new, old) is (new == old or int(new) < int(old))


def test_a_resource_version_of_thousands_of_digits_is_compared_without_a_crash() -> None:
    assert not stale(f"0{HUGE}", "5") and stale("5", f"0{HUGE}")  # (a leading zero: compared through int(), raised)
    assert not stale(f"0{HUGE}", f"00{HUGE}") and stale(f"0{HUGE}1", f"{HUGE}2")  # (as the property above)
    assert not _cache_keeps_version_10_over(f"0{HUGE}")


@pytest.mark.parametrize("quantity", [HUGE, f"{HUGE}m", f"1.{HUGE}", "1e9999", "1e999999999", f"1e{HUGE}"])
def test_a_quantity_too_large_to_compute_is_refused_and_its_node_offers_nothing(quantity: str) -> None:
    """A quantity's number or power of ten past 1000 digits is refused, not computed: ``1e999999999`` took the fold
    computing a power of ten for good, and a number past 4300 digits raised ``ValueError``, which callers, catching
    ``InvalidQuantity``, did not expect."""
    with pytest.raises(InvalidQuantity, match="out of range"):
        milli_value(quantity)
    node = trim({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                 "status": {"allocatable": {"cpu": quantity, "memory": "1Gi"}}})
    assert parse_node(node).allocatable == {}
    assert milli_value("1e1000") == 10**1003 and milli_value(f"{'9' * 1000}m") == int("9" * 1000)


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
