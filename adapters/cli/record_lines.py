"""One-line, human-readable renderings of log records (``tether log tail``, ``tether replay --explain``).

A line is: offset, time, who (the source of an event, the decider of a command), key, type, a summary of the
payload in a few words, and the causation. Rendering is total: an unknown payload falls back to its fields.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.text import Text

from tether.core.admission.data_hold import format_duration
from tether.core.commands import (
    AddFinalizer,
    AdmitRequest,
    CreateDataSource,
    CreateQueue,
    DeleteDataSource,
    EmitKubernetesEvent,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    ReleasePod,
    RemoveFinalizer,
    ResumeBinding,
    SetAdmissionHold,
    SetBindingPlacement,
    SetMemberCondition,
    StartTimer,
    SuspendDispatching,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
)
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    BindingAdmissionDecided,
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    ListsStarted,
    MemberDisconnected,
    ObjectDeleted,
    ObjectObserved,
    ObjectsListed,
    PodGateDecided,
    SettingsApplied,
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
    """Any payload's fields as compact JSON (the fallback of a type added later). Encoded by msgspec's JSON
    encoder, not ``to_builtins``: an object's spec and status are kept as raw JSON (``msgspec.Raw``), which the
    encoder writes as it is and ``to_builtins`` refuses."""
    try:
        raw = msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, msgspec.MsgspecError) as exc:  # rendering is total: never a traceback for one line
        return f"{type(value).__name__} ({exc})"
    if isinstance(raw, dict):
        raw.pop("type", None)
    return msgspec.json.encode(raw).decode()


def _patch(ops: tuple[dict[str, Any], ...]) -> str:
    """A JSON Patch in a few words: the paths it touches (``add /spec/suspension``…)."""
    if not ops:
        return "unchanged"
    words = [f"{op.get('op', '?')} {op.get('path', '?')}" for op in ops[:3]]
    return ", ".join(words) + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")


def _quantities(pairs: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs) or "-"


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
                text = f"{i.key} lookup failed ({'transient' if retryable else 'permanent'}): {message}"
            case CommandSucceeded(command=name, superseded_by=later) if later:  # the command id is the causation
                text = f"{name} superseded by {later} (not applied: the later command carries the newer state)"
            case CommandSucceeded(command=name, noop=noop):
                text = f"{name} {'already satisfied' if noop else 'applied'}"
            case CommandFailed(command=name, reason=reason, message=message, retryable=retryable):
                text = f"{name} failed{' (retryable)' if retryable else ''}: {reason}: {message}"
            case TimerFired(timer_id=tid, purpose=purpose):
                text = f"{purpose} timer {tid}"
            case ListsStarted(sources=sources, cluster=cluster):
                text = f"{len(sources)} list(s) started" + (f" in {cluster}" if cluster else "")
            case MemberDisconnected(cluster=cluster, reason=reason):
                text = f"member {cluster} disconnected" + (f": {reason}" if reason else "")
            case BindingAdmissionDecided(operation=op, patch=patch, reason=reason, suspended=suspended,
                                         decided_at=at):
                held = " suspended" if suspended else ""
                text = f"{op}{held}: {_patch(patch)} (world at E{at}): {reason}"
            case PodGateDecided(gated=gated, name=name, generate_name=prefix, reason=reason, decided_at=at):
                pod = name or f"{prefix}…"
                text = f"{pod} {'gated' if gated else 'admitted unchanged'} (world at {at or '-'}): {reason}"
            case SettingsApplied(max_hold_ms=max_hold_ms, plugin_configmap=plugins, admission_configmap=admission):
                text = f"settings: max hold {format_duration(max_hold_ms)}, plugins {plugins}, admission {admission}"
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
        case EmitKubernetesEvent(event_type=kind, reason=reason, message=message) | EmitMemberEvent(
                event_type=kind, reason=reason, message=message):
            text = f"{kind} {reason}: {message}"
        case ReleasePod(required=required, preferred=preferred, note=note):
            text = (f"ungate with {len(required)} required and {len(preferred)} preferred term(s)"
                    + (f": {note}" if note else ""))
        case SetMemberCondition(condition=c):
            text = f"{c.type}={c.status}({c.reason})" + (f": {c.message}" if c.message else "")
        case ResumeBinding(admitted_request=request, reason=reason):
            text = f"resume, admitting {_quantities(request)}" + (f": {reason}" if reason else "")
        case SetAdmissionHold(annotation=annotation, text=why):
            text = f"{annotation}={why!r}" if why else f"remove {annotation}"
        case UpdateQueueStatus(allocated=allocated, pending=pending, running=running, inqueue=inqueue):
            text = f"allocated {_quantities(allocated)} pending={pending} running={running} inqueue={inqueue}"
        case CreateQueue(name=name, weight=weight):
            text = f"{name} weight={weight}"
        case EvictBinding(for_binding=arrival, queue=queue, policy=policy, reason=reason):
            text = f"evict ({policy}, queue {queue}) for {arrival}: {reason}"
        case SuspendDispatching(reason=reason):
            text = f"suspend dispatching: {reason}"
        case AdmitRequest(admitted_request=request, reason=reason):
            text = f"admit {_quantities(request)}" + (f": {reason}" if reason else "")
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


def brief(record: EventRecord | CommandRecord, *, with_key: bool = True) -> str:
    """``E119 executor DataSource//x CommandSucceeded update_data_source_locality applied``: a record in one plain
    line (no time: the caller shows it), for the causes ``--explain`` names."""
    tag = ("E" if isinstance(record, EventRecord) else "C") + (str(record.offset) if record.offset else "-")
    key = f" {record.key}" if with_key else ""
    return _clip(f"{tag} {who(record)}{key} {type_name(record)}: {summary(record)}", 2 * MAX_SUMMARY)
