"""``GET /status``: one JSON document saying what a running daemon is doing (``tether status`` renders it).

Sections, each answering an operator's question:

* ``daemon`` — is it up and ready, since when, which identity;
* ``leader`` — does this replica act, and if not, who does (the Lease holder at the last look);
* ``log`` — where the log is, its end per stream, how far the decider and the executor are, and their lag;
* ``world`` — what is tracked: claims (bound, pending), DataSources, bindings (placements injected), Karmada
  Clusters, commands and catalog lookups in flight (and which tables are being looked up), timers, lists pending;
* ``plugins`` — the plugin ConfigMap, the systems in force and those refused, with why (their claims stay
  ``PluginConfigInvalid``);
* ``admission`` — with ``--admission``: the configuration's state (refused and why, the actions) and, per queue,
  its preemption policy, what it is charged (``allocated``, tether's view; ``status_allocated``, what the Queue's
  status says), the bindings held and admitted and the admission checks it names, and the bindings' checks by check
  and state;
* ``locality`` — locality tiers: the settings refused (and why), the bindings by tier, which tier each is in and why;
* ``members`` — every cluster tether knows: Karmada's Ready flag, and for a connected member (pod placement) how it
  is connected, whether it is still listing, its nodes and pods;
* ``watches`` — each watch: listed yet, errors, the last one;
* ``decisions`` and ``errors`` — the last ones (``adapters/daemon/recent.py``), newest first.

**Cheap and read-only.** The document is built from the daemon's memory: the world as folded, the watch sources,
the leader elector, the recent decisions. The only I/O is reading each stream's end and consumer positions (what
the lag gauge reads once a second). The world is read in one synchronous pass — no ``await`` in the middle — so a
document is a consistent snapshot of one moment of the event loop. Lists that can be long (held bindings, lookups in
flight) are cut at :data:`LIST_LIMIT`, with their full counts beside them.
"""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from tether.adapters.daemon.reporting import admission_checks, tiers_in_use
from tether.core.admission.objects import queue_charges
from tether.core.datadependency.tiers import DATA, locality_problems, tier_of, tier_standing
from tether.core.keys import LOCALITY_TIERS_ANNOTATION
from tether.core.quantity import format_milli

if TYPE_CHECKING:
    from tether.adapters.daemon.daemon import Daemon

LIST_LIMIT = 20
_CONSUMERS = (("events", "decider"), ("commands", "executor"))


def _version() -> str:
    try:
        return version("tether")
    except PackageNotFoundError:
        return "unknown"


def _leader(daemon: Daemon) -> dict[str, Any]:
    cfg, elector = daemon.cfg, daemon.leader
    if not cfg.leader_elect:
        return {"election": False, "leading": True, "identity": cfg.identity, "holder": cfg.identity, "lease": ""}
    leading = elector is not None and elector.is_leader.is_set()
    holder = cfg.identity if leading else (elector.holder if elector is not None else "")
    return {"election": True, "leading": leading, "identity": cfg.identity, "holder": holder,
            "lease": f"{cfg.lease_namespace}/{cfg.lease_name}"}


def _world(daemon: Daemon) -> dict[str, Any] | None:
    loops = daemon.loops
    if loops is None or not loops.recovered.is_set():
        return None
    world = loops.world
    return {**world.summary(), "timers": len(world.timers), "lists_pending": sorted(world.lists_pending),
            "lookups": sorted(world.lookups_in_flight)[:LIST_LIMIT], "last_event_at_ms": world.last_at_ms}


def _admission(daemon: Daemon) -> dict[str, Any]:
    cfg = daemon.cfg
    section: dict[str, Any] = {"enabled": cfg.admission, "configmap": cfg.admission_configmap, "queues": []}
    if not cfg.admission or daemon.loops is None or not daemon.loops.recovered.is_set():
        return section
    state = daemon.loops.world.admission
    section["config_error"] = state.config_error
    section["checks"] = {queue: [p.name for p in policies]
                         for queue, policies in sorted(state.checks_config.queues.items())}
    section["check_states"] = {f"{check} {s}": n for (check, s), n in admission_checks(state).items() if n}
    section["actions"] = list(state.config.actions)
    charges = queue_charges(state)
    queues: dict[str, dict[str, Any]] = {}
    for name, observed in sorted(state.queues.items()):
        queues[name] = {"name": name, "open": observed.queue.open, "weight": observed.queue.weight,
                        "problem": observed.problem, "held": [], "admitted": [],
                        "status_allocated": dict(observed.status.get("allocated") or {})}
    for name in sorted({*queues, *state.config.policies}):
        entry = queues.setdefault(name, {"name": name, "open": None, "weight": None, "problem": "not observed",
                                         "held": [], "admitted": []})
        policy = state.config.policy(name)  # (as the actions let it act)
        entry["policy"] = {"withinQueue": policy.within_queue, "reclaim": policy.reclaim}
    # held/admitted as tether_admission_bindings counts them (adapters/daemon/reporting.py, run_admission)
    for key, binding in sorted(state.bindings.items()):
        if not state.managed.manages(binding.workload_kind, binding.ref.namespace):
            continue
        workload = state.workloads.get(binding.workload)
        queue = workload.queue if workload is not None else "default"
        entry = queues.setdefault(queue, {"name": queue, "open": None, "weight": None, "problem": "not observed",
                                          "held": [], "admitted": []})
        held = binding.suspended and key not in state.admitted
        entry["held" if held else "admitted"].append(f"{binding.ref.namespace}/{binding.ref.name}")
    for entry in queues.values():
        entry["allocated"] = {k: format_milli(v) for k, v in charges.get(entry["name"], {}).items()}
        entry.setdefault("policy", {"withinQueue": "Never", "reclaim": "Never"})
        for state_ in ("held", "admitted"):
            names = entry[state_]
            entry[f"{state_}_count"] = len(names)
            entry[state_] = names[:LIST_LIMIT]
    section["queues"] = list(queues.values())
    return section


