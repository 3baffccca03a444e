"""tether's murmur2 partitioner gives the partition aiokafka's (and Java's) default partitioner gives."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.adapters.log.kafka_produce import default_partition
from tether.adapters.log.kafka_produce import murmur2 as fast_murmur2


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_same_hash_and_partition_as_aiokafka(key: bytes, count: int) -> None:
    assert fast_murmur2(key) == murmur2(key)
    ids = list(range(count))
    assert default_partition(key, count) == DefaultPartitioner()(key, ids, ids)


def test_known_keys() -> None:
    for length in range(0, 40):
        key = bytes(range(200, 200 + length % 56)) + b"Kind/ns/name"[: length % 13]
        assert fast_murmur2(key) == murmur2(key)
