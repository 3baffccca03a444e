"""Queue admission's fold: Queues, PriorityClasses, cluster capacity, workloads' queues, and the admission view
of every ResourceBinding — folded from the same events as the rest of the world.

:func:`fold_admission` is called by :func:`~tether.projections.fold.evolve` for every event; it keeps its state in
``World.admission`` (:class:`~tether.core.world.admission_state.AdmissionState`, whose shape is core's) so that
the data-dependency part of the world is untouched by it and the two can be merged, snapshotted and replayed
together. Like the rest of the world it depends on nothing
but (world, event): no clock, sorted iteration where order matters.

What is kept, per kind:

* **Queue** (``scheduling.volcano.sh/v1beta1``): the session's :class:`~tether.core.world.admission_state.Queue` and the
  status tether last saw on it (so the decider writes a status only when it differs);
* **PriorityClass**: value by name, and the ``globalDefault`` one's value;
* **Cluster** (Karmada): ``status.resourceSummary`` allocatable and allocated (+ allocating), and readiness;
* **workloads** (apps/v1 Deployments, ``batch.volcano.sh`` Jobs): only the queue name and the PriorityClass name,
  resolved as Volcano Global does (``core.admission.objects.workload_queue_name``) — the decision path never reads the
  workload itself;
* **ResourceBinding**: :class:`~tether.core.world.admission_state.AdmissionBinding` (suspension, per-replica
  request, replicas, Divided or Duplicated, ``schedulePriority``, tether's admission annotations);
* **the admission ConfigMap**: the plugin tiers (``volcano-scheduler.conf``), which bindings are
  queue-managed, and each queue's admission checks (``admission-checks``: ``core.admission.checks``). A
  configuration that does not parse keeps the previous one and records the error (the decider reports it; nothing
  is lost).

``max_hold_ms`` is the bound of a hold for data (``core.admission.data_hold``), from the daemon's
:class:`~tether.core.events.SettingsApplied` (the default without one).

``admitted`` holds the bindings tether has issued a :class:`~tether.core.commands.ResumeBinding` for and has not
yet seen unsuspended: they count as admitted from the moment the command is issued (``note_resume``), so a retried
resume, a cycle before its outcome, or a restart in between never admits a binding twice or charges its queue
twice. ``evicting`` is its mirror: the bindings an :class:`~tether.core.commands.EvictBinding` was issued for
(``note_evict``), until seen suspended — evicted, and no longer charged, from the moment it is issued.
``position`` is the offset of the last event folded: the webhook records it with each decision, so that ``tether
replay --diff`` can re-derive the decision from the world as it was then.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml

from tether.core.admission.checks import CHECKS_KEY, parse_checks
from tether.core.admission.config import AdmissionConfigError, load_yaml, parse_admission_config
from tether.core.admission.objects import queue_from_object, workload_queue_name
from tether.core.commands import CheckStatus, EvictBinding
from tether.core.envelope import EventRecord, parse_rfc3339_ms
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    ObjectDeleted,
    ObjectObserved,
    ObjectsListed,
    SettingsApplied,
    TimerFired,
)
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    OVERRUN_ANNOTATION,
    RELEASED_ANNOTATION,
)
from tether.core.kube import KubeObject, as_list, as_mapping, dig, ref_of
from tether.core.quantity import InvalidQuantity, ResourceList, resource_list
from tether.core.world.admission_checks import NO_CHECKS
from tether.core.world.admission_state import (
    CYCLE_PURPOSE,
    DEFAULT_ADMISSION_CONFIG,
    AdmissionBinding,
    AdmissionState,
    Component,
    ObservedCluster,
    Queue,
    QueueManaged,
    QueueObserved,
    WorkloadQueue,
)
from tether.core.world.views import observed_affinity, workload_key

QUEUE = "Queue"
PRIORITY_CLASS = "PriorityClass"
DEPLOYMENT = "Deployment"
VOLCANO_JOB = "Job"  # batch.volcano.sh/v1alpha1 (only that group is watched)
BINDING = "ResourceBinding"
CLUSTER = "Cluster"
CONFIGMAP = "ConfigMap"

CONFIG_KEY = "volcano-scheduler.conf"
MANAGED_KEY = "queue-managed"


def parse_admission_binding(obj: KubeObject) -> AdmissionBinding:
    """The admission view of a binding; total (a malformed quantity becomes ``problem``)."""
    spec = obj.spec_dict()
    meta = obj.metadata
    resource = as_mapping(spec.get("resource"))
    api_version, kind = str(resource.get("apiVersion", "")), str(resource.get("kind", ""))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    problem = ""
    try:
        request = resource_list(dig(spec, "replicaRequirements", "resourceRequest"))
    except (InvalidQuantity, AttributeError, TypeError) as error:  # (not a map of quantities at all: the same)
        request, problem = {}, f"spec.replicaRequirements.resourceRequest: {error}"
    replicas = spec.get("replicas")
    components: tuple[Component, ...] = ()
    if spec.get("components"):
        try:
            components = parse_components(spec.get("components"))
        except (InvalidQuantity, AttributeError, TypeError, ValueError) as error:
            problem = problem or f"spec.components: {error}"
    placement = as_mapping(spec.get("placement"))
    scheduling_type = dig(placement, "replicaScheduling", "replicaSchedulingType")
    affinity = as_mapping(placement.get("clusterAffinity")) if not placement.get("clusterAffinities") else \
        affinity_group(placement, observed_affinity(obj))
    clusters = as_list(spec.get("clusters"))
    priority = dig(spec, "schedulePriority", "priority")
    annotations = meta.annotations
    admitted: ResourceList | None = None
    raw_admitted = annotations.get(ADMITTED_REQUEST_ANNOTATION)
    if raw_admitted:
        try:
            admitted = resource_list(msgspec.json.decode(raw_admitted))
        except (msgspec.DecodeError, InvalidQuantity, TypeError, AttributeError):
            admitted = None
    suspension = as_mapping(spec.get("suspension"))
    return AdmissionBinding(
        ref=ref_of(obj), resource_version=meta.resource_version,
        workload=workload_key(api_version, kind, str(resource.get("namespace") or meta.namespace),
                               str(resource.get("name", ""))),
        workload_kind=f"{group}/{kind}", suspended=suspension.get("scheduling") is True,
        request=request, replicas=replicas if isinstance(replicas, int) and replicas > 0 else 1,
        divided=scheduling_type == "Divided",
        target_clusters=tuple(sorted({str(c.get("name")) for c in clusters if isinstance(c, dict) and c.get("name")})),
        affinity_names=tuple(sorted(n for n in affinity.get("clusterNames") or () if isinstance(n, str))),
        affinity_exclude=tuple(sorted(n for n in affinity.get("exclude") or () if isinstance(n, str))),
        schedule_priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        creation_ms=(parse_rfc3339_ms(meta.creation_timestamp) or 0) if meta.creation_timestamp else 0,
        hold=annotations.get(ADMISSION_ANNOTATION), overrun=annotations.get(OVERRUN_ANNOTATION),
        released=annotations.get(RELEASED_ANNOTATION),
        admitted_request=admitted, problem=problem, components=components,
        dispatching_suspended=suspension.get("dispatching") is True,
        evicted_for=annotations.get(EVICTED_FOR_ANNOTATION) or "",
    )


def affinity_group(placement: dict[str, Any], observing: str) -> dict[str, Any]:
    """The group of a placement's ``clusterAffinities`` a binding is charged by: the one karmada-scheduler placed it
    by (``observing``), else the first, which it tries first (a binding held by admission is not scheduled yet) —
    so the charge follows the group, a locality tier, the binding is in."""
    groups = [t for t in as_list(placement.get("clusterAffinities")) if isinstance(t, dict)]
    return next((t for t in groups if observing and t.get("affinityName") == observing), groups[0] if groups else {})


def parse_components(raw: object) -> tuple[Component, ...]:
    """Karmada's ``spec.components`` (v1.16+: a workload of several pod templates — Spark, Flink, a Volcano Job, Ray,
    PyTorch): each ``{name, replicas, replicaRequirements: {resourceRequest}}``. Raises ``ValueError`` (or
    ``InvalidQuantity``) saying what is malformed."""
    if not isinstance(raw, list):
        raise ValueError("expected a list of components")
    out: list[Component] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValueError(f"[{index}]: expected a component, got {type(item).__name__}")
        replicas = item.get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ValueError(f"[{index}].replicas: expected a count, got {replicas!r}"[:200])
        request = resource_list(dig(item, "replicaRequirements", "resourceRequest"))
        out.append(Component(name=str(item.get("name") or ""), replicas=replicas, request=request))
    return tuple(out)


def _relevant(state: AdmissionState, obj: KubeObject) -> bool:
    """Whether admission reads this binding: suspended (tether's or anyone's), carrying tether's admission
    annotations, or queue-managed — of a managed kind in a managed namespace (its request counts against its
    queue; the decider passes over any other binding that is neither suspended nor annotated). A cheap byte test
    first: a replay folds every binding observation, and most logs never use admission."""
    annotations = obj.metadata.annotations
    if ADMISSION_ANNOTATION in annotations or ADMITTED_REQUEST_ANNOTATION in annotations or \
            RELEASED_ANNOTATION in annotations or EVICTED_FOR_ANNOTATION in annotations:
        return True
    if b'"suspension"' in bytes(obj.spec):
        return True
    return bool(state.managed.kinds) and state.managed.manages(binding_workload_kind(obj), obj.metadata.namespace)


class _BindingResource(msgspec.Struct, gc=False, rename="camel"):
    api_version: Any = ""
    kind: Any = ""


class _BindingOf(msgspec.Struct, gc=False):
    resource: _BindingResource | None = None


_binding_of = msgspec.json.Decoder(_BindingOf)


def binding_workload_kind(obj: KubeObject) -> str:
    """``group/Kind`` of the workload a binding binds — :func:`parse_admission_binding`'s ``workload_kind``, from
    ``spec.resource`` alone: with queue-managed kinds configured, every version of every binding is asked this."""
    try:
        resource = _binding_of.decode(obj.spec).resource
    except msgspec.ValidationError:
        return parse_admission_binding(obj).workload_kind
    api_version, kind = ("", "") if resource is None else (str(resource.api_version), str(resource.kind))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return f"{group}/{kind}"


def parse_managed(raw: str) -> QueueManaged:
    """``queue-managed`` key of the admission ConfigMap: ``{kinds: [apps/Deployment], namespaces: [...]}``."""
    document = load_yaml(raw, what="queue-managed: ") or {}
    if not isinstance(document, dict) or set(document) - {"kinds", "namespaces"}:
        raise AdmissionConfigError("queue-managed: expected {kinds: [group/Kind, ...], namespaces: [...]}")
    kinds, namespaces = document.get("kinds") or [], document.get("namespaces") or []
    if not (isinstance(kinds, list) and isinstance(namespaces, list) and all(isinstance(k, str) and "/" in k
                                                                           for k in kinds)
            and all(isinstance(n, str) for n in namespaces)):
        raise AdmissionConfigError("queue-managed: kinds are group/Kind strings (apps/Deployment), namespaces strings")
    return QueueManaged(kinds=tuple(sorted(kinds)), namespaces=tuple(sorted(namespaces)))


def forget_admission_config(state: AdmissionState) -> None:
    """The admission ConfigMap is another one now (``SettingsApplied``): the defaults until it is observed."""
    _fold_config(state, None)


def _fold_config(state: AdmissionState, obj: KubeObject | None) -> None:
    if obj is None:
        state.config, state.managed, state.config_error = DEFAULT_ADMISSION_CONFIG, QueueManaged(), ""
        state.checks_config = NO_CHECKS
        return
    try:
        raw = obj.data.get(CONFIG_KEY)
        config = parse_admission_config(raw) if raw else DEFAULT_ADMISSION_CONFIG
        managed = parse_managed(obj.data[MANAGED_KEY]) if obj.data.get(MANAGED_KEY) else QueueManaged()
        checks = parse_checks(obj.data[CHECKS_KEY]) if obj.data.get(CHECKS_KEY) else NO_CHECKS
    except (AdmissionConfigError, yaml.YAMLError) as error:
        state.config_error = f"ConfigMap {obj.metadata.namespace}/{obj.metadata.name}: {error}"
        return  # the previous configuration stays in force
    state.config, state.managed, state.config_error = config, managed, ""
    state.checks_config = checks


def fold_admission_binding(state: AdmissionState, key: str, obj: KubeObject) -> None:
    """Fold a version of the binding ``key`` (``ResourceBinding/<namespace>/<name>``), observed or written."""
    held = state.bindings.get(key)
    if held is not None and held.resource_version == obj.metadata.resource_version:
        return
    if not _relevant(state, obj):  # (most bindings, when admission is not in use: not parsed at all)
        if held is not None:
            del state.bindings[key]
        return
    binding = parse_admission_binding(obj)
    state.bindings[key] = binding
    if not binding.suspended:
        state.admitted.pop(key, None)  # seen unsuspended: the resume is done
    elif state.evicting:
        state.evicting.pop(key, None)  # seen suspended: the eviction is done


def fold_admission_cluster(state: AdmissionState, obj: KubeObject) -> None:
    """Fold an observation of a Karmada Cluster: kept as its status bytes, parsed when a cycle asks
    (:func:`cluster_capacities`), not on every status heartbeat."""
    state.clusters[obj.metadata.name] = ObservedCluster(name=obj.metadata.name, status=bytes(obj.status))


def _fold_object(state: AdmissionState, obj: KubeObject, *, deleted: bool, admission_configmap: str) -> None:
    kind, meta = obj.kind, obj.metadata
    if kind == BINDING:
        key = f"{kind}/{meta.namespace}/{meta.name}"
        if deleted:
            _forget_binding(state, key)
        else:
            fold_admission_binding(state, key, obj)
    elif kind == CLUSTER:
        if deleted:
            state.clusters.pop(meta.name, None)
        else:
            fold_admission_cluster(state, obj)
    elif kind == QUEUE and obj.api_version.startswith("scheduling.volcano.sh/"):
        if deleted:
            state.queues.pop(meta.name, None)
            return
        raw = {"metadata": {"name": meta.name, "uid": meta.uid, "creationTimestamp": meta.creation_timestamp},
               "spec": obj.spec_dict(), "status": obj.status_dict()}
        try:
            queue, problem = queue_from_object(raw), ""
        except InvalidQuantity as error:
            queue, problem = Queue(name=meta.name, open=False, uid=meta.uid), f"Queue {meta.name}: {error}"
        state.queues[meta.name] = QueueObserved(ref=ref_of(obj), queue=queue, status=raw["status"], problem=problem)
    elif kind in (DEPLOYMENT, VOLCANO_JOB):
        if kind == VOLCANO_JOB and not obj.api_version.startswith("batch.volcano.sh/"):
            return
        key = workload_key(obj.api_version, kind, meta.namespace, meta.name)
        if deleted:
            state.workloads.pop(key, None)
            return
        state.workloads[key] = workload_queue(obj)
    elif kind == CONFIGMAP and f"{meta.namespace}/{meta.name}" == admission_configmap:
        _fold_config(state, None if deleted else obj)


class _TemplateMeta(msgspec.Struct, gc=False):
    labels: Any = None
    annotations: Any = None


class _TemplateSpec(msgspec.Struct, gc=False, rename="camel"):
    priority_class_name: Any = None


class _Template(msgspec.Struct, gc=False):
    metadata: _TemplateMeta | None = None
    spec: _TemplateSpec | None = None


class _WorkloadSpec(msgspec.Struct, gc=False, rename="camel"):
    """What admission reads of a workload's spec (a Volcano Job's tasks, a Deployment's containers: skipped)."""

    queue: Any = None
    priority_class_name: Any = None
    template: _Template | None = None


