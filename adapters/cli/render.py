"""One-line, human-readable renderings of log records (``tether log tail``, ``tether replay --explain``).

A line is: offset, time, who (the source of an event, the decider of a command), key, type, a summary of the
payload in a few words, and the causation. Rendering is total: an unknown payload falls back to its fields.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.text import Text

from tether.core.commands import (
    AddFinalizer,
    CreateDataSource,
    DeleteDataSource,
    EmitKubernetesEvent,
    LookupDataLocation,
    RemoveFinalizer,
    SetBindingPlacement,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
)
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    ObjectDeleted,
    ObjectObserved,
    ObjectsListed,
    TimerFired,
)
from tether.core.kube import KubeObject

MAX_SUMMARY = 160


def _clip(text: str, limit: int = MAX_SUMMARY) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _object_summary(obj: KubeObject) -> str:
    parts = [f"rv={obj.metadata.resource_version}"] if obj.metadata.resource_version else []
    phase = obj.status_dict().get("phase")
    if isinstance(phase, str) and phase:
        parts.append(f"phase={phase}")
    if obj.deleting:
        parts.append("deleting")
    if obj.metadata.finalizers:
        parts.append(f"finalizers={len(obj.metadata.finalizers)}")
    return " ".join(parts)


def _fields(value: Any) -> str:
    raw = msgspec.to_builtins(value)
    if isinstance(raw, dict):
        raw.pop("type", None)
    return msgspec.json.encode(raw).decode()


def summary(record: EventRecord | CommandRecord) -> str:
    """A few words about the payload."""
    if isinstance(record, EventRecord):
        match record.event:
            case ObjectObserved(obj=obj):
                text = _object_summary(obj)
            case ObjectDeleted(obj=obj):
                text = "deleted " + _object_summary(obj)
            case ObjectsListed(kind=kind, keys=keys, namespace=ns):
                text = f"{len(keys)} {kind} listed" + (f" in {ns}" if ns else "")
            case DataLocationResolved(identity=i, location=location, trigger=trigger):
                text = f"{i.key} at {location} ({trigger})"
            case DataSourceNotInCatalog(identity=i, message=message):
                text = f"{i.key} not in catalog: {message}"
            case DataLocationLookupFailed(identity=i, message=message, retryable=retryable):
                text = f"{i.key} lookup failed{' (retryable)' if retryable else ''}: {message}"
            case CommandSucceeded(command=name, noop=noop):  # the command id is the causation
                text = f"{name} {'already satisfied' if noop else 'applied'}"
            case CommandFailed(command=name, reason=reason, message=message, retryable=retryable):
                text = f"{name} failed{' (retryable)' if retryable else ''}: {reason}: {message}"
            case TimerFired(timer_id=tid, purpose=purpose):
                text = f"{purpose} timer {tid}"
            case _:
                text = _fields(record.event)  # type: ignore[unreachable]  # an event type added later
        return _clip(text)
    match record.command:
        case AddFinalizer(finalizer=f) | RemoveFinalizer(finalizer=f):
            text = f
        case UpdateClaimStatus(phase=phase, bound_data_source=ds, conditions=conds):
            text = f"phase={phase}" + (f" boundDataSource={ds}" if ds else "") + "".join(
                f" {c.type}={c.status}({c.reason})" for c in conds
            )
        case UpdateDataSourceStatus(bound_claims=n):
            text = f"boundClaims={n}"
        case CreateDataSource(identity=i, cluster_names=clusters, location=location):
            text = f"{i.key} at {location} → {','.join(clusters) or '-'}"
        case UpdateDataSourceLocality(cluster_names=clusters, location=location):
            text = f"moved to {location} → {','.join(clusters) or '-'}"
        case DeleteDataSource(uid=uid):
            text = f"uid={uid}"
        case SetBindingPlacement(excluded_clusters=excluded, injected=injected, reschedule_at=at):
            text = (f"exclude {','.join(excluded) or '-'}" if injected else "remove tether placement") + (
                f" reschedule@{at}" if at else ""
            )
        case LookupDataLocation(identity=i, trigger=trigger, attempt=attempt):
            text = f"{i.key} ({trigger}, attempt {attempt})"
        case StartTimer(purpose=purpose, fire_at_ms=at):
            text = f"{purpose} at {rfc3339(at)}"
        case EmitKubernetesEvent(event_type=kind, reason=reason, message=message):
            text = f"{kind} {reason}: {message}"
        case _:
            text = _fields(record.command)  # type: ignore[unreachable]  # a command type added later
    return _clip(text)


def type_name(record: EventRecord | CommandRecord) -> str:
    return type(record.event).__name__ if isinstance(record, EventRecord) else type(record.command).__name__


def who(record: EventRecord | CommandRecord) -> str:
    return record.source if isinstance(record, EventRecord) else (record.decider or "decider")


def line(record: EventRecord | CommandRecord, *, show_key: bool = True) -> Text:
    """``E 12  2025-01-01T00:00:00Z  watch  Kind/ns/name  ObjectObserved  rv=3  ← cause``, styled."""
    is_event = isinstance(record, EventRecord)
    text = Text()
    position = str(record.offset) if record.offset else "-"  # 0: derived now, not in the log
    text.append(f"{'E' if is_event else 'C'}{position:<7} ", style="cyan" if is_event else "magenta")
    text.append(rfc3339(record.at_ms) + " ", style="dim")
    text.append(f"{who(record):<9} ", style="green" if is_event else "yellow")
    if show_key:
        text.append(record.key + " ", style="bold")
    text.append(type_name(record) + " ", style="blue")
    text.append(summary(record))
    if record.causation:
        text.append(f"  ← {record.causation}", style="dim")
    if isinstance(record, CommandRecord) and record.reason:
        text.append(f"  because {record.reason}", style="italic")
    return text
