"""Write the JSON Schemas of tether's log records: ``events.schema.json`` and ``commands.schema.json``.

Generated from the msgspec types (``msgspec.json.schema`` of EventRecord / CommandRecord), so they describe
exactly what ``tether.core.envelope.encode`` writes to the events and commands topics (or SQLite bodies).
Run ``python ops/schema/generate.py`` after changing a record type; ``--check`` exits 1 when the committed files
are out of date (the test suite runs that check). Versioning policy: ``ops/schema/README.md``.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from tether.core.envelope import COMMAND_SCHEMA_VERSION, CommandRecord, EventRecord
from tether.core.events import EVENT_SCHEMA_VERSION

HERE = Path(__file__).resolve().parent


def cleaned(node: Any) -> Any:
    """``node`` with every ``description`` dedented as ``inspect.cleandoc`` does: msgspec 0.23 dedents docstrings
    itself and earlier versions did not, so the committed files are the same whichever is installed."""
    if isinstance(node, dict):
        return {k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else cleaned(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [cleaned(v) for v in node]
    return node


def schemas() -> dict[str, dict[str, Any]]:
    out = {}
    for name, cls, version in (
        ("events", EventRecord, EVENT_SCHEMA_VERSION),
        ("commands", CommandRecord, COMMAND_SCHEMA_VERSION),
    ):
        schema = cleaned(msgspec.json.schema(cls))
        out[f"{name}.schema.json"] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://tether.dev/schema/{name}.schema.json",
            "title": f"tether {name} record",
            "description": (
                f"One record of tether's {name} stream (a Kafka message value, or a SQLite body). "
                f"Written with schema version {version}; readers upcast older versions (ops/schema/README.md)."
            ),
            "x-tether-schema-version": version,
            **schema,
        }
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for filename, schema in schemas().items():
        path = HERE / filename
        text = render(schema)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(filename)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python ops/schema/generate.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
