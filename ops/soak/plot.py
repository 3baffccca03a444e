"""The soak's plot: the daemon's memory, its log lag and the decision latencies over time, from the soak's CSV.

A PNG drawn by matplotlib when it is installed (``pip install 'tether[plot]'``), else an SVG written by hand
(matplotlib is a large dependency for three line charts, and the soak must run where it is absent: CI). Both
show the same three panels, sharing the time axis, with the end of the warm-up marked — four with the heap probe's
samples (``soak.py --heap-probe``): the daemon's C heap in use and free, and SQLite's own memory.

``python ops/soak/plot.py SOAK.csv [--warmup SECONDS] [--heap heap.jsonl] [--svg]`` redraws a plot from a CSV.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
from pathlib import Path

#: (title, unit, [(CSV column, legend)]) of each panel, top to bottom.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("daemon memory", "MB", [("rss_mb", "RSS"), ("rss_anon_mb", "RssAnon (heap)"), ("rss_file_mb", "RssFile")]),
    ("log lag", "records", [("events_lag", "events (decider)"), ("commands_lag", "commands (executor)")]),
    ("decision latency (per sample window)", "ms", [("claim_p50_ms", "claim → placement p50"),
                                                    ("claim_p99_ms", "claim → placement p99"),
                                                    ("move_p50_ms", "table move → placement p50"),
                                                    ("group_p50_ms", "pod group → bound p50")]),
]
#: The panel of the heap probe's samples (``soak.py --heap-probe``), drawn when they are given.
HEAP_PANEL = ("daemon C heap (--heap-probe)", "MB", [("heap_in_use_mb", "in use"),
                                                    ("heap_free_mb", "free, kept by the allocator"),
                                                    ("sqlite_mb", "SQLite's own")])
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def read_rows(path: Path) -> list[dict[str, float | None]]:
    with path.open() as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in row.items()} for row in csv.DictReader(f)]


def plot(csv_path: Path, *, warmup: float, title: str = "tether soak",
         heap: list[dict[str, float | None]] | None = None, fmt: str = "") -> Path:
    """Draw the plot next to ``csv_path``: ``.png`` with matplotlib, else ``.svg`` (``fmt="svg"``: always);
    returns its path. ``heap``: the heap probe's samples on the soak's time axis (``t_s``), a fourth panel."""
    rows = read_rows(csv_path)
    end = max([r["t_s"] or 0.0 for r in rows] + [0.0])
    keep = ["t_s"] + [column for column, _ in HEAP_PANEL[2]]  # (not its RSS: the first panel's, from the soak)
    rows += [{k: sample.get(k) for k in keep} for sample in heap or []  # (not its samples of the daemon stopping)
             if sample.get("t_s") is not None and 0 <= (sample["t_s"] or 0.0) <= end]
    panels = PANELS + ([HEAP_PANEL] if heap else [])
    if fmt == "svg":
        out = csv_path.with_suffix(".svg")
        out.write_text(svg(rows, warmup=warmup, title=title, panels=panels))
        return out
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out = csv_path.with_suffix(".svg")
        out.write_text(svg(rows, warmup=warmup, title=title, panels=panels))
        return out
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3 * len(panels)), sharex=True)
    minutes = [(r["t_s"] or 0.0) / 60 for r in rows]
    for ax, (name, unit, series) in zip(axes, panels, strict=True):
        for (column, label), color in zip(series, COLORS, strict=False):
            points = [(m, r[column]) for m, r in zip(minutes, rows, strict=True) if r.get(column) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=label, color=color, linewidth=1.2,
                        marker=".", markersize=3)
        ax.axvline(warmup / 60, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[-1].set_xlabel("minutes (dashed: end of warm-up)")
    fig.suptitle(title)
    fig.tight_layout()
    out = csv_path.with_suffix(".png")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def svg(rows: list[dict[str, float | None]], *, warmup: float, title: str,
        panels: list[tuple[str, str, list[tuple[str, str]]]] = PANELS) -> str:
    """The same panels as an SVG document (no dependency)."""
    width, panel_h, left, right, top, gap = 900, 200, 70, 20, 40, 50
    height = top + len(panels) * (panel_h + gap)
    t_max = max([r["t_s"] or 0.0 for r in rows] + [1.0])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>']
    plot_w = width - left - right
    for index, (name, unit, series) in enumerate(panels):
        y0 = top + index * (panel_h + gap)
        values = [r[c] for r in rows for c, _ in series if r.get(c) is not None]
        v_max = max([v for v in values if v is not None] + [1e-9]) * 1.1

        def x(t: float) -> float:
            return left + plot_w * t / t_max

        def y(v: float, y0: float = y0, v_max: float = v_max) -> float:
            return y0 + panel_h - panel_h * v / v_max

        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel_h}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="{left}" y="{y0 - 6}">{html.escape(name)} ({unit})</text>')
        for fraction in (0, 0.5, 1):
            value = v_max / 1.1 * fraction
            parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.4g}</text>')
        wx = x(min(warmup, t_max))
        parts.append(f'<line x1="{wx:.1f}" y1="{y0}" x2="{wx:.1f}" y2="{y0 + panel_h}" stroke="grey" '
                     'stroke-dasharray="4 3"/>')
        for k, ((column, label), color) in enumerate(zip(series, COLORS, strict=False)):
            points = [f"{x(r['t_s'] or 0.0):.1f},{y(v):.1f}" for r in rows if (v := r.get(column)) is not None]
            if points:
                parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{" ".join(points)}"/>')
            parts.append(f'<text x="{left + 10 + 200 * k}" y="{y0 + 14}" fill="{color}">{html.escape(label)}</text>')
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        t = t_max * fraction
        parts.append(f'<text x="{left + plot_w * fraction:.1f}" y="{height - gap + 18}" text-anchor="middle">'
                     f'{t / 60:.1f} min</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds of warm-up to mark")
    parser.add_argument("--heap", type=Path, help="the heap probe's heap.jsonl (as the soak rewrote it: soak time)")
    parser.add_argument("--svg", action="store_true", help="an SVG even when matplotlib is installed")
    args = parser.parse_args()
    heap = None
    if args.heap:
        samples = [json.loads(line) for line in args.heap.read_text().splitlines() if line.strip()]
        heap = [{k: v for k, v in s.items() if isinstance(v, (int, float))} for s in samples]
    print(plot(args.csv, warmup=args.warmup, heap=heap, fmt="svg" if args.svg else ""))


if __name__ == "__main__":
    main()
