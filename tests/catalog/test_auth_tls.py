"""Authentication modes (none, basic, bearer/token, apikey, OAuth2 client credentials) and TLS, over real HTTP."""

from __future__ import annotations

import asyncio
import os
import ssl

import pytest
import trustme

from tether.adapters.catalog.iceberg_rest import AmoroResolver
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.core.events import DataLocationLookupFailed, DataLocationResolved
from tether.core.identity import make_identity

ORDERS = make_identity("amoro", "table", "prod.sales.orders", None)


async def resolve_once(plugin, fake_time):
    r = AmoroResolver(plugin, **fake_time.options())
    try:
        return await r.resolve(ORDERS)
    finally:
        await r.aclose()


@pytest.mark.parametrize(
    ("server", "good", "bad"),
    [
        ({"mode": "basic", "username": "u", "password": "p"},
         {"type": "basic", "username": "u", "password": "p"}, {"type": "basic", "username": "u", "password": "x"}),
        ({"mode": "bearer", "token": "t0k"}, {"type": "bearer", "token": "t0k"}, {"type": "bearer", "token": "nope"}),
        ({"mode": "bearer", "token": "t0k"}, {"type": "token", "token": "t0k"}, {"type": "none"}),
        ({"mode": "apikey", "api_key": "k1"}, {"type": "apikey", "token": "k1"}, {"type": "apikey", "token": "k2"}),
        ({"mode": "apikey", "api_key": "k1", "header": "X-Catalog-Key"},
         {"type": "apikey", "token": "k1", "extra": {"header": "X-Catalog-Key"}}, {"type": "apikey", "token": "k1"}),
    ],
    ids=["basic", "bearer", "vg-token-alias", "apikey", "apikey-custom-header"],
)
async def test_static_auth_modes(sandbox, make_plugin, fake_time, server, good, bad):
    sandbox.require_auth(**server)
    assert isinstance(await resolve_once(make_plugin(sandbox.url, auth=good), fake_time), DataLocationResolved)
    denied = await resolve_once(make_plugin(sandbox.url, auth=bad), fake_time)
    assert isinstance(denied, DataLocationLookupFailed) and not denied.retryable
    assert "denied access (401)" in denied.message and f"auth type {bad['type'].replace('token', 'bearer')!r}" in (
        denied.message
    )
    assert fake_time.sleeps == []  # auth failures are not retried


async def test_no_auth_against_an_open_catalog(sandbox, make_plugin, fake_time):
    assert isinstance(await resolve_once(make_plugin(sandbox.url, auth={"type": "none"}), fake_time),
                      DataLocationResolved)


def oauth2(url: str, secret: str = "s3cret", **more: str) -> dict[str, str]:
    return {"type": "oauth2", "tokenUrl": f"{url}/v1/oauth/tokens", "clientId": "tether", "clientSecret": secret,
            "scope": "catalog", **more}