def _plugins(daemon: Daemon) -> dict[str, Any]:
    section: dict[str, Any] = {"configmap": daemon.cfg.plugin_configmap, "systems": [], "refused": {}}
    if daemon.loops is None or not daemon.loops.recovered.is_set():
        return section
    plugins = daemon.loops.world.plugins
    section["systems"] = sorted(plugins.plugins)
    section["refused"] = {name: error for name, error in sorted(plugins.errors.items()) if name not in plugins.plugins}
    return section


def _locality(daemon: Daemon) -> dict[str, Any]:
    """Locality tiers: the settings refused, the bindings by tier, and which tier each is in and why (the ones that
    fell over first)."""
    loops = daemon.loops
    if loops is None or not loops.recovered.is_set():
        return {"problems": [], "tiers": {}, "bindings": [], "bindings_count": 0}
    world = loops.world
    rows: list[tuple[int, str]] = []
    for key, binding in sorted(world.bindings.items()):
        if LOCALITY_TIERS_ANNOTATION not in binding.annotations:
            continue
        standing = tier_standing(binding.placement, binding.annotations, binding.observed_affinity)
        first = tier_of(binding.observed_affinity) == DATA
        rows.append((1 if first else 0, f"{key.split('/', 1)[1]}: {standing}"))
    rows.sort(key=lambda row: row[0])  # (stable: by key within; those that fell over first)
    return {"problems": locality_problems(world), "tiers": tiers_in_use(world),
            "bindings": [text for _, text in rows][:LIST_LIMIT], "bindings_count": len(rows)}


def _members(daemon: Daemon) -> list[dict[str, Any]]:
    world = daemon.loops.world if daemon.loops is not None and daemon.loops.recovered.is_set() else None
    ready = dict(world.clusters) if world is not None else {}
    states = world.members.clusters if world is not None else {}
    connected = daemon.members.members if daemon.members is not None else {}
    rows = []
    for name in sorted({*ready, *connected, *states}):
        member, state = connected.get(name), states.get(name)
        rows.append({
            "name": name, "karmada_ready": ready.get(name), "connected": member is not None,
            "origin": member.origin if member is not None else "",
            "listing": sorted(state.lists_pending) if state is not None else [],
            "nodes": len(state.nodes) if state is not None else 0, "pods": len(state.pods) if state is not None else 0,
            "watch_errors": sum(s.errors for s in member.sources) if member is not None else 0,
            # its optional APIs not served there (Godel's, Fluid's: docs/optional-apis.md)
            "absent": sorted(s.resource.plural for s in member.sources if s.absent) if member is not None else [],
            "last_error": next((s.last_error for s in member.sources if s.last_error), "") if member else "",
        })
    return rows


def _watches(daemon: Daemon) -> list[dict[str, Any]]:
    return [{"resource": s.name, "synced": s.synced.is_set(), "errors": s.errors, "absent": s.absent,
             "last_error": s.last_error} for s in daemon.sources]


async def _log(daemon: Daemon) -> dict[str, Any]:
    section: dict[str, Any] = {"url": daemon.cfg.log_url, "streams": {}}
    log_ = daemon.event_log
    if log_ is None:
        return section
    try:
        for stream, consumer in _CONSUMERS:
            end, done = await log_.end(stream), await log_.position(stream, consumer=consumer)
            section["streams"][stream] = {
                "end": {str(p): o for p, o in sorted(end.items())},
                "consumer": consumer, "position": {str(p): o for p, o in sorted(done.items())},
                "lag": sum(max(0, o - done.get(p, 0)) for p, o in end.items())}
    except Exception as exc:  # a status answers even when the log hiccups: it says so
        section["error"] = repr(exc)[:200]
    return section


async def daemon_status(daemon: Daemon, *, started_at: float) -> dict[str, Any]:
    """The status document of ``daemon`` (module doc); ``started_at`` is its start (``time.time()``)."""
    ready, why = daemon.ready()
    loops = daemon.loops
    document: dict[str, Any] = {
        "daemon": {"version": _version(), "identity": daemon.cfg.identity, "ready": ready, "ready_reason": why,
                   "started_at": started_at, "uptime_seconds": round(time.time() - started_at, 1),
                   "events_decided": loops.decided_events if loops is not None else 0,
                   "commands_applied": loops.applied_commands if loops is not None else 0},
        "leader": _leader(daemon),
        "world": _world(daemon),
        "plugins": _plugins(daemon),
        "admission": _admission(daemon),
        "locality": _locality(daemon),
        "members": _members(daemon),
        "watches": _watches(daemon),
        "decisions": list(reversed(loops.recent.decisions)) if loops is not None else [],
        "errors": list(reversed(loops.recent.errors)) if loops is not None else [],
    }
    document["log"] = await _log(daemon)  # (the one await: after the synchronous pass over the world)
    return document


__all__ = ["LIST_LIMIT", "daemon_status"]
