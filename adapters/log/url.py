"""``open_log(url)``: one string selects and configures the event log backend.

* ``sqlite:///abs/path/tether.db`` — :class:`~tether.adapters.log.sqlite.SqliteLog` on an absolute path
  (the URL's path); ``sqlite:relative/tether.db`` or ``sqlite://./tether.db`` for a relative one, and a bare
  filesystem path (``./tether.db``) means SQLite too (convenient on the command line). Query options:
  ``poll_interval`` (seconds, cross-process follow), ``on_corrupt`` (``dead_letter`` | ``raise``),
  ``synchronous`` (``FULL`` | ``NORMAL``).
* ``kafka://broker:9092/...`` — ``KafkaLog`` from ``tether.adapters.log.kafka``, imported only when used
  (aiokafka stays out of the SQLite path). Its factory is ``KafkaLog.from_url(url)``, which may be a plain
  or an async function.

Other backends register a scheme in :data:`BACKENDS` as ``"module:Class"``; the class must have ``from_url``, and
may have ``check_url`` (a syntax check without connecting, :func:`check_log_url`).

**A file that cannot be a log** — a directory, a file in a directory that does not exist, a file that is not a
SQLite database — raises :class:`~tether.adapters.log.sqlite.LogUnusable` (re-exported here) saying so.

**Reaching the log.** A Kafka log connects lazily, on first use — which, in the daemon, is in the middle of its
start, and in ``tether replay``, deep inside the first read. ``open_log(url, connect=True)`` connects at once
(``start()``, which every read and append does first anyway) and turns "no broker answers" into one
:class:`LogUnreachable` naming the brokers and the URL, so that the command line can say so in one line.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from tether.adapters.log import EventLog
from tether.adapters.log.sqlite import LogUnusable, SqliteLog

#: scheme → "module:Class" whose ``from_url(url)`` opens the log (sync or async).
BACKENDS: dict[str, str] = {"kafka": "tether.adapters.log.kafka:KafkaLog"}


def sqlite_path(url: str) -> tuple[str, dict[str, str]]:
    """The file path and the options of a ``sqlite:`` URL (or bare path)."""
    if not url.startswith("sqlite:"):
        return url, {}
    parts = urlsplit(url)
    path = parts.path
    if parts.netloc:  # sqlite://./x.db or sqlite://relative/x.db
        path = parts.netloc + path
    if not path:
        raise ValueError(f"no file in {url!r} (expected sqlite:///path/to/tether.db)")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return path, options


def is_sqlite(url: str) -> bool:
    """Whether ``url`` names a SQLite log (a ``sqlite:`` URL or a bare path)."""
    return url.startswith("sqlite:") or "://" not in url


__all__ = ["BACKENDS", "UNREACHABLE", "LogUnreachable", "LogUnusable", "check_log_url", "is_sqlite", "open_log",
           "sqlite_path"]


class LogUnreachable(ConnectionError):
    """The log's servers did not answer (a Kafka broker down, or a mistyped address); the message says which."""


#: How a :class:`LogUnreachable` message begins (before the URL): what a supervisor reading a daemon's output
#: matches (``adapters.testing.chaos_run``).
UNREACHABLE = "cannot reach the log"


_SQLITE_OPTIONS = frozenset({"poll_interval", "on_corrupt", "synchronous"})


def _backend(url: str) -> Any:
    scheme = url.split(":", 1)[0]
    target = BACKENDS.get(scheme)
    if target is None:
        raise ValueError(f"unknown log URL scheme {scheme!r} (sqlite, {', '.join(sorted(BACKENDS))})")
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def check_log_url(url: str) -> None:
    """Raise ``ValueError`` saying what is wrong with ``url``, without opening or connecting to anything."""
    if is_sqlite(url):
        _, options = sqlite_path(url)
        unknown = set(options) - _SQLITE_OPTIONS
        if unknown:
            raise ValueError(f"unknown sqlite log option(s): {', '.join(sorted(unknown))}")
        return
    check = getattr(_backend(url), "check_url", None)
    if check is not None:
        check(url)


def _unreachable(exc: BaseException) -> bool:
    """A failure to reach the servers (rather than a bug): a socket error, or the Kafka client's own errors."""
    return isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("aiokafka")


async def open_log(url: str, *, connect: bool = False) -> EventLog:
    """Open the log named by ``url`` (module docstring); with ``connect``, reach its servers now or raise
    :class:`LogUnreachable`."""
    opened = await _open(url)
    start = getattr(opened, "start", None)
    if connect and start is not None:
        client_logs = logging.getLogger("aiokafka")  # its connection errors are reported below, once
        level = client_logs.level
        client_logs.setLevel(logging.CRITICAL)
        try:
            await start()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await opened.close()
            if not _unreachable(exc):
                raise
            servers = urlsplit(url).netloc
            detail = f" ({_first_line(exc)})" if isinstance(exc, OSError) else ""  # (aiokafka's own text is noise)
            raise LogUnreachable(f"{UNREACHABLE} {url}: nothing answers at {servers}{detail}; start it there, "
                                 "or fix the address in the URL") from exc
        finally:
            client_logs.setLevel(level)
    return opened


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


async def _open(url: str) -> EventLog:
    if is_sqlite(url):
        path, options = sqlite_path(url)
        unknown = set(options) - _SQLITE_OPTIONS
        if unknown:
            raise ValueError(f"unknown sqlite log option(s): {', '.join(sorted(unknown))}")
        kwargs: dict[str, Any] = {}
        if "poll_interval" in options:
            kwargs["poll_interval"] = float(options["poll_interval"])
        if "on_corrupt" in options:
            kwargs["on_corrupt"] = options["on_corrupt"]
        if "synchronous" in options:
            kwargs["synchronous"] = options["synchronous"]
        return await SqliteLog.open(path, **kwargs)
    opened = _backend(url).from_url(url)
    if inspect.isawaitable(opened):
        opened = await opened
    return cast(EventLog, opened)
