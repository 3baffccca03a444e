"""The webhook server's certificates over time (``adapters/kubernetes/webhook_certs.py``, ``WebhookServer``):
renewal of the self-signed ones, rotation of mounted ones picked up while serving, and a rotation caught half-way.

Time is passed to ``ensure_self_signed`` (``now``) rather than waited for; the server checks its files every
``reload_interval`` (a few milliseconds here), requests or not.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import structlog
from cryptography import x509

from tether.adapters.kubernetes.webhook import AdmissionRequest, WebhookAnswer, WebhookServer
from tether.adapters.kubernetes.webhook_certs import CA_FILE, CERT_FILE, KEY_FILE, ensure_self_signed
from tether.adapters.testing.tether_stack import eventually

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PATH = "/mutate/things"


def _expiry(cert: Path) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc


def test_a_valid_certificate_is_kept_across_restarts(tmp_path: Path) -> None:
    cert, key, ca = ensure_self_signed(tmp_path, names=["tether-webhook.tether-system.svc"], now=NOW)
    first = (cert.read_bytes(), key.read_bytes(), ca)
    again = ensure_self_signed(tmp_path, names=["tether-webhook.tether-system.svc"], now=NOW + dt.timedelta(days=300))
    assert (again[0].read_bytes(), again[1].read_bytes(), again[2]) == first  # replicas sharing it agree
    assert oct(key.stat().st_mode & 0o777) == "0o600"


def test_a_certificate_close_to_expiry_is_renewed_with_a_new_ca(tmp_path: Path) -> None:
    names = ["tether-webhook.tether-system.svc"]
    cert, _, ca = ensure_self_signed(tmp_path, names=names, now=NOW)
    expires = _expiry(cert)
    late = expires - dt.timedelta(days=29)  # less than 30 days left
    renewed, _, new_ca = ensure_self_signed(tmp_path, names=names, now=late)
    assert new_ca != ca and (tmp_path / CA_FILE).read_bytes() == new_ca  # the caBundle to inject changes too
    assert _expiry(renewed) > expires + dt.timedelta(days=300)


def test_a_certificate_not_covering_the_names_or_unreadable_is_remade(tmp_path: Path) -> None:
    cert, _, ca = ensure_self_signed(tmp_path, names=["a.svc"], now=NOW)
    _, _, wider = ensure_self_signed(tmp_path, names=["a.svc", "127.0.0.1"], now=NOW)  # a name (an IP) added
    assert wider != ca
    san = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["a.svc"] and [str(ip) for ip in
                                                                   san.get_values_for_type(x509.IPAddress)] == [
        "127.0.0.1"]
    cert.write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    _, _, remade = ensure_self_signed(tmp_path, names=["a.svc", "127.0.0.1"], now=NOW)
    assert remade != wider


class Served:
    def __init__(self, server: WebhookServer, ca: bytes) -> None:
        self.server, self.ca = server, ca

    async def status(self, ca: bytes) -> int:
        """The status of an empty POST, the handshake verified against ``ca`` (raises if it does not verify)."""
        context = ssl.create_default_context(cadata=ca.decode())
        async with aiohttp.ClientSession() as http, http.post(
                f"https://127.0.0.1:{self.server.port}{PATH}", data=b"{}", ssl=context) as response:
            return response.status


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    cert, key, ca = ensure_self_signed(tmp_path / "mounted", names=["127.0.0.1"])

    def allow(request: AdmissionRequest) -> WebhookAnswer:
        return WebhookAnswer()

    server = WebhookServer(handlers={PATH: allow}, cert_file=str(cert), key_file=str(key),
                           serving=lambda: (True, "ready"), host="127.0.0.1", port=0, reload_interval=0.01)
    await server.start()
    try:
        yield Served(server, ca)
    finally:
        await server.stop()


def _rotate(mounted: Path, fresh: Path) -> bytes:
    """cert-manager renewing the mounted Secret: a new key and certificate (a new CA here) in place."""
    cert, key, ca = ensure_self_signed(fresh, names=["127.0.0.1"])
    (mounted / KEY_FILE).write_bytes(key.read_bytes())
    (mounted / CERT_FILE).write_bytes(cert.read_bytes())
    return ca


async def test_a_rotation_to_a_new_ca_is_picked_up_without_a_request(served: Served, tmp_path: Path) -> None:
    """The API server trusts the new CA (its caBundle updated with the Secret) and fails every handshake with the
    old certificate: no request reaches the server, and the server must notice the new files all the same."""
    assert await served.status(served.ca) == 400  # (an empty review: the handshake is what matters)
    new_ca = _rotate(tmp_path / "mounted", tmp_path / "renewed")

    async def verified_by_the_new_ca() -> bool:
        try:
            return await served.status(new_ca) == 400
        except aiohttp.ClientConnectorCertificateError:
            return False

    await eventually(verified_by_the_new_ca, "the new certificate served")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await served.status(served.ca)


async def test_a_rotation_caught_half_way_keeps_the_old_certificate(served: Served, tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    other, _, _ = ensure_self_signed(tmp_path / "other", names=["127.0.0.1"])
    (mounted / CERT_FILE).write_bytes(other.read_bytes())  # the new certificate is there, its key not yet
    assert served.server._reloader is not None
    served.server._reloader.cancel()  # (the test checks by hand from here)
    with structlog.testing.capture_logs() as logs:
        assert not served.server.reload_if_changed()
    assert [e["event"] for e in logs] == ["could not reload the certificate; keeping the current one"]
    assert await served.status(served.ca) == 400  # still serving, with the old chain
    new_ca = _rotate(mounted, tmp_path / "renewed")  # the rotation completes
    assert served.server.reload_if_changed()
    assert await served.status(new_ca) == 400
