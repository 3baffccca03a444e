"""Retries, timeouts, the circuit breaker, the concurrency limit and single flight, against injected faults."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tether.adapters.catalog.http import CircuitBreaker, CircuitOpenError, backoff_delay, parse_retry_after
from tether.adapters.catalog.iceberg_rest import AmoroResolver
from tether.adapters.testing.tether_stack import eventually
from tether.core.events import DataLocationLookupFailed, DataLocationResolved
from tether.core.identity import make_identity
from tether.core.plugin_config import CircuitBreakerConfig, RetryConfig

ORDERS = make_identity("amoro", "table", "prod.sales.orders", None)


def ident(name: str):
    return make_identity("amoro", "table", name, None)


async def test_503_is_retried_with_full_jitter_backoff_then_succeeds(sandbox, make_plugin, fake_time):
    plugin = make_plugin(sandbox.url, retry={"maxRetries": 3, "initialBackoff": "1s", "backoffMultiplier": 2})
    r = AmoroResolver(plugin, **fake_time.options(random=0.5))
    sandbox.fail_next(3, status=503)
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationResolved)
    assert sandbox.requests_for("prod.sales.orders") == 4
    assert fake_time.sleeps == [0.5, 1.0, 2.0]  # uniform(0, 1·2^n) with random=0.5
    await r.aclose()


def test_backoff_is_capped_by_max_backoff():
    retry = RetryConfig(initial_backoff=1.0, max_backoff=5.0, backoff_multiplier=3.0)
    assert [backoff_delay(n, retry, random=lambda: 1.0) for n in range(4)] == [1.0, 3.0, 5.0, 5.0]
    assert backoff_delay(3, retry, random=lambda: 0.0) == 0.0


async def test_429_retry_after_is_honoured(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.fail_next(1, status=429, retry_after=3)
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationResolved)
    assert fake_time.sleeps == [3.0]
    await r.aclose()


async def test_retry_after_beyond_max_backoff_gives_up_at_once(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url, retry={"maxBackoff": "5s"}), **fake_time.options())
    sandbox.fail_next(1, status=429, retry_after=120)
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable
    assert "retry after 120s" in out.message
    assert fake_time.sleeps == [] and sandbox.requests_for("prod.sales.orders") == 1
    await r.aclose()


def test_parse_retry_after_accepts_seconds_and_http_dates():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412480.0 - 10) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


async def test_exhausted_retries_end_in_a_retryable_failure(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url, retry={"maxRetries": 2}), **fake_time.options())
    sandbox.fail_next(10, status=500)
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable
    assert "answered 500" in out.message and "gave up after 3 attempts" in out.message
    assert sandbox.requests_for("prod.sales.orders") == 3 and len(fake_time.sleeps) == 2
    await r.aclose()


async def test_slow_catalog_times_out_per_attempt(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url, retry={"maxRetries": 1, "timeout": "50ms"}), **fake_time.options())
    sandbox.delay_next(1, 5.0)
    out = await r.resolve(ORDERS)  # the first attempt times out, the retry succeeds
    assert isinstance(out, DataLocationResolved)
    sandbox.delay_next(2, 5.0)
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable and "timed out after 0.05s" in out.message
    await r.aclose()


async def test_unreachable_catalog_is_a_retryable_failure(make_plugin, fake_time):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nobody listens there
    r = AmoroResolver(make_plugin(f"http://127.0.0.1:{port}", retry={"maxRetries": 1}), **fake_time.options())
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable and "Connect" in out.message
    await r.aclose()


async def test_circuit_opens_after_threshold_then_recovers_half_open(sandbox, make_plugin, fake_time):
    plugin = make_plugin(
        sandbox.url, retry={"maxRetries": 0}, circuitBreaker={"failureThreshold": 3, "resetTimeout": "30s"}
    )
    r = AmoroResolver(plugin, **fake_time.options())
    sandbox.fail_next(100, status=503)
    for _ in range(3):
        out = await r.resolve(ORDERS)
        assert isinstance(out, DataLocationLookupFailed) and "answered 503" in out.message
    assert r.breaker.state == "open"
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable and "circuit open" in out.message
    assert sandbox.requests_for("prod.sales.orders") == 3  # failed fast: no request

    fake_time.advance(30)
    assert r.breaker.state == "half-open"
    out = await r.resolve(ORDERS)  # the probe fails: open again for another reset_timeout
    assert "answered 503" in out.message and r.breaker.state == "open"
    assert sandbox.requests_for("prod.sales.orders") == 4

    sandbox.clear_faults()
    fake_time.advance(30)
    assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
    assert r.breaker.state == "closed"
    await r.aclose()


async def test_breaker_opening_mid_lookup_stops_the_retries(sandbox, make_plugin, fake_time):
    plugin = make_plugin(sandbox.url, retry={"maxRetries": 5}, circuitBreaker={"failureThreshold": 2})
    r = AmoroResolver(plugin, **fake_time.options())
    sandbox.fail_next(100, status=502)
    out = await r.resolve(ORDERS)
    assert "circuit open" in out.message and "last error" in out.message and "502" in out.message
    assert sandbox.requests_for("prod.sales.orders") == 2
    await r.aclose()


def test_half_open_lets_one_probe_through():
    now = [0.0]
    b = CircuitBreaker(CircuitBreakerConfig(failure_threshold=1, reset_timeout=10), clock=lambda: now[0])
    b.record_failure()
    now[0] = 10
    assert b.before_request() is True  # the probe
    b.release_probe()  # cancelled without evidence: the next request probes instead
    assert b.state == "half-open"
    assert b.before_request() is True
    with pytest.raises(CircuitOpenError, match="probe is in flight"):  # a second request while the probe is out
        b.before_request()
    b.record_success()
    assert b.before_request() is False
    assert b.state == "closed"


async def _half_open(sandbox, make_plugin, fake_time, **plugin) -> AmoroResolver:
    """A resolver whose breaker opened (one 503) and whose reset timeout has passed: the next request probes."""
    r = AmoroResolver(make_plugin(sandbox.url, retry={"maxRetries": 0},
                                  circuitBreaker={"failureThreshold": 1, "resetTimeout": "30s"}, **plugin),
                      **fake_time.options())
    sandbox.fail_next(1, status=503)
    assert "answered 503" in (await r.resolve(ORDERS)).message
    fake_time.advance(30)
    assert r.breaker.state == "half-open"
    sandbox.reset_stats()
    return r


async def test_half_open_sends_exactly_one_probe_for_concurrent_lookups(sandbox, make_plugin, fake_time):
    names = [f"prod.load.t{i}" for i in range(5)]
    for n in names:
        sandbox.add_table(n, f"s3://warehouse-east/{n}")
    r = await _half_open(sandbox, make_plugin, fake_time, concurrency=8)
    sandbox.delay_next(1, 0.2)  # the probe is still out while the others ask
    outs = await asyncio.gather(*(r.resolve(ident(n)) for n in names))
    assert sandbox.stats()["total"] == 1  # one probe reached the catalog
    probe = [o for o in outs if isinstance(o, DataLocationResolved)]
    refused = [o for o in outs if isinstance(o, DataLocationLookupFailed)]
    assert len(probe) == 1 and len(refused) == 4
    assert all(o.retryable and "probe is in flight" in o.message for o in refused)
    assert r.breaker.state == "closed"  # the probe succeeded
    assert all(isinstance(o, DataLocationResolved) for o in [await r.resolve(ident(n)) for n in names])
    await r.aclose()


async def test_a_cancelled_probe_lets_the_next_lookup_probe(sandbox, make_plugin, fake_time):
    """The daemon stopping cancels a lookup in flight: the probe ends without evidence either way, and must not
    leave the breaker waiting for its outcome for ever (every later lookup failing fast, "probe in flight")."""
    r = await _half_open(sandbox, make_plugin, fake_time)
    sandbox.delay_next(1, 30.0)
    caller = asyncio.create_task(r.resolve(ORDERS))
    await eventually(lambda: asyncio.sleep(0, sandbox.stats()["in_flight"] == 1), "the probe at the catalog")
    flight = next(iter(r._flights._tasks.values()))
    flight.cancel()  # what a shutdown does to the task that runs the request
    await asyncio.gather(caller, flight, return_exceptions=True)
    assert r.breaker.state == "half-open"
    out = await r.resolve(ORDERS)  # probes (not refused as "a probe is in flight") and closes the breaker
    assert isinstance(out, DataLocationResolved), out
    assert sandbox.requests_for("prod.sales.orders") == 2 and r.breaker.state == "closed"
    await r.aclose()


async def test_not_found_and_auth_answers_do_not_trip_the_breaker(sandbox, make_plugin, fake_time):
    plugin = make_plugin(sandbox.url, circuitBreaker={"failureThreshold": 2})
    r = AmoroResolver(plugin, **fake_time.options())
    for _ in range(5):
        await r.resolve(ident("prod.sales.missing"))
    assert r.breaker.state == "closed"
    await r.aclose()


async def test_concurrency_limit_is_respected_at_the_server(sandbox, make_plugin, fake_time):
    names = [f"prod.load.t{i}" for i in range(12)]
    for n in names:
        sandbox.add_table(n, f"s3://warehouse-east/{n}")
    sandbox.delay_next(12, 0.05)
    r = AmoroResolver(make_plugin(sandbox.url, concurrency=3), **fake_time.options())
    outs = await asyncio.gather(*(r.resolve(ident(n)) for n in names))
    assert all(isinstance(o, DataLocationResolved) for o in outs)
    assert sandbox.max_in_flight == 3
    await r.aclose()


async def test_single_flight_one_request_for_concurrent_resolves(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.delay_next(1, 0.05)  # keep the first request open while the others arrive
    triggers = ["lookup", "refresh"] * 10
    outs = await asyncio.gather(*(r.resolve(ORDERS, trigger=t) for t in triggers))
    assert sandbox.requests_for("prod.sales.orders") == 1
    assert [o.trigger for o in outs] == triggers  # shared answer, each caller's own trigger
    assert {o.location for o in outs} == {"s3://warehouse-east/prod/sales/orders"}
    # once the flight has landed, the next resolve asks again (no caching here: the DataSource is the cache)
    await r.resolve(ORDERS)
    assert sandbox.requests_for("prod.sales.orders") == 2
    await r.aclose()


async def test_a_cancelled_caller_does_not_cancel_the_shared_request(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.delay_next(1, 0.05)
    first = asyncio.create_task(r.resolve(ORDERS))
    second = asyncio.create_task(r.resolve(ORDERS))
    await asyncio.sleep(0.01)
    first.cancel()
    out = await second
    assert isinstance(out, DataLocationResolved) and sandbox.requests_for("prod.sales.orders") == 1
    await r.aclose()


def test_only_consecutive_failures_open_the_breaker() -> None:
    b = CircuitBreaker(CircuitBreakerConfig(failure_threshold=3, reset_timeout=10), clock=lambda: 0.0)
    for _ in range(5):  # failures with a success in between: never three in a row
        b.record_failure()
        b.record_failure()
        assert b.state == "closed"
        b.record_success()
    b.record_failure()
    b.record_failure()
    b.record_failure()
    assert b.state == "open"


def test_after_a_good_probe_the_threshold_counts_again() -> None:
    """A probe that succeeded closes the breaker for good: the next failures count from zero up to the threshold
    (a probe still marked in flight would re-open it at the first failure), and the next time it opens, a probe
    goes out again."""
    now = [0.0]
    b = CircuitBreaker(CircuitBreakerConfig(failure_threshold=3, reset_timeout=10), clock=lambda: now[0])
    for cycle in range(3):  # open → half-open → the probe succeeds → closed → opens again …
        for _ in range(3):
            assert b.state == "closed", f"cycle {cycle}: opened before the threshold"
            b.record_failure()
        assert b.state == "open"
        now[0] += 10
        assert b.before_request() is True, f"cycle {cycle}: no probe went out"
        b.record_success()
        assert b.state == "closed" and b.before_request() is False
