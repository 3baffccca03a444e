"""Member clusters: one API connection, one set of watch sources and one executor per member, joined and left at
run time.

**Where the connections come from.** Two ways, usable together (a configured kubeconfig wins for its name):

* a **kubeconfig per cluster** in tether's configuration (``tether run --member NAME=KUBECONFIG``);
* the **Karmada ``Cluster`` objects**, as Karmada's push mode uses them: ``spec.apiEndpoint`` and
  ``spec.secretRef`` → a Secret in the Karmada control plane holding ``token`` and ``caBundle``
  (``spec.insecureSkipTLSVerification`` honoured). The daemon's Cluster watch hands every Cluster to
  :meth:`MemberClusters.cluster_observed`; a Cluster without an endpoint or secret is not connected (a log line
  with its name says why), a deleted Cluster disconnects. The Secret is read again at each observation of its
  Cluster (Karmada's status heartbeats update it every few seconds): a rotated Secret (another resourceVersion)
  reconnects the member with the new credentials; a missing, unreadable or malformed one leaves it unconnected
  with a warning naming it, and the next observation tries again.

**Isolation.** Each member has its own ``ApiClient``, its own watch sources and its own tasks; a member that is
unreachable backs off in its own watch loops (``WatchSource.run``) and holds back only its own pod placement (its
lists are pending, ``projections/member_fold.py``). Nothing that one member does blocks another, or the control plane.

**Optional APIs.** Nodes, Pods and batch Jobs are served by every member. Godel's PodGroups and each of Fluid's
operations are CRDs that most members lack, that may be installed later or deleted while tether runs: they are
watched with ``absent_ok`` (``WatchSource``) — not served, a kind lists as empty with one warning, so the member's
lists end and the rest of its pods are placed (a member without Godel still places Fluid operations, one without
Fluid still places groups); it is asked for again every ``absent_retry`` seconds and picked up once installed; its
objects are forgotten when its CRD is deleted.

**One namespace.** With ``DaemonConfig.member_namespace`` the members' namespaced sources (pods, PodGroups, Jobs,
Fluid operations) watch that namespace only; Nodes are always watched whole.

**Leaving.** A member that leaves has its tasks cancelled and its client closed, and a
:class:`~tether.core.events.MemberDisconnected` is appended: the world drops what it knew of it.

:class:`MemberExecutor` applies the member commands (``ReleasePod``, ``SetMemberCondition``, ``EmitMemberEvent``)
with the member's client, by :class:`~tether.adapters.kubernetes.executor.KubeExecutor`'s discipline (read,
compare, write the difference guarded by the resourceVersion, outcome as an event). A command for a member that is
not connected fails as retryable (``MemberUnavailable``): the decider retries it with backoff, re-deciding.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes_asyncio import client, config

from tether.adapters.log import EventLog
from tether.core.commands import Command, EmitMemberEvent, ReleasePod, SetMemberCondition, command_name
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandFailed, Event, ListsStarted, MemberDisconnected, event_key, member_key
from tether.core.keys import PLACEMENT_ANNOTATION
from tether.core.kube import KubeObject, as_json, parse_conditions, pointer_token, set_condition, trim
from tether.core.placement.node_affinity import InvalidAffinity, tighten_node_affinity
from tether.core.placement.operation_status import accepts_conditions

from .client import JSON_PATCH, KubeClient, KubeError, Resource
from .executor import KubeExecutor, _Attempt
from .watch import WatchSource

log = structlog.get_logger("tether.members")

NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
POD_GROUPS = Resource("scheduling.godel.kubewharf.io", "v1alpha1", "podgroups", "PodGroup", True)
FLUID = tuple(Resource("data.fluid.io", "v1alpha1", plural, kind, True) for plural, kind in (
    ("dataloads", "DataLoad"), ("datamigrates", "DataMigrate"), ("dataprocesses", "DataProcess"),
    ("databackups", "DataBackup")))
#: Watched in every member, in dependency order: nodes before pods (a pod's node is known), operations and Jobs
#: before pods (a pod's owner is known when the pod is decided).
MEMBER_RESOURCES = (NODES, POD_GROUPS, *FLUID, JOBS, PODS)
_BY_KIND = {r.kind: r for r in (NODES, PODS, JOBS, POD_GROUPS, *FLUID)}
EVENTS = Resource("", "v1", "events", "Event", True)


def _client_with_ca(configuration: client.Configuration, ca: bytes) -> client.ApiClient:
    """An ApiClient trusting ``ca`` (PEM; none: the system's). The client reads its CA file once, when it builds its
    TLS context, so the file lives only for that: nothing of a member's credentials is left on disk."""
    if not ca:
        return client.ApiClient(configuration)
    fd, path = tempfile.mkstemp(prefix="tether-member-ca-", suffix=".crt")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(ca)
        configuration.ssl_ca_cert = path
        return client.ApiClient(configuration)
    finally:
        configuration.ssl_ca_cert = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _now_ms() -> int:
    return int(time.time() * 1000)


class _MemberKube(KubeExecutor):
    """:class:`KubeExecutor`'s retry discipline with the member commands (one instance per member). ``resources``:
    the API resource of each kind a command may target (tests serve another project's schema under a group of
    their own)."""

    def __init__(self, kube: KubeClient, *, cluster: str, resources: Mapping[str, Resource] | None = None,
                 **options: Any) -> None:
        super().__init__(kube, **options)
        self.cluster = cluster
        self.resources = resources if resources is not None else _BY_KIND

    async def apply_release_pod(self, c: ReleasePod, attempt: _Attempt) -> tuple[KubeObject | None, bool]:
        pod = await self.kube.get(PODS, c.pod.name, namespace=c.pod.namespace)
        if pod is None or (c.pod.uid and pod["metadata"].get("uid") != c.pod.uid):
            return None, True  # gone (or another pod of that name): nothing to release
        spec = pod.get("spec") or {}
        gates = [g for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]
        if not any(g.get("name") == c.gate for g in gates):
            return trim(pod), True  # already released: an ungated pod's affinity can no longer change
        affinity = dict(spec.get("affinity") or {})
        try:
            tightened = tighten_node_affinity(affinity.get("nodeAffinity"), required=c.required,
                                              preferred=c.preferred, path="spec.affinity.nodeAffinity")
        except InvalidAffinity as exc:  # the pod's own affinity is malformed: release it without tether's terms
            log.warning("pod affinity malformed; releasing without placement", cluster=self.cluster,
                        key=c.pod.key, error=str(exc))
            tightened = None
        meta = pod["metadata"]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                      "value": meta["resourceVersion"]}]
        if tightened is not None and tightened.node_affinity != affinity.get("nodeAffinity"):
            ops.append({"op": "add", "path": "/spec/affinity",
                        "value": {**affinity, "nodeAffinity": tightened.node_affinity}})
        remaining = [g for g in gates if g.get("name") != c.gate]
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": remaining} if remaining
                   else {"op": "remove", "path": "/spec/schedulingGates"})
        if c.note:
            if meta.get("annotations"):
                ops.append({"op": "add", "path": f"/metadata/annotations/{pointer_token(PLACEMENT_ANNOTATION)}",
                            "value": c.note})
            else:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {PLACEMENT_ANNOTATION: c.note}})
        out = await self.kube.patch(PODS, c.pod.name, ops, namespace=c.pod.namespace, content_type=JSON_PATCH)
        return trim(out), False

    async def apply_set_member_condition(self, c: SetMemberCondition,
                                         attempt: _Attempt) -> tuple[KubeObject | None, bool]:
        """tether's condition on a Fluid operation: a merge patch of ``status.conditions`` alone (the owner's
        conditions verbatim), guarded by the resourceVersion read — and only onto a status Fluid's controller has
        written: Fluid's schema refuses a status without ``phase`` and ``duration``, which are not tether's to
        invent (``core.placement.operation_status``). The decider already waits for that; a fresh read that shows
        otherwise (the object was re-created) writes nothing, and the observation it returns brings the decider
        back when the status appears."""
        res = self.resources[c.target.kind]
        obj = await self.kube.get(res, c.target.name, namespace=c.target.namespace)
        if obj is None or (c.target.uid and obj["metadata"].get("uid") != c.target.uid):
            return None, True
        status = obj.get("status") or {}
        if not accepts_conditions(status):
            log.info("condition not written: the owner has not written the object's status yet", cluster=self.cluster,
                     key=c.target.key, condition=c.condition.type)
            return trim(obj), True
        held = parse_conditions(status.get("conditions"))
        mine = [c2 for c2 in held if c2.type == c.condition.type]
        if mine and (mine[0].status, mine[0].reason, mine[0].message) == (
                c.condition.status, c.condition.reason, c.condition.message):
            return trim(obj), True
        others = [x for x in status.get("conditions") or [] if isinstance(x, dict)
                  and x.get("type") != c.condition.type]  # the owner's conditions, verbatim
        updated = as_json(set_condition(tuple(mine), c.condition))
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {"conditions": [*others, *updated]}}
        out = await self.kube.patch(res, c.target.name, body, namespace=c.target.namespace, subresource="status")
        return trim(out), False

    async def apply_emit_member_event(self, c: EmitMemberEvent, attempt: _Attempt) -> tuple[KubeObject | None, bool]:
        from tether.core.commands import EmitKubernetesEvent

        return await self.apply_emit_kubernetes_event(
            EmitKubernetesEvent(involved=c.involved, event_type=c.event_type, reason=c.reason, message=c.message),
            attempt)


