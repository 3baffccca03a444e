"""``tether run``: every adapter wired around the decider and executor loops (``loops.py``).

:class:`Daemon` builds, from a :class:`DaemonConfig`, the pieces of one tether process and runs them:

* the event log (``--log``, ``sqlite:///tether.db`` by default, or ``kafka://...``);
* a Kubernetes client (kubeconfig, in-cluster, or an ``ApiClient`` handed in by tests and the demo);
* before anything starts, the preflight (``adapters/daemon/preflight.py``): the kubeconfig, the log's servers and
  the API server's CRDs are checked and the ports bound, and a mistake is one
  :class:`~tether.adapters.daemon.preflight.StartupError`;
* watch sources for DataSourceClaims, DataSources, ResourceBindings, Karmada Clusters and the plugin ConfigMap;
* executors: Kubernetes (``KubeExecutor``), catalog (``CatalogExecutor`` over a ``ResolverSet`` kept in sync
  with the plugin ConfigMap), timers;
* the migration poller: every ``refreshInterval`` (per plugin, ±20 % jitter) it re-resolves the DataSources in
  use and appends an answer only when a location changed — the "compute follows data" trigger for catalogs
  that cannot notify (Amoro cannot);
* HTTP endpoints (health, readiness, metrics, status, pushed table-moved notifications), and a reporter that sets the
  gauges describing the world once a second (``adapters/daemon/reporting.py``);
* member clusters (``--member``, ``--members-from-karmada``): their watch sources and executor
  (``adapters/kubernetes/members.py``);
* **one webhook server** (HTTPS, one port, one certificate directory) for every webhook tether serves: the
  ResourceBinding webhook (``--binding-webhook``, ``adapters/kubernetes/binding_webhook.py``) and the members' pod
  webhook (``--pod-webhook``, ``adapters/kubernetes/pod_webhook.py``). It starts at once; the server answers 503
  until this replica is the leader with its world recovered, and each handler answers 503 until its own part of
  the world is complete — the binding webhook the control plane's lists, the pod webhook its member's — so a
  member still listing holds back no binding and a Karmada relist no pod. One server rather than one per webhook:
  one port for the Service, one certificate to issue, rotate and trust, one caBundle path; the per-path
  readiness is what would otherwise have justified two;
* **readiness routes webhook traffic to the leader.** With ``failurePolicy: Fail`` a standby's 503 makes the API
  server refuse the request — it does not try another endpoint. So a standby that serves a webhook reports not
  ready on ``/readyz`` and drops out of the webhook Service's endpoints; a standby serving none is ready, as
  a healthy replica that merely does not lead (``ready``);
* optional leader election: a standby replica waits; the leader runs everything; losing the Lease stops the
  daemon (exit code 1) so that the supervisor restarts it as a standby;
* **or the leader publishes its own address** (``--leader-service``): the Services that must reach the leader
  (push, webhooks) have no selector, and the leader writes their EndpointSlices
  (``adapters/kubernetes/leader_endpoints.py``). Then a standby stays ready, webhooks or not — the Helm chart's
  way, which keeps StatefulSet rollouts and PodDisruptionBudgets working.

**The startup heap is frozen** (``freeze_heap``, on by default): once the world is recovered, everything alive —
the modules (kubernetes-asyncio's generated models alone are most of ~80k objects) and the recovered world — is
collected once and moved to the permanent generation (``gc.freeze()``), so the cyclic GC never scans it again.
Before, every full collection scanned it: a 30 to 45 ms stop-the-world pause, at random, in the middle of a decision
or of a request (measured with ``ops/bench/e2e.py``; the slowest claims of a run were exactly those). Frozen
objects are still freed by reference counting; only a reference cycle among them would never be collected, and
the module graph and the world's maps are long-lived. What the world gains after the start is scanned as usual
(a world of ~11k claims is ~47k more objects, ~25 ms per full collection, which happens far more rarely).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from kubernetes_asyncio import client

from tether.adapters.catalog.executor import CatalogExecutor
from tether.adapters.catalog.registry import ResolverSet
from tether.adapters.daemon import preflight
from tether.adapters.daemon.endpoints import Endpoints
from tether.adapters.daemon.executor_loop import BOOKKEEPING_DELAY, bookkeeping
from tether.adapters.daemon.loops import Loops
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.daemon.reporting import StateReporter
from tether.adapters.daemon.status import daemon_status
from tether.adapters.daemon.timers import TimerService
from tether.adapters.kubernetes.binding_webhook import PATH as BINDING_PATH
from tether.adapters.kubernetes.binding_webhook import BindingWebhook
from tether.adapters.kubernetes.client import (
    BINDINGS,
    CLAIMS,
    CLUSTERS,
    CONFIGMAPS,
    DATASOURCES,
    DEPLOYMENTS,
    PRIORITY_CLASSES,
    QUEUES,
    VOLCANO_JOBS,
    KubeClient,
    KubeError,
)
from tether.adapters.kubernetes.competing import EVENT_MESSAGE as COMPETING_MESSAGE
from tether.adapters.kubernetes.competing import EVENT_REASON as COMPETING_REASON
from tether.adapters.kubernetes.competing import CompetingWrites
from tether.adapters.kubernetes.executor import KubeExecutor, ObjectCache
from tether.adapters.kubernetes.kubeconfig import KubeconfigError, load_in_cluster
from tether.adapters.kubernetes.leader import LeaderElector
from tether.adapters.kubernetes.leader_endpoints import LeaderEndpoints
from tether.adapters.kubernetes.members import MemberClusters, MemberExecutor
from tether.adapters.kubernetes.pod_webhook import PATH as POD_PATH
from tether.adapters.kubernetes.pod_webhook import PodWebhook
from tether.adapters.kubernetes.watch import WatchSource
from tether.adapters.kubernetes.webhook import WebhookHandler, WebhookServer
from tether.adapters.kubernetes.webhook_certs import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    ensure_self_signed,
    inject_ca_bundle,
    service_names,
)
from tether.adapters.log import EventLog
from tether.core.commands import EmitKubernetesEvent
from tether.core.envelope import EventRecord
from tether.core.events import DataLocationResolved, Event, ListsStarted, SettingsApplied, event_key
from tether.core.identity import DataIdentity
from tether.core.kube import KubeObject, ref_of
from tether.core.world import Settings, World
from tether.core.world.admission_state import DEFAULT_MAX_HOLD_MS

log = structlog.get_logger("tether.daemon")

DEFAULT_WEBHOOK_PORT = 9443
DEFAULT_WEBHOOK_CERT_DIR = "/var/run/tether/webhook"


@dataclass
class DaemonConfig:
    log_url: str = "sqlite:///tether.db"
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    plugin_configmap: str = "volcano-global/volcano-global-datasource-plugins"
    watch_namespace: str = ""
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    http_tls_cert: str = ""  # with http_tls_key: the endpoints (push, metrics, status, probes) over HTTPS
    http_tls_key: str = ""
    push_token: str = ""
    leader_elect: bool = False
    lease_namespace: str = "tether-system"
    lease_name: str = "tether-leader"
    lease_duration: float = 15.0  # seconds; client-go's defaults (15 s / 10 s / 2 s)
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    refresh_interval: float | None = None  # overrides every plugin's refreshInterval (seconds)
    snapshot_every: int = 50_000
    executor_concurrency: int = 32
    # how long a bookkeeping write (a claim's status, an Event, a Queue's status; a DataSource's claimRefs three times
    # that) waits for the next one of its object, so that one write carries them (adapters/daemon/executor_loop.py)
    bookkeeping_delay: float = BOOKKEEPING_DELAY
    freeze_heap: bool = True  # gc.freeze() once recovered (module doc); off where the process is not the daemon's
    members: dict[str, str] = field(default_factory=dict)  # member cluster name → kubeconfig (pod placement)
    members_from_karmada: bool = False  # also connect every Karmada Cluster with apiEndpoint + secretRef
    # Only the members' namespaced objects (pods, PodGroups, Jobs, Fluid operations) of this namespace; Nodes stay
    # cluster-wide. For a daemon confined to one namespace of a shared member — the tests' on a shared cluster,
    # where another run's daemon must not place this run's pods: pods of other namespaces then count against no
    # node's allocatable, so only where nothing else lands on the nodes placed on (the tests' tainted Nodes).
    member_namespace: str = ""
    # queue admission (docs/admission.md): watch Queues, PriorityClasses, workloads and the admission ConfigMap
    admission: bool = False
    admission_configmap: str = "tether-system/tether-admission"
    admission_volcano_jobs: bool = False  # also watch batch.volcano.sh Jobs
    # the longest a new binding is held for its data before it is released without the data constraint (seconds;
    # 0: no hold). Decisions read it from the log (SettingsApplied, appended with the first lists): a replay decides
    # under the bound the daemon had. Ten minutes: core/admission/data_hold.py says why.
    max_hold: float = DEFAULT_MAX_HOLD_MS / 1000
    absent_retry: float = 30.0  # seconds between asking again for an optional resource not served (its CRD absent)
    # an optional API group served from another group, {its group: the group serving it} — tests on a shared
    # cluster serve Volcano's, Godel's or Fluid's kinds from CRDs of their own (client.served_from); not a CLI flag
    api_groups: dict[str, str] = field(default_factory=dict)
    # the webhook server (module doc): one HTTPS port and certificate directory for every webhook tether serves
    binding_webhook: bool = False  # /mutate/resourcebindings (the ResourceBinding admission webhook)
    pod_webhook: bool = False  # /mutate/pods/<cluster> (the member clusters' pod webhook)
    webhook_port: int = DEFAULT_WEBHOOK_PORT
    webhook_host: str = "0.0.0.0"
    webhook_cert_dir: str = DEFAULT_WEBHOOK_CERT_DIR  # tls.crt/tls.key (cert-manager's Secret, or self-signed)
    webhook_self_signed: bool = False  # make the certificates in webhook_cert_dir and inject the caBundle
    webhook_inject_ca: bool = False  # inject webhook_cert_dir/ca.crt (cert-manager in another cluster than the API's)
    webhook_service: str = "tether-webhook"
    webhook_namespace: str = "tether-system"
    webhook_configuration: str = "tether-resourcebindings"  # the MutatingWebhookConfiguration (caBundle)
    webhook_extra_names: list[str] = field(default_factory=list)  # more names for the self-signed certificate
    # leader-only Services (adapters/kubernetes/leader_endpoints.py): their EndpointSlices name the leader's pod, in
    # the cluster tether runs in (the pod's service account); pod_ip/pod_namespace/identity come from the downward API
    leader_services: list[str] = field(default_factory=list)
    pod_ip: str = ""
    pod_namespace: str = ""

    @property
    def serves_webhooks(self) -> bool:
        return bool(self.binding_webhook or self.pod_webhook)


def component_failure(task: asyncio.Task[Any]) -> str | None:
    """Why a finished component task failed, or None when it did not. A task that ended *cancelled* failed too:
    the daemon cancels its tasks only after this check, so the ``CancelledError`` came from inside (a library's
    stray one — adapters/log/kafka_stop.py). ``Task.exception()`` raises on such a task: asked bare, it turned a
    component's failure into a crash of ``run`` with a traceback instead of this one line and a clean stop."""
    if task.cancelled():
        return "CancelledError() raised inside the component (nothing cancelled it)"
    error = task.exception()
    return None if error is None else repr(error)


