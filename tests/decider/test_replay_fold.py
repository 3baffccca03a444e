"""The replay's fold (:class:`ReplayFold`: each object parsed once, for its last version) against ``evolve``.

Random histories over a few objects of every kind the replay fold holds back — claims, DataSources, bindings,
clusters, and admission's view of bindings — with what makes holding back delicate: echoes and older
resourceVersions (which must be dropped exactly as ``evolve`` drops them), resourceVersions crossing a power of ten,
deletions and re-creations (tombstones, kept in order), relists, forgotten objects (a command's outcome without an
object), catalog answers (a DataSource's deletion forgets its identity's answer only when it was the last DataSource
of it), DataSources whose claimRefs fill and empty (``released`` depends on the versions in between), DataSources
whose location changes between versions (another writer's change after an answer is adopted as the answer; one
before it, or the answer to this daemon's own location write, is not), and bindings suspended and resumed (a
ResumeBinding noted after its event, as ``tether replay`` notes the recorded commands, makes a binding admitted
until a version is seen unsuspended; an EvictBinding, evicted until a version is seen suspended) while the
admission ConfigMap and the settings change which bindings admission reads. Batch boundaries fall anywhere. The
worlds must be equal, and the tombstones in the same order (the oldest is forgotten first).

Each history is also folded as the SQLite log hands it to ``tether replay`` (``SqliteLog.scan(undecoded=True)``):
every record that carries an object's version undecoded, as a :class:`StoredEvent` of its type, key and
resourceVersion; the fold holds those of claims, bindings and pods so, decoding only the versions it keeps.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests
from tether.core.commands import (
    DATA_GROUP_VERSION,
    Command,
    EvictBinding,
    ReleasePod,
    ResumeBinding,
    SetBindingPlacement,
    UpdateClaimStatus,
    command_name,
)
from tether.core.envelope import (
    CommandHead,
    CommandRecord,
    EventRecord,
    StoredEvent,
    decode_command_head,
    encode,
    object_version,
)
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationResolved,
    Event,
    ListsStarted,
    ObjectDeleted,
    ObjectObserved,
    ObjectsListed,
    SettingsApplied,
    list_source,
)
from tether.core.identity import make_identity
from tether.core.keys import LOCATION_ANNOTATION
from tether.core.kube import KubeObject, ObjectRef, trim
from tether.core.world import World, initial_world
from tether.projections.admission_fold import MANAGED_KEY
from tether.projections.fold import evolve, note_issued
from tether.projections.replay_fold import ReplayFold, fold_batch

NS = "n0"
CLAIMS = ("k0", "k1", "k2")
TABLES = ("t0", "t1")
SOURCES = {"ds-t0": "t0", "ds-t1": "t1", "ds-t0-again": "t0"}  # two DataSources may cache one table
WORKLOADS = ("w0", "w1")
REGIONS = ("", "east", "west")  # a DataSource's location annotation: none, or in one of two regions
CLUSTERS = ("c1", "c2")
ADMISSION_CONFIGMAPS = ("tether-system/tether-admission", "tether-system/other")  # the default, and another

rv_mode = st.sampled_from(["next", "next", "next", "same", "older"])
actions = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(CLAIMS), st.sampled_from(TABLES), st.sampled_from(WORKLOADS),
              st.booleans(), rv_mode, st.sampled_from([False, True, "update_claim_status"])),
    st.tuples(st.just("issue"), st.sampled_from(CLAIMS + WORKLOADS)),
    st.tuples(st.just("fail"), st.sampled_from(CLAIMS + WORKLOADS), st.booleans()),
    st.tuples(st.just("source"), st.sampled_from(sorted(SOURCES)), st.frozensets(st.sampled_from(CLAIMS)),
              st.booleans(), rv_mode, st.sampled_from([False, "patch", "update_data_source_locality"]),
              st.sampled_from(REGIONS)),
    st.tuples(st.just("binding"), st.sampled_from(WORKLOADS), st.sampled_from(CLUSTERS), rv_mode,
              st.sampled_from([False, True, "set_binding_placement"]), st.booleans()),
    st.tuples(st.just("resume"), st.sampled_from(WORKLOADS)),
    st.tuples(st.just("resumed"), st.sampled_from(WORKLOADS)),
    st.tuples(st.just("evict"), st.sampled_from(WORKLOADS)),
    st.tuples(st.just("evicted"), st.sampled_from(WORKLOADS), st.sampled_from(["gone", "refused", "retried"])),
    st.tuples(st.just("admission-config"), st.sampled_from(ADMISSION_CONFIGMAPS), st.booleans()),
    st.tuples(st.just("settings"), st.sampled_from(ADMISSION_CONFIGMAPS)),
    st.tuples(st.just("cluster"), st.sampled_from(CLUSTERS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(["claim", "source", "binding", "cluster"]),
              st.sampled_from(CLAIMS + tuple(SOURCES) + WORKLOADS + CLUSTERS)),
    st.tuples(st.just("forget"), st.sampled_from(CLAIMS + tuple(SOURCES))),
    st.tuples(st.just("listed"), st.sampled_from(["DataSourceClaim", "DataSource", "ResourceBinding", "Cluster"]),
              st.frozensets(st.sampled_from(CLAIMS + tuple(SOURCES) + WORKLOADS + CLUSTERS))),
    st.tuples(st.just("resolved"), st.sampled_from(TABLES), st.sampled_from(REGIONS[1:])),
    st.tuples(st.just("lists-started"),
              st.frozensets(st.sampled_from(["DataSourceClaim", "DataSource", "ResourceBinding", "Cluster"]))),
    st.tuples(st.just("batch")),
)


class History:
    """Turns actions into events, with resourceVersions, uids and generations as an API server sets them."""

    def __init__(self) -> None:
        self.revision = 7  # etcd's: every write takes the next one (starts below 10 to cross a power of ten)
        self.rv: dict[str, int] = {}  # object → its resourceVersion
        self.lives: dict[str, int] = {}  # object → how many times it was created (its uid)
        self.spec: dict[str, Any] = {}  # object → its spec (generation bumps when it changes)
        self.generation: dict[str, int] = {}
        self.events: list[list[EventRecord]] = [[]]  # batches
        self.issued: dict[int, list[CommandRecord]] = {}  # the commands each event caused, by its offset
        self.offset = 0
        self.versions: dict[tuple[str, str], KubeObject] = {}  # (object, resourceVersion) → what it was then
        self.noted: dict[str, str] = {}  # slot (command:target) → the id of the last command issued for it

    def _rv(self, key: str, mode: str) -> str:
        if mode == "same" and key in self.rv:
            return str(self.rv[key])
        if mode == "older" and key in self.rv:
            return str(max(1, self.rv[key] - 3))
        self.revision += 1 + self.revision // 9  # grows through 9 → 10 → … → 100…
        self.rv[key] = self.revision
        return str(self.revision)

    def _meta(self, key: str, name: str, namespace: str, spec: Any, mode: str) -> dict[str, Any]:
        if key not in self.lives:
            self.lives[key] = 1
        if key not in self.generation or self.spec.get(key) != spec:
            self.spec[key] = spec
            self.generation[key] = self.generation.get(key, 0) + 1
        meta = {"name": name, "uid": f"{key}#{self.lives[key]}", "generation": self.generation[key],
                "resourceVersion": self._rv(key, mode)}
        if namespace:
            meta["namespace"] = namespace
        return meta

    def add(self, event: Event) -> None:
        self.offset += 1
        self.events[-1].append(EventRecord(at_ms=len(self.events), source="watch", key="k", event=event,
                                           offset=self.offset))

    def observe(self, raw: dict[str, Any], as_result: bool | str) -> None:
        obj = trim(raw)  # an echo (the same resourceVersion) is the same object, as on an API server:
        obj = self.versions.setdefault((obj.key, obj.metadata.resource_version), obj)
        if as_result:  # a write's outcome carries the object the API server returned (of which command: a string)
            command = as_result if isinstance(as_result, str) else "patch"  # (of the last one issued, if any)
            self.add(CommandSucceeded(command_id=self.noted.get(f"{command}:{obj.key}", "x"), command=command,
                                      target=obj.key, result=obj))
        else:
            self.add(ObjectObserved(obj=obj))

    def do(self, action: tuple[Any, ...]) -> None:
        match action:
            case ("claim", name, table, workload, deleting, mode, as_result):
                raw = manifests.claim(name, namespace=NS, table=f"db.{table}", workload=workload)
                key = f"DataSourceClaim/{NS}/{name}"
                raw["metadata"] = self._meta(key, name, NS, raw["spec"], mode)
                if deleting:
                    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                raw["status"] = {"phase": "Bound", "boundDataSource": f"ds-{table}"}
                self.observe(raw, as_result)
            case ("source", name, refs, deleting, mode, as_result, region):
                table = SOURCES[name]
                spec = {"system": "amoro", "type": "table", "name": f"db.{table}", "reclaimPolicy": "Delete",
                        "locality": {"clusterNames": ["c1"]}}
                meta = self._meta(f"DataSource//{name}", name, "", spec, mode)
                if region:
                    meta["annotations"] = {LOCATION_ANNOTATION: f"s3://{region}/{table}"}
                raw = {"apiVersion": DATA_GROUP_VERSION, "kind": "DataSource", "metadata": meta, "spec": spec,
                       "status": {"boundClaims": len(refs), "claimRefs": [
                           {"apiVersion": DATA_GROUP_VERSION, "kind": "DataSourceClaim", "name": c, "namespace": NS}
                           for c in sorted(refs)]}}
                if deleting:
                    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                self.observe(raw, as_result)
            case ("binding", workload, cluster, mode, as_result, suspended):
                raw = manifests.resource_binding(workload, namespace=NS, suspended=suspended)
                key = f"ResourceBinding/{NS}/{raw['metadata']['name']}"
                raw["metadata"] |= self._meta(key, raw["metadata"]["name"], NS, raw["spec"], mode)
                raw["spec"]["clusters"] = [{"name": cluster, "replicas": 1}]
                self.observe(raw, as_result)
            case ("cluster", name, ready):
                raw = manifests.cluster(name, ready=ready)
                raw["metadata"] |= self._meta(f"Cluster//{name}", name, "", raw["spec"], "next")
                self.observe(raw, False)
            case ("delete", kind, name):
                key = {"claim": f"DataSourceClaim/{NS}/{name}", "source": f"DataSource//{name}",
                       "binding": f"ResourceBinding/{NS}/{name}-deployment", "cluster": f"Cluster//{name}"}[kind]
                kind_name, namespace, object_name = key.split("/")
                meta = self._meta(key, object_name, namespace, self.spec.get(key), "next")
                self.add(ObjectDeleted(obj=trim({"apiVersion": "v1", "kind": kind_name, "metadata": meta})))
                self.lives[key] = self.lives.get(key, 1) + 1  # a re-created object has a new uid
            case ("forget", name):
                target = f"DataSourceClaim/{NS}/{name}" if name in CLAIMS else f"DataSource//{name}"
                command = "remove_finalizer" if name in CLAIMS else "delete_data_source"
                self.add(CommandSucceeded(command_id="y", command=command, target=target))
            case ("listed", kind, names):
                keys = tuple(sorted(_listed_key(kind, n) for n in names))
                self.add(ObjectsListed(kind=kind, keys=keys))
            case ("lists-started", kinds):
                self.add(ListsStarted(sources=tuple(sorted(list_source(k) for k in kinds))))
            case ("resolved", table, region):
                identity = make_identity("amoro", "table", f"db.{table}", None)
                self.add(DataLocationResolved(identity=identity, location=f"s3://{region}/{table}"))
            case ("resume", workload) if self.offset:  # caused by the last event (and noted right after it)
                name = f"{workload}-deployment"
                command = ResumeBinding(binding=ObjectRef(api_version="work.karmada.io/v1alpha2",
                                                          kind="ResourceBinding", name=name, namespace=NS),
                                        admitted_request=())
                self.issued.setdefault(self.offset, []).append(CommandRecord(
                    id=f"r{self.offset}", at_ms=self.offset, key=f"ResourceBinding/{NS}/{name}", command=command,
                    causation=f"0:{self.offset}"))
            case ("evict", workload) if self.offset:  # as a resume: caused by the last event, noted right after it
                name = f"{workload}-deployment"
                command = EvictBinding(binding=ObjectRef(api_version="work.karmada.io/v1alpha2",
                                                         kind="ResourceBinding", name=name, namespace=NS),
                                       for_binding=f"{NS}/other", queue="q", policy="preempt", reason="evicted")
                self.issued.setdefault(self.offset, []).append(CommandRecord(
                    id=f"e{self.offset}", at_ms=self.offset, key=f"ResourceBinding/{NS}/{name}", command=command,
                    causation=f"0:{self.offset}"))
            case ("evicted", workload, how):  # its outcome without an object (gone), or its failure
                target = f"ResourceBinding/{NS}/{workload}-deployment"
                if how == "gone":
                    self.add(CommandSucceeded(command_id="e", command="evict_binding", target=target))
                else:
                    self.add(CommandFailed(command_id="e", command="evict_binding", target=target,
                                           reason="Conflict", message="m", retryable=how == "retried"))
            case ("issue", name) if self.offset:  # a write of a claim's status or a binding's placement, in flight
                command, key = _write_of(name)
                command_id = f"c{self.offset}-{name}"
                self.noted[f"{command_name(type(command))}:{key}"] = command_id
                self.issued.setdefault(self.offset, []).append(CommandRecord(
                    id=command_id, at_ms=0, key=key, command=command, causation=f"0:{self.offset}"))
            case ("fail", name, retryable):  # its failure: retried later (its slot waits), or refused for good
                command, key = _write_of(name)
                slot = f"{command_name(type(command))}:{key}"
                self.add(CommandFailed(command_id=self.noted.get(slot, "x"), command=command_name(type(command)),
                                       target=key, reason="Conflict", message="m", retryable=retryable))
            case ("resumed", workload):  # its outcome, without an object (the binding was gone)
                self.add(CommandSucceeded(command_id="r", command="resume_binding",
                                          target=f"ResourceBinding/{NS}/{workload}-deployment"))
            case ("admission-config", configmap, managed):  # queue-managed Deployments: admission reads them all
                namespace, name = configmap.split("/")
                raw = {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": self._meta(f"ConfigMap/{configmap}", name, namespace, None, "next"),
                       "data": {MANAGED_KEY: "kinds: [apps/Deployment]"} if managed else {}}
                self.observe(raw, False)
            case ("settings", configmap):
                self.add(SettingsApplied(max_hold_ms=60_000, plugin_configmap="volcano-global/plugins",
                                         admission_configmap=configmap))
            case ("batch",):
                self.events.append([])


def _write_of(name: str) -> tuple[Command, str]:
    """The write tether issues for a claim (its status) or a workload (its binding's placement), and its target."""
    if name in CLAIMS:
        ref = ObjectRef(api_version=DATA_GROUP_VERSION, kind="DataSourceClaim", name=name, namespace=NS)
        return UpdateClaimStatus(claim=ref, phase="Bound", bound_data_source="", conditions=()), ref.key
    ref = ObjectRef(api_version="work.karmada.io/v1alpha2", kind="ResourceBinding", name=f"{name}-deployment",
                    namespace=NS)
    return SetBindingPlacement(binding=ref, excluded_clusters=(), injected=True), ref.key


def _listed_key(kind: str, name: str) -> str:
    if kind == "DataSource":
        return f"DataSource//{name}"
    if kind == "Cluster":
        return f"Cluster//{name}"
    if kind == "ResourceBinding":
        return f"ResourceBinding/{NS}/{name}-deployment"
    return f"{kind}/{NS}/{name}"


def _same(bulk: World, evolved: World) -> None:
    assert msgspec.json.encode(bulk, order="deterministic") == msgspec.json.encode(evolved, order="deterministic")
    assert list(bulk.tombstones) == list(evolved.tombstones)


def _evolved(h: History, *, noted: bool = True) -> World:
    """``evolve``'s world of the history, each recorded command noted right after its event (as ``tether replay``
    notes them; not at all unless ``noted``)."""
    evolved = initial_world()
    for batch in h.events:
        for record in batch:
            evolve(evolved, record)
            for command in h.issued.get(record.offset, ()) if noted else ():
                note_issued(evolved, command.command, command.id, at_ms=command.at_ms)
    return evolved


def _as_stored(records: list[EventRecord]) -> list[EventRecord | StoredEvent]:
    """``records`` as ``SqliteLog.scan(undecoded=True)`` gives them once appended (each under its object's key, as
    the watch and the executor append them): those that carry an object's version undecoded."""
    out: list[EventRecord | StoredEvent] = []
    for record in records:
        event = record.event
        if isinstance(event, ObjectObserved | ObjectDeleted):
            key = f"{event.cluster}:{event.obj.key}" if event.cluster else event.obj.key
        else:
            key = event.target if isinstance(event, CommandSucceeded) else record.key
        stored = msgspec.structs.replace(record, key=key)
        version = object_version(stored)
        if version:
            out.append(StoredEvent(offset=record.offset, type=type(event).__name__, key=key,
                                   version=version, body=encode(msgspec.structs.replace(stored, offset=0))))
        else:
            out.append(stored)
    return out


def _folded_as_stored(h: History, *, noted: bool) -> World:
    """The replay fold's world of the history, as stored records (:func:`_as_stored`), each batch's recorded commands
    noted (``noted``: a write's outcome is then decoded, to free its command's slot) or none."""
    bulk = ReplayFold(initial_world())
    issued = {offset: [decode_command_head(encode(c)) for c in commands] for offset, commands in h.issued.items()}
    for batch in h.events:
        bulk.fold(_as_stored(batch), issued if noted else None)
    assert not bulk.undecodable
    return bulk.finish()

@settings(max_examples=400, deadline=None)
@given(st.lists(actions, min_size=1, max_size=60))
@example([  # the last DataSource of a table is deleted while another one, new, is held: the answer stays
    ("source", "ds-t0-again", frozenset({"k0"}), False, "next", False, ""),
    ("source", "ds-t0", frozenset({"k0"}), False, "next", False, ""),
    ("resolved", "t0", "east"),
    ("delete", "source", "ds-t0"),
])
@example([  # claimRefs filled then emptied within the held versions: released
    ("source", "ds-t1", frozenset(), False, "next", False, ""),
    ("batch",),
    ("delete", "claim", "k2"),  # a flush: the empty DataSource is in the world
    ("source", "ds-t1", frozenset({"k1"}), False, "next", "patch", ""),
    ("source", "ds-t1", frozenset(), False, "next", False, ""),
    ("source", "ds-t1", frozenset(), False, "same", False, ""),
])
@example([  # moved there and back within the held versions, after an answer: the answer is the last location
    ("resolved", "t0", "east"),
    ("source", "ds-t0", frozenset(), False, "next", False, "east"),
    ("batch",),
    ("delete", "claim", "k2"),  # a flush
    ("source", "ds-t0", frozenset(), False, "next", False, "west"),
    ("source", "ds-t0", frozenset(), False, "next", "patch", "east"),
])
@example([  # this daemon's own location write is not adopted, another writer's is
    ("resolved", "t0", "east"),
    ("source", "ds-t0", frozenset(), False, "next", False, "east"),
    ("source", "ds-t0", frozenset(), False, "next", "update_data_source_locality", "west"),
    ("source", "ds-t0", frozenset(), False, "next", False, "east"),
    ("resolved", "t1", "east"),
    ("source", "ds-t1", frozenset(), False, "next", "update_data_source_locality", "west"),
])
@example([  # a move, then an answer, then versions that do not move: the answer stands
    ("resolved", "t1", "east"),
    ("source", "ds-t1", frozenset(), False, "next", False, "west"),
    ("resolved", "t1", "east"),
    ("source", "ds-t1", frozenset({"k0"}), False, "next", False, "west"),
])
@example([  # a version before a resume is admission's before the resume: the binding stays admitted
    ("admission-config", ADMISSION_CONFIGMAPS[0], True),
    ("binding", "w0", "c1", "next", False, False),
    ("resume", "w0"),
])
@example([  # an admitted binding seen unsuspended, then suspended again: no longer admitted
    ("admission-config", ADMISSION_CONFIGMAPS[0], True),
    ("binding", "w0", "c1", "next", False, True),
    ("resume", "w0"),
    ("binding", "w0", "c1", "next", True, False),
    ("binding", "w0", "c2", "next", False, True),
])
@example([  # an evicted binding seen suspended, then unsuspended (admitted again): no longer evicted
    ("admission-config", ADMISSION_CONFIGMAPS[0], True),
    ("binding", "w0", "c1", "next", False, False),
    ("evict", "w0"),
    ("binding", "w0", "c1", "next", True, True),
    ("binding", "w0", "c2", "next", False, False),
])
@example([  # a version before an eviction is admission's before the eviction: evicted until seen suspended again
    ("admission-config", ADMISSION_CONFIGMAPS[0], True),
    ("binding", "w1", "c1", "next", False, True),
    ("evict", "w1"),
    ("evicted", "w1", "retried"),
])
@example([  # a binding deleted after a version admission reads: gone from admission too
    ("binding", "w1", "c1", "next", False, True),
    ("delete", "binding", "w1"),
])
@example([  # the queue-managed kinds change between versions: each version is read under the kinds of its time
    ("binding", "w0", "c1", "next", False, False),
    ("admission-config", ADMISSION_CONFIGMAPS[0], True),
    ("binding", "w1", "c1", "next", False, False),
    ("settings", ADMISSION_CONFIGMAPS[1]),
])
def test_the_replay_fold_builds_the_world_evolve_builds(history: list[tuple[Any, ...]]) -> None:
    h = History()
    for action in history:
        h.do(action)
    evolved = _evolved(h)
    bulk = ReplayFold(initial_world())
    issued = {offset: [decode_command_head(encode(c)) for c in commands] for offset, commands in h.issued.items()}
    for batch in h.events:
        bulk.fold(batch, issued)
    assert not issued  # every command noted, after its event
    _same(bulk.finish(), evolved)
    one_batch = initial_world()
    fold_batch(one_batch, [record for batch in h.events for record in batch],
               {offset: [CommandHead.of(c) for c in commands] for offset, commands in h.issued.items()})
    _same(one_batch, evolved)
    _same(_folded_as_stored(h, noted=True), evolved)
    _same(_folded_as_stored(h, noted=False), _evolved(h, noted=False))


def test_a_malformed_version_folds_as_evolve_folds_it_held_or_last() -> None:
    # a malformed spec or status is never an error: the claim's view carries the problem (the decider makes it a
    # condition). Held and replaced, it is never parsed; last, it parses through the same tolerant path
    good = manifests.claim("k0", namespace=NS, table="db.t0", workload="w0")
    bad = manifests.claim("k0", namespace=NS, table="db. t0 ", workload="w0")
    bad["spec"]["attributes"] = ["not", "a", "map"]
    bad["status"] = {"phase": 7, "conditions": "none"}
    for versions in ([bad, good], [good, bad], [bad]):
        events = []
        for generation, raw in enumerate(versions, 1):
            raw = dict(raw, metadata=dict(raw["metadata"], uid="u", generation=generation,
                                          resourceVersion=str(10 + generation)))
            events.append(EventRecord(at_ms=generation, source="watch", key="k", event=ObjectObserved(obj=trim(raw))))
        evolved = initial_world()
        for record in events:
            evolve(evolved, record)
        bulk = initial_world()
        fold_batch(bulk, events)
        _same(bulk, evolved)
        claim = bulk.claims[f"DataSourceClaim/{NS}/k0"]
        assert bool(claim.problem) == (versions[-1] is bad)


def test_a_member_clusters_events_fold_into_the_members_as_evolve_folds_them() -> None:
    """A member's pods, nodes, lists and command outcomes go to ``world.members`` (``tether replay`` and
    ``--explain`` read the members from the replay fold), never into the control plane's maps."""
    def pod(name: str, rv: str, node: str = "") -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": NS, "uid": f"u-{name}", "resourceVersion": rv,
            "annotations": {"godel.bytedance.com/pod-group-name": "g"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "1",
                                                             "labels": {"rack": "r1"}},
            "status": {"allocatable": {"cpu": "8"}}}
    claim = manifests.claim("k0", namespace=NS, table="db.t0", workload="w0")
    claim["metadata"].update(uid="k", resourceVersion="5")
    events: list[Event] = [
        ListsStarted(sources=(list_source("Pod"), list_source("Node")), cluster="m1"),
        ObjectObserved(obj=trim(node), cluster="m1"),
        ObjectObserved(obj=trim(pod("p0", "2")), cluster="m1"),
        ObjectObserved(obj=trim(pod("p1", "3")), cluster="m1"),
        ObjectsListed(kind="Pod", keys=(f"Pod/{NS}/p0", f"Pod/{NS}/p1"), cluster="m1"),
        ObjectsListed(kind="Node", keys=("Node//n1",), cluster="m1"),
        ObjectObserved(obj=trim(claim)),
        CommandSucceeded(command_id="c1", command="release_pod", target=f"m1:Pod/{NS}/p0",
                         result=trim(pod("p0", "4", node="n1"))),
        ObjectDeleted(obj=trim(pod("p1", "5")), cluster="m1"),
    ]
    records = [EventRecord(at_ms=i, source="watch", key="k", event=e, offset=i) for i, e in enumerate(events, 1)]
    evolved = initial_world()
    for record in records:
        evolve(evolved, record)
    bulk = initial_world()
    fold_batch(bulk, records)
    _same(bulk, evolved)
    state = bulk.members.clusters["m1"]
    assert sorted(state.pods) == [f"Pod/{NS}/p0"] and state.pods[f"Pod/{NS}/p0"].node_name == "n1"
    assert list(bulk.claims) == [f"DataSourceClaim/{NS}/k0"]


