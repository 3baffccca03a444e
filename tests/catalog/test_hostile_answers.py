"""A catalog that answers garbage: wrong JSON, JSON of the wrong types, a huge body, a stream that never ends.

Each one is a lookup failure with a message that says what was wrong (the claim's condition carries it), never an
exception out of the resolver, and what the resolver holds is bounded: the body read stops at the cap
(``max_response_bytes``) and the attempt at ``retryConfig.timeout``. The sandbox counts what it sent, so the tests
see that the client stopped reading instead of draining the rest. End to end (the claim's condition, the daemon
still serving): tests/integration/test_catalog_chaos.py.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from tether.adapters.catalog.iceberg_rest import MAX_LOCATION_LENGTH, AmoroResolver
from tether.core.events import DataLocationLookupFailed, DataLocationResolved
from tether.core.identity import make_identity

ORDERS = make_identity("amoro", "table", "prod.sales.orders", None)

GARBAGE = [
    ("not json", "{this is not json", "malformed LoadTableResponse"),
    ("a list", "[1, 2, 3]", "no 'metadata' object (the body is an array)"),
    ("metadata a string", '{"metadata": "s3://x"}', "no 'metadata' object (the body is an object)"),
    ("location a number", '{"metadata": {"location": 42}}', "'metadata.location' is not a string but a number"),
    ("location null", '{"metadata": {"location": null}}', "'metadata.location' missing"),
    ("properties a list", '{"metadata": {"location": "s3://a/b", "properties": [1]}}',
     "'metadata.properties' is not an object but an array"),
    ("nested too deep", "[" * 200_000 + "]" * 200_000, "malformed LoadTableResponse"),
    ("a long location", json.dumps({"metadata": {"location": "s3://a/" + "x" * (MAX_LOCATION_LENGTH + 1)}}),
     f"at most {MAX_LOCATION_LENGTH}"),
]


@pytest.mark.parametrize(("body", "expected"), [(b, e) for _, b, e in GARBAGE], ids=[n for n, _, _ in GARBAGE])
async def test_garbage_is_a_failure_that_says_what_is_wrong(sandbox, make_plugin, fake_time, body: str,
                                                            expected: str) -> None:
    resolver = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.garbage_next(1, body=body)
    out = await resolver.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed), out
    assert expected in out.message, out.message
    assert out.retryable  # fixing the catalog heals the claim on the decider's schedule
    assert sandbox.requests_for("prod.sales.orders") == 1  # an answer, not a transient failure: not asked again now
    assert len(out.message) < 1_000  # a condition's message, not the body
    assert isinstance(await resolver.resolve(ORDERS), DataLocationResolved)  # the next answer is good again
    await resolver.aclose()


async def test_a_huge_body_is_cut_at_the_cap_and_memory_stays_bounded(sandbox, make_plugin, fake_time) -> None:
    cap = 1024 * 1024
    resolver = AmoroResolver(make_plugin(sandbox.url), **fake_time.options(), max_response_bytes=cap)
    sandbox.huge_next(1, size=64 * cap)  # 64 MiB offered
    tracemalloc.start()
    try:
        out = await resolver.resolve(ORDERS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(out, DataLocationLookupFailed) and out.retryable, out
    assert f"more than {cap} bytes" in out.message
    assert peak < 8 * cap, peak  # the cap and a chunk, not the 64 MiB
    await resolver.aclose()


async def test_a_declared_content_length_over_the_cap_is_refused_before_reading(sandbox, make_plugin,
                                                                                fake_time) -> None:
    resolver = AmoroResolver(make_plugin(sandbox.url), **fake_time.options(), max_response_bytes=100)
    out = await resolver.resolve(ORDERS)  # a normal LoadTableResponse is far more than 100 bytes
    assert isinstance(out, DataLocationLookupFailed) and "more than 100 bytes" in out.message
    await resolver.aclose()


async def test_an_endless_stream_ends_at_the_cap(sandbox, make_plugin, fake_time) -> None:
    cap = 256 * 1024
    resolver = AmoroResolver(make_plugin(sandbox.url, retry={"timeout": "30s"}), **fake_time.options(),
                             max_response_bytes=cap)
    sandbox.stream_next(1)
    out = await resolver.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and f"more than {cap} bytes" in out.message, out
    await resolver.aclose()


async def test_an_endless_trickle_ends_at_the_timeout(sandbox, make_plugin) -> None:
    """Under the size cap but never finished: the attempt's timeout ends it (real time: 0.3 s per attempt)."""
    resolver = AmoroResolver(make_plugin(sandbox.url, retry={"timeout": "300ms", "maxRetries": 0}),
                             max_response_bytes=1 << 40)
    sandbox.stream_next(1)
    out = await resolver.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and "timed out after 0.3s" in out.message, out
    await resolver.aclose()


async def test_faults_with_a_probability_fire_on_that_share_and_are_repeatable(make_plugin, fake_time) -> None:
    from tether.adapters.sandbox.catalog import SandboxCatalog

    fired = []
    for _ in range(2):
        async with SandboxCatalog(random_seed=7) as cat:
            rule = cat.fail_next(10_000, status=503, probability=0.5)
            resolver = AmoroResolver(make_plugin(cat.url, retry={"maxRetries": 0},
                                                 circuitBreaker={"failureThreshold": 1_000}), **fake_time.options())
            outcomes = [await resolver.resolve(ORDERS) for _ in range(200)]
            await resolver.aclose()
            fired.append([isinstance(o, DataLocationLookupFailed) for o in outcomes])
            assert rule.fired == sum(fired[-1]) and 60 < rule.fired < 140
    assert fired[0] == fired[1]  # the same seed, the same faults
