"""``tether replay --what-if CONFIG``: re-decide recorded history under another configuration.

Test a location-mapping change before rolling it out: tether folds the recorded events twice through the
deciders — once as recorded, once with every observation of the plugin ConfigMap replaced by the candidate
(a ConfigMap manifest in Volcano Global's format, YAML or JSON; it also takes effect from the first event) —
and reports, event by event, the commands that one run issues and the other does not.

Both runs fold the *recorded* observations, so the comparison is first-order: each difference is what tether
would have decided differently at that point given what it had actually seen then (e.g. a DataSource created
with other clusters, then corrected on each later observation). That is the useful question before a rollout
— "which decisions change, and for which objects" — without pretending to simulate how the world would have
reacted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import yaml

from tether.adapters.log import EventLog
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import ObjectObserved
from tether.core.kube import KubeObject, ObjectMeta
from tether.core.pipeline import step
from tether.projections.world import CONFIGMAP, Settings, initial_world


class WhatIfDifference(msgspec.Struct):
    event_offset: int
    event_key: str
    only_recorded_config: list[CommandRecord]
    only_candidate_config: list[CommandRecord]


def load_candidate(path: str | Path) -> dict[str, str]:
    """The ``data`` of a ConfigMap manifest (or a bare ``{plugin: json}`` mapping) from a YAML/JSON file."""
    doc: Any = yaml.safe_load(Path(path).read_text())
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        doc = doc.get("data") or {}
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise ValueError(f"{path}: expected a ConfigMap manifest or a mapping of plugin name to JSON text")
    return dict(doc)


def _candidate_stream(records: list[EventRecord], data: dict[str, str], settings: Settings) -> Iterator[EventRecord]:
    namespace, _, name = settings.plugin_configmap.partition("/")
    first = True
    for record in records:
        event = record.event
        if first:
            first = False
            seed = KubeObject(api_version="v1", kind=CONFIGMAP, metadata=ObjectMeta(name=name, namespace=namespace,
                                                                                    resource_version="0"), data=data)
            yield EventRecord(at_ms=record.at_ms, source="what-if", key=seed.key, event=ObjectObserved(obj=seed),
                              offset=0)
        if isinstance(event, ObjectObserved) and event.obj.kind == CONFIGMAP and \
                f"{event.obj.metadata.namespace}/{event.obj.metadata.name}" == settings.plugin_configmap:
            obj = copy.copy(event.obj)
            obj.data = data
            yield msgspec.structs.replace(record, event=ObjectObserved(obj=obj))
        else:
            yield record


def _comparable(command: CommandRecord) -> bytes:
    return msgspec.json.encode(command.command)


async def what_if(log: EventLog, candidate: dict[str, str], *, settings: Settings | None = None,
                  until_offset: int | None = None) -> list[WhatIfDifference]:
    settings = settings or Settings()
    records: list[EventRecord] = []
    async for batch in log.read("events", until_offset=until_offset):
        records.extend(r for r in batch if isinstance(r, EventRecord))
    recorded_world = initial_world(settings)
    candidate_world = initial_world(settings)
    by_offset: dict[int, list[CommandRecord]] = {}
    for record in records:
        by_offset[record.offset] = step(recorded_world, record)
    differences: list[WhatIfDifference] = []
    for record in _candidate_stream(records, candidate, settings):
        produced = step(candidate_world, record)
        if record.source == "what-if":
            continue
        baseline = by_offset.get(record.offset, [])
        a = {_comparable(c): c for c in baseline}
        b = {_comparable(c): c for c in produced}
        if a.keys() != b.keys():
            differences.append(WhatIfDifference(
                event_offset=record.offset, event_key=record.key,
                only_recorded_config=[a[k] for k in a.keys() - b.keys()],
                only_candidate_config=[b[k] for k in b.keys() - a.keys()]))
    return differences
