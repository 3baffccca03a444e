"""TLS on the daemon's endpoints (the push endpoint, /metrics, /status, the probes) and the push token's
comparison in constant time.

* With ``--http-tls-cert``/``--http-tls-key`` the endpoints speak HTTPS only, with TLS 1.2 at least, and a rotated
  certificate is served without a restart, as the webhooks' (``ServingCertificate``); the flags come in pairs, and
  a certificate that does not load stops the start with one line naming the flags.
* Every decision on a push token goes through ``hmac.compare_digest`` — with no token, a wrong one, a token in
  another scheme, the right one: how long a refusal takes says nothing about how much of the token was right.
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.daemon import endpoints as endpoints_module
from tether.adapters.daemon.endpoints import Endpoints
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.daemon.preflight import StartupError, serving_certificate
from tether.adapters.kubernetes.webhook_certs import ServingCertificate, ensure_self_signed
from tether.adapters.testing.tether_stack import eventually
from tether.core.events import DataLocationResolved, Event
from tether.core.identity import DataIdentity

TOKEN = "the-push-token"


async def moved(identity: DataIdentity) -> Event:
    return DataLocationResolved(identity=identity, location="s3://east/t", trigger="push")


@pytest.fixture
async def https(tmp_path: Path) -> AsyncIterator[tuple[Endpoints, bytes]]:
    cert, key, ca = ensure_self_signed(tmp_path / "tls", names=["127.0.0.1"])
    endpoints = Endpoints(metrics=Metrics(), ready=lambda: (True, "ready"), on_table_moved=moved, push_token=TOKEN,
                          host="127.0.0.1", port=0, tls=ServingCertificate(str(cert), str(key), reload_interval=0))
    await endpoints.start()
    yield endpoints, ca
    await endpoints.stop()


async def test_the_endpoints_speak_tls_only(https: tuple[Endpoints, bytes]) -> None:
    endpoints, ca = https
    assert endpoints.scheme == "https"
    context = ssl.create_default_context(cadata=ca.decode())
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz", "/metrics"):
            async with http.get(f"https://127.0.0.1:{endpoints.port}{path}", ssl=context) as response:
                assert response.status == 200
        async with http.post(f"https://127.0.0.1:{endpoints.port}/v1/notifications/table-moved", ssl=context,
                             json={"system": "amoro", "dataSourceName": "db.t"},
                             headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 202
        with pytest.raises(aiohttp.ClientError):  # plain HTTP: no answer at all
            async with http.get(f"http://127.0.0.1:{endpoints.port}/healthz"):
                pass
    assert endpoints.tls is not None and endpoints.tls.context().minimum_version == ssl.TLSVersion.TLSv1_2


def rotate(tls: ServingCertificate, folder: Path) -> bytes:
    """What cert-manager does to a mounted Secret: a new key and certificate (of a new CA) in place."""
    cert, key, ca = ensure_self_signed(folder, names=["127.0.0.1"])
    Path(tls.key_file).write_bytes(key.read_bytes())
    Path(tls.cert_file).write_bytes(cert.read_bytes())
    return ca


async def test_a_rotated_certificate_is_served_without_a_restart(https: tuple[Endpoints, bytes],
                                                                 tmp_path: Path) -> None:
    """Rotated to a new CA, which the clients trust instead of the old one: every handshake with the old chain fails,
    so no request could trigger the reload — the endpoints' own watch of the files does (ServingCertificate.watch)."""
    endpoints, old_ca = https
    assert endpoints.tls is not None
    new_ca = rotate(endpoints.tls, tmp_path / "rotated")
    url = f"https://127.0.0.1:{endpoints.port}/healthz"

    async def served_with_the_new_chain() -> bool:
        try:
            async with aiohttp.ClientSession() as http, http.get(  # (a new connection: a new handshake)
                    url, ssl=ssl.create_default_context(cadata=new_ca.decode())) as response:
                return response.status == 200
        except aiohttp.ClientConnectorCertificateError:
            return False

    await eventually(served_with_the_new_chain, "the rotated certificate served")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(url, ssl=ssl.create_default_context(cadata=old_ca.decode())):
                pass


async def test_every_token_decision_goes_through_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    compare_digest = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare_digest(a, b)

    monkeypatch.setattr(endpoints_module.hmac, "compare_digest", spy)
    endpoints = Endpoints(metrics=Metrics(), ready=lambda: (True, "ready"), on_table_moved=moved, push_token=TOKEN,
                          host="127.0.0.1", port=0)
    await endpoints.start()
    body = {"system": "amoro", "dataSourceName": "db.t"}
    cases = {None: 401, f"Bearer {TOKEN[:-1]}": 401, f"Bearer {TOKEN}x": 401, TOKEN: 401, f"Basic {TOKEN}": 401,
             f"Bearer {TOKEN}": 202, f"bearer  {TOKEN} ": 202}
    try:
        async with aiohttp.ClientSession() as http:
            for authorization, expected in cases.items():
                headers = {"Authorization": authorization} if authorization is not None else {}
                async with http.post(f"http://127.0.0.1:{endpoints.port}/v1/notifications/table-moved", json=body,
                                     headers=headers) as response:
                    assert response.status == expected, authorization
    finally:
        await endpoints.stop()
    assert len(calls) == len(cases)  # one constant-time comparison per request, whatever came
    assert all(expected == TOKEN.encode() for _, expected in calls)


def test_the_tls_flags_come_in_pairs(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("x")
    result = CliRunner().invoke(main, ["run", "--http-tls-cert", str(tmp_path / "tls.crt")])
    assert result.exit_code == 2 and "give both --http-tls-cert and --http-tls-key, or neither" in result.output


def test_a_certificate_that_does_not_load_stops_the_start_in_one_line(tmp_path: Path) -> None:
    cert, key, _ = ensure_self_signed(tmp_path / "a", names=["127.0.0.1"])
    _, other_key, _ = ensure_self_signed(tmp_path / "b", names=["127.0.0.1"])
    (tmp_path / "garbage.pem").write_text("not a certificate")
    for cert_file, key_file in ((str(tmp_path / "garbage.pem"), str(key)), (str(cert), str(other_key))):
        with pytest.raises(StartupError) as refused:
            serving_certificate(cert_file, key_file, flags="--http-tls-cert/--http-tls-key")
        assert str(refused.value).startswith("--http-tls-cert/--http-tls-key: cannot load the TLS certificate")
        assert "\n" not in str(refused.value)
    assert serving_certificate(str(cert), str(key), flags="x").context() is not None


def test_a_certificate_is_reloaded_once_per_change_and_its_folder_made_with_its_parents(tmp_path: Path) -> None:
    cert, key, _ = ensure_self_signed(tmp_path / "not" / "there" / "yet", names=["127.0.0.1"])
    tls = ServingCertificate(str(cert), str(key))
    assert not tls.reload_if_changed()  # nothing loaded yet: the first context() loads
    tls.context()
    assert not tls.reload_if_changed()  # unchanged
    rotate(tls, tmp_path / "rotated")
    os.utime(cert, ns=(0, cert.stat().st_mtime_ns + 10**9))  # (a different mtime even on a coarse filesystem)
    assert tls.reload_if_changed()
    assert not tls.reload_if_changed()  # once: the new files are the loaded ones now
