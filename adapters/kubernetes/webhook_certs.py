"""Certificates for tether's webhooks without cert-manager: a self-signed CA, a serving certificate, caBundle.

The API server calls a webhook over HTTPS and verifies its certificate against the ``caBundle`` of the webhook
configuration, for the name ``<service>.<namespace>.svc``. Two ways to get there (``ops/webhook/README.md``):

* **cert-manager** issues the Secret and its CA injector fills ``caBundle`` (annotation
  ``cert-manager.io/inject-ca-from``); tether only reads the mounted files (:class:`~.webhook.WebhookServer`
  re-reads them when they rotate);
* **self-signed** (``tether run --webhook-self-signed``): at start the daemon makes a CA and a serving
  certificate in a directory (kept across restarts while valid, so replicas sharing a volume agree), and patches
  the ``caBundle`` of its webhook configurations — :func:`inject_ca_bundle`, guarded by resourceVersion and
  written only where it differs.

Keys are ECDSA P-256 (small, fast handshakes); the serving certificate lives a year and is renewed at start when
less than 30 days are left.

:class:`ServingCertificate` is the server side of every TLS port tether opens — the webhook server and, with
``--http-tls-cert``/``--http-tls-key``, the daemon's endpoints: one context from a certificate and key file, TLS
1.2 at least, re-read when the files change (cert-manager rotating a mounted Secret) without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import os
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .client import KubeClient, KubeError, Resource

log = structlog.get_logger("tether.tls")

MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", False)

CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
_VALIDITY = dt.timedelta(days=365)
_RENEW_BEFORE = dt.timedelta(days=30)


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may use for a Service (it verifies ``<svc>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _still_valid(cert_path: Path, names: Sequence[str], now: dt.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}
    return set(names) <= have and cert.not_valid_after_utc - now > _RENEW_BEFORE


def ensure_self_signed(directory: str | Path, *, names: Sequence[str],
                       now: dt.datetime | None = None) -> tuple[Path, Path, bytes]:
    """A CA and a serving certificate for ``names`` (DNS names or IP addresses) in ``directory``, made when
    missing, expiring or not covering ``names``. Returns (cert file, key file, CA PEM for ``caBundle``)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    now = now or dt.datetime.now(dt.UTC)
    cert_path, key_path, ca_path = folder / CERT_FILE, folder / KEY_FILE, folder / CA_FILE
    if ca_path.exists() and _still_valid(cert_path, names, now):
        return cert_path, key_path, ca_path.read_bytes()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether webhook CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + _VALIDITY)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    # key first, certificate last: a server re-reading on the certificate's change finds a matching key
    _write(key_path, key_pem, mode=0o600)
    _write(ca_path, _pem(ca))
    _write(cert_path, _pem(cert))
    return cert_path, key_path, _pem(ca)


def _write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)  # atomic: a reader never sees half a file


async def inject_ca_bundle(kube: KubeClient, configuration: str, ca_pem: bytes, *, attempts: int = 5) -> bool:
    """Set ``caBundle`` on every webhook of the MutatingWebhookConfiguration ``configuration``; True when it
    wrote (False: already so). The list of webhooks is replaced whole (a merge patch cannot address one element
    of a list), guarded by the resourceVersion read, and re-read on a conflict."""
    bundle = base64.b64encode(ca_pem).decode()
    for _ in range(attempts):
        current = await kube.get(MUTATING_WEBHOOKS, configuration)
        if current is None:
            raise LookupError(f"MutatingWebhookConfiguration {configuration!r} does not exist: apply ops/webhook first")
        hooks: list[dict[str, Any]] = current.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
            return False
        for hook in hooks:
            hook.setdefault("clientConfig", {})["caBundle"] = bundle
        body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "webhooks": hooks}
        try:
            await kube.patch(MUTATING_WEBHOOKS, configuration, body)
            return True
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise RuntimeError(f"could not set the caBundle of {configuration!r}: kept conflicting")


class ServingCertificate:
    """A server's TLS context from ``cert_file`` and ``key_file``, re-read when they change (module doc).

    :meth:`context` loads them (an ``OSError`` or ``ssl.SSLError`` when they are missing or do not match: the
    caller's start fails with it); :meth:`watch` — a task of the server's, every ``reload_interval`` seconds —
    and :meth:`maybe_reload` — on requests, at most as often — re-read them when their modification times changed.
    The task is what matters: when a rotation also changes the CA the clients trust (a self-signed CA renewed, a
    new issuer), every handshake with the old certificate fails, so no request ever gets far enough to notice the
    new files. New handshakes use the new chain; open connections keep theirs until they close. A half-written
    rotation (a key that does not match the certificate yet) is tried on a scratch context and not loaded: the
    current chain keeps serving, and the next check tries again."""

    def __init__(self, cert_file: str, key_file: str, *, reload_interval: float = 30.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.reload_interval = reload_interval
        self._ssl: ssl.SSLContext | None = None
        self._loaded: tuple[float, float] = (0.0, 0.0)
        self._checked = 0.0

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def context(self) -> ssl.SSLContext:
        """The context, loading the files the first time."""
        if self._ssl is None:
            context = self._new_context()
            context.load_cert_chain(self.cert_file, self.key_file)
            self._ssl, self._loaded = context, self._mtimes()
        return self._ssl

    def reload_if_changed(self) -> bool:
        """Re-read the certificate when its files changed; True when it did."""
        try:
            mtimes = self._mtimes()
            if self._ssl is None or mtimes == self._loaded:
                return False
            # on a scratch context first: load_cert_chain replaces the certificate before it checks the key, so a
            # pair caught half-way would leave the serving context with a certificate and a key that do not
            # match — every handshake failing — instead of the old chain
            self._new_context().load_cert_chain(self.cert_file, self.key_file)
            self._ssl.load_cert_chain(self.cert_file, self.key_file)  # replaces the chain for new handshakes
            self._loaded = mtimes
        except (OSError, ssl.SSLError) as exc:  # a half-written rotation: keep serving the old chain, retry later
            log.warning("could not reload the certificate; keeping the current one", cert=self.cert_file,
                        error=str(exc))
            return False
        log.info("reloaded the certificate", cert=self.cert_file)
        return True

    async def watch(self) -> None:
        """Check the files every ``reload_interval`` seconds, requests or not (the class doc); run as a task."""
        while True:
            await asyncio.sleep(max(self.reload_interval, 0.05))  # (0, "on every request", is no pace for a loop)
            self._checked = time.monotonic()
            self.reload_if_changed()

    def maybe_reload(self) -> None:
        """:meth:`reload_if_changed`, at most every ``reload_interval`` seconds (cheap on every request)."""
        now = time.monotonic()
        if now - self._checked > self.reload_interval:
            self._checked = now
            self.reload_if_changed()
