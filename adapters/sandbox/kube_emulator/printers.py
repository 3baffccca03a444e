"""kube-apiserver's printers for the built-in kinds: the columns and cells of ``kubectl get`` (``tables.py`` builds
the Table).

A real server prints each built-in kind with columns of its own (``pkg/printers/internalversion`` in Kubernetes),
every column at once, the ``-o wide`` ones at ``priority`` 1 for kubectl to hide. The emulator prints those an
operator of tether reads (:data:`BUILTIN_PRINTERS`), each checked against kube-apiserver 1.28 here
(``tests/emulator/test_tables.py``):

* **Events** (``kubectl get events``: what tether reports about an object): LAST SEEN, TYPE, REASON, OBJECT,
  MESSAGE, from the event's times, count and series;
* **Pods**: READY, STATUS (``SchedulingGated`` while a pod waits at tether's gate, once a kube-scheduler, or the
  emulator's binder, has written that condition; an init container's progress, a container's waiting reason,
  ``Terminating``), RESTARTS; a finished pod's row is ``Completed``;
* **Nodes** (STATUS, ROLES, VERSION), **Deployments** (READY, UP-TO-DATE, AVAILABLE: the workloads tether places),
  **Jobs** (COMPLETIONS, DURATION), **Leases** (HOLDER: which replica leads), **ConfigMaps** (DATA: the number of
  keys) and **Namespaces** (STATUS).

Unlike a custom resource's, a built-in kind's Age is a ``string`` column, and a time it lacks is ``<unknown>``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from tether.core.envelope import parse_rfc3339_ms
from tether.core.keys import ROLE_LABEL

#: The descriptions a real server gives its two default columns (ObjectMeta's ``name`` and ``creationTimestamp``).
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a "
    "client to request the generation of an appropriate name automatically. Name is primarily intended for creation "
    "idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is "
    "represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: ~2-3 significant figures."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def age(value: Any, now: datetime) -> str | None:
    """The time since ``value`` (an RFC 3339 time) as apimachinery prints it; None for no time."""
    if not isinstance(value, str):
        return None
    then_ms = parse_rfc3339_ms(value)
    return "<invalid>" if then_ms is None else human_duration(now.timestamp() - then_ms / 1000)


def _since(value: Any, now: datetime) -> str:
    """A built-in printer's age of a time (``translateTimestampSince``): ``<unknown>`` for none."""
    return age(value, now) or "<unknown>"


def column(name: str, description: str, *, priority: int = 0, format: str = "") -> dict[str, Any]:
    return {"name": name, "type": "string", "format": format, "description": description, "priority": priority}


_BUILTIN_NAME = column("Name", NAME_DESCRIPTION, format="name")
_BUILTIN_AGE = column("Age", AGE_DESCRIPTION)


class Printer(NamedTuple):
    """A built-in kind's columns, the cells of one of its objects at a time, and its row's conditions (a finished
    pod's ``Completed``), if any."""

    columns: list[dict[str, Any]]
    cells: Callable[[dict[str, Any], datetime], list[Any]]
    conditions: Callable[[dict[str, Any]], list[dict[str, str]]] | None = None


def _event_cells(event: dict[str, Any], now: datetime) -> list[Any]:
    """An Event's row, as kube-apiserver prints it: first seen is ``firstTimestamp`` (else ``eventTime``); last seen
    is ``lastTimestamp`` (else the first), or the series' last observation; the count is the series' (else
    ``count``, and 1 for an event of the events.k8s.io API, which sets none)."""
    first = _since(event.get("firstTimestamp") or event.get("eventTime"), now)
    last = _since(event["lastTimestamp"], now) if event.get("lastTimestamp") else first
    count = event.get("count") or 1
    if isinstance(series := event.get("series"), dict):
        last, count = _since(series.get("lastObservedTime"), now), series.get("count") or 0
    involved = event.get("involvedObject") or {}
    kind, name = str(involved.get("kind") or "").lower(), involved.get("name") or ""
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [last, event.get("type", ""), event.get("reason", ""), f"{kind}/{name}" if name else kind,
            involved.get("fieldPath", ""), f"{component}, {instance}" if instance else component,
            str(event.get("message") or "").strip(), first, count, event["metadata"]["name"]]


