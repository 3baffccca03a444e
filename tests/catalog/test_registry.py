"""Choosing resolvers: built-ins, third-party entry points of ``tether.catalogs``, and the per-system set."""

from __future__ import annotations

import json
import textwrap

import pytest

from tether.adapters.catalog.iceberg_rest import AmoroResolver, CatalogResolver, IcebergRestResolver, PathResolver
from tether.adapters.catalog.registry import ResolverSet, UnknownCatalogType, load_resolver
from tether.core.events import DataLocationLookupFailed, DataLocationResolved
from tether.core.identity import make_identity
from tether.core.plugin_config import parse_plugin, parse_plugin_configmap

FAKE_PLUGIN = '''
from tether.core.events import DataLocationResolved

class FakeResolver:
    def __init__(self, plugin, *, session=None):
        self.system = plugin.system
        self.closed = False

    async def resolve(self, identity, *, trigger="lookup"):
        return DataLocationResolved(identity=identity, location="fake://" + identity.name, trigger=trigger)

    async def aclose(self):
        self.closed = True

def broken(plugin, *, session=None):
    raise RuntimeError("cannot start")

def not_a_resolver(plugin, *, session=None):
    return object()
'''


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A real installed distribution on sys.path declaring three ``tether.catalogs`` entry points."""
    (tmp_path / "fakecat_plugin.py").write_text(textwrap.dedent(FAKE_PLUGIN))
    dist = tmp_path / "fakecat-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakecat\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[tether.catalogs]\nfake = fakecat_plugin:FakeResolver\nbroken = fakecat_plugin:broken\n"
        "odd = fakecat_plugin:not_a_resolver\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def plugin(system: str, **doc):
    return parse_plugin(system, json.dumps({"system": system, "endpoint": {"url": "http://127.0.0.1:9"}, **doc}))


def test_builtin_types():
    assert type(load_resolver(plugin("amoro"))) is AmoroResolver
    assert type(load_resolver(plugin("lake", type="iceberg-rest"))) is IcebergRestResolver
    assert type(load_resolver(plugin("s3"))) is PathResolver
    assert isinstance(load_resolver(plugin("hdfs")), CatalogResolver)


def test_unknown_type_names_the_known_ones():
    with pytest.raises(UnknownCatalogType, match=r"no catalog plugin of type 'hive'.*amoro"):
        load_resolver(plugin("hive"))


async def test_third_party_entry_point(third_party):
    r = load_resolver(plugin("mine", type="fake"))
    assert type(r).__name__ == "FakeResolver" and isinstance(r, CatalogResolver)
    ident = make_identity("mine", "table", "a.b", None)
    assert await r.resolve(ident, trigger="push") == DataLocationResolved(
        identity=ident, location="fake://a.b", trigger="push"
    )


def test_a_plugin_that_returns_no_resolver_is_refused_with_its_type(third_party):
    with pytest.raises(TypeError, match="catalog plugin 'odd' returned object, not a CatalogResolver"):
        load_resolver(plugin("mine", type="odd"))


async def test_broken_third_party_plugin_spoils_only_its_system(third_party):
    rs = ResolverSet(parse_plugin_configmap({
        "bad": '{"system": "bad", "type": "broken"}',
        "good": '{"system": "good", "type": "fake"}',
    }))
    bad = await rs.resolve(make_identity("bad", "table", "x", None))
    assert isinstance(bad, DataLocationLookupFailed) and not bad.retryable
    assert "could not be loaded: cannot start" in bad.message
    assert isinstance(await rs.resolve(make_identity("good", "table", "x", None)), DataLocationResolved)
    await rs.aclose()


async def test_resolver_set_rebuilds_only_changed_systems(third_party):
    first = parse_plugin_configmap({
        "a": '{"system": "a", "type": "fake"}',
        "b": '{"system": "b", "type": "fake"}',
        "s3": '{"system": "s3"}',
    })
    rs = ResolverSet(first)
    a, b = rs.resolver("a"), rs.resolver("b")
    assert rs.systems == {"a", "b", "s3"}
    rs.update(parse_plugin_configmap({
        "a": '{"system": "a", "type": "fake"}',
        "b": '{"system": "b", "type": "fake", "concurrency": 2}',
    }))
    assert rs.resolver("a") is a
    assert rs.resolver("b") is not b and rs.resolver("b").system == "b"
    gone = await rs.resolve(make_identity("s3", "path", "s3://x/y", None))
    assert isinstance(gone, DataLocationLookupFailed) and "no plugin configured for system 's3'" in gone.message
    await rs.aclose()
    assert b.closed and a.closed


async def test_resolver_set_contains_a_plugin_that_raises():
    class Raising:
        system = "x"

        async def resolve(self, identity, *, trigger="lookup"):
            raise RuntimeError("boom")

        async def aclose(self):
            return None

    rs = ResolverSet(parse_plugin_configmap({"x": '{"system": "x"}'}), loader=lambda p, **kw: Raising())
    out = await rs.resolve(make_identity("x", "table", "t", None))
    assert isinstance(out, DataLocationLookupFailed) and out.retryable and "boom" in out.message
    await rs.aclose()


async def test_resolver_set_passes_injected_time_to_builtins(fake_time, sandbox):
    doc = json.dumps({"system": "amoro", "endpoint": {"url": sandbox.url},
                      "retryConfig": {"maxRetries": 1, "initialBackoff": "2s"}})
    rs = ResolverSet(parse_plugin_configmap({"amoro": doc}), **fake_time.options(random=1.0))
    sandbox.fail_next(1, status=503)
    out = await rs.resolve(make_identity("amoro", "table", "prod.sales.orders", None))
    assert isinstance(out, DataLocationResolved) and fake_time.sleeps == [2.0]
    await rs.aclose()