# --- member clusters: pods held for their last version -----------------------------------------------------------

MEMBERS = ("m1", "m2")
PODS = ("p0", "p1", "p2")
NODES = ("n1", "n2")
member_actions = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(MEMBERS), st.sampled_from(PODS), rv_mode, st.sampled_from(("", *NODES)),
              st.sampled_from(["Pending", "Running", "Succeeded"]), st.sampled_from(["", "load-job"]),
              st.booleans()),
    st.tuples(st.just("delete-pod"), st.sampled_from(MEMBERS), st.sampled_from(PODS)),
    st.tuples(st.just("node"), st.sampled_from(MEMBERS), st.sampled_from(NODES), st.sampled_from(["r1", "r2"])),
    st.tuples(st.just("job"), st.sampled_from(MEMBERS), st.booleans()),
    st.tuples(st.just("load"), st.sampled_from(MEMBERS), st.booleans()),
    st.tuples(st.just("pods-listed"), st.sampled_from(MEMBERS), st.frozensets(st.sampled_from(PODS))),
    st.tuples(st.just("failed"), st.sampled_from(MEMBERS), st.sampled_from(PODS)),
    st.tuples(st.just("release"), st.sampled_from(MEMBERS), st.sampled_from(PODS)),
    st.tuples(st.just("group"), st.sampled_from(MEMBERS), st.booleans()),
    st.tuples(st.just("emitted"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("claim"), st.sampled_from(CLAIMS), st.sampled_from(TABLES), st.sampled_from(WORKLOADS),
              st.booleans(), rv_mode, st.booleans()),
    st.tuples(st.just("batch")),
)