def _ms(value: Any) -> int | None:
    return parse_rfc3339_ms(value) if isinstance(value, str) else None


def _last_terminated(container: dict[str, Any]) -> int:
    """When a container's last run finished (ms), 0 if it has not restarted."""
    return _ms(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")) or 0


def _pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    """A Pod's row, as kube-apiserver 1.28 prints it (``printPod``): READY counts the ready containers (restartable
    init containers, "sidecars", included); STATUS is the phase, or the pod's reason, ``SchedulingGated`` while the
    scheduler holds it at its gates, an init container's progress or failure, a container's waiting or terminated
    reason, and ``Terminating`` once it is being deleted; RESTARTS says when the last restart was."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    reason = status.get("reason") or status.get("phase") or ""
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    inits = {c.get("name"): c for c in spec.get("initContainers") or [] if isinstance(c, dict)}
    sidecars = {name for name, c in inits.items() if c.get("restartPolicy") == "Always"}
    total, ready = len(spec.get("containers") or []) + len(sidecars), 0
    restarts = sidecar_restarts = 0
    last_restart = last_sidecar_restart = 0  # (ms; 0: none)
    initializing = False
    init_statuses = [c for c in status.get("initContainerStatuses") or [] if isinstance(c, dict)]
    for i, container in enumerate(init_statuses):
        state, finished = container.get("state") or {}, _last_terminated(container)
        restarts += container.get("restartCount") or 0
        last_restart = max(last_restart, finished)
        sidecar = container.get("name") in sidecars
        if sidecar:
            sidecar_restarts += container.get("restartCount") or 0
            last_sidecar_restart = max(last_sidecar_restart, finished)
        terminated, waiting = state.get("terminated"), state.get("waiting") or {}
        if terminated is not None and not terminated.get("exitCode"):
            continue
        if sidecar and container.get("started"):
            ready += bool(container.get("ready"))
            continue
        if terminated is not None:  # (initialization failed)
            reason = f"Init:{terminated['reason']}" if terminated.get("reason") else \
                f"Init:Signal:{terminated['signal']}" if terminated.get("signal") else \
                f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(inits)}"
        initializing = True
        break
    initialized = next((c.get("status") == "True" for c in conditions if c.get("type") == "Initialized"), False)
    if not initializing or initialized:
        restarts, last_restart, running = sidecar_restarts, last_sidecar_restart, False
        for container in reversed([c for c in status.get("containerStatuses") or [] if isinstance(c, dict)]):
            state = container.get("state") or {}
            restarts += container.get("restartCount") or 0
            last_restart = max(last_restart, _last_terminated(container))
            terminated, waiting = state.get("terminated"), state.get("waiting") or {}
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None:
                reason = terminated.get("reason") or (f"Signal:{terminated['signal']}" if terminated.get("signal")
                                                      else f"ExitCode:{terminated.get('exitCode', 0)}")
            elif container.get("ready") and state.get("running") is not None:
                running, ready = True, ready + 1
        if reason == "Completed" and running:
            reason = "Running" if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) \
                else "NotReady"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    printed_restarts = str(restarts)
    if restarts and last_restart:
        printed_restarts += f" ({human_duration(now.timestamp() - last_restart / 1000)} ago)"
    gates = [g.get("conditionType") for g in spec.get("readinessGates") or [] if isinstance(g, dict)]
    met = sum(next((c.get("status") == "True" for c in conditions if c.get("type") == gate), False) for gate in gates)
    ips = [ip.get("ip") for ip in status.get("podIPs") or [] if isinstance(ip, dict)]
    return [pod["metadata"]["name"], f"{ready}/{total}", reason, printed_restarts,
            _since(pod["metadata"].get("creationTimestamp"), now), (ips[0] if ips else "") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            f"{met}/{len(gates)}" if gates else "<none>"]


def _pod_conditions(pod: dict[str, Any]) -> list[dict[str, str]]:
    """A finished pod's row is ``Completed`` (kubectl may hide such rows)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return []
    message = "The pod has completed successfully." if phase == "Succeeded" else "The pod failed."
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message}]