_workload_spec = msgspec.json.Decoder(_WorkloadSpec)


def workload_queue(obj: KubeObject) -> WorkloadQueue:
    """A workload's queue and PriorityClass name, from the few fields of its spec they are read from (every
    version of every Job and Deployment comes here); a spec whose parts do not have the expected shapes is read
    whole by :func:`_workload_queue_tolerant`, with the same result."""
    try:
        typed = _workload_spec.decode(obj.spec)
    except msgspec.ValidationError:
        return _workload_queue_tolerant(obj)
    spec: dict[str, Any] = {"queue": typed.queue, "priorityClassName": typed.priority_class_name}
    if (template := typed.template) is not None:
        meta, pod = template.metadata, template.spec
        spec["template"] = {
            "metadata": None if meta is None else {"labels": meta.labels, "annotations": meta.annotations},
            "spec": None if pod is None else {"priorityClassName": pod.priority_class_name}}
    return _workload_queue_of(obj, spec)


def _workload_queue_tolerant(obj: KubeObject) -> WorkloadQueue:
    return _workload_queue_of(obj, obj.spec_dict())


def _workload_queue_of(obj: KubeObject, spec: dict[str, Any]) -> WorkloadQueue:
    whole = {"apiVersion": obj.api_version, "kind": obj.kind, "spec": spec,
             "metadata": {"annotations": obj.metadata.annotations}}
    path = ("priorityClassName",) if obj.kind == VOLCANO_JOB else ("template", "spec", "priorityClassName")
    priority_class = dig(spec, *path)
    return WorkloadQueue(queue=workload_queue_name(whole),
                         priority_class=priority_class if isinstance(priority_class, str) else "")


