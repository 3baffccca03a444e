"""The replay's fold: many events at once, parsing each object once for its last version.

:func:`~tether.projections.fold.evolve` folds one event and says what it touched, for the deciders to
reconcile; the daemon needs exactly that. A replay that only rebuilds state (``tether replay``, from the start or
from a snapshot; the benchmark) needs none of it, and it can use what the log is made of: an observation is a
**full snapshot** of its object (level-triggered, as controller-runtime has it), so the world after a run of
observations of one object is the world after the last of them. In the bench's log a claim is written about six
times, a binding four times and a DataSource forty times (each claim bound rewrites its claimRefs); parsing and
indexing each version is most of what a replay costs. :class:`ReplayFold` keeps, per claim, DataSource, binding
and Karmada Cluster, the latest version it saw — after the same staleness tests ``evolve`` makes, at the same
position, so tombstones are kept and dropped exactly as they would be — and parses it once, when something
needs it:

* at :meth:`ReplayFold.finish` (the end of the replay), for everything still held;
* before a deletion of that object (which buries the resourceVersion the world held), and before any DataSource
  deletion for every DataSource (dropping the last DataSource of an identity forgets its catalog answer, which
  depends on the other DataSources of the identity);
* before a relist (which compares the world's keys with the listed ones), for every object.

Admission's view (``projections.admission_fold``) of bindings and Clusters is held the same way — a replay meets every
version of every binding, and most are never read by admission at all — with three exceptions that keep it equal
to ``evolve``'s: a binding tether has resumed and not yet seen unsuspended (``admitted``), or evicted and not yet
seen suspended (``evicting``), is folded version by version, since one such version in the run ends that; a
binding's held version is folded before the ResumeBinding or EvictBinding noted after a later event (it came
first); and every held version is folded before what changes which
bindings admission reads (the admission ConfigMap, ``SettingsApplied``) and before a relist. A binding's deletion
drops its held version.

A member cluster's pods (``projections.member_fold``: a pod is written four or five times — created gated, released,
echoed, bound, finished) are held the same way, per member, and folded before anything of that member that may
read them or change what their fold records: a pod's deletion (its last version may record where a Fluid
operation ran), a Node, Job or Fluid operation of the member (observed, deleted or a write's result; not a PodGroup
nor an Event, which neither read nor change them), and its lists, a failure or a timer of any member.

Nothing else reads these objects while state is rebuilt: the catalog answers, the command outcomes and the
timers read only their own maps (and the indexes only to say what they touched, which nobody reads here).

Two facts about an object depend on its history rather than its last version:

* a DataSource's ``released`` (its claimRefs went from non-empty to empty: reclaimPolicy Delete applies). After a
  run of versions it is true exactly when the last version's claimRefs are empty and the world's version had
  claimRefs or was released, or a version of the run before the last had claimRefs. So when a held version is
  replaced, its claimRefs are parsed — until one non-empty version was seen, which for a DataSource in use is the
  first;
* a DataSource whose location changed from one version to the next makes that location its identity's catalog
  answer (``world.adopt_location``), unless an answer about the identity came after it. The location is an
  annotation (decoded with the metadata), so each held version is compared with the one before it; the last change
  per identity is kept until the sources are put, and forgotten when an answer about the identity is folded.

The result equals :func:`evolve`'s world (a property test checks it on random histories and random batch
boundaries) except where order carries no meaning: the order in which a map's keys were first inserted, and the
iteration order of the index sets (the deciders sort every set they iterate).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from tether.core.envelope import CommandHead, EventRecord, StoredEvent
from tether.core.events import (
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
    SettingsApplied,
    TimerFired,
)
from tether.core.identity import DataIdentity
from tether.core.keys import LOCATION_ANNOTATION
from tether.core.kube import KubeObject
from tether.core.world import World
from tether.core.world.member_state import MEMBER_KINDS, POD, POD_GROUP
from tether.core.world.views import (
    BINDING,
    CLAIM,
    CLUSTER,
    CONFIGMAP,
    DATASOURCE,
    _source_spec_fields,
    parse_binding,
    parse_claim,
    parse_source,
)

from .admission_fold import READ_KINDS, fold_admission, fold_admission_binding, fold_admission_cluster
from .fold import (
    _FOLDS,
    LOCATION_WRITES,
    _command_done,
    _fold_member,
    _forget,
    _ignored,
    _newer,
    _observe,
    _put_binding,
    _put_claim,
    _put_source,
    _unread,
    adopt_location,
    location_moved,
    note_recorded,
    put_cluster,
    writing_location,
)
from .member_fold import observe_member, release_done
from .versions import stale as _stale

#: The other event types that may be about a member cluster (``world._fold_member`` decides).
_MAYBE_MEMBER = frozenset({ObjectsListed, ListsStarted, MemberDisconnected, CommandFailed, TimerFired})
_ANSWERS = frozenset({DataLocationResolved, DataSourceNotInCatalog, DataLocationLookupFailed})
#: The member kinds whose fold reads a member's pods or changes what a pod's fold records (``members._put``: a Job
#: reads its pods, a Node or a Fluid operation is where a pod ran); a PodGroup, an Event or an outcome without an
#: object neither reads nor changes them, so the pods held need not be folded first.
_SETTLING = frozenset(MEMBER_KINDS) - {POD, POD_GROUP}
#: The events without an object that admission's fold reads (``admission.fold_admission``); of the outcomes without
#: an object, only a resume's.
_ADMISSION_EVENTS = frozenset({CommandFailed, ObjectsListed, TimerFired, SettingsApplied})
#: The writes whose outcome admission folds even when nothing came back (the binding is gone).
_ADMISSION_WRITES = frozenset({"resume_binding", "evict_binding"})
#: The commands that make a binding's versions folded one by one until one ends them (module doc).
_ADMITTING_COMMANDS = frozenset({"ResumeBinding", "EvictBinding"})
_HELD_KINDS = (f"{CLAIM}/", f"{BINDING}/")  # (key prefixes)
_OBSERVED = ObjectObserved.__name__
_MEMBER_POD = f":{POD}"


#: A version held: the decoded object, or its stored record when it came undecoded (``scan(undecoded=True)``).
Held = KubeObject | StoredEvent


def _version(held: Held) -> str:
    return held.version if type(held) is StoredEvent else held.metadata.resource_version  # type: ignore[union-attr]


class ReplayFold:
    """Folds batches of events into ``world`` (in place); :meth:`finish` completes it. Between the two the world
    lacks the last versions of some objects: read it after :meth:`finish` only."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.unread = _unread()
        self.claims: dict[str, Held] = {}  # object key → latest version, not parsed yet
        self.bindings: dict[str, Held] = {}  # object key → latest version
        self.sources: dict[str, KubeObject] = {}  # DataSource name → latest version
        self.sources_had_refs: set[str] = set()  # DataSources a replaced version of which listed claims
        self.clusters: dict[str, KubeObject] = {}  # Karmada Cluster name → latest observation
        self.moved: dict[str, tuple[DataIdentity, str]] = {}  # identity key → the last location a held version
        # changed to since the identity's last answer (module doc), adopted when the sources are put
        self.admitting: dict[str, Held] = {}  # binding key → its latest version admission has not folded
        self.pods: dict[str, dict[str, Held]] = {}  # member → pod key → its latest version (module doc)
        # (each held version above is a KubeObject, or a StoredEvent of one when it came undecoded)
        self.undecodable: list[tuple[StoredEvent, Exception]] = []  # records that came undecoded and then did not
        # decode: skipped; the versions before them are gone, so ``tether replay`` then folds again, decoding all

    def fold(self, records: Iterable[EventRecord | StoredEvent],
             issued: dict[int, list[CommandHead]] | None = None) -> None:
        """Fold ``records``. ``issued`` (by the offset of the event that caused them) are the commands the
        deciders issued, as recorded: each is noted right after its event, as ``step`` did, so the world is the
        daemon's without re-deciding (``tether replay``). Those noted are removed from it; what is left was caused
        by events outside the batch."""
        world, unread, folds = self.world, self.unread, _FOLDS
        admitting = self.admitting
        admission = world.admission
        inflight, retry_wait = world.inflight, world.retry_wait  # (never replaced: folds change them in place)
        admission_kinds, admission_configmap = READ_KINDS, world.settings.admission_configmap
        item: EventRecord | StoredEvent | None = None
        count = 0
        position = -1  # the offset of the last event not about a member (evolve leaves admission's for those)
        for count, item in enumerate(records, 1):  # noqa: B007 (read after the loop)
            if type(item) is StoredEvent:  # a version that came undecoded: held so if it is of a kind held
                key = item.key  # a claim's or binding's observed, or written while no command is in flight (else
                # its outcome frees a command's slot), or a member's pod (observed: a member's write result never
                # comes undecoded, core.envelope.object_version); anything else is decoded
                if key.startswith(_HELD_KINDS):
                    if item.type == _OBSERVED or not (inflight or retry_wait):
                        self._hold_version(key, item, item.version,
                                           kind=CLAIM if key.startswith(_HELD_KINDS[0]) else BINDING)
                        position = item.offset
                        if issued and (caused := issued.pop(item.offset, None)):
                            self._note(caused)
                        continue
                elif key.partition("/")[0].endswith(_MEMBER_POD):
                    self._hold_stored_pod(item, key)
                    if issued and (caused := issued.pop(item.offset, None)):
                        self._note(caused)
                    continue
                if (decoded := self._record(item)) is None:
                    continue  # (damaged: skipped, as a reader skips it)
                last = decoded
            else:
                last = item  # type: ignore[assignment]
            event: Any = last.event  # (dispatched on its type once, below: Any spares the checker re-narrowing it)
            of = type(event)
            obj: KubeObject | None = None
            # a member cluster's event goes to world.members, as evolve folds it (the cheap test first); the
            # others as evolve's folds, without what only says what they touched
            if of is ObjectObserved:  # two events in five
                member = bool(event.cluster)
                if not member:
                    obj = event.obj
                elif event.obj.kind == POD:  # held: its last version is folded (module doc)
                    meta = event.obj.metadata
                    self._hold_pod(event.cluster, f"{POD}/{meta.namespace}/{meta.name}", meta.resource_version,
                                   event.obj)
                    world.members.state(event.cluster).position = f"{last.partition}:{last.offset}"
                else:
                    if event.obj.kind in _SETTLING:
                        self._settle_pods(event.cluster)
                    _fold_member(world, last, unread)
            elif of is CommandSucceeded:  # one in three: _fold_succeeded
                target = event.target
                member = ":" in target and "/" not in (cluster := target.partition(":")[0])  # (_fold_member's)
                if member:
                    if event.result is not None and event.result.kind == POD:  # a released pod: held
                        _command_done(world, event)
                        if event.command == "release_pod":
                            release_done(world.members, cluster, pod_key=target.partition(":")[2],
                                         command_id=event.command_id)
                        meta = event.result.metadata
                        self._hold_pod(cluster, f"{POD}/{meta.namespace}/{meta.name}", meta.resource_version,
                                       event.result, answer=True)
                    else:
                        if event.result is not None and event.result.kind in _SETTLING:
                            self._settle_pods(cluster)
                        _fold_member(world, last, unread)
                else:
                    if inflight or retry_wait:  # (both empty in a replay that only rebuilds state)
                        _command_done(world, event)
                    obj = event.result
                    if obj is None and (event.command == "delete_data_source" or event.command == "remove_finalizer"):
                        kind, _, rest = event.target.partition("/")
                        namespace, _, name = rest.partition("/")
                        self._settle(kind, namespace, name)
                        _forget(world, event.target, unread)
            elif of is ObjectDeleted:
                member = bool(event.cluster)
                if member:
                    if event.obj.kind == POD:  # its held version first (where it ran may be recorded)
                        meta = event.obj.metadata
                        self._settle_pod(event.cluster, f"{POD}/{meta.namespace}/{meta.name}")
                    elif event.obj.kind in _SETTLING:
                        self._settle_pods(event.cluster)
                    _fold_member(world, last, unread)
                else:
                    meta = event.obj.metadata
                    self._settle(event.obj.kind, meta.namespace, meta.name)
                    if admitting and event.obj.kind == BINDING:  # (admission drops its view: nothing to fold)
                        admitting.pop(f"{BINDING}/{meta.namespace}/{meta.name}", None)
                    _observe(world, event.obj, unread, deleted=True)
            else:
                if self.pods and of in _MAYBE_MEMBER:  # (lists, a failure, a timer: rare) every held pod first
                    self._settle_pods()
                member = of in _MAYBE_MEMBER and _fold_member(world, last, unread)
                if not member:
                    if of is ObjectsListed:
                        self.flush()
                    elif of is SettingsApplied:  # (it may change which bindings admission reads)
                        self._admit_all()
                    elif self.moved and of in _ANSWERS:
                        self.moved.pop(event.identity.key, None)  # (this answer is newer than those changes)
                    fold = folds.get(of)
                    if fold is not None:
                        fold(world, last, event, unread)
                        if of is SettingsApplied:  # (the admission ConfigMap's name may have changed)
                            admission_configmap = world.settings.admission_configmap
            if member:
                pass  # (folded: nothing of the control plane's to hold, and admission's position stays)
            elif obj is not None:
                position = last.offset
                kind = obj.kind
                if kind in (CLAIM, BINDING):  # (when it did not come undecoded: an older log, a write's
                    meta = obj.metadata  # outcome while commands are in flight)
                    self._hold_version(f"{kind}/{meta.namespace}/{meta.name}", obj, meta.resource_version, kind=kind)
                else:  # own: the answer to this daemon's own write of a DataSource's location
                    if kind == CONFIGMAP:  # (the admission ConfigMap says which bindings admission reads)
                        self._admit_all()
                    self._hold(obj, own=of is CommandSucceeded and event.command in LOCATION_WRITES
                               and not event.noop)
                    if kind in admission_kinds and kind != CLUSTER:  # (a Cluster is held: folded when put)
                        fold_admission(admission, last, admission_configmap=admission_configmap)
            else:
                position = last.offset
                if of is ObjectDeleted:
                    if event.obj.kind in admission_kinds:
                        fold_admission(admission, last, admission_configmap=admission_configmap)
                elif of in _ADMISSION_EVENTS or (of is CommandSucceeded and event.command in _ADMISSION_WRITES):
                    fold_admission(admission, last, admission_configmap=admission_configmap)  # (module doc)
            if issued and (caused := issued.pop(last.offset, None)):
                self._note(caused)
        if item is not None:  # no fold reads these three
            world.events += count
            if type(item) is StoredEvent:  # (its time is in its body)
                item = self._record(item)
            if item is not None:
                world.last_at_ms = item.at_ms
            if position >= 0:
                world.admission.position = position

    def _note(self, caused: list[CommandHead]) -> None:
        """Note the commands an event caused, as recorded, right after it (as ``step`` issued them)."""
        world = self.world
        for head in caused:
            if self.admitting and head.command.type in _ADMITTING_COMMANDS:
                self._admit(head.key)  # (its versions before the resume or eviction come before it)
            note_recorded(world, head)

    def finish(self) -> World:
        """Parse and put every version still held; returns the world, complete."""
        self.flush()
        return self.world

    def flush(self) -> None:
        """Parse and put every version held (a relist compares the world's keys with the listed ones)."""
        world, unread = self.world, self.unread
        for key, held in self.claims.items():
            if (obj := self._object(held)) is not None:
                _put_claim(world, key, parse_claim(obj, world.claims.get(key)), unread)
        self.claims.clear()  # (cleared, not replaced: fold holds the map)
        admitting = self.admitting
        for key, held in self.bindings.items():
            if (obj := self._object(held)) is not None:
                _put_binding(world, key, parse_binding(obj, world.bindings.get(key)), unread)
                if admitting.get(key) is held:  # (admission's too, mostly: decoded once for both)
                    admitting[key] = obj
        self.bindings.clear()
        self._put_sources()
        for name, obj in self.clusters.items():
            put_cluster(world, name, obj, unread)
            fold_admission_cluster(world.admission, obj)
        self.clusters.clear()
        self._admit_all()
        self._settle_pods()

    def _hold_pod(self, cluster: str, key: str, rv: str, obj: KubeObject | StoredEvent, *,
                  answer: bool = False) -> None:
        """Hold ``obj``, version ``rv`` of a member's pod ``key``, as ``observe_member`` would fold it: not when it is
        older than the version held (a release's answer after the watch's bind), nor, for a write's answer
        (``answer``), when the member holds no such pod (seen deleted meanwhile, or a member disconnected)."""
        held: dict[str, Any] | None = self.pods.get(cluster)
        previous = held.get(key) if held is not None else None
        if previous is not None:
            if not _stale(rv, _version(previous)):
                held[key] = obj  # type: ignore[index]
            return
        if answer:
            state = self.world.members.clusters.get(cluster)
            if state is None or key not in state.pods:
                return
        if held is None:
            held = self.pods[cluster] = {}
        held[key] = obj

    def _settle_pod(self, cluster: str, key: str) -> None:
        """Fold the held version of one pod of ``cluster``, if any."""
        held = self.pods.get(cluster)
        if held and (version := held.pop(key, None)) is not None and (obj := self._object(version)) is not None:
            observe_member(self.world.members, cluster, obj, deleted=False, report=False)

    def _settle_pods(self, cluster: str | None = None) -> None:
        """Fold the held pods of ``cluster`` (of every member: None), in the order they were first held."""
        for name in [cluster] if cluster is not None else list(self.pods):
            held = self.pods.pop(name, None)
            if held:
                members = self.world.members
                for version in held.values():
                    if (obj := self._object(version)) is not None:
                        observe_member(members, name, obj, deleted=False, report=False)

    def _admit(self, key: str) -> None:
        """Fold into admission the version of binding ``key`` it has not folded yet, if any."""
        if (held := self.admitting.pop(key, None)) is not None and (obj := self._object(held)) is not None:
            fold_admission_binding(self.world.admission, key, obj)

    def _admit_all(self) -> None:
        """Fold into admission every binding version it has not folded yet."""
        admission = self.world.admission
        for key, held in self.admitting.items():
            if (obj := self._object(held)) is not None:
                fold_admission_binding(admission, key, obj)
        self.admitting.clear()

    def _put_sources(self) -> None:
        """Put every DataSource held, then adopt the locations they changed to (``world.adopt_location``)."""
        for name in list(self.sources):
            self._put_source(name)
        for identity, location in self.moved.values():
            adopt_location(self.world, identity, location, self.unread)
        self.moved.clear()

    def _put_source(self, name: str) -> None:
        obj = self.sources.pop(name)
        source = parse_source(obj, self.world.sources.get(name), self.world.claims)
        _put_source(self.world, name, source, self.unread)
        if name in self.sources_had_refs:
            self.sources_had_refs.discard(name)
            if not source.claim_keys:
                source.released = True

    def _hold_first(self, held: dict[str, Any], key: str, obj: KubeObject | StoredEvent, *, kind: str,
                    rv: str) -> None:
        """Hold ``obj``, version ``rv`` and the first since the last flush of a claim or binding, if ``evolve`` would
        put it (newer than the world's, or than the object's deletion)."""
        world = self.world
        view = world.claims.get(key) if kind == CLAIM else world.bindings.get(key)
        if not _ignored(world, key, view, rv):
            held[key] = obj

    def _hold_stored_pod(self, stored: StoredEvent, key: str) -> None:
        """Hold a version of a member's pod that came undecoded (``key``: <cluster>:Pod/namespace/name), as
        :meth:`fold` holds a decoded one."""
        cluster, _, pod_key = key.rpartition(":")
        self._hold_pod(cluster, pod_key, stored.version, stored)
        self.world.members.state(cluster).position = f"{stored.partition}:{stored.offset}"

    def _hold_version(self, key: str, version: Held, rv: str, *, kind: str) -> None:
        """Hold ``version`` (``rv``) of the claim or binding ``key`` if it replaces the one held (most events of a
        replay come here), and give a binding's to admission: folded at once if admitted, else held (module doc)."""
        held: dict[str, Any] = self.claims if kind == CLAIM else self.bindings
        previous = held.get(key)
        if previous is None:
            self._hold_first(held, key, version, kind=kind, rv=rv)
        else:  # world._newer, inlined (an echo, the same resourceVersion, is dropped)
            old = previous.version if type(previous) is StoredEvent else \
                previous.metadata.resource_version  # (_version, inlined)
            if rv != old and ((len(rv) == len(old) and rv > old) or not _stale(rv, old)):
                held[key] = version
        if kind == BINDING:
            admission = self.world.admission
            if key in admission.admitted or (admission.evicting and key in admission.evicting):
                if (obj := self._object(version)) is not None:
                    fold_admission_binding(self.world.admission, key, obj)
            else:
                self.admitting[key] = version

    def _object(self, held: KubeObject | StoredEvent) -> KubeObject | None:
        """The object of a held version, decoded if it came undecoded; None (and kept in ``undecodable``) if its body
        does not decode: the version is skipped, as a reader skips a damaged record."""
        if type(held) is not StoredEvent:
            return held  # type: ignore[return-value]
        try:
            return held.obj()
        except ValueError as exc:
            self.undecodable.append((held, exc))
            return None

    def _record(self, stored: StoredEvent) -> EventRecord | None:
        """The whole record of one that came undecoded; None (kept in ``undecodable``) if it does not decode."""
        try:
            return stored.record()
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            self.undecodable.append((stored, exc))
            return None

    def _hold(self, obj: KubeObject, *, own: bool = False) -> None:
        """Hold ``obj``, a DataSource, if ``evolve`` would put it, or a Cluster (the last observation wins, as in
        ``evolve``); fold anything else at once (the plugin ConfigMap: rare)."""
        if obj.kind == CLUSTER:
            self.clusters[obj.metadata.name] = obj
            return
        if obj.kind != DATASOURCE:
            _observe(self.world, obj, self.unread)
            return
        world, meta = self.world, obj.metadata
        name, rv = meta.name, meta.resource_version
        held = self.sources.get(name)
        if held is not None:
            if _newer(rv, held.metadata.resource_version):
                if name not in self.sources_had_refs and parse_source(held, world.sources.get(name)).claim_keys:
                    self.sources_had_refs.add(name)  # (see the module's docstring: released)
                self._note_move(obj, held.metadata.annotations.get(LOCATION_ANNOTATION, ""), own=own)
                self.sources[name] = obj
            return
        current = world.sources.get(name)
        if not _ignored(world, f"{DATASOURCE}//{name}", current, rv):
            self._note_move(obj, current.location if current is not None else None, own=own)
            self.sources[name] = obj

    def _note_move(self, obj: KubeObject, before: str | None, *, own: bool) -> None:
        """Remember the location ``obj`` changed to, if it did and another writer did it (module doc; ``evolve``
        adopts it at once)."""
        meta = obj.metadata
        location = meta.annotations.get(LOCATION_ANNOTATION, "")
        if (location_moved(location, deleting=meta.deletion_timestamp is not None, before=before) and not own
                and not writing_location(self.world, meta.name)):
            identity = _source_spec_fields(obj)[0]
            if identity is not None:
                self.moved[identity.key] = (identity, location)

    def _settle(self, kind: str, namespace: str, name: str) -> None:
        """Put what a deletion of this object reads: its own latest version (every DataSource's, for a
        DataSource)."""
        world, key = self.world, f"{kind}/{namespace}/{name}"
        if kind == CLAIM:
            if (held := self.claims.pop(key, None)) is not None and (claim := self._object(held)) is not None:
                _put_claim(world, key, parse_claim(claim, world.claims.get(key)), self.unread)
        elif kind == BINDING:
            if (held := self.bindings.pop(key, None)) is not None and (binding := self._object(held)) is not None:
                _put_binding(world, key, parse_binding(binding, world.bindings.get(key)), self.unread)
        elif kind == DATASOURCE:
            self._put_sources()
        elif kind == CLUSTER:
            self.clusters.pop(name, None)  # (its deletion drops it from the world: nothing to put first)


def fold_batch(world: World, records: Iterable[EventRecord],
               issued: dict[int, list[CommandHead]] | None = None) -> None:
    """Fold ``records`` into ``world`` when nobody reads what they touched: :class:`ReplayFold` over one batch."""
    bulk = ReplayFold(world)
    bulk.fold(records, issued)
    bulk.finish()
