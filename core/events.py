"""Events: everything tether learns about the world, as it is appended to the log.

An event is a fact that already happened — an object was observed, a lookup answered, a command applied,
a timer fired. Each is a msgspec struct in one tagged union (:data:`Event`), so a record decodes straight into
the right class, and outside consumers see a ``"type"`` field naming it (the JSON Schema in ``ops/schema`` is
generated from these classes).

Three families:

* **Observations** of Kubernetes objects (:class:`ObjectObserved`, :class:`ObjectDeleted`,
  :class:`ObjectsListed`) recorded by the watch adapters as trimmed snapshots — nothing else is needed to replay —
  and :class:`ListsStarted`, which says that lists are under way: until each of them has ended, the world is a
  half-listed one and nothing is decided from it.
* **Catalog answers** (:class:`DataLocationResolved`, :class:`DataSourceNotInCatalog`,
  :class:`DataLocationLookupFailed`): the outcome of a lookup, a periodic re-resolution or a pushed
  "table moved" notification. The mapping from location to clusters is *not* done here but by the decider,
  so that ``tether replay --what-if`` can re-decide history under another mapping.
* **Outcomes** of tether's own commands (:class:`CommandSucceeded`, :class:`CommandFailed`) and timers
  (:class:`TimerFired`). A successful write carries the object the API server returned, so the projections
  learn the new resourceVersion without waiting for the watch.

And the answers of tether's pod webhook (:class:`PodGateDecided`): a decision taken on the API server's write
path rather than by the decider loop, recorded so that the log explains every gate tether put on a pod; and the
daemon's settings that decisions depend on (:class:`SettingsApplied`), so that a replay decides under them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .identity import DataIdentity
from .kube import KubeObject

#: Version of the event schema written by this code; older records are upcast on read (core.envelope).
EVENT_SCHEMA_VERSION = 1


class ObjectObserved(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """An object was added or modified (or listed again on a relist). ``cluster``: the member cluster it lives in
    (empty: the Karmada control plane) — optional and omitted when empty, so logs written before stay decodable
    and byte-identical."""

    obj: KubeObject
    cluster: str = ""


class ObjectDeleted(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """An object is gone from the API server (its last state). ``cluster`` as in :class:`ObjectObserved`."""

    obj: KubeObject
    cluster: str = ""


class ObjectsListed(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """A (re)list of ``kind`` completed: objects of that kind whose key is not in ``keys`` no longer exist.

    A relist follows a 410 Gone or a restart; the objects themselves were appended just before as
    :class:`ObjectObserved`. Only keys are carried, so this stays small even for many objects.
    """

    kind: str
    keys: tuple[str, ...]
    namespace: str = ""  # set when the list was namespace-scoped
    cluster: str = ""  # the member cluster listed (empty: the Karmada control plane)


class ListsStarted(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """The watch sources named in ``sources`` (see :func:`list_source`) are listing; each list ends with its
    :class:`ObjectsListed`.

    The daemon appends one naming every source before its first lists (a start, a takeover by a standby), and a
    source appends one naming itself before it relists (410 Gone, a watch gap). While any of them is still
    listing, the world may hold bindings without the claims that constrain them, or claims that were deleted in
    the gap: the pipeline decides nothing until the last list has ended, then reconciles every object once,
    as controller-runtime waits for its caches to sync before it reconciles.
    """

    sources: tuple[str, ...]
    cluster: str = ""  # a member cluster's lists: they hold back that member's pod placement only


class MemberDisconnected(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """tether stopped watching the member cluster ``cluster`` (its Karmada Cluster or its configuration is gone):
    what the world knew of it is dropped, nothing is decided there any more."""

    cluster: str
    reason: str = ""


def member_key(cluster: str, key: str) -> str:
    """The log key of an object in a member cluster: ``<cluster>:Kind/namespace/name`` (a cluster name is a DNS
    label, so the colon cannot be part of it; keys stay unique across clusters and control-plane keys unchanged)."""
    return f"{cluster}:{key}" if cluster else key


def split_member_key(key: str) -> tuple[str, str]:
    """``<cluster>:Kind/ns/name`` → (cluster, ``Kind/ns/name``); ("", key) for a control-plane key."""
    head, sep, rest = key.partition(":")
    if sep and "/" not in head:
        return head, rest
    return "", key


def list_source(kind: str, namespace: str = "") -> str:
    """The name of a list in :class:`ListsStarted`: what its :class:`ObjectsListed` carries, ``kind/namespace``."""
    return f"{kind}/{namespace}"


class DataLocationResolved(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """The catalog says where ``identity``'s data lives. ``trigger``: lookup | refresh | push."""

    identity: DataIdentity
    location: str
    trigger: str = "lookup"