class Daemon:
    def __init__(self, cfg: DaemonConfig, *, api_client: client.ApiClient | None = None,
                 log_: EventLog | None = None, resolver_options: dict[str, Any] | None = None,
                 member_clients: dict[str, client.ApiClient] | None = None,
                 host_api_client: client.ApiClient | None = None,
                 lease_clock: Callable[[], float] = time.time,
                 lease_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """``host_api_client``: the cluster tether runs in, for ``leader_services`` (default: the pod's service
        account); ``api_client``: Karmada's API server. ``lease_clock``/``lease_sleep``: the leader election's time
        (``LeaderElector``'s ``clock``/``sleep``), for tests that drive it with a manual clock instead of waiting
        for lease durations."""
        self.cfg = cfg
        self._host_api_client = host_api_client
        self._owned_host_client: client.ApiClient | None = None
        self.leader_endpoints: LeaderEndpoints | None = None
        self._webhook_ca = b""
        self._lease_clock = lease_clock
        self._lease_sleep = lease_sleep
        self._api_client = api_client
        self._log = log_
        self._resolver_options = resolver_options or {}
        self.metrics = Metrics(admission=cfg.admission)
        self.loops: Loops | None = None
        self.sources: list[WatchSource] = []
        self.resolvers: ResolverSet | None = None
        self.endpoints: Endpoints | None = None
        self.leader: LeaderElector | None = None
        self.webhook: WebhookServer | None = None
        self.started = asyncio.Event()
        self._member_clients = member_clients or {}
        self.members: MemberClusters | None = None
        self.started_at = time.time()
        self.competing: CompetingWrites | None = None  # another writer of what tether owns (competing.py)

    @property
    def event_log(self) -> EventLog | None:
        """The log, once opened (``run``)."""
        return self._log

    async def status(self) -> dict[str, Any]:
        """``GET /status`` (``adapters/daemon/status.py``)."""
        return await daemon_status(self, started_at=self.started_at)

    @property
    def world(self) -> World:
        assert self.loops is not None
        return self.loops.world

    def ready(self) -> tuple[bool, str]:
        """``/readyz``. A standby is ready — healthy, merely not leading — unless it serves a webhook: then it is
        not, so that the webhook Service's endpoints are the leader only (module doc)."""
        if self.leader is not None and not self.leader.is_leader.is_set():
            problem = f"; {self.leader.problem}" if self.leader.problem else ""
            if self.cfg.serves_webhooks and not self.cfg.leader_services:
                return False, f"standby (not the leader): its webhooks would only answer 503{problem}"
            return True, f"standby (not the leader){problem}"
        if self.loops is None or not self.loops.recovered.is_set():
            return False, "recovering the world from the log"
        unsynced = [s.name for s in self.sources if not s.synced.is_set()]
        if unsynced:
            return False, f"waiting for the first list of {', '.join(unsynced)}"
        return True, "ready"

    def replica_current(self) -> tuple[bool, str]:
        """The webhook server's gate, for every path: the leader, its world recovered. What else a webhook needs is
        its handler's to check (``control_plane_listed`` for bindings; the member's lists for pods)."""
        if self.leader is not None and not self.leader.is_leader.is_set():
            return False, "standby (not the leader)"
        if self.loops is None or not self.loops.recovered.is_set():
            return False, "recovering the world from the log"
        return True, "current"

    def control_plane_listed(self) -> tuple[bool, str]:
        """Whether every control-plane list has ended (``World.lists_pending``, and each source's first list): a
        binding decided before could miss a claim not listed yet. The binding webhook's own check."""
        assert self.loops is not None
        if self.loops.world.lists_pending or not all(s.synced.is_set() for s in self.sources):
            return False, "lists pending: the world is not complete yet"
        return True, "current"

    async def _start_webhook(self, kube: KubeClient, *, sock: socket.socket | None = None) -> None:
        """The one webhook server, with the handlers of the webhooks configured (module doc)."""
        cfg = self.cfg
        assert self._log is not None
        cert, key = Path(cfg.webhook_cert_dir) / CERT_FILE, Path(cfg.webhook_cert_dir) / KEY_FILE
        ca = b""
        if cfg.webhook_self_signed:
            names = [*service_names(cfg.webhook_service, cfg.webhook_namespace), *cfg.webhook_extra_names]
            cert, key, ca = ensure_self_signed(cfg.webhook_cert_dir, names=names)
        log_ = self._log

        def append(records: Sequence[EventRecord]) -> Awaitable[object]:
            return log_.append("events", records)

        handlers: dict[str, WebhookHandler] = {}
        if cfg.binding_webhook:
            assert self.competing is not None
            handlers[BINDING_PATH] = BindingWebhook(world=lambda: self.world, append=append,
                                                    current=self.control_plane_listed,
                                                    on_patch=self.competing.expect)
        if cfg.pod_webhook:
            handlers[POD_PATH] = PodWebhook(world=lambda: self.world, append=append)
        metrics = self.metrics
        self.webhook = WebhookServer(
            handlers=handlers, cert_file=str(cert), key_file=str(key), serving=self.replica_current,
            host=cfg.webhook_host, port=cfg.webhook_port,
            observe=lambda path, outcome, seconds: metrics.webhook_latency.labels(path, outcome).observe(seconds))
        await self.webhook.start(sock=sock)
        if cfg.webhook_inject_ca and not cfg.webhook_self_signed:  # cert-manager's Secret, its CA beside the cert
            try:
                ca = (Path(cfg.webhook_cert_dir) / CA_FILE).read_bytes()
            except OSError as exc:
                log.warning("no CA to inject into the webhook configuration", file=str(exc))
        self._webhook_ca = ca

    async def _inject_webhook_ca(self, kube: KubeClient) -> None:
        """The leader's CA into the binding webhook configuration's caBundle, once it leads: with self-signed
        certificates each replica has its own CA (unless they share the directory), and only the leader serves.
        (The members' pod webhook configurations live in the members: their caBundle is set by hand.)"""
        cfg = self.cfg
        if not (self._webhook_ca and cfg.binding_webhook):
            return
        try:
            await inject_ca_bundle(kube, cfg.webhook_configuration, self._webhook_ca)
        except (LookupError, KubeError, RuntimeError) as exc:  # served anyway: the configuration may come later
            log.warning("could not inject the webhook's caBundle", configuration=cfg.webhook_configuration,
                        error=str(exc)[:200])

    async def _on_table_moved(self, identity: DataIdentity) -> Event:
        assert self.resolvers is not None and self._log is not None
        outcome: Event = await self.resolvers.resolve(identity, trigger="push")
        await self._log.append("events", [EventRecord(at_ms=int(time.time() * 1000), source="push",
                                                      key=event_key(outcome), event=outcome)])
        return outcome

    def _count_lookup(self, system: str, outcome: str) -> None:
        """The catalog executor's answers, counted (``tether_catalog_lookups_total``)."""
        self.metrics.lookups.labels(system, outcome).inc()

    def _sync_resolvers(self, world: World) -> None:
        if self.resolvers is not None:
            self.resolvers.update(world.plugins)

    async def poll_locations(self) -> None:
        """Re-resolve the DataSources in use, forever; append only changes (module doc)."""
        assert self.loops is not None and self.resolvers is not None and self._log is not None
        await self.loops.recovered.wait()
        next_due: dict[str, float] = {}
        while True:
            world = self.loops.world
            now = time.monotonic()
            due: list[tuple[DataIdentity, str]] = []
            for source in list(world.sources.values()):
                identity = source.identity
                if identity is None or source.deleting or not source.location:
                    continue
                plugin = world.plugins.plugins.get(identity.system)
                if plugin is None:
                    continue
                interval = self.cfg.refresh_interval or plugin.refresh_interval
                key = identity.key
                if key not in next_due:
                    next_due[key] = now + interval * random.uniform(0.8, 1.2)
                elif next_due[key] <= now:
                    next_due[key] = now + interval * random.uniform(0.8, 1.2)
                    due.append((identity, source.location))
            if due:
                answers = await asyncio.gather(*(self.resolvers.resolve(i, trigger="refresh") for i, _ in due))
                moved = [a for a, (_, old) in zip(answers, due, strict=True)
                         if isinstance(a, DataLocationResolved) and a.location != old]
                if moved:
                    at = int(time.time() * 1000)
                    await self._log.append("events", [EventRecord(at_ms=at, source="poller", key=event_key(a),
                                                                  event=a) for a in moved])
                    log.info("data moved", tables=[a.identity.key for a in moved])
            waits = [t - time.monotonic() for t in next_due.values()]
            await asyncio.sleep(min([1.0, *[w for w in waits if w > 0]]) if waits else 1.0)

    async def run(self, *, stop: asyncio.Event | None = None) -> int:
        """Run until ``stop`` is set or the process is cancelled; returns the exit code."""
        # preflight (adapters/daemon/preflight.py): a mistake is one StartupError, before anything starts
        owns_client = self._api_client is None
        api = self._api_client or await preflight.api_client(kubeconfig=self.cfg.kubeconfig, context=self.cfg.context,
                                                             in_cluster=self.cfg.in_cluster)
        owns_log = self._log is None
        kube = KubeClient(api)
        sockets: list[socket.socket] = []  # the endpoints', then the webhook server's (preflight.listen)
        try:
            self._log = self._log or await preflight.event_log(self.cfg.log_url)
            await preflight.require_served(kube, server=str(api.configuration.host))
            http_tls = (preflight.serving_certificate(self.cfg.http_tls_cert, self.cfg.http_tls_key,
                                                      flags="--http-tls-cert/--http-tls-key")
                        if self.cfg.http_tls_cert else None)
            if self.cfg.serves_webhooks and not self.cfg.webhook_self_signed:
                certs = Path(self.cfg.webhook_cert_dir)
                preflight.serving_certificate(str(certs / CERT_FILE), str(certs / KEY_FILE), flags="--webhook-cert-dir")
            sockets.append(preflight.listen(self.cfg.http_host, self.cfg.http_port,
                                            flags="--http-address/--http-port"))
            if self.cfg.serves_webhooks:
                sockets.append(preflight.listen(self.cfg.webhook_host, self.cfg.webhook_port,
                                                flags="--webhook-address/--webhook-port"))
        except BaseException:
            for sock in sockets:
                sock.close()
            if owns_log and self._log is not None:
                await self._log.close()
                self._log = None
            if owns_client:
                await api.close()
            raise
        plugin_ns, _, plugin_name = self.cfg.plugin_configmap.partition("/")
        self.resolvers = ResolverSet(**self._resolver_options)
        timers = TimerService(self._log)
        known = ObjectCache()  # what the watches saw last: the executor writes from it without a GET first
        executor = KubeExecutor(kube, cache=known)
        executor.events.on_drop = self.metrics.events_dropped.inc
        self.competing = executor.writes = CompetingWrites(
            # a DataSource is shared with the tethers of other namespaces (competing.py)
            shared_kinds=frozenset({"DataSource"}) if self.cfg.watch_namespace else frozenset(),
            count=lambda kind: self.metrics.competing_writes.labels(kind).inc(),
            emit=lambda obj: executor.apply_emit_kubernetes_event(EmitKubernetesEvent(
                involved=ref_of(obj), event_type="Warning", reason=COMPETING_REASON, message=COMPETING_MESSAGE)))
        competing = self.competing

        def observe(obj: KubeObject, deleted: bool = False) -> None:  # the watches of what tether writes
            known.observe(obj, deleted)
            competing.observed(obj, deleted)

        member_executor = MemberExecutor()
        self.members = MemberClusters(self._log, member_executor, kubeconfigs=self.cfg.members,
                                      namespace=self.cfg.member_namespace,
                                      karmada=kube if self.cfg.members_from_karmada else None,
                                      clients=self._member_clients, api_groups=self.cfg.api_groups,
                                      absent_retry=self.cfg.absent_retry)
        self.loops = Loops(
            self._log, executors=[executor,
                                  CatalogExecutor(self.resolvers, on_lookup=self._count_lookup), member_executor],
            timers=timers, settings=Settings(plugin_configmap=self.cfg.plugin_configmap,
                                             admission_configmap=self.cfg.admission_configmap), metrics=self.metrics,
            snapshot_every=self.cfg.snapshot_every, concurrency=self.cfg.executor_concurrency,
            defer=bookkeeping(self.cfg.bookkeeping_delay), on_world_changed=self._sync_resolvers)
        ns = self.cfg.watch_namespace
        self.sources = [
            WatchSource(kube, self._log, CONFIGMAPS, namespace=plugin_ns,
                        field_selector=f"metadata.name={plugin_name}"),
            WatchSource(kube, self._log, CLUSTERS, on_object=self.members.cluster_observed),
            WatchSource(kube, self._log, DATASOURCES, on_object=observe),
            *self._admission_sources(kube),
            WatchSource(kube, self._log, BINDINGS, namespace=ns, on_object=observe),
            # last: a claim is decided with all it refers to
            WatchSource(kube, self._log, CLAIMS, namespace=ns, on_object=observe),
        ]
        self.endpoints = Endpoints(metrics=self.metrics, ready=self.ready, on_table_moved=self._on_table_moved,
                                   push_token=self.cfg.push_token, host=self.cfg.http_host, port=self.cfg.http_port,
                                   status=self.status, tls=http_tls)
        tasks: list[asyncio.Task[Any]] = []
        exit_code = 0
        try:  # (the servers inside: whatever fails, everything opened is closed and the process can end)
            await self.endpoints.start(sock=sockets[0])
            if self.cfg.serves_webhooks:  # up at once: a replica not current answers 503 (failurePolicy applies)
                await self._start_webhook(kube, sock=sockets[1])
            if self.cfg.leader_elect:
                self.leader = LeaderElector(kube, namespace=self.cfg.lease_namespace, name=self.cfg.lease_name,
                                            identity=self.cfg.identity, lease_duration=self.cfg.lease_duration,
                                            renew_deadline=self.cfg.renew_deadline,
                                            retry_period=self.cfg.retry_period, clock=self._lease_clock,
                                            sleep=self._lease_sleep)
                tasks.append(asyncio.create_task(self.leader.run(), name="leader"))
                await self._wait_any(self.leader.is_leader.wait(), stop)
                if stop is not None and stop.is_set():
                    return 0
            self.metrics.leader.set(1)  # the Lease holder, or the only replica there is: this one acts
            if self.cfg.leader_services:
                tasks.append(asyncio.create_task(self._publish_leader_endpoints(), name="leader-endpoints"))
            await self._inject_webhook_ca(kube)
            await self.initial_lists()
            await self.members.start()  # each member lists and watches on its own (adapters/kubernetes/members.py)
            members = self.members

            def sources() -> list[WatchSource]:  # the control plane's, and each connected member's
                return [*self.sources, *(s for m in list(members.members.values()) for s in m.sources)]

            reporter = StateReporter(metrics=self.metrics, loops=self.loops, sources=sources,
                                     log_=self._log, admission_configmap=self.cfg.admission_configmap,
                                     plugin_configmap=self.cfg.plugin_configmap)
            extra = [reporter.run_admission()] if self.cfg.admission else []
            tasks.append(asyncio.create_task(self.loops.run(*(s.run() for s in self.sources),
                                                              self.poll_locations(), reporter.run(), *extra),
                                             name="loops"))
            self.started.set()
            log.info("tether running", log=self.cfg.log_url, http_port=self.endpoints.port)
            waiters = [t for t in tasks if t.get_name() != "leader-endpoints"]  # (it ends once written)
            if self.cfg.freeze_heap:  # (not a waiter: it ends at once, the daemon does not)
                tasks.append(asyncio.create_task(self._freeze_heap_once_recovered(), name="freeze-heap"))
            if stop is not None:
                waiters.append(asyncio.create_task(stop.wait(), name="stop"))
            if self.leader is not None:
                waiters.append(asyncio.create_task(self.leader.lost.wait(), name="lost"))
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.get_name() == "lost":
                    exit_code = 1
                elif task.get_name() != "stop" and (failure := component_failure(task)) is not None:
                    log.error("component failed", component=task.get_name(), error=failure)
                    exit_code = 1
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.members is not None:
                await self.members.stop()
            if (self.loops is not None and self.loops.recovered.is_set()
                    and (self.leader is None or not self.leader.lost.is_set())):
                try:  # the position past the last batches that produced nothing (loops doc): still the leader
                    await self.loops.save_position()
                except Exception as exc:
                    log.warning("could not commit the decider's position on shutdown", error=repr(exc)[:200])
            self.metrics.leader.set(0)  # after the loops stopped: this replica no longer acts
            if self.leader_endpoints is not None:  # before the Lease goes: the successor's address is not touched
                await self.leader_endpoints.withdraw()
            if self.leader is not None:  # nothing acts once the standby may lead
                await self.leader.release()
            if self.loops is not None and self.loops.recovered.is_set():
                try:
                    position = await self._log.position("events", consumer="decider")
                    if position:
                        await self.loops.save_snapshot(position)
                except Exception:  # a snapshot is only a cache; failing to write one on the way out is fine
                    log.warning("could not save a snapshot on shutdown")
            await self.endpoints.stop()
            if self.webhook is not None:
                await self.webhook.stop()
            await self.resolvers.aclose()
            await competing.aclose()
            if owns_log:
                await self._log.close()
            if owns_client:
                await api.close()
            if self._owned_host_client is not None:
                await self._owned_host_client.close()
            log.info("tether stopped", exit_code=exit_code)
        return exit_code

    def _admission_sources(self, kube: KubeClient) -> list[WatchSource]:
        """What queue admission reads (``--admission``): Queues, PriorityClasses, the workloads whose queue names
        the bindings need, and the admission ConfigMap — listed before the bindings, so a binding is decided with
        its queue known.

        **Optional sources.** Volcano's Queues and Jobs are CRDs that a Karmada control plane may not have, and a
        list that never ends keeps ``World.lists_pending`` non-empty — tether would decide nothing at all, data
        dependency included. They are watched with ``absent_ok`` (``WatchSource``): not served, they list as empty
        (one warning), are asked for again every ``absent_retry`` seconds, and are picked up once installed.
        PriorityClasses too: ``scheduling.k8s.io`` is built into every kube-apiserver (so into
        karmada-apiserver), but an aggregated or trimmed control plane may lack it, and without it bindings simply
        fall back to the default priority. Deployments (``apps/v1``) and ConfigMaps are always served, so a 404
        there is an error worth retrying loudly."""
        if not self.cfg.admission:
            return []
        assert self._log is not None
        ns = self.cfg.watch_namespace
        config_ns, _, config_name = self.cfg.admission_configmap.partition("/")
        retry, groups = self.cfg.absent_retry, self.cfg.api_groups
        sources = [
            WatchSource(kube, self._log, CONFIGMAPS, namespace=config_ns,
                        field_selector=f"metadata.name={config_name}"),
            WatchSource(kube, self._log, QUEUES, absent_ok=True, absent_retry=retry, api_groups=groups),
            WatchSource(kube, self._log, PRIORITY_CLASSES, absent_ok=True, absent_retry=retry),
            WatchSource(kube, self._log, DEPLOYMENTS, namespace=ns),
        ]
        if self.cfg.admission_volcano_jobs:
            sources.append(WatchSource(kube, self._log, VOLCANO_JOBS, namespace=ns, absent_ok=True,
                                       absent_retry=retry, api_groups=groups))
        return sources

    async def _publish_leader_endpoints(self) -> None:
        """This replica's address in the leader-only Services' EndpointSlices, retried until written (module doc).
        Until then the push endpoint and the webhooks are unreachable — said once, loudly, with the reason."""
        cfg = self.cfg
        assert self.endpoints is not None
        ports = {"http": self.endpoints.port}
        if self.webhook is not None:
            ports["webhook"] = self.webhook.port
        if self._host_api_client is None:
            configuration = client.Configuration()
            try:
                load_in_cluster(configuration)
            except KubeconfigError as exc:
                log.error("cannot publish the leader's address: the push endpoint and the webhooks are unreachable",
                          services=cfg.leader_services, error=f"--leader-service: {exc}")
                return
            self._host_api_client = self._owned_host_client = client.ApiClient(configuration)
        endpoints = LeaderEndpoints(KubeClient(self._host_api_client), namespace=cfg.pod_namespace,
                                    services=cfg.leader_services, address=cfg.pod_ip, ports=ports,
                                    pod_name=cfg.identity)
        warned = False
        while True:
            try:
                await endpoints.publish()
                self.leader_endpoints = endpoints
                return
            except KubeError as exc:
                if not warned:
                    log.error("cannot publish the leader's address: the push endpoint and the webhooks are "
                              "unreachable until it is", services=cfg.leader_services, status=exc.status,
                              error=exc.message[:200])
                    warned = True
            await asyncio.sleep(2.0)

    async def _freeze_heap_once_recovered(self) -> None:
        """Collect, then freeze everything alive, once the world is recovered (module doc)."""
        assert self.loops is not None
        await self.loops.recovered.wait()
        gc.collect()
        gc.freeze()
        frozen = gc.get_freeze_count()
        self.metrics.gc_frozen.set(frozen)
        log.info("froze the startup heap", objects=frozen)

    async def initial_lists(self) -> None:
        """List every source once, one after the other, in dependency order, before any watch starts.

        The decider folds the log in order; listed concurrently, a claim could enter the log before the DataSource
        that serves it, and be decided as a cache miss (a needless catalog lookup) — on the first start and on
        every leader takeover. The sources are ordered: plugin ConfigMap, Clusters, DataSources, bindings, claims.
        A list that fails is left to the watch loop, which relists with backoff.

        One :class:`~tether.core.events.ListsStarted` naming every source goes first: until the last list has
        ended, the decider decides nothing (a world that holds the bindings but not yet their claims would strip
        every placement tether injected: a cold start, a takeover, a switch from Volcano Global). Right after it,
        :class:`~tether.core.events.SettingsApplied` records the settings decisions depend on (``--max-hold``).
        """
        assert self._log is not None
        started = ListsStarted(sources=tuple(s.list_source for s in self.sources))
        settings = SettingsApplied(max_hold_ms=max(0, round(self.cfg.max_hold * 1000)),  # after the ListsStarted:
                                   plugin_configmap=self.cfg.plugin_configmap,  # nothing is decided under them
                                   admission_configmap=self.cfg.admission_configmap)  # before the lists have ended
        now = int(time.time() * 1000)
        await self._log.append("events", [EventRecord(at_ms=now, source="daemon", key=event_key(event), event=event)
                                          for event in (started, settings)])
        for source in self.sources:
            try:
                await source.relist(announce=False)
            except Exception as exc:
                log.warning("initial list failed; the watch will relist", resource=source.name, error=repr(exc)[:200])

    @staticmethod
    async def _wait_any(aw: Any, stop: asyncio.Event | None) -> None:
        waiters = [asyncio.ensure_future(aw)]
        if stop is not None:
            waiters.append(asyncio.ensure_future(stop.wait()))
        _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for p in pending:
            p.cancel()