MEMBER_COMMANDS = (ReleasePod, SetMemberCondition, EmitMemberEvent)


class MemberExecutor:
    """Routes each member command to its member's executor (``runtime.Executor``)."""

    def __init__(self) -> None:
        self.executors: dict[str, _MemberKube] = {}

    def handles(self, command: Command) -> bool:
        return isinstance(command, MEMBER_COMMANDS)

    async def apply(self, record: CommandRecord) -> list[Event]:
        command = record.command
        assert isinstance(command, MEMBER_COMMANDS)
        executor = self.executors.get(command.cluster)
        if executor is None:
            target = member_key(command.cluster, (command.pod if isinstance(command, ReleasePod) else
                                                  command.target if isinstance(command, SetMemberCondition) else
                                                  command.involved).key)
            return [CommandFailed(command_id=record.id, command=command_name(command), target=target,
                                  reason="MemberUnavailable", message=f"member cluster {command.cluster} is not "
                                  "connected", retryable=True)]
        events = await executor.apply(record)
        return [_tag(e, command.cluster) for e in events]


def _tag(event: Event, cluster: str) -> Event:
    """KubeExecutor names the target ``Kind/ns/name``; the log needs the member's key."""
    import msgspec

    target = getattr(event, "target", "")
    if target and not target.startswith(f"{cluster}:"):
        return msgspec.structs.replace(event, target=member_key(cluster, target))  # type: ignore[type-var]
    return event