class MemberHistory(History):
    """Pods (a gang's, or a Fluid DataLoad's Job's), nodes, the Job and the DataLoad, in two members."""

    def __init__(self) -> None:
        super().__init__()
        self.releases: dict[str, str] = {}  # member pod key → id of the last ReleasePod issued for it

    def member(self, cluster: str, raw: dict[str, Any], *, result: bool = False, deleted: bool = False) -> None:
        obj = trim(raw)
        obj = self.versions.setdefault((f"{cluster}:{obj.key}", obj.metadata.resource_version), obj)
        if deleted:
            self.add(ObjectDeleted(obj=obj, cluster=cluster))
        elif result:  # the answer of the last release issued for the pod, if any
            self.add(CommandSucceeded(command_id=self.releases.get(f"{cluster}:{obj.key}", "r"), command="release_pod",
                                      target=f"{cluster}:{obj.key}", result=obj))
        else:
            self.add(ObjectObserved(obj=obj, cluster=cluster))

    def do(self, action: tuple[Any, ...]) -> None:
        match action:
            case ("pod", cluster, name, mode, node, phase, job, as_result):
                key = f"{cluster}:Pod/{NS}/{name}"
                meta = self._meta(key, name, NS, None, mode) | {
                    "creationTimestamp": f"2026-01-01T00:00:0{name[-1]}Z",
                    "annotations": {"godel.bytedance.com/pod-group-name": "g"}}
                if job:
                    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j"}]
                spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
                if node:
                    spec["nodeName"] = node
                self.member(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                                      "status": {"phase": phase}}, result=as_result)
            case ("delete-pod", cluster, name):
                key = f"{cluster}:Pod/{NS}/{name}"
                meta = self._meta(key, name, NS, None, "next")
                self.member(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": meta}, deleted=True)
                self.lives[key] = self.lives.get(key, 1) + 1
            case ("node", cluster, name, rack):
                meta = self._meta(f"{cluster}:Node//{name}", name, "", None, "next") | {"labels": {"rack": rack}}
                self.member(cluster, {"apiVersion": "v1", "kind": "Node", "metadata": meta,
                                      "status": {"allocatable": {"cpu": "8"}}})
            case ("job", cluster, owned):
                meta = self._meta(f"{cluster}:Job/{NS}/load-job", "load-job", NS, None, "next")
                if owned:
                    meta["ownerReferences"] = [{"apiVersion": "data.fluid.io/v1alpha1", "kind": "DataLoad",
                                                "name": "load", "uid": "uid-load"}]
                self.member(cluster, {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})
            case ("load", cluster, written):  # observed, or the result of tether's write of its condition
                meta = self._meta(f"{cluster}:DataLoad/{NS}/load", "load", NS, None, "next")
                raw = {"apiVersion": "data.fluid.io/v1alpha1", "kind": "DataLoad", "metadata": meta,
                       "spec": {"dataset": {"name": "d", "namespace": NS}}, "status": {"phase": "Complete"}}
                if written:
                    self.add(CommandSucceeded(command_id="w", command="set_member_condition",
                                              target=f"{cluster}:DataLoad/{NS}/load", result=trim(raw)))
                else:
                    self.member(cluster, raw)
            case ("pods-listed", cluster, names):
                self.add(ObjectsListed(kind="Pod", keys=tuple(sorted(f"Pod/{NS}/{n}" for n in names)),
                                       cluster=cluster))
            case ("release", cluster, name) if self.offset:  # tether's ReleasePod, issued after the last event
                command = ReleasePod(cluster=cluster, pod=ObjectRef(api_version="v1", kind="Pod", name=name,
                                                                    namespace=NS), gate="tether.dev/placement")
                self.issued.setdefault(self.offset, []).append(CommandRecord(
                    id=f"rel{self.offset}", at_ms=0, key=f"{cluster}:Pod/{NS}/{name}", command=command,
                    causation=f"0:{self.offset}"))
                self.releases[f"{cluster}:Pod/{NS}/{name}"] = f"rel{self.offset}"
            case ("group", cluster, deleted):  # the pods' PodGroup (its fold neither reads nor changes them)
                meta = self._meta(f"{cluster}:PodGroup/{NS}/g", "g", NS, None, "next")
                self.member(cluster, {"apiVersion": "scheduling.godel.kubewharf.io/v1alpha1", "kind": "PodGroup",
                                      "metadata": meta, "spec": {"minMember": 2}}, deleted=deleted)
                if deleted:
                    self.lives[f"{cluster}:PodGroup/{NS}/g"] = self.lives.get(f"{cluster}:PodGroup/{NS}/g", 1) + 1
            case ("emitted", cluster):  # an Event tether wrote on the PodGroup: an outcome without an object
                self.add(CommandSucceeded(command_id="e", command="emit_member_event",
                                          target=f"{cluster}:PodGroup/{NS}/g"))
            case ("failed", cluster, name):
                self.add(CommandFailed(command_id="f", command="release_pod", target=f"{cluster}:Pod/{NS}/{name}",
                                       reason="Conflict", message="m", retryable=True))
            case _:
                super().do(action)


@settings(max_examples=300, deadline=None)
@given(st.lists(member_actions, min_size=1, max_size=50))
@example([  # an older version of a pod after a newer one (a release's answer after the bind): ignored
    ("pod", "m1", "p0", "next", "n1", "Running", "", False),
    ("pod", "m1", "p0", "older", "", "Pending", "", True),
])
@example([  # a release in flight, then its answer: no longer on its way
    ("pod", "m1", "p2", "next", "", "Pending", "", False),
    ("release", "m1", "p2"),
    ("pod", "m1", "p2", "next", "", "Pending", "", True),
])
@example([  # a DataLoad's pod succeeded then deleted within the held versions: where it ran is still recorded
    ("node", "m1", "n1", "r1"), ("load", "m1", False), ("job", "m1", True),
    ("pod", "m1", "p0", "next", "n1", "Running", "load-job", False),
    ("pod", "m1", "p0", "next", "n1", "Succeeded", "load-job", False),
    ("delete-pod", "m1", "p0"),
])
@example([  # the node is observed after the pod's version that ran on it: recorded only from a later version
    ("load", "m1", False), ("job", "m1", True),
    ("pod", "m1", "p1", "next", "n2", "Succeeded", "load-job", False),
    ("node", "m1", "n2", "r2"),
    ("pod", "m1", "p1", "next", "n2", "Succeeded", "load-job", True),
])
@example([  # the operation known only from a write's result after the pod's last version: nothing recorded
    ("node", "m1", "n1", "r1"), ("job", "m1", True),
    ("pod", "m1", "p0", "next", "n1", "Succeeded", "load-job", False),
    ("load", "m1", True),
])
@example([  # the operation observed only after its pod's last version: nothing recorded
    ("node", "m1", "n1", "r1"), ("job", "m1", True),
    ("pod", "m1", "p0", "next", "n1", "Succeeded", "load-job", False),
    ("load", "m1", False),
])
@example([  # ... and without one, never
    ("load", "m1", False), ("job", "m1", True),
    ("pod", "m1", "p1", "next", "n2", "Succeeded", "load-job", False),
    ("node", "m1", "n2", "r2"),
])
def test_a_members_pods_fold_as_evolve_folds_them(history: list[tuple[Any, ...]]) -> None:
    """Member pods are held for their last version like claims (the replay fold parses a pod once): the members the
    replay fold builds are ``evolve``'s — indexes, the placement recorded for a Fluid operation, positions — whatever
    the Jobs, nodes, operations, relists, failures and deletions between the versions, and wherever batches end."""
    h = MemberHistory()
    for action in history:
        h.do(action)
    evolved = _evolved(h)
    bulk = ReplayFold(initial_world())
    issued = {offset: [decode_command_head(encode(c)) for c in commands] for offset, commands in h.issued.items()}
    for batch in h.events:
        bulk.fold(batch, issued)
    _same(bulk.finish(), evolved)
    _same(_folded_as_stored(h, noted=True), evolved)
    _same(_folded_as_stored(h, noted=False), _evolved(h, noted=False))
