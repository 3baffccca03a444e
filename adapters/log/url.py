"""``open_log(url)``: one string selects and configures the event log backend.

* ``sqlite:///abs/path/tether.db`` — :class:`~tether.adapters.log.sqlite.SqliteLog` on an absolute path
  (the URL's path); ``sqlite:relative/tether.db`` or ``sqlite://./tether.db`` for a relative one, and a bare
  filesystem path (``./tether.db``) means SQLite too (convenient on the command line). Query options:
  ``poll_interval`` (seconds, cross-process follow), ``on_corrupt`` (``dead_letter`` | ``raise``),
  ``synchronous`` (``FULL`` | ``NORMAL``).
* ``kafka://broker:9092/...`` — ``KafkaLog`` from ``tether.adapters.log.kafka``, imported only when used
  (aiokafka stays out of the SQLite path). Its factory is ``KafkaLog.from_url(url)``, which may be a plain
  or an async function.

Other backends register a scheme in :data:`BACKENDS` as ``"module:Class"``; the class must have ``from_url``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from tether.adapters.log import EventLog
from tether.adapters.log.sqlite import SqliteLog

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


async def open_log(url: str) -> EventLog:
    """Open the log named by ``url`` (module docstring)."""
    if is_sqlite(url):
        path, options = sqlite_path(url)
        unknown = set(options) - {"poll_interval", "on_corrupt", "synchronous"}
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
    scheme = url.split(":", 1)[0]
    target = BACKENDS.get(scheme)
    if target is None:
        raise ValueError(f"unknown log URL scheme {scheme!r} (sqlite, {', '.join(sorted(BACKENDS))})")
    module_name, _, class_name = target.partition(":")
    backend = getattr(importlib.import_module(module_name), class_name)
    opened = backend.from_url(url)
    if inspect.isawaitable(opened):
        opened = await opened
    return cast(EventLog, opened)
