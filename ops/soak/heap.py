"""The soak's arithmetic on its samples: the least-squares slope memory is judged by, and what the heap probe saw.

The heap probe (``heap_probe/sitecustomize.py``, ``soak.py --heap-probe``) writes its samples from inside the
daemon's process with the process's own clock; here they are put on the soak's time axis and summarised after the
warm-up, next to the soak's own figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(x, y)`` points (None for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return None
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def heap_samples(path: Path, started_at: float) -> list[dict[str, Any]]:
    """The heap probe's samples (``heap_probe/sitecustomize.py``) on the soak's time axis: ``t_s`` from the soak's
    start (the probe's own clock starts with the daemon, earlier), its own kept as ``probe_t_s``; the file is
    rewritten so, for ``plot.py --heap``."""
    if not path.exists():
        return []
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for sample in samples:
        sample.setdefault("probe_t_s", sample["t_s"])
        sample["t_s"] = round(sample["at"] - started_at, 1)
    path.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    return samples


def heap_summary(samples: list[dict[str, Any]], warmup: float, end: float) -> dict[str, Any]:
    """What the heap probe saw after the warm-up: the slopes of the C heap in use and of its free space, SQLite's
    memory, Python's small objects and the tasks, and the bounded structures at the end of the warm-up and of the
    run."""
    after = [s for s in samples if warmup <= s["t_s"] <= end]  # (not the daemon stopping, after the soak's end)
    if len(after) < 2:
        return {}
    out: dict[str, Any] = {}
    for key in ("rss_anon_mb", "heap_in_use_mb", "heap_free_mb", "sqlite_mb", "py_blocks", "tasks"):
        if key in after[0]:
            value = slope([(s["t_s"] / 60, s[key]) for s in after])
            out[f"probe_{key}_slope_per_min"] = round(value, 3) if value is not None else None
    for key in ("heap_in_use_mb", "heap_free_mb", "sqlite_mb", "py_blocks", "tasks"):
        if key in after[0]:
            out[f"probe_{key}_at_warmup"], out[f"probe_{key}_end"] = after[0][key], after[-1][key]
    out["probe_sizes_at_warmup"], out["probe_sizes_end"] = after[0].get("sizes"), after[-1].get("sizes")
    return out
