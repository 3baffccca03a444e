"""A world for crash-restart runs: every part its own process, the daemon killed with SIGKILL and started again.

Used by tests/integration/test_crash_restart.py (sized down) and ``ops/chaos/crash_restart.py`` (full size). The
processes, all on loopback:

* the **control plane**: the Kubernetes emulator (``python -m tether.adapters.sandbox.kube_emulator``) with the
  Karmada scheduler stand-in, a watch history large enough that the checker's watches never fall out of it;
* one **member** cluster: another emulator with the pod binder and Godel's PodGroup CRD, racks of nodes — as
  many racks as the run's pod groups call for (:func:`racks_for`: each group must fit in one rack, so a member
  too small for them all could never converge);
* the **daemon**: ``tether run`` exactly as an operator starts it, on a SQLite log (or the Kafka log, two replicas
  with leader election), with queue admission, the ResourceBinding webhook (registered with ``failurePolicy:
  Fail``: no binding is stored unseen) and pod placement in the member;
* in this process: the sandbox Iceberg REST catalog (it counts the lookups) and the workload's client.

The workload creates claims over a set of tables, one ResourceBinding per workload (half before their claim, half
after — both orders of a real rollout) and gated pod groups in the member. The binding creations go through the
webhook, so while the daemon is down they fail, as on a real cluster, and the workload retries them as Karmada's
detector would. :class:`Daemons` kills the daemon (the leader, with replicas) at the chosen points and starts a
new process at once. What the run must end with is :mod:`.chaos_checks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import (
    BINDINGS,
    CLAIMS,
    CLUSTERS,
    CONFIGMAPS,
    KubeClient,
    KubeError,
    Resource,
)
from tether.adapters.kubernetes.members import NODES, POD_GROUPS, PODS
from tether.adapters.kubernetes.webhook_certs import MUTATING_WEBHOOKS, ensure_self_signed
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv, kube_environment
from tether.adapters.testing.kafka_broker import TcpProxy, free_port
from tether.core.keys import HOSTNAME_LABEL, NAMESPACE_NAME_LABEL, PLACEMENT_GATE, POD_GROUP_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE_CRDS = ("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources",
                      "work.karmada.io_resourcebindings", "cluster.karmada.io_clusters",
                      "scheduling.volcano.sh_queues")
MEMBER_NAMESPACE = "ml"
REGIONS = {"east": ("east1", "east2"), "west": ("west1",)}
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def tether_command() -> list[str]:
    """``tether`` as installed next to this interpreter (a virtualenv's console script), else through Python."""
    script = Path(sys.executable).parent / "tether"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from tether.adapters.cli import main; main()"]


@contextlib.asynccontextmanager
async def emulator_process(directory: Path, *args: str) -> AsyncIterator[Path]:
    """An emulator in its own process; yields its kubeconfig. Stopped (SIGTERM, then SIGKILL) at the end."""
    os.makedirs(directory, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether.adapters.sandbox.kube_emulator", "--port", "0", "--kubeconfig-dir",
        str(directory), "--bookmark-interval", "5", *args, env=_env(), cwd=str(ROOT),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if "serving on" not in line:
            raise RuntimeError(f"the emulator did not start: {line!r}")
        yield directory / "kubeconfig"
    finally:
        await _end(proc)


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


#: What a daemon logs when it gives its Lease up for not renewing it in time: an exit by design (leader.py).
LOST_LEADERSHIP = "lost leadership"


def exit_reason(log_path: Path | None) -> str:
    """Why a daemon exited, from its stderr: :data:`LOST_LEADERSHIP`, its "component failed" line, or else the last
    line it wrote (a traceback's exception)."""
    if log_path is None:
        return "no log"
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"its log is unreadable: {exc}"
    for line in reversed(lines):
        if f'"{LOST_LEADERSHIP}"' in line:
            return LOST_LEADERSHIP
        if '"component failed"' in line:
            return line.strip()[:300]
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last[:300] or "nothing logged"


@dataclass
class Replica:
    """One ``tether run`` process and the ports it serves."""

    name: str
    http_port: int
    webhook_port: int
    proc: asyncio.subprocess.Process | None = None
    log_path: Path | None = None  # the current process's stderr

    async def get(self, path: str) -> tuple[int, str]:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session, \
                    session.get(f"http://127.0.0.1:{self.http_port}{path}") as resp:
                return resp.status, await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return 0, ""

    async def ready(self) -> bool:
        return (await self.get("/readyz"))[0] == 200

    async def leader(self) -> bool:
        status, text = await self.get("/metrics")
        return status == 200 and any(line.split()[-1] in ("1", "1.0") for line in text.splitlines()
                                     if line.startswith("tether_leader "))


@dataclass
class Daemons:
    """The daemon processes of a run: one (SQLite) or two replicas with leader election (Kafka).

    Besides the kills the run asks for, this plays the two parts of Kubernetes that a daemon's own exit calls on
    (:meth:`supervise`): the **supervisor** starts a replica that exited again (a leader that lost its Lease exits
    by design, so that it is restarted as a standby), and the webhook **Service** follows readiness — the API
    server's webhook calls go to the ready leader, whichever it is now. Without them a leader that exited on its
    own left the webhook proxy on a dead port: every binding creation failed until the run's next kill, which the
    blocked workload never reached (the Kafka chaos flake, seed 522469301). Every exit the run did not cause is
    recorded (:attr:`unplanned_exits`, with the reason its log gives), so a crash is reported, not hidden."""

    args: list[str]
    replicas: list[Replica]
    log_dir: Path
    webhook_proxy: TcpProxy
    kills: int = 0
    starts: int = 0
    unplanned_exits: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock)  # a replica is (re)started by one caller at once

    async def start(self, replica: Replica) -> None:
        self.starts += 1
        replica.log_path = self.log_dir / f"{replica.name}.{self.starts}.log"
        err = replica.log_path.open("wb")
        replica.proc = await asyncio.create_subprocess_exec(
            *tether_command(), "run", *self.args, "--http-port", str(replica.http_port), "--webhook-port",
            str(replica.webhook_port), env={**_env(), "POD_NAME": replica.name}, cwd=str(self.log_dir),
            stdout=subprocess.DEVNULL, stderr=err)
        err.close()

    async def start_all(self) -> None:
        for replica in self.replicas:
            await self.start(replica)

    async def leader(self, *, within: float = 120.0) -> Replica:
        """The replica that leads (the only one, without leader election) once it is ready; points the webhook
        proxy at it (a Service would send the API server's calls to the ready pod)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = await self._follow()
            if found is not None:
                return found
            await asyncio.sleep(0.1)
        raise TimeoutError(f"no replica became the ready leader within {within:g} s")

    async def _follow(self) -> Replica | None:
        """One look at the replicas: those that exited on their own started again (recorded), the webhook proxy
        pointed at the ready leader; that leader, or None."""
        for replica in self.replicas:
            if replica.proc is not None and replica.proc.returncode is not None:
                await self._restart_exited(replica)  # a leader that lost its Lease exits: its supervisor restarts it
            elif await replica.ready() and (len(self.replicas) == 1 or await replica.leader()):
                self.webhook_proxy.target_port = replica.webhook_port
                return replica
        return None

    async def supervise(self, *, every: float = 0.25) -> None:
        """Until cancelled: restart a replica that exited on its own and keep the webhook proxy on the ready leader
        (class doc) — what the Deployment and the webhook Service do for a real tether."""
        while True:
            await self._follow()
            await asyncio.sleep(every)

    async def _restart_exited(self, replica: Replica) -> None:
        async with self._starting:
            if self.stopped or replica.proc is None or replica.proc.returncode is None:
                return  # the run is ending (stop), or it was started again meanwhile (kill_leader, another look)
            self.unplanned_exits.append({"replica": replica.name, "code": replica.proc.returncode,
                                         "reason": exit_reason(replica.log_path)})
            await self.start(replica)

    async def describe(self) -> str:
        """Each replica's process, readiness and leadership, the proxy's target and the exits the run did not cause:
        kept with a failed run's logs, so that what the webhook's callers met is on record."""
        lines = [f"webhook proxy -> 127.0.0.1:{self.webhook_proxy.target_port}"]
        for replica in self.replicas:
            proc = replica.proc
            state = "not started" if proc is None else (
                f"pid {proc.pid} running" if proc.returncode is None else f"exited {proc.returncode}")
            status, why = await replica.get("/readyz")
            lines.append(f"{replica.name}: {state}; webhook port {replica.webhook_port}; /readyz {status} "
                         f"{why.strip()!r}; leader {await replica.leader()}; log {replica.log_path}")
        lines += [f"unplanned exit: {unplanned!r}" for unplanned in self.unplanned_exits]
        return "\n".join(lines) + "\n"

    async def kill_leader(self) -> str:
        """SIGKILL the leader (whatever it is doing), start its replacement at once and wait for a leader again
        (the workload goes on meanwhile: its writes retry while no replica answers the webhook); returns who was
        killed."""
        victim = await self.leader()
        assert victim.proc is not None
        async with self._starting:  # (not taken for an unplanned exit by the supervisor meanwhile)
            with contextlib.suppress(ProcessLookupError):
                victim.proc.send_signal(signal.SIGKILL)
            await victim.proc.wait()
            self.kills += 1
            await self.start(victim)
        await self.leader()  # the webhook's "Service" follows the new leader (another replica, with replicas)
        return victim.name

    async def stop(self) -> None:
        """End every replica; nothing is started again after this (the supervisor's restarts end here)."""
        async with self._starting:
            self.stopped = True
        for replica in self.replicas:
            if replica.proc is not None:
                await _end(replica.proc)


#: Each member node's allocatable CPU, and each pod group pod's CPU request.
NODE_CPU = 8
POD_CPU = 1
#: Racks at least (the CI-size runs' member), and the spare room the full-size member keeps beyond its groups.
MIN_RACKS = 4
RACK_HEADROOM = 0.25


def racks_for(*, groups: int, group_size: int, nodes_per_rack: int = 4) -> int:
    """Racks enough for ``groups`` pod groups of ``group_size`` pods, with :data:`RACK_HEADROOM` to spare.

    A group is required in one rack and its pods run until the end, so a rack holds ``nodes_per_rack x NODE_CPU
    // (group_size x POD_CPU)`` groups (8 with the defaults) and never more: 40 groups on 4 racks of 4 nodes of 8
    CPU (32 groups' worth) could never all be bound, whatever tether did."""
    per_rack = max(1, nodes_per_rack * NODE_CPU // (group_size * POD_CPU))
    return max(MIN_RACKS, math.ceil(groups * (1 + RACK_HEADROOM) / per_rack))


@dataclass
class World:
    env: KubeEnv
    kube: KubeClient
    member: KubeClient
    catalog: SandboxCatalog
    daemons: Daemons
    namespace: str
    clusters: dict[str, str]  # role → Cluster name
    tables: list[str]
    region_of: dict[str, str]  # table → region
    log_url: str
    tmp: Path
    racks: int
    rng: random.Random
    groups: list[str] = field(default_factory=list)
    failed: bool = False  # set by a run whose checks failed: its logs are kept as if it had raised (chaos_world)

    async def note_replicas(self) -> None:
        """What the replicas are doing now, into ``logs/replicas.txt`` (kept with a failed run's logs)."""
        with contextlib.suppress(Exception):
            (self.tmp / "logs" / "replicas.txt").write_text(await self.daemons.describe())

    def excluded_for(self, table: str) -> frozenset[str]:
        """The clusters tether must exclude for a workload of ``table``: the stack's clusters without its data."""
        holding = {self.clusters[r] for r in REGIONS[self.region_of[table]]}
        return frozenset(set(self.clusters.values()) - holding)

    async def create_binding(self, workload: str) -> None:
        """Create the workload's binding through the webhook, retrying while the daemon is down (Fail policy)."""
        body = manifests.resource_binding(workload, namespace=self.namespace,
                                          cluster_names=sorted(self.clusters.values()))
        await _retrying(lambda: self.kube.create(BINDINGS, body, namespace=self.namespace))

    async def create_claim(self, name: str, table: str, workload: str) -> None:
        body = manifests.claim(name, namespace=self.namespace, table=table, workload=workload)
        await _retrying(lambda: self.kube.create(CLAIMS, body, namespace=self.namespace))

    async def create_group(self, name: str, size: int) -> None:
        """A Godel PodGroup needing one rack, and its pods, gated (as the pod webhook gates them)."""
        await _retrying(lambda: self.member.create(POD_GROUPS, {
            "apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": MEMBER_NAMESPACE},
            "spec": {"minMember": size, "affinity": {"podGroupAffinity": {"required": [{"topologyKey": "rack"}]}}}},
            namespace=MEMBER_NAMESPACE))
        for i in range(size):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{i}", "namespace": MEMBER_NAMESPACE,
                "annotations": {POD_GROUP_ANNOTATION: name}},
                "spec": {"schedulingGates": [{"name": PLACEMENT_GATE}], "containers": [{
                    "name": "c", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": str(POD_CPU)}}}]}}
            await _retrying(lambda pod=pod: self.member.create(PODS, pod, namespace=MEMBER_NAMESPACE))
        self.groups.append(name)

    async def split_groups(self) -> dict[str, list[str]]:
        """Pod groups whose bound pods are in more than one rack (a domain), with the racks."""
        nodes, _ = await self.member.list(NODES)
        rack = {n["metadata"]["name"]: n["metadata"]["labels"]["rack"] for n in nodes}
        pods, _ = await self.member.list(PODS, namespace=MEMBER_NAMESPACE)
        racks: dict[str, set[str]] = {}
        for pod in pods:
            group = (pod["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION)
            node = (pod.get("spec") or {}).get("nodeName")
            if group and node:
                racks.setdefault(group, set()).add(rack[node])
        return {g: sorted(r) for g, r in racks.items() if len(r) > 1}

    async def unbound_pods(self) -> int:
        pods, _ = await self.member.list(PODS, namespace=MEMBER_NAMESPACE)
        return sum(1 for p in pods if not (p.get("spec") or {}).get("nodeName"))

    def lookups(self) -> int:
        return sum(self.catalog.requests_for(t) for t in self.tables)


async def _retrying(call: Any, *, within: float = 180.0) -> Any:
    """``call()`` until the API accepts it: a webhook that is down (the daemon was killed) is a 500 with Fail; an
    object that already exists was created by an earlier try whose answer was lost."""
    deadline = time.monotonic() + within
    delay = 0.05
    while True:
        try:
            return await call()
        except KubeError as exc:
            if exc.status == 409 and exc.reason == "AlreadyExists":
                return None
            if (not exc.retryable and exc.status not in (400, 403)) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(1.0, delay * 2)


@contextlib.asynccontextmanager
async def chaos_world(*, tables: int, seed: int, kafka_bootstrap: str | None = None, replicas: int = 1,
                      racks: int = 4, nodes_per_rack: int = 4, lease_duration: float = 4.0,
                      tmp: str | None = None) -> AsyncIterator[World]:
    """The world of the module doc, torn down at the end (the daemons first). ``kafka_bootstrap``: the Kafka log
    on that broker (a fresh topic prefix) with ``replicas`` replicas; otherwise SQLite in the temporary folder."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="tether-chaos-", dir=tmp) as folder:
        base = Path(folder)
        async with emulator_process(base / "cp", "--karmada", "--history-size", "1000000") as cp_config, \
                emulator_process(base / "m1", "--binder", "--crds", "scheduling.godel.kubewharf.io_podgroups",
                                 "--history-size", "1000000") as m1_config, \
                kube_environment(kubeconfig=str(cp_config), namespace_prefix="tether-chaos") as env, \
                SandboxCatalog(seed=False, random_seed=seed) as catalog:
            await env.register_crds(*CONTROL_PLANE_CRDS)
            kube = KubeClient(env.api_client)
            from kubernetes_asyncio import config as kconfig

            member_api = await kconfig.new_client_from_config(config_file=str(m1_config))
            try:
                member = KubeClient(member_api)
                await _seed_member(member, racks, nodes_per_rack)
                world = await _seed_control_plane(env, kube, member, catalog, base, tables, rng, racks,
                                                  kafka_bootstrap, replicas, lease_duration, cp_config, m1_config)
                failed = True
                supervisor: asyncio.Task[None] | None = None
                try:
                    await world.daemons.start_all()
                    await world.daemons.leader()
                    supervisor = asyncio.create_task(world.daemons.supervise(), name="chaos-supervisor")
                    yield world
                    failed = False
                finally:
                    if supervisor is not None:
                        supervisor.cancel()
                        await asyncio.gather(supervisor, return_exceptions=True)
                    if failed:  # the run raised: what the replicas were doing, beside their logs
                        await world.note_replicas()
                    await world.daemons.stop()
                    world.daemons.webhook_proxy.stop()
                    if failed or world.failed:  # keep what the daemons logged, the temporary folder goes
                        _keep_logs(base / "logs", seed)
            finally:
                await member_api.close()


def _keep_logs(logs: Path, seed: int) -> None:
    """Copy a failed run's daemon logs (it raised, or its checks failed) out of its temporary folder (to
    ``$TMPDIR/tether-chaos-logs-<seed>``) and say where, on stderr: a chaos failure that depends on timing may not
    come back when it is run again."""
    kept = Path(tempfile.gettempdir()) / f"tether-chaos-logs-{seed}"
    with contextlib.suppress(OSError):
        shutil.copytree(logs, kept, dirs_exist_ok=True)
        print(f"chaos run failed: the daemons' logs are kept in {kept}", file=sys.stderr)


async def _seed_member(member: KubeClient, racks: int, per_rack: int) -> None:
    await member.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": MEMBER_NAMESPACE}})
    for r in range(racks):
        for n in range(per_rack):
            name = f"m1-r{r}-n{n}"
            await member.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {HOSTNAME_LABEL: name, "rack": f"rack{r}", "zone": "z1"}}})
            await member.patch(NODES, name, {"status": {
                "allocatable": {"cpu": str(NODE_CPU), "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}}, subresource="status")


async def _seed_control_plane(env: KubeEnv, kube: KubeClient, member: KubeClient, catalog: SandboxCatalog,
                              base: Path, tables: int, rng: random.Random, racks: int,
                              kafka_bootstrap: str | None, replicas: int, lease_duration: float,
                              control_plane_config: Path, member_config: Path) -> World:
    ns = env.namespace
    suffix = secrets.token_hex(3)
    clusters = {role: f"{role}-{suffix}" for roles in REGIONS.values() for role in roles}
    for role, name in clusters.items():
        raw = manifests.cluster(name, region=role[:-1])
        status = raw.pop("status")
        await kube.create(CLUSTERS, raw)
        await kube.patch(CLUSTERS, name, {"status": status}, subresource="status")
    names, region_of = [], {}
    for i in range(tables):
        region = "east" if i % 3 else "west"
        name = f"prod.{suffix}.t{i}"
        catalog.add_table(name, f"s3://warehouse-{region}/{suffix}/t{i}")
        names.append(name)
        region_of[name] = region
    plugin = manifests.plugin_entry(url=catalog.url, port=None, mapping={
        f"s3://warehouse-{region}/{suffix}/": [clusters[r] for r in roles] for region, roles in REGIONS.items()},
        **{"retryConfig": {"maxRetries": 2, "initialBackoff": "50ms", "maxBackoff": "500ms", "timeout": "5s"}})
    await kube.create(CONFIGMAPS, manifests.plugin_configmap({"amoro": plugin}, namespace=ns, name="tether-plugins"),
                      namespace=ns)
    certs = base / "certs"
    _, _, ca = ensure_self_signed(certs, names=["127.0.0.1", "localhost"])
    proxy = TcpProxy(0).start()  # the webhook "Service": pointed at the leader's webhook port (Daemons.leader)
    await kube.create(MUTATING_WEBHOOKS, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"tether-chaos-{suffix}"},
        "webhooks": [{"name": "resourcebindings.tether.dev", "admissionReviewVersions": ["v1"],
                      "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 5,
                      "reinvocationPolicy": "IfNeeded",
                      "clientConfig": {"url": f"https://127.0.0.1:{proxy.port}/mutate/resourcebindings",
                                       "caBundle": _b64(ca)},
                      "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["work.karmada.io"],
                                 "apiVersions": ["v1alpha2"], "resources": ["resourcebindings"],
                                 "scope": "Namespaced"}],
                      "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}]})
    if kafka_bootstrap:
        from tether.adapters.testing.kafka_broker import kafka_test_url

        log_url = kafka_test_url(kafka_bootstrap, f"chaos-{suffix}")
    else:
        log_url = f"sqlite:///{base / 'tether.db'}"
    args = ["--log", log_url, "--kubeconfig", str(control_plane_config), "--plugin-configmap", f"{ns}/tether-plugins",
            "--watch-namespace", ns, "--lease-namespace", ns, "--admission", "--admission-configmap",
            f"{ns}/tether-admission", "--binding-webhook", "--webhook-cert-dir", str(certs),
            "--member", f"m1={member_config}", "--log-level", "warning", "--lease-duration", str(lease_duration)]
    if replicas > 1:
        args += ["--leader-elect"]
    (base / "logs").mkdir()
    daemons = Daemons(args=args, replicas=[Replica(f"tether-{i}", free_port(), free_port()) for i in range(replicas)],
                      log_dir=base / "logs", webhook_proxy=proxy)
    return World(env=env, kube=kube, member=member, catalog=catalog, daemons=daemons, namespace=ns,
                 clusters=clusters, tables=names, region_of=region_of, log_url=log_url, tmp=base, racks=racks,
                 rng=rng)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()