def _node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    """A Node's row (``printNode``): Ready, NotReady or Unknown (no Ready condition), and SchedulingDisabled when
    cordoned; its roles from the ``node-role.kubernetes.io/<role>`` and ``kubernetes.io/role`` labels."""
    spec, status, meta = node.get("spec") or {}, node.get("status") or {}, node["metadata"]
    ready = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"),
                 None)
    states = ["Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = meta.get("labels") or {}
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels
             if k.startswith("node-role.kubernetes.io/") and k != "node-role.kubernetes.io/"}
    roles |= {v for k, v in labels.items() if k == ROLE_LABEL and v}
    info = status.get("nodeInfo") or {}
    addresses = [a for a in status.get("addresses") or [] if isinstance(a, dict)]
    return [meta["name"], ",".join(states), ",".join(sorted(roles)) or "<none>",
            _since(meta.get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), "<none>"),
            next((a.get("address") for a in addresses if a.get("type") == "ExternalIP"), "<none>"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def label_selector(selector: Any) -> str:
    """A LabelSelector as apimachinery's ``LabelSelectorAsSelector(...).String()`` writes it: requirements sorted by
    key, ``k=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``; ``""`` for none or an empty one. Raises
    :class:`ValueError` for an operator it does not know, or values where there must be none (or none where there
    must be some)."""
    if not isinstance(selector, dict):
        return ""
    requirements: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator")
        values = sorted(set(expression.get("values") or []))
        if operator in ("In", "NotIn") and values:
            requirements.append((key, f"{key} {operator.lower()} ({','.join(values)})"))
        elif operator in ("Exists", "DoesNotExist") and not values:
            requirements.append((key, key if operator == "Exists" else f"!{key}"))
        else:
            raise ValueError(f"a selector's {operator!r} with values {values}")
    return ",".join(text for _, text in sorted(requirements, key=lambda r: r[0]))


def _containers(template_spec: dict[str, Any]) -> tuple[str, str]:
    """The template's container names and images, each joined with commas (``layoutContainerCells``)."""
    containers = [c for c in template_spec.get("containers") or [] if isinstance(c, dict)]
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}


def _deployment_cells(deployment: dict[str, Any], now: datetime) -> list[Any]:
    """A Deployment's row (``printDeployment``): READY as ready/desired replicas, UP-TO-DATE and AVAILABLE from its
    status (0 until a controller writes one); its selector ``<invalid>`` if it does not parse."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    try:
        selector = label_selector(spec.get("selector"))
    except ValueError:
        selector = "<invalid>"
    names, images = _containers(_template_spec(deployment))
    return [deployment["metadata"]["name"], f"{status.get('readyReplicas') or 0}/{spec.get('replicas') or 0}",
            status.get("updatedReplicas") or 0, status.get("availableReplicas") or 0,
            _since(deployment["metadata"].get("creationTimestamp"), now), names, images, selector]


def _job_cells(job: dict[str, Any], now: datetime) -> list[Any]:
    """A Job's row (``printJob``): COMPLETIONS as succeeded/completions (``/1 of <parallelism>`` without
    completions), DURATION from its start to its completion (or now; empty before it starts)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = spec.get("parallelism") or 0
        completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    started, finished = _ms(status.get("startTime")), _ms(status.get("completionTime"))
    duration = "" if started is None else human_duration(
        ((finished if finished is not None else now.timestamp() * 1000) - started) / 1000)
    try:
        selector = label_selector(spec.get("selector")) or "<none>"
    except ValueError:
        selector = "<error>"
    names, images = _containers(_template_spec(job))
    return [job["metadata"]["name"], completions, duration, _since(job["metadata"].get("creationTimestamp"), now),
            names, images, selector]


