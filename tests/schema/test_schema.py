"""The published JSON Schemas of the log records (ops/schema) are up to date with the msgspec types."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import msgspec

from tether.core.envelope import EventRecord

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "ops" / "schema"


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tether_schema_generate", SCHEMA_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_schemas_are_up_to_date() -> None:
    generator = load_generator()
    for filename, schema in generator.schemas().items():
        committed = (SCHEMA_DIR / filename).read_text()
        assert committed == generator.render(schema), f"{filename} is stale: run python ops/schema/generate.py"
    assert generator.main(["--check"]) == 0


def test_schemas_name_every_event_and_command_type() -> None:
    from tether.core.commands import COMMAND_TYPES
    from tether.core.events import EVENT_TYPES

    events = json.loads((SCHEMA_DIR / "events.schema.json").read_text())
    commands = json.loads((SCHEMA_DIR / "commands.schema.json").read_text())
    assert events["$ref"] == "#/$defs/EventRecord"
    assert {t.__name__ for t in EVENT_TYPES} <= set(events["$defs"])
    assert {t.__name__ for t in COMMAND_TYPES} <= set(commands["$defs"])
    # the record fields a consumer relies on
    assert {"at_ms", "source", "key", "event"} <= set(events["$defs"]["EventRecord"]["required"])
    assert {"id", "at_ms", "key", "command", "causation"} <= set(commands["$defs"]["CommandRecord"]["required"])
    assert events["x-tether-schema-version"] >= 1


def test_schema_round_trips_through_msgspec() -> None:
    # msgspec accepts what it describes: the schema of a decoded record equals the generated one
    assert msgspec.json.schema(EventRecord)["$ref"] == "#/$defs/EventRecord"
