"""Resolving against the sandbox catalog over real HTTP: locations, misses, bad names, bad bodies, path systems."""

from __future__ import annotations

import aiohttp
import pytest

from tether.adapters.catalog.iceberg_rest import AmoroResolver, IcebergRestResolver, PathResolver
from tether.adapters.catalog.registry import ResolverSet
from tether.core.events import DataLocationLookupFailed, DataLocationResolved, DataSourceNotInCatalog
from tether.core.identity import make_identity
from tether.core.plugin_config import parse_plugin_configmap


def ident(name: str, system: str = "amoro"):
    return make_identity(system, "table", name, None)


async def test_location_from_metadata_location(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    out = await r.resolve(ident("prod.sales.orders"))
    assert out == DataLocationResolved(identity=ident("prod.sales.orders"), location="s3://warehouse-east/prod/sales/orders")
    assert sandbox.requests_for("prod.sales.orders") == 1
    await r.aclose()


async def test_write_data_path_wins_over_location(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    out = await r.resolve(ident("prod.events.clicks"))
    assert isinstance(out, DataLocationResolved)
    assert out.location == "s3://warehouse-west/prod/events/clicks/data"
    await r.aclose()


async def test_moved_table_is_seen_on_the_next_lookup(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.move_table("prod.sales.orders", "s3://warehouse-west/moved/orders")
    out = await r.resolve(ident("prod.sales.orders"), trigger="refresh")
    assert out == DataLocationResolved(
        identity=ident("prod.sales.orders"), location="s3://warehouse-west/moved/orders", trigger="refresh"
    )
    sandbox.move_table("prod.sales.orders", "s3://warehouse-east/data-only", via="write.data.path")
    out = await r.resolve(ident("prod.sales.orders"))
    assert isinstance(out, DataLocationResolved) and out.location == "s3://warehouse-east/data-only"
    await r.aclose()


async def test_missing_table_is_not_in_catalog(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    out = await r.resolve(ident("prod.sales.nope"))
    assert isinstance(out, DataSourceNotInCatalog)
    assert "NoSuchTableException" in out.message and "prod.sales.nope" in out.message
    missing_ns = await r.resolve(ident("prod.nowhere.t"))
    assert isinstance(missing_ns, DataSourceNotInCatalog) and "NoSuchNamespaceException" in missing_ns.message
    assert fake_time.sleeps == []  # a definite answer is never retried
    await r.aclose()


async def test_non_iceberg_catalog_400_is_not_in_catalog_with_server_message(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    out = await r.resolve(ident("hive_legacy.db.t"))
    assert isinstance(out, DataSourceNotInCatalog)
    assert "not an iceberg catalog" in out.message
    await r.aclose()


@pytest.mark.parametrize("name", ["sales.orders", "a.b.c.d", "prod..orders", "orders"])
async def test_malformed_amoro_name_is_a_non_retryable_failure_naming_the_shape(sandbox, make_plugin, name):
    r = AmoroResolver(make_plugin(sandbox.url))
    out = await r.resolve(ident(name))
    assert isinstance(out, DataLocationLookupFailed) and not out.retryable
    assert "'catalog.db.table'" in out.message
    assert sandbox.stats()["total"] == 0
    await r.aclose()


async def test_generic_iceberg_rest_multi_level_namespace_uses_unit_separator(sandbox, make_plugin, fake_time):
    plugin = make_plugin(sandbox.url, system="lake", type="iceberg-rest")
    r = IcebergRestResolver(plugin, **fake_time.options())
    assert r.table_url("web.daily.visits").endswith("/v1/namespaces/web%1Fdaily/tables/visits")
    out = await r.resolve(ident("web.daily.visits", "lake"))
    assert isinstance(out, DataLocationResolved)
    assert out.location == "s3://warehouse-west/default/web/daily/visits"
    bad = await r.resolve(ident("visits", "lake"))
    assert isinstance(bad, DataLocationLookupFailed) and "'namespace.table'" in bad.message
    await r.aclose()


async def test_generic_with_catalog_prefix_template(sandbox, make_plugin, fake_time):
    plugin = make_plugin(
        sandbox.url, system="lake", type="iceberg-rest", basePath="/api/iceberg/rest", prefix="catalogs/{catalog}"
    )
    r = IcebergRestResolver(plugin, **fake_time.options())
    out = await r.resolve(ident("analytics.marketing.campaigns", "lake"))
    assert isinstance(out, DataLocationResolved) and out.location.startswith("s3://warehouse-west/")
    bad = await r.resolve(ident("marketing.campaigns", "lake"))
    assert isinstance(bad, DataLocationLookupFailed) and "'catalog.namespace.table'" in bad.message
    await r.aclose()


async def test_malformed_body_is_a_clear_failure_and_not_retried_at_once(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.malformed_next(1)
    out = await r.resolve(ident("prod.sales.orders"))
    assert isinstance(out, DataLocationLookupFailed) and out.retryable
    assert "malformed LoadTableResponse" in out.message and "502 Bad Gateway" in out.message
    assert sandbox.requests_for("prod.sales.orders") == 1
    assert isinstance(await r.resolve(ident("prod.sales.orders")), DataLocationResolved)
    await r.aclose()


async def test_json_body_without_metadata_is_malformed(sandbox, make_plugin, fake_time):
    r = AmoroResolver(make_plugin(sandbox.url), **fake_time.options())
    sandbox.malformed_next(1, body='{"metadata-location": "s3://x/m.json"}')
    out = await r.resolve(ident("prod.sales.orders"))
    assert isinstance(out, DataLocationLookupFailed) and "no 'metadata' object" in out.message
    await r.aclose()


async def test_path_systems_need_no_http(monkeypatch):
    def no_http(*args, **kwargs):
        raise AssertionError("a path system must not open an HTTP session")

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", no_http)
    plugins = parse_plugin_configmap({"s3": '{"system": "s3"}', "hdfs": '{"system": "hdfs"}'})
    rs = ResolverSet(plugins)
    assert isinstance(rs.resolver("s3"), PathResolver)
    cases = {
        ("s3", "s3://warehouse-east//prod/t"): "s3://warehouse-east/prod/t",
        ("s3", "warehouse-west/prod/t"): "s3://warehouse-west/prod/t",
        ("s3", "S3A://bucket/x"): "s3a://bucket/x",
        ("hdfs", "hdfs://nn:8020/warehouse/t"): "hdfs://nn:8020/warehouse/t",
        ("hdfs", "/warehouse/t"): "hdfs:///warehouse/t",
        ("s3", "/bucket/dir/"): "s3://bucket/dir/",
    }
    for (system, name), location in cases.items():
        out = await rs.resolve(ident(name, system))
        assert out == DataLocationResolved(identity=ident(name, system), location=location), (system, name)
    wrong = await rs.resolve(ident("hdfs://nn/x", "s3"))
    assert isinstance(wrong, DataLocationLookupFailed) and not wrong.retryable and "scheme 'hdfs'" in wrong.message
    await rs.aclose()


async def test_unknown_system_is_a_non_retryable_failure(sandbox, make_plugin):
    doc = f'{{"system": "amoro", "endpoint": {{"url": "{sandbox.url}"}}}}'
    rs = ResolverSet(parse_plugin_configmap({"amoro": doc}))
    out = await rs.resolve(ident("prod.sales.orders", "hive"))
    assert out == DataLocationLookupFailed(
        identity=ident("prod.sales.orders", "hive"), message="no plugin configured for system 'hive'", retryable=False
    )
    assert isinstance(await rs.resolve(ident("prod.sales.orders")), DataLocationResolved)
    await rs.aclose()


async def test_invalid_plugin_entry_is_reported_for_its_system():
    rs = ResolverSet(parse_plugin_configmap({"amoro": '{"system": "amoro", "concurrency": 0}'}))
    out = await rs.resolve(ident("prod.sales.orders"))
    assert isinstance(out, DataLocationLookupFailed) and not out.retryable
    assert "invalid" in out.message and "concurrency" in out.message
    await rs.aclose()


async def test_health_checks_amoro_real_path(sandbox, make_plugin):
    r = AmoroResolver(make_plugin(sandbox.url))
    assert r.health_url == f"{sandbox.url}/api/ams/v1/health/status"
    ok, detail = await r.check_health()
    assert ok and "success" in detail
    await r.aclose()