async def test_oauth2_token_is_cached_and_refreshed_before_expiry(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret", expires_in=100)
    r = AmoroResolver(make_plugin(sandbox.url, auth=oauth2(sandbox.url)), **fake_time.options())
    for _ in range(3):
        assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
    assert sandbox.token_requests == 1 and r.auth.token_requests == 1
    fake_time.advance(85)  # still inside the lifetime minus the 10 % margin
    await r.resolve(ORDERS)
    assert sandbox.token_requests == 1
    fake_time.advance(10)  # 95 s: within the margin, fetch a fresh token before the old one dies
    assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
    assert sandbox.token_requests == 2
    await r.aclose()


async def test_oauth2_revoked_token_is_refreshed_once_on_401(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    r = AmoroResolver(make_plugin(sandbox.url, auth=oauth2(sandbox.url)), **fake_time.options())
    await r.resolve(ORDERS)
    sandbox.revoke_tokens()
    out = await r.resolve(ORDERS)
    assert isinstance(out, DataLocationResolved)
    assert sandbox.token_requests == 2
    assert sandbox.requests_for("prod.sales.orders") == 3  # ok, 401, ok after refresh
    await r.aclose()


async def test_oauth2_default_token_url_is_under_the_base_path(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    auth = oauth2(sandbox.url)
    del auth["tokenUrl"]
    r = AmoroResolver(make_plugin(sandbox.url, auth=auth), **fake_time.options())
    assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
    await r.aclose()


async def test_oauth2_token_url_given_as_a_path_is_on_the_endpoints_host(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    r = AmoroResolver(make_plugin(sandbox.url, auth={**oauth2(sandbox.url), "tokenUrl": "/v1/oauth/tokens"}),
                      **fake_time.options())
    assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
    assert sandbox.token_requests == 1
    await r.aclose()


async def test_oauth2_rejected_client_is_a_non_retryable_failure(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    out = await resolve_once(make_plugin(sandbox.url, auth=oauth2(sandbox.url, secret="wrong")), fake_time)
    assert isinstance(out, DataLocationLookupFailed) and not out.retryable
    assert "token request" in out.message and "rejected (401)" in out.message
    assert sandbox.requests_for("prod.sales.orders") == 0


async def test_concurrent_lookups_share_one_token_request(sandbox, make_plugin, fake_time):
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    r = AmoroResolver(make_plugin(sandbox.url, auth=oauth2(sandbox.url)), **fake_time.options())
    names = ["prod.sales.orders", "prod.sales.customers", "prod.events.clicks", "analytics.marketing.campaigns"]
    outs = await asyncio.gather(*(r.resolve(make_identity("amoro", "table", n, None)) for n in names))
    assert all(isinstance(o, DataLocationResolved) for o in outs)
    assert sandbox.token_requests == 1
    await r.aclose()


# ------------------------------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_sandbox(ca):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    async with SandboxCatalog(ssl_context=ctx) as cat:
        yield cat, ctx


async def test_tls_with_a_private_ca(tls_sandbox, ca, tmp_path, make_plugin, fake_time):
    cat, _ = tls_sandbox
    assert cat.url.startswith("https://")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ok = await resolve_once(make_plugin(cat.url, tls={"caFile": str(ca_file)}), fake_time)
    assert isinstance(ok, DataLocationResolved)
    untrusted = await resolve_once(make_plugin(cat.url), fake_time)
    assert isinstance(untrusted, DataLocationLookupFailed) and not untrusted.retryable
    assert "TLS verification" in untrusted.message
    skip = await resolve_once(make_plugin(cat.url, tls={"insecureSkipVerify": True}), fake_time)
    assert isinstance(skip, DataLocationResolved)


async def test_tls_client_certificate(tls_sandbox, ca, tmp_path, make_plugin, fake_time):
    cat, server_ctx = tls_sandbox
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS from now on
    ca.configure_trust(server_ctx)
    ca_file, client_pem = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("tether@example.org").private_key_and_cert_chain_pem.write_to_path(str(client_pem))
    ok = await resolve_once(make_plugin(cat.url, tls={"caFile": str(ca_file), "certFile": str(client_pem)}), fake_time)
    assert isinstance(ok, DataLocationResolved)
    no_cert = await resolve_once(make_plugin(cat.url, tls={"caFile": str(ca_file)}, retry={"maxRetries": 0}),
                                 fake_time)
    assert isinstance(no_cert, DataLocationLookupFailed)


# --- secrets by reference (tokenFile, passwordEnv, clientSecretFile …) ------------------------------------------


async def test_a_token_file_is_read_per_request_and_a_rotation_is_used_at_once(sandbox, make_plugin, fake_time,
                                                                                tmp_path):
    token = tmp_path / "token"
    token.write_text("first-token\n")
    sandbox.require_auth("bearer", token="first-token")
    plugin = make_plugin(sandbox.url, auth={"type": "bearer", "tokenFile": str(token)})
    assert plugin.auth.token == "" and plugin.auth.token_file == str(token)  # the ConfigMap holds the path only
    r = AmoroResolver(plugin, **fake_time.options())
    try:
        assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
        sandbox.require_auth("bearer", token="second-token")
        token.write_text("second-token\n")  # the mounted Secret rotated
        os.utime(token, (1, 1))  # (a new modification time, however fast the clock of the file system)
        assert isinstance(await r.resolve(ORDERS), DataLocationResolved)
        token.unlink()
        gone = await r.resolve(ORDERS)
        assert isinstance(gone, DataLocationLookupFailed) and gone.retryable
        assert f"endpoint.auth.tokenFile {token}: cannot read it" in gone.message
    finally:
        await r.aclose()


async def test_secrets_from_the_environment(sandbox, make_plugin, fake_time, monkeypatch):
    monkeypatch.setenv("CATALOG_PASSWORD", "p4ss")
    sandbox.require_auth("basic", username="u", password="p4ss")
    good = make_plugin(sandbox.url, auth={"type": "basic", "username": "u", "passwordEnv": "CATALOG_PASSWORD"})
    assert isinstance(await resolve_once(good, fake_time), DataLocationResolved)
    unset = make_plugin(sandbox.url, auth={"type": "basic", "username": "u", "passwordEnv": "NOT_SET_ANYWHERE"})
    failed = await resolve_once(unset, fake_time)
    assert isinstance(failed, DataLocationLookupFailed) and "$NOT_SET_ANYWHERE is not set" in failed.message


async def test_an_oauth2_client_secret_from_a_file(sandbox, make_plugin, fake_time, tmp_path):
    (tmp_path / "secret").write_text("s3cret")
    sandbox.require_auth("oauth2", client_id="tether", client_secret="s3cret")
    auth = {key: value for key, value in oauth2(sandbox.url).items() if key != "clientSecret"}
    plugin = make_plugin(sandbox.url, auth={**auth, "clientSecretFile": str(tmp_path / "secret")})
    assert isinstance(await resolve_once(plugin, fake_time), DataLocationResolved)


def test_one_source_per_secret(make_plugin):
    with pytest.raises(ValueError, match="give one of token, tokenEnv, not several"):
        make_plugin("http://x", auth={"type": "bearer", "token": "t", "tokenEnv": "T"})