def fold_priority_class(state: AdmissionState, *, name: str, value: int, global_default: bool,
                        deleted: bool = False) -> None:
    """PriorityClasses keep ``value`` and ``globalDefault`` outside ``spec``; ``core.kube.trim`` records them
    under ``spec``, and :func:`fold_admission` hands them here."""
    if deleted:
        state.priority_classes.pop(name, None)
    else:
        state.priority_classes[name] = value
    if global_default and not deleted:
        state.default_priority_class, state.default_priority = name, value
    elif state.default_priority_class == name:
        state.default_priority_class, state.default_priority = "", 0


def _forget_binding(state: AdmissionState, key: str) -> None:
    """The binding is gone: nothing of it is admitted, evicted, checked or remembered."""
    state.bindings.pop(key, None)
    state.admitted.pop(key, None)
    state.admitted_at.pop(key, None)
    state.evicting.pop(key, None)
    state.checks.pop(key, None)


def _forget_listed(state: AdmissionState, listed: ObjectsListed) -> None:
    present = set(listed.keys)
    if listed.kind == BINDING:
        for key in sorted(k for k, b in state.bindings.items()
                          if k not in present and (not listed.namespace or b.ref.namespace == listed.namespace)):
            _forget_binding(state, key)
    elif listed.kind == CLUSTER:
        for name in sorted(n for n in state.clusters if f"{CLUSTER}//{n}" not in present):
            del state.clusters[name]
    elif listed.kind == QUEUE:
        for name in sorted(n for n in state.queues if f"{QUEUE}//{n}" not in present):
            del state.queues[name]
    elif listed.kind == PRIORITY_CLASS:
        for name in sorted(n for n in state.priority_classes if f"{PRIORITY_CLASS}//{n}" not in present):
            fold_priority_class(state, name=name, value=0, global_default=False, deleted=True)
    elif listed.kind in (DEPLOYMENT, VOLCANO_JOB):
        for key in sorted(state.workloads):
            _, kind, namespace, name = key.split("/", 3)
            if kind == listed.kind and (not listed.namespace or namespace == listed.namespace) and \
                    f"{kind}/{namespace}/{name}" not in present:
                del state.workloads[key]


