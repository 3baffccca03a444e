"""The soak's heap probe (``ops/soak/soak.py --heap-probe``): what the daemon process's memory is made of, over time.

``RssAnon`` says that the heap grew, not why. The soak starts the daemon with this directory first on its
``PYTHONPATH``, so Python imports this ``sitecustomize`` at the child's start-up; with ``$TETHER_SOAK_HEAP_PROBE``
set (a JSONL path) and in the daemon's process only (``$TETHER_TEST_DAEMON_CONFIG``), a thread writes one line
every ``$TETHER_SOAK_HEAP_PROBE_EVERY`` seconds (``t_s`` from the probe's start, ``at`` the wall clock, which the
soak aligns with its own samples):

* ``rss_anon_mb``, ``rss_file_mb`` (``/proc/self/status``);
* the C heap as glibc's ``mallinfo2`` counts it, over every arena: ``heap_mb`` (obtained from the system),
  ``heap_in_use_mb`` (allocated and not freed: Python's objects over 512 bytes, SQLite, OpenSSL, msgspec's
  buffers …) and ``heap_free_mb`` (freed but kept by the allocator: growth here with a flat ``heap_in_use_mb``
  is fragmentation, not a leak) — absent where the C library is not glibc;
* ``sqlite_mb``: SQLite's own count of what it allocated (page caches, statements), every connection together;
* ``py_blocks``: Python's small-object allocator's live blocks (objects up to 512 bytes), and ``tasks``: asyncio
  tasks alive;
* ``sizes``: the length of every bounded-by-design structure of the daemon — the world's maps (tombstones, timers,
  commands in flight, rejected commands …), the log's in-process tails (rows and bytes), the executor's object
  cache, the competing-writes detector's maps.

It only reads lengths and counters, from its own thread, and never iterates the event loop's tasks (listing them
from another thread kept finished tasks alive in a first version of this probe, which then "found" a task leak).
The daemon is found by wrapping ``Daemon.__init__``. Nothing here runs unless the variable is set.
"""

from __future__ import annotations

import os

if os.environ.get("TETHER_SOAK_HEAP_PROBE") and os.environ.get("TETHER_TEST_DAEMON_CONFIG"):
    import ctypes
    import json
    import sys
    import threading
    import time
    from typing import Any

    from tether.adapters.daemon import daemon as _daemon_module

    _daemons: list[Any] = []
    _original_init = _daemon_module.Daemon.__init__

    def _init(self: Any, *args: Any, **kwargs: Any) -> None:
        _original_init(self, *args, **kwargs)
        _daemons.append(self)

    _daemon_module.Daemon.__init__ = _init  # type: ignore[method-assign]

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    def _library(name: str, symbol: str, restype: Any) -> Any:
        try:
            function = getattr(ctypes.CDLL(name), symbol)
        except (OSError, AttributeError):
            return None
        function.restype = restype
        return function

    _mallinfo2 = _library("libc.so.6", "mallinfo2", _MallInfo2)
    _sqlite_used = _library("libsqlite3.so.0", "sqlite3_memory_used", ctypes.c_int64)

    def _mb(n: float) -> float:
        return round(n / 2**20, 2)

    def _status() -> dict[str, float]:
        wanted = {"RssAnon": "rss_anon_mb", "RssFile": "rss_file_mb"}
        out = {}
        with open("/proc/self/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in wanted:
                    out[wanted[name]] = _mb(int(value.split()[0]) * 1024)
        return out

    def _sizes(daemon: Any) -> dict[str, int]:
        sizes: dict[str, int] = {}
        loops = daemon.loops
        if loops is not None:
            world = loops.world
            for name in ("claims", "sources", "bindings", "tombstones", "timers", "inflight", "retry_wait",
                         "rejected", "lookups", "lookups_in_flight", "sources_listing_claim"):
                sizes[f"world.{name}"] = len(getattr(world, name))
            for executor in loops.executors:
                cache = getattr(executor, "cache", None)
                if cache is not None:
                    sizes["executor_cache"] = len(cache)
        tails = getattr(daemon._log, "_tails", None) or {}
        for stream, tail in tails.items():
            rows = list(tail.rows)
            sizes[f"log_tail.{stream}.rows"] = len(rows)
            sizes[f"log_tail.{stream}.bytes"] = sum(len(body) for _, body in rows)
        competing = daemon.competing
        if competing is not None:
            for name in ("seen", "own", "inflight", "waiting", "expected", "reported"):
                sizes[f"competing.{name}"] = len(getattr(competing, name))
        return sizes

    def _sample(started: float) -> dict[str, Any]:
        row: dict[str, Any] = {"t_s": round(time.monotonic() - started, 1), "at": round(time.time(), 2), **_status()}
        if _mallinfo2 is not None:
            info = _mallinfo2()
            row.update(heap_mb=_mb(info.arena + info.hblkhd), heap_in_use_mb=_mb(info.uordblks + info.hblkhd),
                       heap_free_mb=_mb(info.fordblks))
        if _sqlite_used is not None:
            row["sqlite_mb"] = _mb(_sqlite_used())
        row["py_blocks"] = sys.getallocatedblocks()
        asyncio_tasks = sys.modules.get("asyncio.tasks")
        if asyncio_tasks is not None:
            row["tasks"] = len(asyncio_tasks._all_tasks)  # (a WeakSet: its length, never its items)
        if _daemons:
            try:
                row["sizes"] = _sizes(_daemons[-1])
            except (AttributeError, RuntimeError) as exc:  # (a structure mid-change, or not built yet)
                row["sizes_error"] = repr(exc)[:200]
        return row

    def _probe(path: str, every: float) -> None:
        started = time.monotonic()
        with open(path, "a", buffering=1) as out:
            while True:
                time.sleep(every)
                out.write(json.dumps(_sample(started)) + "\n")

    threading.Thread(target=_probe, name="soak-heap-probe", daemon=True, args=(
        os.environ["TETHER_SOAK_HEAP_PROBE"], float(os.environ.get("TETHER_SOAK_HEAP_PROBE_EVERY", "15")))).start()