@dataclass
class _Member:
    name: str
    api: client.ApiClient
    origin: str  # "kubeconfig" or "cluster"
    fingerprint: str = ""
    sources: list[WatchSource] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


ClientFactory = Callable[[str], Awaitable[client.ApiClient]]


class MemberClusters:
    """The connected members: their clients, watch sources and executors (module doc)."""

    def __init__(self, log_: EventLog, executor: MemberExecutor, *, kubeconfigs: Mapping[str, str] | None = None,
                 karmada: KubeClient | None = None, clients: Mapping[str, client.ApiClient] | None = None,
                 api_groups: Mapping[str, str] | None = None, absent_retry: float = 30.0,
                 namespace: str = "") -> None:
        self.log = log_
        # what each member watches: the optional APIs (Godel's, Fluid's) may be absent there (module doc)
        self.api_groups = dict(api_groups or {})
        self.absent_retry = absent_retry
        self.namespace = namespace  # "" all; else the namespaced member sources watch this one (DaemonConfig)
        self.executor = executor
        self.kubeconfigs = dict(kubeconfigs or {})
        self.karmada = karmada
        self.clients = dict(clients or {})  # given ApiClients (tests), by member name; never closed here
        self.members: dict[str, _Member] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        for name in sorted({*self.kubeconfigs, *self.clients}):
            api = self.clients.get(name)
            if api is None:
                configuration = client.Configuration()
                await config.load_kube_config(config_file=self.kubeconfigs[name], client_configuration=configuration)
                api = client.ApiClient(configuration)
            await self.join(name, api, origin="kubeconfig")

    async def join(self, name: str, api: client.ApiClient, *, origin: str, fingerprint: str = "") -> bool:
        """Connect ``name`` through ``api``; False (and ``api`` unused) when a member of that name is connected."""
        async with self._lock:
            if name in self.members:
                return False
            kube = KubeClient(api)
            member = _Member(name=name, api=api, origin=origin, fingerprint=fingerprint)
            member.sources = [WatchSource(kube, self.log, res, cluster=name, absent_ok=res.optional,
                                          absent_retry=self.absent_retry, api_groups=self.api_groups,
                                          namespace=self.namespace if res.namespaced else "")
                              for res in MEMBER_RESOURCES]
            self.executor.executors[name] = _MemberKube(kube, cluster=name, component="tether")
            started = ListsStarted(sources=tuple(s.list_source for s in member.sources), cluster=name)
            await self.log.append("events", [EventRecord(at_ms=_now_ms(), source="members", key=event_key(started),
                                                         event=started)])
            member.tasks = [asyncio.create_task(s.run(), name=f"watch {s.name}") for s in member.sources]
            self.members[name] = member
            log.info("member cluster joined", cluster=name, origin=origin)
            return True

    async def leave(self, name: str, *, reason: str) -> None:
        async with self._lock:
            member = self.members.pop(name, None)
            if member is None:
                return
            self.executor.executors.pop(name, None)
            for task in member.tasks:
                task.cancel()
            await asyncio.gather(*member.tasks, return_exceptions=True)
            if name not in self.clients:
                await member.api.close()
            left = MemberDisconnected(cluster=name, reason=reason)
            await self.log.append("events", [EventRecord(at_ms=_now_ms(), source="members", key=event_key(left),
                                                         event=left)])
            log.info("member cluster left", cluster=name, reason=reason)

    async def stop(self) -> None:
        for member in list(self.members.values()):
            for task in member.tasks:
                task.cancel()
            await asyncio.gather(*member.tasks, return_exceptions=True)
            if member.name not in self.clients:
                await member.api.close()
        self.members.clear()

    def cluster_observed(self, obj: KubeObject, deleted: bool) -> None:
        """The daemon's Cluster watch callback: connect a member from its Karmada Cluster, or disconnect it."""
        if self.karmada is None or obj.kind != "Cluster":
            return
        name = obj.metadata.name
        held = self.members.get(name)
        if held is not None and held.origin == "kubeconfig":
            return  # configured explicitly: the configuration wins
        if deleted:
            asyncio.get_running_loop().create_task(self.leave(name, reason="Karmada Cluster deleted"))
            return
        asyncio.get_running_loop().create_task(self._connect_from_cluster(obj))

    async def _connect_from_cluster(self, obj: KubeObject) -> None:
        name, spec = obj.metadata.name, obj.spec_dict()
        endpoint, secret_ref = spec.get("apiEndpoint"), spec.get("secretRef") or {}
        if not endpoint or not secret_ref.get("name"):
            log.info("member cluster not connected: no apiEndpoint or secretRef", cluster=name)
            return
        assert self.karmada is not None
        try:
            secret = await self.karmada.get(SECRETS, secret_ref["name"], namespace=secret_ref.get("namespace", ""))
        except KubeError as exc:
            log.warning("member cluster secret unreadable", cluster=name, status=exc.status, message=exc.message)
            return
        if secret is None:
            log.warning("member cluster secret not found", cluster=name, secret=secret_ref.get("name"),
                        namespace=secret_ref.get("namespace", ""))
            return
        data = secret.get("data") or {}
        if "token" not in data:
            log.warning("member cluster secret has no token", cluster=name, secret=secret_ref.get("name"))
            return
        fingerprint = f"{endpoint}|{secret['metadata'].get('resourceVersion', '')}"
        held = self.members.get(name)
        if held is not None:
            if held.fingerprint == fingerprint:
                return
            await self.leave(name, reason="credentials changed")
        try:
            token = base64.b64decode(data["token"], validate=True).decode().strip()
        except (ValueError, TypeError):  # not base64, or not text: said without a byte of it (it is a secret)
            token = ""
        if not token:
            log.warning("member cluster secret's token is unreadable (not base64-encoded text)", cluster=name,
                        secret=secret_ref.get("name"))
            return
        configuration = client.Configuration()
        configuration.host = endpoint
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        if spec.get("insecureSkipTLSVerification"):
            configuration.verify_ssl = False
        try:
            api = _client_with_ca(configuration, base64.b64decode(data["caBundle"], validate=True)
                                  if data.get("caBundle") and not spec.get("insecureSkipTLSVerification") else b"")
        except (ValueError, TypeError, OSError, ssl.SSLError) as exc:  # a caBundle that is no PEM: this member only
            log.warning("member cluster caBundle unusable", cluster=name, error=str(exc)[:200])
            return
        try:
            joined = await self.join(name, api, origin="cluster", fingerprint=fingerprint)
        except Exception as exc:
            log.warning("member cluster could not join", cluster=name, error=repr(exc)[:200])
            joined = False
        if not joined:  # (connected meanwhile, by a newer observation of its Cluster)
            await api.close()