#: The kinds admission reads (``projections.replay_fold`` passes over the rest without a call). Everything else — claims
#: and DataSources, most of a log — is passed over with one set test: every event of a replay comes through here.
READ_KINDS = frozenset({BINDING, CLUSTER, QUEUE, PRIORITY_CLASS, DEPLOYMENT, VOLCANO_JOB, CONFIGMAP})


def fold_admission(state: AdmissionState, record: EventRecord, *, admission_configmap: str) -> None:
    """Fold one event into the admission state (in place). ``projections.replay_fold`` calls it only for the events that
    can change it — an observation or a write's result of a kind in :data:`READ_KINDS`, or any other event — and
    sets ``position`` itself, once per batch."""
    state.position = record.offset
    event = record.event
    if isinstance(event, ObjectObserved | ObjectDeleted):
        obj = event.obj
        if obj.kind not in READ_KINDS:
            return
        deleted = isinstance(event, ObjectDeleted)
        if obj.kind == PRIORITY_CLASS:
            spec = obj.spec_dict()
            value = spec.get("value")
            fold_priority_class(state, name=obj.metadata.name, value=value if isinstance(value, int) else 0,
                                global_default=spec.get("globalDefault") is True, deleted=deleted)
        else:
            _fold_object(state, obj, deleted=deleted, admission_configmap=admission_configmap)
    elif isinstance(event, CommandSucceeded):
        if event.result is not None:
            if event.result.kind in READ_KINDS:
                _fold_object(state, event.result, deleted=False, admission_configmap=admission_configmap)
        elif event.command == "resume_binding":  # the binding is gone (nothing came back): nothing to admit
            state.admitted.pop(event.target, None)
        elif event.command == "evict_binding":  # gone: nothing to evict
            state.evicting.pop(event.target, None)
    elif isinstance(event, CommandFailed) and not event.retryable:
        if event.command == "resume_binding":
            state.admitted.pop(event.target, None)  # refused for good: the next cycle decides it again
        elif event.command == "evict_binding":
            state.evicting.pop(event.target, None)  # refused for good: it stays admitted, and charged
    elif isinstance(event, ObjectsListed):
        _forget_listed(state, event)
    elif isinstance(event, TimerFired) and event.purpose == CYCLE_PURPOSE:
        fired = event.timer_id.rpartition("|")[2]
        if not fired.isdigit() or int(fired) >= state.cycle_due:
            state.cycle_due = 0  # (a cycle armed earlier than the one due replaced it: that one's firing is spent)
    elif isinstance(event, SettingsApplied):
        state.max_hold_ms = max(0, event.max_hold_ms)