#: The wide columns of a kind with a pod template (Deployment, Job): ``_containers`` and its selector.
_TEMPLATE = [column("Containers", "Names of each container in the template.", priority=1),
             column("Images", "Images referenced by each container in the template.", priority=1),
             column("Selector", "The label selector of its pods.", priority=1)]


#: The built-in kinds the emulator prints as a real server does (module doc), by (API group, kind).
BUILTIN_PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Event"): Printer(
        [column("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
         column("Type", "Type of this event (Normal, Warning)."),
         column("Reason", "Why the action was taken, in a short CamelCase word."),
         column("Object", "The object this event is about."),
         column("Subobject", "The part of the object this event is about (a container).", priority=1),
         column("Source", "The component reporting this event.", priority=1),
         column("Message", "A human-readable description of this event."),
         column("First Seen", "The time at which this event was first recorded.", priority=1),
         column("Count", "The number of times this event has occurred.", priority=1),
         column("Name", NAME_DESCRIPTION, priority=1, format="name")],
        _event_cells),
    ("coordination.k8s.io", "Lease"): Printer(
        [_BUILTIN_NAME, column("Holder", "The identity of the holder of the lease."), _BUILTIN_AGE],
        lambda lease, now: [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity") or "",
                            _since(lease["metadata"].get("creationTimestamp"), now)]),
    ("", "ConfigMap"): Printer(
        [_BUILTIN_NAME, column("Data", "The number of keys in data and binaryData."), _BUILTIN_AGE],
        lambda configmap, now: [configmap["metadata"]["name"],
                                len(configmap.get("data") or {}) + len(configmap.get("binaryData") or {}),
                                _since(configmap["metadata"].get("creationTimestamp"), now)]),
    ("", "Pod"): Printer(
        [_BUILTIN_NAME, column("Ready", "Ready containers, of all (sidecars included)."),
         column("Status", "The pod's phase, or what holds it (module doc)."),
         column("Restarts", "Restarts of the pod's containers, and how long ago the last one was."), _BUILTIN_AGE,
         column("IP", "The pod's first IP.", priority=1), column("Node", "The Node it is bound to.", priority=1),
         column("Nominated Node", "The Node the scheduler nominated for it.", priority=1),
         column("Readiness Gates", "Readiness gates met, of all.", priority=1)],
        _pod_cells, _pod_conditions),
    ("", "Node"): Printer(
        [_BUILTIN_NAME, column("Status", "The status of the node"), column("Roles", "The roles of the node"),
         _BUILTIN_AGE, column("Version", "The kubelet's version."),
         column("Internal-IP", "The node's first internal IP.", priority=1),
         column("External-IP", "The node's first external IP.", priority=1),
         column("OS-Image", "The node's OS image.", priority=1),
         column("Kernel-Version", "The node's kernel version.", priority=1),
         column("Container-Runtime", "The node's container runtime and its version.", priority=1)],
        _node_cells),
    ("apps", "Deployment"): Printer(
        [_BUILTIN_NAME, column("Ready", "Ready replicas, of those desired."),
         column("Up-to-date", "Replicas running the latest template."),
         column("Available", "Replicas available (ready for minReadySeconds)."), _BUILTIN_AGE, *_TEMPLATE],
        _deployment_cells),
    ("batch", "Job"): Printer(
        [_BUILTIN_NAME, column("Completions", "Pods succeeded, of the completions wanted."),
         column("Duration", "Time required to complete the job."), _BUILTIN_AGE, *_TEMPLATE],
        _job_cells),
    ("", "Namespace"): Printer(
        [_BUILTIN_NAME, column("Status", "The status of the namespace"), _BUILTIN_AGE],
        lambda namespace, now: [namespace["metadata"]["name"], (namespace.get("status") or {}).get("phase", ""),
                                _since(namespace["metadata"].get("creationTimestamp"), now)]),
}
