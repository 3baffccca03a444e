"""The fold: every event of the log folded into the world (``core.world``), one event at a time.

:func:`evolve` folds one :class:`~tether.core.envelope.EventRecord` into a :class:`~tether.core.world.World` **in
place** and returns what it touched. In-place mutation is a deliberate departure from the textbook ``evolve(state,
event) -> state``: copying maps of tens of thousands of claims per event would cost more than everything else a
replay does, and determinism does not need immutability — it needs ``evolve`` to depend on nothing but the world
and the event, which it does (no clock, no randomness, no I/O, and every iteration over a set is sorted).

The world's shape is core's (``core/world/``); this module fills it: it parses each observation into its view,
keeps the indexes, the catalog's answers and tether's own commands in flight, and notes the commands ``step``
issues (:func:`note_issued`, :func:`note_recorded`). Where a write changed a DataSource's location, that location is
the answer (:func:`adopt_location`: what two writers do must converge).

A write's outcome event carries the object the API server returned; it is folded like an observation, so the
world learns the new resourceVersion without waiting for the watch. An observation that is not newer than what the
world holds (the same resourceVersion, or a smaller integer one) is ignored, and so is one older than the deletion
of an object the world no longer holds (a tombstone per recently deleted object): a write's result that reaches
the log after the watch reported the deletion cannot bring the object back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, cast

import msgspec

from tether.core.commands import (
    COMMAND_TYPES,
    Command,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    ReleasePod,
    ResumeBinding,
    SetAdmissionChecks,
    StartTimer,
    UpdateClaimStatus,
    command_name,
    command_target,
)
from tether.core.envelope import CommandHead, EventRecord, rfc3339
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
    list_source,
)
from tether.core.identity import DataIdentity, data_source_name
from tether.core.keys import LOCALITY_TIERS_ANNOTATION
from tether.core.kube import KubeObject
from tether.core.plugin_config import EMPTY_PLUGINS, parse_plugin_configmap
from tether.core.world import SMALL_INDEX, Index, Lookup, Settings, Timer, Touched, World, slot
from tether.core.world.admission_state import CYCLE_PURPOSE
from tether.core.world.clusters import cluster_place
from tether.core.world.data_operation import OPERATION_KINDS
from tether.core.world.views import (
    BINDING,
    CLAIM,
    CLUSTER,
    CONFIGMAP,
    DATASOURCE,
    Binding,
    Claim,
    Source,
    cluster_ready,
    parse_binding,
    parse_claim,
    parse_source,
)

from .admission_fold import READ_KINDS as ADMISSION_READ_KINDS
from .admission_fold import (
    fold_admission,
    forget_admission_config,
    note_checks,
    note_cycle_armed,
    note_evict,
    note_resume,
)
from .member_fold import (
    member_disconnected,
    member_listed,
    member_lists_started,
    note_outcome,
    note_releasing,
    observe_member,
    release_done,
)
from .versions import stale as _stale


class _Discarded:
    """A stand-in for a set that keeps nothing, for a :class:`Touched` nobody reads (a replay:
    ``replay_fold.ReplayFold``).

    ``add`` and ``update`` are the builtin ``bool``: a call straight into C, with no frame and no hashing
    (``bool`` of a set or tuple does not iterate it). Not a descriptor, so it is called with the argument alone."""

    add = bool
    update = bool


#: The one set that keeps nothing. A fold may test for it to skip work done only to fill it.
_DISCARDED = cast(set[str], _Discarded())


def _unread() -> Touched:
    """A :class:`Touched` whose sets keep nothing: what a fold touched, when nobody will read it (about 5 % of a
    replay's fold went into filling sets that were dropped unread)."""
    return Touched(claims=_DISCARDED, sources=_DISCARDED, bindings=_DISCARDED, identities=_DISCARDED,
                   members=_DISCARDED)


#: How many deleted objects the world remembers. A write's outcome can reach the log after the watch reported the
#: object's deletion (the executor and the watch race); without its tombstone that older result would bring the
#: object back. Outcomes are appended within seconds, so the last few thousand deletions are plenty; the oldest
#: tombstone goes first (deterministically: insertion order).
TOMBSTONES = 10_000


def _bury(world: World, key: str, resource_version: str) -> None:
    """Remember that ``key`` was deleted at ``resource_version`` (see TOMBSTONES)."""
    tombstones = world.tombstones
    held = tombstones.pop(key, None)
    tombstones[key] = resource_version if held is None or _stale(held, resource_version) else held
    if len(tombstones) > TOMBSTONES:
        del tombstones[next(iter(tombstones))]


def _buried(world: World, key: str, resource_version: str) -> bool:
    """Whether an observation of an object the world does not hold is older than its deletion."""
    held = world.tombstones.get(key)
    if held is None:
        return False
    if _stale(resource_version, held):
        return True
    del world.tombstones[key]  # a newer object of the same name: recreated
    return False


def _newer(new: str, old: str) -> bool:
    """Whether an observation at resourceVersion ``new`` replaces the one held at ``old`` (``not _stale``)."""
    # the common case first, without _stale: a newer etcd revision with as many digits (as _stale would say:
    # digit strings of one length compare as numbers, and others are never stale)
    return (len(new) == len(old) and new > old) or not _stale(new, old)


def _ignored(world: World, key: str, held: Claim | Source | Binding | None, resource_version: str) -> bool:
    """Whether an observation tells nothing new: not newer than the object held, or older than its deletion."""
    if held is not None:
        return not _newer(resource_version, held.resource_version)
    return bool(world.tombstones) and _buried(world, key, resource_version)


def _index_add(index: Index, key: str, value: str) -> None:
    if not key:
        return
    members = index.get(key)
    if members is None:
        index[key] = (value,)
    elif type(members) is set:
        members.add(value)
    elif value not in members:
        if len(members) < SMALL_INDEX:
            index[key] = tuple(sorted((*members, value)))
        else:
            index[key] = {*members, value}


def _index_remove(index: Index, key: str, value: str) -> None:
    if not key:
        return
    members = index.get(key)
    if members is None or value not in members:
        return
    if len(members) == 1:
        del index[key]
    elif len(members) > SMALL_INDEX + 1:
        cast(set[str], members).discard(value)
    else:
        index[key] = tuple(sorted(m for m in members if m != value))


def _index_entry(members: Collection[str]) -> Collection[str]:
    """The form an index entry with these members takes (see :data:`Index`)."""
    return tuple(sorted(members)) if len(members) <= SMALL_INDEX else set(members)


def canonical_indexes(world: World) -> None:
    """Give every index entry its form (a snapshot decodes them as lists)."""
    for index in (world.claims_by_workload, world.claims_by_identity, world.sources_by_identity,
                  world.bindings_by_workload, world.sources_listing_claim):
        for key, members in index.items():
            index[key] = _index_entry(members)


# --- folding ----------------------------------------------------------------------------------------------


def _matters_to_sources(world: World, old: Claim | None, new: Claim | None) -> bool:
    """Whether a DataSource's claimRefs may change: not on the claim's own conditions or phase.

    The observed ``boundDataSource`` only matters when several live DataSources cache the same identity (the claim
    then keeps the one it is bound to)."""
    if old is None or new is None:
        return True
    if old.identity != new.identity or old.deleting != new.deleting or old.ref.uid != new.ref.uid:
        return True
    return new.identity is not None and len(world.sources_by_identity.get(new.identity.key, ())) > 1 and \
        old.bound_data_source != new.bound_data_source  # last: it decodes both statuses


def _put_claim(world: World, key: str, claim: Claim | None, touched: Touched) -> None:
    old = world.claims.get(key)
    # a status write, the common case: parse_claim reused the parsed spec (the very same objects), so identity
    # tests answer for _matters_to_sources without comparing fields
    same_spec = claim is not None and old is not None and claim.ref is old.ref and \
        claim.identity is old.identity and claim.workload is old.workload and claim.deleting is old.deleting and \
        (claim.identity is None or len(world.sources_by_identity.get(claim.identity.key, ())) < 2)
    sources_too = not same_spec and _matters_to_sources(world, old, claim)
    if claim is not None and old is not None and (same_spec or (claim.workload == old.workload and not sources_too)):
        # no index changes; the claim and its workload's bindings are touched
        world.claims[key] = claim
        touched.claims.add(key)
        touched.bindings.update(world.bindings_by_workload.get(claim.workload, ()))
        return
    if old is not None:
        touched.bindings.update(world.bindings_by_workload.get(old.workload, ()))
        if sources_too:
            touched.sources.update(world.sources_listing_claim.get(key, ()))
            if touched.sources is not _DISCARDED and old.bound_data_source:  # (not decoded for nobody)
                touched.sources.add(old.bound_data_source)
        if old.identity is not None:
            if sources_too:
                touched.sources.update(world.sources_by_identity.get(old.identity.key, ()))
            if claim is None or claim.identity != old.identity:
                _index_remove(world.claims_by_identity, old.identity.key, key)
        if claim is None or claim.workload != old.workload:
            _index_remove(world.claims_by_workload, old.workload, key)
    touched.claims.add(key)
    if claim is None:
        if world.claims.pop(key, None) is not None and old is not None:
            _bury(world, key, old.resource_version)
        return
    world.claims[key] = claim
    if old is None or claim.workload != old.workload:
        _index_add(world.claims_by_workload, claim.workload, key)
    touched.bindings.update(world.bindings_by_workload.get(claim.workload, ()))
    if claim.identity is not None:
        # the claim's own DataSources (their claimRefs may change); not the other claims of the identity
        if old is None or claim.identity != old.identity:
            _index_add(world.claims_by_identity, claim.identity.key, key)
        if sources_too:
            touched.sources.update(world.sources_by_identity.get(claim.identity.key, ()))
    if sources_too and touched.sources is not _DISCARDED and claim.bound_data_source:
        # (a replay rebuilding state does not decode a new claim's status just to name what nobody will read)
        touched.sources.add(claim.bound_data_source)


def _claims_of_source(world: World, source: Source) -> set[str]:
    keys: set[str] = set()
    if source.identity is not None:
        keys.update(world.claims_by_identity.get(source.identity.key, ()))
    keys.update(source.claim_keys)
    return keys


def _serves_claims_differently(old: Source | None, new: Source | None) -> bool:
    """Whether claims must be re-decided: what they see of a DataSource is its existence, identity, locality and
    deletion — not its status (claimRefs change with every claim, and re-deciding all of them each time would
    make a burst of n claims on one table cost n²)."""
    if old is None or new is None:
        return True
    return (old.identity, old.cluster_names, old.deleting) != (new.identity, new.cluster_names, new.deleting)


def _put_source(world: World, name: str, source: Source | None, touched: Touched) -> None:
    old = world.sources.get(name)
    touched.sources.add(name)
    fan_out = _serves_claims_differently(old, source)
    old_keys = old.claim_keys if old is not None else ()
    new_keys = source.claim_keys if source is not None else ()
    entered: set[str] | tuple[()] = ()
    left: set[str] | tuple[()] = ()
    extends = source.__dict__.pop("extends", None) if source is not None else None
    if extends is not None and extends is old_keys:
        # the parse reused old_keys as the head of new_keys (views._source_status_of): only keys after it may
        # enter, and one enters unless the index already lists it for this DataSource (i.e. it is in old_keys)
        listing = world.sources_listing_claim
        entered = {k for k in new_keys[len(old_keys):] if name not in listing.get(k, ())}
        for ref_key in entered:
            _index_add(listing, ref_key, name)
    elif old_keys != new_keys:  # most writes leave claimRefs alone; the others move one or two claims
        old_set, new_set = set(old_keys), set(new_keys)
        entered, left = new_set - old_set, old_set - new_set
        for ref_key in left:
            _index_remove(world.sources_listing_claim, ref_key, name)
        for ref_key in entered:
            _index_add(world.sources_listing_claim, ref_key, name)
    if old is not None:
        if old.identity is not None and (source is None or source.identity != old.identity):
            _index_remove(world.sources_by_identity, old.identity.key, name)
        if fan_out:
            touched.claims.update(_claims_of_source(world, old))
        else:  # only the claims that entered or left claimRefs (a deleting claim waits for that)
            touched.claims.update(entered)
            touched.claims.update(left)
        if source is not None and old_keys and not new_keys:
            source.released = True
        elif source is not None and not new_keys:
            source.released = old.released
    if source is None:
        if world.sources.pop(name, None) is not None and old is not None:
            _bury(world, old.ref.key, old.resource_version)
        if old is not None and old.identity is not None and not world.sources_by_identity.get(old.identity.key):
            world.lookups.pop(old.identity.key, None)  # the DataSource was the cache: the next claim looks up again
        return
    world.sources[name] = source
    if source.identity is not None:
        if old is None or old.identity != source.identity:
            _index_add(world.sources_by_identity, source.identity.key, name)
        if fan_out:
            touched.identities.add(source.identity.key)
    if fan_out:
        touched.claims.update(_claims_of_source(world, source))


def _put_binding(world: World, key: str, binding: Binding | None, touched: Touched) -> None:
    old = world.bindings.get(key)
    touched.bindings.add(key)
    if old is not None and binding is not None and old.workload == binding.workload:  # the common case
        world.bindings[key] = binding
        touched.claims.update(world.claims_by_workload.get(binding.workload, ()))
        return
    if old is not None:
        _index_remove(world.bindings_by_workload, old.workload, key)
        touched.claims.update(world.claims_by_workload.get(old.workload, ()))
    if binding is None:
        if world.bindings.pop(key, None) is not None and old is not None:
            _bury(world, key, old.resource_version)
        return
    world.bindings[key] = binding
    _index_add(world.bindings_by_workload, binding.workload, key)
    touched.claims.update(world.claims_by_workload.get(binding.workload, ()))


def _observe(world: World, obj: KubeObject, touched: Touched, *, deleted: bool = False, own: bool = False) -> str:
    """Fold an observation; returns the key of the claim, DataSource or binding it put (and touched), or "".
    ``own``: the object is the answer to this daemon's own write of a DataSource's location (never adopted)."""
    # an echo (the same resourceVersion as the object held) is tested inline before _ignored: most observations
    # of a replay are the watch's echoes of writes already folded, and this test is their whole cost
    kind = obj.kind
    meta = obj.metadata
    rv = meta.resource_version
    if kind == CLAIM:
        key = f"{kind}/{meta.namespace}/{meta.name}"  # obj.key, inlined: the hottest line of a replay
        old_claim = world.claims.get(key)
        if deleted:
            _put_claim(world, key, None, touched)
            _bury(world, key, rv)
        elif old_claim is not None and len(rv) == len(held := old_claim.resource_version) and rv > held:
            _put_claim(world, key, parse_claim(obj, old_claim), touched)  # newer: _ignored's quick test, inlined
        elif (old_claim is not None and rv == old_claim.resource_version) or _ignored(world, key, old_claim, rv):
            return ""
        else:
            _put_claim(world, key, parse_claim(obj, old_claim), touched)
        return key
    if kind == DATASOURCE:
        name = meta.name
        old_source = world.sources.get(name)
        if deleted:
            _put_source(world, name, None, touched)
            _bury(world, f"{kind}//{name}", rv)
        elif (old_source is not None and rv == old_source.resource_version) or \
                _ignored(world, f"{kind}//{name}", old_source, rv):
            return ""
        else:
            source = parse_source(obj, old_source, world.claims)
            _put_source(world, name, source, touched)
            if (source.identity is not None and not own and not writing_location(world, name)
                    and location_moved(source.location, deleting=source.deleting,
                                       before=old_source.location if old_source is not None else None)):
                adopt_location(world, source.identity, source.location, touched)
        return f"{kind}//{name}"
    if kind == BINDING:
        key = f"{kind}/{meta.namespace}/{meta.name}"
        old_binding = world.bindings.get(key)
        if deleted:
            _put_binding(world, key, None, touched)
            _bury(world, key, rv)
        elif (old_binding is not None and rv == old_binding.resource_version) or \
                _ignored(world, key, old_binding, rv):
            return ""
        else:
            _put_binding(world, key, parse_binding(obj, old_binding), touched)
        return key
    if kind == CLUSTER:
        name = meta.name
        before = world.clusters.get(name)
        if deleted:
            world.clusters.pop(name, None)
            world.cluster_places.pop(name, None)
        else:
            put_cluster(world, name, obj, touched)
        if deleted or before is None:  # membership changes every binding's exclusions; readiness does not
            touched.all_bindings = True
    elif kind == CONFIGMAP and f"{meta.namespace}/{meta.name}" == world.settings.plugin_configmap:
        world.plugins = EMPTY_PLUGINS if deleted else parse_plugin_configmap(dict(obj.data), world.plugins)
        touched.all_claims = True
        touched.all_bindings = True
    return ""


def put_cluster(world: World, name: str, obj: KubeObject, touched: Touched) -> None:
    """Fold an observation of a Karmada Cluster: its readiness, and its place (labels, provider/region/zone) — a
    place that changed re-plans the bindings when locality tiers are in use (their ``near-data`` tier follows a
    topology label), and only then: nothing else reads a Cluster's labels."""
    world.clusters[name] = cluster_ready(obj)
    place = cluster_place(obj)
    held = world.cluster_places.get(name)
    if held == place:
        return
    world.cluster_places[name] = place
    if held is not None and locality_in_use(world):
        touched.all_bindings = True


def locality_in_use(world: World) -> bool:
    """Whether any claim, plugin or binding uses locality tiers (a Cluster's labels then matter to placements)."""
    return any(plugin.locality.configured for plugin in world.plugins.plugins.values()) or \
        any(claim.locality is not None for claim in world.claims.values()) or \
        any(LOCALITY_TIERS_ANNOTATION in binding.annotations for binding in world.bindings.values())


def _forget_missing(world: World, listed: ObjectsListed, touched: Touched) -> None:
    present = set(listed.keys)

    def gone(key: str, namespace: str) -> bool:
        return key not in present and (not listed.namespace or namespace == listed.namespace)

    if listed.kind == CLAIM:
        for key in sorted(k for k, c in world.claims.items() if gone(k, c.ref.namespace)):
            _put_claim(world, key, None, touched)
    elif listed.kind == DATASOURCE:
        for name in sorted(n for n, s in world.sources.items() if gone(s.ref.key, "")):
            _put_source(world, name, None, touched)
    elif listed.kind == BINDING:
        for key in sorted(k for k, b in world.bindings.items() if gone(k, b.ref.namespace)):
            _put_binding(world, key, None, touched)
    elif listed.kind == CLUSTER:
        for name in sorted(n for n in world.clusters if gone(f"{CLUSTER}//{n}", "")):
            del world.clusters[name]
            world.cluster_places.pop(name, None)
            touched.all_bindings = True


#: The commands that write a DataSource's location: their answers are this daemon's own writes.
LOCATION_WRITES = frozenset({"create_data_source", "update_data_source_locality"})


def writing_location(world: World, name: str) -> bool:
    """Whether this daemon has a write of the DataSource's location in flight: a version observed meanwhile may be
    that very write (its watch event can come before its answer), so it is not taken for another writer's."""
    if not world.inflight:
        return False
    target = f"{DATASOURCE}//{name}"
    return any(slot(command, target) in world.inflight for command in LOCATION_WRITES)


def location_moved(location: str, *, deleting: bool, before: str | None) -> bool:
    """Whether an observation of a live DataSource shows a location other than the version before it (None: no
    version before) — someone wrote its locality (:func:`adopt_location`)."""
    return bool(location) and not deleting and location != before


def adopt_location(world: World, identity: DataIdentity, location: str, touched: Touched) -> None:
    """A DataSource's location was changed by a write: that location becomes the identity's catalog answer.

    The DataSource is the answer every writer shares; the catalog answers a daemon holds are its own history (a
    push reaches one replica, pollers ask at different times). Were a daemon to keep following its own answer, two
    daemons with different answers would rewrite the locality, and every binding behind it, back and forth for
    ever. So a change of the location observed after an answer is a newer answer: the daemon that wrote it knew
    something later (the last write wins, in the API server's order, which every watcher sees alike), and a stale
    write is corrected by the next poll that finds the catalog elsewhere. An unchanged location (a status write, an
    echo) changes nothing, and this daemon's own location writes are never adopted (``own``, ``writing_location``):
    a write decided from an older answer may land after a newer one, which must then still be written."""
    key = identity.key
    lookup = world.lookups.get(key)
    if lookup is None or lookup.kind != "resolved" or lookup.location == location:
        return
    world.lookups[key] = msgspec.structs.replace(lookup, location=location)
    touched.identities.add(key)
    touched.claims.update(world.claims_by_identity.get(key, ()))
    touched.sources.update(world.sources_by_identity.get(key, ()))


def _answer(world: World, identity: DataIdentity, lookup: Lookup, touched: Touched) -> None:
    key = identity.key
    attempt = world.lookups_in_flight.pop(key, 0)
    lookup.attempt = attempt or world.lookups.get(key, lookup).attempt
    world.lookups[key] = lookup
    world.inflight.pop(slot("lookup_data_location", f"Data/{key}"), None)
    touched.identities.add(key)
    touched.claims.update(world.claims_by_identity.get(key, ()))
    touched.sources.update(world.sources_by_identity.get(key, ()))


def _fold_observed(world: World, record: EventRecord, event: ObjectObserved, touched: Touched) -> None:
    _observe(world, event.obj, touched)


def _fold_deleted(world: World, record: EventRecord, event: ObjectDeleted, touched: Touched) -> None:
    _observe(world, event.obj, touched, deleted=True)


def _fold_listed(world: World, record: EventRecord, event: ObjectsListed, touched: Touched) -> None:
    _forget_missing(world, event, touched)
    pending = world.lists_pending
    if pending:
        pending.discard(list_source(event.kind, event.namespace))
        if not pending:  # the picture is complete again: every object is reconciled once, from all of it
            touched.all_claims = True
            touched.all_bindings = True
            touched.sources.update(world.sources)


def _fold_lists_started(world: World, record: EventRecord, event: ListsStarted, touched: Touched) -> None:
    world.lists_pending.update(event.sources)
    for source in event.sources:  # the claims' scope: --watch-namespace, as the log says it (a replay knows it too)
        kind, _, namespace = source.partition("/")
        if kind == CLAIM:
            world.claims_namespace = namespace


def _fold_settings(world: World, record: EventRecord, event: SettingsApplied, touched: Touched) -> None:
    """The daemon's settings (``max_hold_ms`` is admission's: ``projections.admission_fold``). A ConfigMap that is no
    longer the configuration's is forgotten — what it said no longer applies, and the lists that follow the event
    bring the new one — and every claim and binding is decided again under them (the daemon appends them with its
    lists, so in practice once the lists have ended)."""
    settings = Settings(plugin_configmap=event.plugin_configmap, admission_configmap=event.admission_configmap)
    if settings.plugin_configmap != world.settings.plugin_configmap:
        world.plugins = EMPTY_PLUGINS
    if settings.admission_configmap != world.settings.admission_configmap:
        forget_admission_config(world.admission)
    world.settings = settings
    touched.all_claims = True
    touched.all_bindings = True


def _fold_resolved(world: World, record: EventRecord, event: DataLocationResolved, touched: Touched) -> None:
    _answer(world, event.identity, Lookup(identity=event.identity, kind="resolved", location=event.location,
                                          trigger=event.trigger, at_ms=record.at_ms), touched)


def _fold_not_found(world: World, record: EventRecord, event: DataSourceNotInCatalog, touched: Touched) -> None:
    _answer(world, event.identity, Lookup(identity=event.identity, kind="not-found", message=event.message,
                                          at_ms=record.at_ms), touched)


def _fold_lookup_failed(world: World, record: EventRecord, event: DataLocationLookupFailed,
                        touched: Touched) -> None:
    _answer(world, event.identity, Lookup(identity=event.identity, kind="failed", message=event.message,
                                          retryable=event.retryable, at_ms=record.at_ms), touched)


_UPDATE_CLAIM_STATUS = command_name(UpdateClaimStatus)


def _command_done(world: World, event: CommandSucceeded) -> None:
    """The command's slot is free: its command is no longer in flight, nor waiting for a retry."""
    if world.inflight or world.retry_wait:  # (both empty in a replay that only rebuilds state)
        s = f"{event.command}:{event.target}"  # slot(), inlined: one in two events of a replay comes here
        if world.inflight.get(s) == event.command_id:
            del world.inflight[s]
            if event.command == _UPDATE_CLAIM_STATUS:
                world.statuses_in_flight.pop(event.target, None)
        world.retry_wait.pop(s, None)


def _fold_succeeded(world: World, record: EventRecord, event: CommandSucceeded, touched: Touched) -> None:
    _command_done(world, event)
    if event.result is not None:
        own = event.command in LOCATION_WRITES and not event.noop  # (a no-op answers with the object as it is)
        if _observe(world, event.result, touched, own=own) == event.target:
            return  # the target was put, and so touched as _touch_target would (it is in the world)
    elif event.command == "delete_data_source" or event.command == "remove_finalizer":
        _forget(world, event.target, touched)  # no object came back: it is gone (deleted, or 404)
    _touch_target(world, event.target, touched)


def _command_failed(world: World, event: CommandFailed) -> None:
    """The command's slot waits for a retry (retryable), or the request is remembered as refused for good."""
    s = slot(event.command, event.target)
    if world.inflight.get(s) == event.command_id:
        del world.inflight[s]
        if event.command == _UPDATE_CLAIM_STATUS:
            world.statuses_in_flight.pop(event.target, None)
    if event.retryable:
        world.retry_wait[s] = world.retry_wait.get(s, 0) + 1
    else:
        world.rejected[event.command_id] = event.message


def _fold_failed(world: World, record: EventRecord, event: CommandFailed, touched: Touched) -> None:
    _command_failed(world, event)
    _touch_target(world, event.target, touched)


def _fold_timer(world: World, record: EventRecord, event: TimerFired, touched: Touched) -> None:
    if world.timers.pop(event.timer_id, None) is None:
        return  # fired twice (at-least-once) or never started: nothing to do
    if event.purpose == "retry-command":  # timer id: retry-command|<command>|<attempt>|<target>
        parts = event.timer_id.split("|", 3)
        if len(parts) == 4:
            world.retry_wait.pop(slot(parts[1], parts[3]), None)
    elif event.purpose == "lookup-retry":  # the last answer about this identity is stale now: ask again
        stale = world.lookups.get(event.subject.removeprefix("Data/"))
        if stale is not None and stale.kind != "resolved":
            stale.kind = "expired"
    world.inflight.pop(slot("start_timer", event.subject), None)
    _touch_target(world, event.subject, touched)


#: One fold per event type (a dict lookup: cheaper than a chain of isinstance checks on the hottest path).
_FOLDS: dict[type, Callable[[World, EventRecord, Any, Touched], None]] = {
    ObjectObserved: _fold_observed,
    ObjectDeleted: _fold_deleted,
    ObjectsListed: _fold_listed,
    ListsStarted: _fold_lists_started,
    DataLocationResolved: _fold_resolved,
    DataSourceNotInCatalog: _fold_not_found,
    DataLocationLookupFailed: _fold_lookup_failed,
    CommandSucceeded: _fold_succeeded,
    CommandFailed: _fold_failed,
    TimerFired: _fold_timer,
    SettingsApplied: _fold_settings,
}


def _fold_member(world: World, record: EventRecord, touched: Touched) -> bool:
    """Fold an event about a member cluster into ``world.members``; False when the event is not about one."""
    event: Any = record.event
    cluster = getattr(event, "cluster", "")
    if cluster:
        if isinstance(event, ObjectObserved | ObjectDeleted | ObjectsListed | ListsStarted):
            world.members.state(cluster).position = f"{record.partition}:{record.offset}"
        if isinstance(event, ObjectObserved | ObjectDeleted):
            touched.members.update(observe_member(world.members, cluster, event.obj,
                                                  deleted=isinstance(event, ObjectDeleted),
                                                  report=touched.members is not _DISCARDED))
        elif isinstance(event, ObjectsListed):
            touched.members.update(member_listed(world.members, cluster, kind=event.kind,
                                                 namespace=event.namespace, keys=event.keys))
        elif isinstance(event, ListsStarted):
            member_lists_started(world.members, cluster, event.sources)
        elif isinstance(event, MemberDisconnected):
            member_disconnected(world.members, cluster)
        return True
    if isinstance(event, CommandSucceeded | CommandFailed | TimerFired):
        target = event.subject if isinstance(event, TimerFired) else event.target
        member, colon, rest = target.partition(":")
        if not colon or "/" in member:  # (a control-plane target: Kind/namespace/name, or Data/...)
            return False
        if isinstance(event, TimerFired):
            world.timers.pop(event.timer_id, None)
            world.inflight.pop(slot("start_timer", event.subject), None)
        elif isinstance(event, CommandSucceeded):
            _command_done(world, event)
            if event.command == "release_pod":
                release_done(world.members, member, pod_key=rest, command_id=event.command_id)
            if event.result is not None:
                touched.members.update(observe_member(world.members, member, event.result, deleted=False,
                                                      answer=True, report=touched.members is not _DISCARDED))
        else:
            _command_failed(world, event)
            if event.command == "release_pod":
                release_done(world.members, member, pod_key=rest, command_id=event.command_id)
        touched.members.add(target if not rest.startswith("Pod/") else _subject_of_pod(world, member, rest))
        return True
    return False


def _subject_of_pod(world: World, cluster: str, pod_key: str) -> str:
    """The PodGroup or operation a pod's command was decided for (what is decided again on its outcome)."""
    state = world.members.clusters.get(cluster)
    pod = state.pods.get(pod_key) if state is not None else None
    if pod is None or state is None:
        return f"{cluster}:{pod_key}"
    if pod.group:
        return f"{cluster}:PodGroup/{pod.namespace}/{pod.group}"
    owner = state.job_owner.get(f"Job/{pod.namespace}/{pod.job}", "") if pod.job else ""
    return f"{cluster}:{owner}" if owner else f"{cluster}:{pod_key}"


def evolve(world: World, record: EventRecord, touched: Touched | None = None) -> Touched:
    """Fold one event into ``world`` (in place); returns what it touched (added to ``touched`` when given)."""
    if touched is None:
        touched = Touched()
    world.events += 1
    world.last_at_ms = record.at_ms
    event = record.event
    if _fold_member(world, record, touched):
        return touched
    fold = _FOLDS.get(type(event))
    if fold is not None:
        fold(world, record, event, touched)
    # admission reads only some kinds of objects (admission_fold.READ_KINDS): the rest skip the call
    obj: KubeObject | None = None
    if isinstance(event, ObjectObserved | ObjectDeleted):
        obj = event.obj
    elif isinstance(event, CommandSucceeded):
        obj = event.result
    if obj is None or obj.kind in ADMISSION_READ_KINDS:
        fold_admission(world.admission, record, admission_configmap=world.settings.admission_configmap)
    else:
        world.admission.position = record.offset
    return touched


def _forget(world: World, target: str, touched: Touched) -> None:
    """Drop the object ``target`` (an object key) from the world: it no longer exists."""
    kind, _, rest = target.partition("/")
    if kind == CLAIM and target in world.claims:
        _put_claim(world, target, None, touched)
    elif kind == DATASOURCE:
        name = rest.split("/", 1)[-1]
        if name in world.sources:
            _put_source(world, name, None, touched)


def _touch_target(world: World, target: str, touched: Touched) -> None:
    kind, _, rest = target.partition("/")
    if kind == CLAIM:
        touched.claims.add(target)
    elif kind == DATASOURCE:
        name = rest.split("/", 1)[-1]
        touched.sources.add(name)
        if name not in world.sources:  # e.g. a CreateDataSource failed: the claims waiting for it decide again
            for identity_key, lookup in world.lookups.items():
                if data_source_name(lookup.identity) == name:
                    touched.claims.update(world.claims_by_identity.get(identity_key, ()))
    elif kind == BINDING:
        touched.bindings.add(target)
    elif kind == "Data":
        identity_key = rest
        touched.identities.add(identity_key)
        touched.claims.update(world.claims_by_identity.get(identity_key, ()))


def note_issued(world: World, command: Command, command_id: str, *, command_slot: str = "", at_ms: int = 0) -> None:
    """Remember a command the decider just issued, until its outcome arrives. ``command_slot``: the command's
    slot when the caller already computed it (``slot(command_name(command), command_target(command))``);
    ``at_ms``: the time it was decided at (its record's, the deciding event's)."""
    world.inflight[command_slot or slot(command_name(command), command_target(command))] = command_id
    if isinstance(command, LookupDataLocation):
        world.lookups_in_flight[command.identity.key] = command.attempt
    elif isinstance(command, UpdateClaimStatus):
        world.statuses_in_flight[command.claim.key] = command.transition
    elif isinstance(command, ResumeBinding):
        note_resume(world.admission, binding_key=command.binding.key, command_id=command_id, at_ms=at_ms)
    elif isinstance(command, SetAdmissionChecks):
        note_checks(world.admission, binding_key=command.binding.key, checks=command.checks)
    elif isinstance(command, EvictBinding):
        note_evict(world.admission, command=command)
    elif isinstance(command, StartTimer):
        world.timers[command.timer_id] = Timer(fire_at_ms=command.fire_at_ms, purpose=command.purpose,
                                               subject=command.subject)
        if command.purpose == CYCLE_PURPOSE:
            note_cycle_armed(world.admission, fire_at_ms=command.fire_at_ms)
    elif isinstance(command, EmitMemberEvent) and command.involved.kind == "PodGroup":
        held = world.members.clusters.get(command.cluster)  # reported on transitions only (projections.member_fold)
        if held is not None:
            held.reported[command.involved.key] = command.reason
    elif isinstance(command, EmitMemberEvent) and command.involved.kind in OPERATION_KINDS:
        note_outcome(world.members, command.cluster, operation_key=command.involved.key, reason=command.reason,
                     message=command.message, at=rfc3339(at_ms))
    elif isinstance(command, ReleasePod):  # on its way until its outcome: pod placement counts it (members)
        note_releasing(world.members, command.cluster, pod_key=command.pod.key, command_id=command_id,
                       required=command.required)


#: The commands :func:`note_issued` reads more of than their type, target and id.
_NOTED_FROM_BODY = frozenset({"LookupDataLocation", "UpdateClaimStatus", "ResumeBinding", "EvictBinding", "StartTimer",
                              "EmitMemberEvent", "ReleasePod", "SetAdmissionChecks"})
#: Each command's tag (its class name, as encoded) → its name (``command_name``).
_NAMES_BY_TAG = {cls.__name__: command_name(cls) for cls in COMMAND_TYPES}


def note_recorded(world: World, head: CommandHead) -> None:
    """Note a recorded command as issued, as ``step`` did when it issued it (``tether replay``): from its head alone
    when its type, target (the record's key) and id say all :func:`note_issued` reads, else from the whole record."""
    name = _NAMES_BY_TAG.get(head.command.type)
    if name is None or head.command.type in _NOTED_FROM_BODY:
        record = head.record()
        note_issued(world, record.command, record.id, at_ms=record.at_ms)
    else:
        world.inflight[f"{name}:{head.key}"] = head.id  # slot(), inlined: once per command of a replay


__all__ = [
    "LOCATION_WRITES", "TOMBSTONES", "adopt_location", "canonical_indexes", "evolve", "locality_in_use",
    "location_moved", "note_issued", "note_recorded", "put_cluster", "writing_location",
]