def note_cycle_armed(state: AdmissionState, *, fire_at_ms: int) -> None:
    """The admission decider armed its next cycle (``StartTimer`` issued)."""
    state.cycle_due = fire_at_ms


def note_checks(state: AdmissionState, *, binding_key: str, checks: tuple[CheckStatus, ...]) -> None:
    """A SetAdmissionChecks was issued: the binding's checks are these from now on (``core.admission.checks``)."""
    if checks:
        state.checks[binding_key] = checks
    else:
        state.checks.pop(binding_key, None)


def note_resume(state: AdmissionState, *, binding_key: str, command_id: str, at_ms: int = 0) -> None:
    """A ResumeBinding was issued at ``at_ms``: the binding is admitted from now on (module doc)."""
    state.admitted[binding_key] = command_id
    state.admitted_at[binding_key] = at_ms
    if state.evicting:
        state.evicting.pop(binding_key, None)  # (admitted again after its eviction: the executor applies both)


def note_evict(state: AdmissionState, *, command: EvictBinding) -> None:
    """An EvictBinding was issued: the binding is evicted from now on, until seen suspended (module doc)."""
    key = command.binding.key
    state.evicting[key] = command
    state.admitted.pop(key, None)
    state.admitted_at.pop(key, None)


__all__ = [
    "CONFIG_KEY", "MANAGED_KEY", "READ_KINDS", "binding_workload_kind", "fold_admission", "fold_admission_binding",
    "fold_admission_cluster", "fold_priority_class", "forget_admission_config", "note_cycle_armed", "note_evict",
    "note_resume", "parse_admission_binding", "parse_components", "parse_managed", "workload_queue",
]