class DataSourceNotInCatalog(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """The catalog answered that ``identity`` does not exist (404, or not an Iceberg table)."""

    identity: DataIdentity
    message: str


class DataLocationLookupFailed(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """A lookup gave no answer after the adapter's own retries.

    ``retryable`` says whether the failure is **transient** — the catalog unavailable, a timeout, its circuit open, a
    5xx or 429, a malformed reply: asking again later may succeed, so the decider retries on a timer and admission
    holds the workload's new bindings for their data (up to ``--max-hold``) — or **permanent**: an unknown system
    or catalog type, a refused authentication, a name the catalog cannot hold; a human must act, nothing is
    retried and nothing is held. (A table that does not exist is :class:`DataSourceNotInCatalog`.) The default,
    True, is also what every record written before the field mattered to admission means: the adapter always
    wrote False for its permanent failures (``adapters/catalog``)."""

    identity: DataIdentity
    message: str
    retryable: bool = True


class SettingsApplied(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """The daemon's settings that decisions depend on, from this point of the log on: appended by the daemon when it
    starts deciding (with its first lists), folded into the world. Deciders have no configuration of their own and
    no clock; recording the settings makes ``tether replay --diff`` decide under the settings the daemon had, not
    under the flags of the machine replaying. A log without this event decides under the defaults.

    ``max_hold_ms``: the longest the admission webhook and decider hold a new binding for its data — a claim still
    resolving, or a catalog failing transiently — before it is released without the data constraint (``tether run
    --max-hold``). ``plugin_configmap`` and ``admission_configmap``: ``namespace/name`` of the ConfigMaps the
    data-source plugins and queue admission are configured from (``--plugin-configmap``, ``--admission-configmap``).
    Every field is always encoded (none has a default), so that changing a default later does not change what an
    old record means."""

    max_hold_ms: int
    plugin_configmap: str
    admission_configmap: str


class CommandSucceeded(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """A command was applied (or found already satisfied: ``noop``); ``result`` is the object written.
    ``superseded_by``: the command was never applied — a later one for the same object and purpose (this id) was
    queued behind it and carries the newer desired state (``noop`` too: nothing was written)."""

    command_id: str
    command: str
    target: str
    result: KubeObject | None = None
    noop: bool = False
    superseded_by: str = ""


class CommandFailed(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """A command could not be applied. ``reason`` is the API's (Conflict, Invalid, NotFound…) or the adapter's."""

    command_id: str
    command: str
    target: str
    reason: str
    message: str
    retryable: bool = True


class TimerFired(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """A timer started by a :class:`~tether.core.commands.StartTimer` command is due."""

    timer_id: str
    purpose: str
    subject: str


class PodGateDecided(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """tether's pod webhook answered a pod CREATE in the member cluster ``cluster``
    (``core.placement.webhook_decision``).

    ``gated``: whether the answer added tether's scheduling gate; ``patch`` is the JSON Patch answered (empty: the
    pod was admitted unchanged), ``reason`` why. ``decided_at`` is the position (``partition:offset``) of the last
    event about that member folded into the world the answer was computed from — replaying the log up to it
    re-derives the same answer. A CREATE usually has no name yet (``generateName``): the gated pod then carries the
    request's ``request_uid`` in the annotation ``tether.dev/admission``, and ``tether replay --explain`` follows it
    from the pod to this record. Folding it changes nothing in the world: the pod arrives through the watch."""

    cluster: str
    namespace: str
    request_uid: str
    gated: bool
    name: str = ""
    generate_name: str = ""
    patch: tuple[dict[str, Any], ...] = ()
    reason: str = ""
    decided_at: str = ""


def pod_admission_key(cluster: str, namespace: str, name: str, request_uid: str) -> str:
    """The log key of a :class:`PodGateDecided`: the pod's own key when the request named it, otherwise
    ``<cluster>:PodAdmission/<namespace>/<request uid>`` (what the gated pod's annotation points to)."""
    if name:
        return member_key(cluster, f"Pod/{namespace}/{name}")
    return member_key(cluster, f"PodAdmission/{namespace}/{request_uid}")
class BindingAdmissionDecided(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """tether's admission webhook answered a ResourceBinding CREATE or UPDATE (``core.admission.webhook_decision``).

    ``obj`` is the request's object as the API server sent it (trimmed), ``patch`` the JSON Patch tether answered
    (empty: admitted unchanged), ``decided_at`` the offset of the last event folded into the world it was decided
    from — ``tether replay --diff`` re-derives the patch from the world at exactly that position. The decision
    changes nothing in the world: the binding as stored arrives through the watch like any other write."""

    key: str
    operation: str
    obj: KubeObject
    patch: tuple[dict[str, Any], ...] = ()
    reason: str = ""
    decided_at: int = 0
    suspended: bool = False


Event = (
    ObjectObserved
    | ObjectDeleted
    | ObjectsListed
    | ListsStarted
    | DataLocationResolved
    | DataSourceNotInCatalog
    | DataLocationLookupFailed
    | CommandSucceeded
    | CommandFailed
    | TimerFired
    | MemberDisconnected
    | PodGateDecided
    | BindingAdmissionDecided
    | SettingsApplied
)

EVENT_TYPES: tuple[type[Event], ...] = (
    ObjectObserved,
    ObjectDeleted,
    ObjectsListed,
    ListsStarted,
    DataLocationResolved,
    DataSourceNotInCatalog,
    DataLocationLookupFailed,
    CommandSucceeded,
    CommandFailed,
    TimerFired,
    MemberDisconnected,
    PodGateDecided,
    BindingAdmissionDecided,
    SettingsApplied,
)


def event_key(event: Event) -> str:
    """The log key of an event: everything about one object (or one data identity) shares a key."""
    match event:
        case ObjectObserved(obj=obj, cluster=cluster) | ObjectDeleted(obj=obj, cluster=cluster):
            return member_key(cluster, obj.key)
        case ObjectsListed(kind=kind, namespace=ns, cluster=cluster):
            return member_key(cluster, f"{kind}/{ns}/*")
        case ListsStarted(cluster=cluster):
            return member_key(cluster, "*/lists")
        case MemberDisconnected(cluster=cluster):
            return member_key(cluster, "*/member")
        case DataLocationResolved(identity=i) | DataSourceNotInCatalog(identity=i) | DataLocationLookupFailed(
            identity=i
        ):
            return f"Data/{i.key}"
        case CommandSucceeded(target=t) | CommandFailed(target=t):
            return t
        case TimerFired(subject=s):
            return s
        case PodGateDecided(cluster=cluster, namespace=ns, name=name, request_uid=uid):
            return pod_admission_key(cluster, ns, name, uid)
        case BindingAdmissionDecided(key=k):
            return k
        case SettingsApplied():
            return "*/settings"
