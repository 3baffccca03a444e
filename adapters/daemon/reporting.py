"""The gauges that describe the world and the loops, set from the world once a second (read only).

Counting claims, DataSources and bindings is O(objects), hence a periodic task rather than a step of the decision
path: a scrape every 15-60 s sees numbers at most a second old. The counters (events, commands, outcomes, lookups,
webhook answers) are incremented where things happen; this module sets what is a *state*:

* claims by phase, DataSources by state, bindings observed, bindings carrying tether's exclusions, bindings tether
  holds suspended (for their data, or by queue admission), lookups in flight, armed timers, lists outstanding;
* each watch's failures, the members' included (``tether_watch_errors_total``: the sources count them; the counter
  is advanced by the difference since the last reading, so it only ever grows) and whether an optional resource
  is absent;
* each consumer's lag behind its stream's end;
* whether each system of the plugin ConfigMap is in force (``tether_plugin_config_valid``) — an entry refused is
  logged at warning once per distinct error, with its system and the parse error;
* bindings placed by locality tiers, by tier, and whether every locality setting in force is accepted — a refused
  one is logged once per distinct set of problems;
* with admission on, queue-managed bindings per queue, their admission checks by check and state, and whether the
  admission ConfigMap is accepted — a refused one is logged once per distinct error, with its key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import structlog

from tether.adapters.daemon.loops import Loops
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.kubernetes.watch import WatchSource
from tether.adapters.log import EventLog
from tether.core.datadependency.tiers import TIERS, locality_problems, tier_of
from tether.core.keys import LOCALITY_TIERS_ANNOTATION
from tether.core.plugin_config import PluginSet
from tether.core.world import World
from tether.core.world.admission_checks import STATES
from tether.core.world.admission_state import AdmissionState

log = structlog.get_logger("tether.daemon")

CLAIM_PHASES = ("Bound", "Pending")
DATASOURCE_STATES = ("located", "unlocated", "deleting")
HOLD_REASONS = ("data", "queue")


def held_bindings(admission: AdmissionState) -> dict[str, int]:
    """Bindings tether holds suspended, by reason: ``queue`` (queue-managed, not admitted yet) or ``data`` (the
    webhook suspended it while a claim of its workload resolves: the ``tether.dev/admission`` annotation). A binding
    someone else suspended is not tether's hold."""
    held = dict.fromkeys(HOLD_REASONS, 0)
    for key, binding in admission.bindings.items():
        if not binding.suspended or key in admission.admitted:
            continue
        if admission.managed.manages(binding.workload_kind, binding.ref.namespace):
            held["queue"] += 1
        elif binding.hold is not None:
            held["data"] += 1
    return held


def plugin_validity(plugins: PluginSet) -> dict[str, int]:
    """``tether_plugin_config_valid``: 1 for every system in force, 0 for every name a claim may give as its system
    and be refused for (``PluginConfigInvalid``: the decider's rule, ``why_pending``)."""
    return {**{name: 0 for name in plugins.errors if name not in plugins.plugins}, **dict.fromkeys(plugins.plugins, 1)}
def admission_checks(state: AdmissionState) -> dict[tuple[str, str], int]:
    """Bindings' admission checks by (check, state), every pair of a check some queue names (0 included)."""
    names = sorted({policy.name for policies in state.checks_config.queues.values() for policy in policies} |
                   {check.name for checks in state.checks.values() for check in checks})
    counts = {(name, s): 0 for name in names for s in STATES}
    for checks in list(state.checks.values()):
        for check in checks:
            counts[(check.name, check.state)] = counts.get((check.name, check.state), 0) + 1
    return counts


def tiers_in_use(world: World) -> dict[str, int]:
    """Bindings placed by locality tiers, by the tier they are in (``none``: not placed yet)."""
    counts = dict.fromkeys((*TIERS, "none"), 0)
    for binding in list(world.bindings.values()):
        if LOCALITY_TIERS_ANNOTATION in binding.annotations:
            counts[tier_of(binding.observed_affinity) or "none"] += 1
    return counts


def world_gauges(world: World) -> dict[str, dict[str, int]]:
    """The world's state gauges as ``{gauge: {label value or "": count}}`` (tests read it too)."""
    phases = dict.fromkeys(CLAIM_PHASES, 0)
    for claim in list(world.claims.values()):
        phase = claim.phase or "Pending"
        phases[phase] = phases.get(phase, 0) + 1
    sources = dict.fromkeys(DATASOURCE_STATES, 0)
    for source in list(world.sources.values()):
        sources["deleting" if source.deleting else "located" if source.location else "unlocated"] += 1
    return {
        "claims": phases,
        "datasources": sources,
        "bindings": {"": len(world.bindings)},
        "bindings_injected": {"": sum(1 for b in list(world.bindings.values()) if b.injected)},
        "bindings_held": held_bindings(world.admission),
        "lookups_in_flight": {"": len(world.lookups_in_flight)},
        "timers": {"": len(world.timers)},
        "lists_pending": {"": len(world.lists_pending)},
        "bindings_by_tier": tiers_in_use(world),
    }


class StateReporter:
    def __init__(self, *, metrics: Metrics, loops: Loops, sources: Callable[[], Iterable[WatchSource]],
                 log_: EventLog, admission_configmap: str = "", plugin_configmap: str = "") -> None:
        """``sources``: the watch sources now (the control plane's, and those of the members connected so far)."""
        self.metrics = metrics
        self.loops = loops
        self.sources = sources
        self.log = log_
        self.admission_configmap = admission_configmap
        self.plugin_configmap = plugin_configmap
        self._errors_seen: dict[str, int] = {}
        self._plugins_seen: PluginSet | None = None
        self._plugin_errors: dict[str, str] = {}  # the refusals logged, by system
        self._plugin_systems: set[str] = set()  # the systems tether_plugin_config_valid has a series for

    def set_plugin_gauges(self) -> None:
        """``tether_plugin_config_valid`` per system, and a warning for each refusal not logged yet (module doc)."""
        plugins = self.loops.world.plugins
        if plugins is self._plugins_seen:  # (a new PluginSet whenever the ConfigMap changes)
            return
        self._plugins_seen = plugins
        validity = plugin_validity(plugins)
        for system in self._plugin_systems - set(validity):  # gone from the ConfigMap: its series goes too
            self.metrics.plugin_config_valid.remove(system)
        self._plugin_systems = set(validity)
        for system, valid in validity.items():
            self.metrics.plugin_config_valid.labels(system).set(valid)
        refused = {system: plugins.errors[system] for system, valid in validity.items() if not valid}
        for system, error in sorted(refused.items()):
            if self._plugin_errors.get(system) != error:
                log.warning("plugin configuration refused: the system's claims stay Pending (PluginConfigInvalid)",
                            configmap=self.plugin_configmap, system=system, error=error)
        for system in sorted(set(self._plugin_errors) - set(refused)):
            log.info("plugin configuration accepted", configmap=self.plugin_configmap, system=system)
        self._plugin_errors = refused
        self._locality_problems: list[str] = []

    def set_world_gauges(self) -> None:
        for gauge, values in world_gauges(self.loops.world).items():
            metric = getattr(self.metrics, gauge)
            for label, count in values.items():
                (metric.labels(label) if label else metric).set(count)

    def set_locality(self) -> None:
        """``tether_locality_config_valid``, and a warning once per distinct set of refused locality settings."""
        problems = locality_problems(self.loops.world)
        self.metrics.locality_config_valid.set(0 if problems else 1)
        if problems != self._locality_problems:
            if problems:
                log.warning("locality setting refused: placements already made stay as they are, new ones are "
                            "Required", problems=problems)
            elif self._locality_problems:
                log.info("locality settings accepted")
            self._locality_problems = problems

    def set_watch_gauges(self) -> None:
        for source in self.sources():
            seen = self._errors_seen.get(source.name)
            counter = self.metrics.watch_errors.labels(source.name)  # (exported at 0 from the start)
            if source.errors > (seen or 0):
                counter.inc(source.errors - (seen or 0))
            self._errors_seen[source.name] = source.errors
            if source.absent_ok:
                self.metrics.watch_absent.labels(source.name).set(1 if source.absent else 0)

    async def set_lag(self) -> None:
        try:
            for stream, consumer in (("events", "decider"), ("commands", "executor")):
                end, done = await self.log.end(stream), await self.log.position(stream, consumer=consumer)
                self.metrics.lag.labels(consumer).set(sum(max(0, o - done.get(p, 0)) for p, o in end.items()))
        except Exception as exc:  # a log hiccup costs one reading of the lag, nothing else
            log.debug("could not read the consumers' lag", error=repr(exc)[:200])

    async def run(self, *, interval: float = 1.0) -> None:
        """Forever, once the world is recovered: every gauge, once per ``interval``."""
        await self.loops.recovered.wait()
        while True:
            self.set_world_gauges()
            self.set_plugin_gauges()
            self.set_locality()
            self.set_watch_gauges()
            await self.set_lag()
            await asyncio.sleep(interval)

    async def run_admission(self, *, interval: float = 1.0) -> None:
        """Queue-managed bindings per queue and state, and whether the admission ConfigMap is accepted (with
        ``--admission``). A refused ConfigMap is logged once per distinct error, with its key."""
        await self.loops.recovered.wait()
        seen: set[tuple[str, str]] = set()
        reported_error = ""
        while True:
            state = self.loops.world.admission
            if state.config_error != reported_error:
                reported_error = state.config_error
                if reported_error:
                    log.warning("admission configuration refused; the previous one stays in force",
                                configmap=self.admission_configmap, error=reported_error)
                else:
                    log.info("admission configuration accepted", configmap=self.admission_configmap)
            if self.metrics.admission_config_valid is not None:
                self.metrics.admission_config_valid.set(0 if state.config_error else 1)
            if self.metrics.admission_checks is not None:
                for labels, count in admission_checks(state).items():
                    self.metrics.admission_checks.labels(*labels).set(count)
            counts: dict[tuple[str, str], int] = {}
            for key, binding in state.bindings.items():
                if not state.managed.manages(binding.workload_kind, binding.ref.namespace):
                    continue
                workload = state.workloads.get(binding.workload)
                queue = workload.queue if workload is not None else "default"
                held = binding.suspended and key not in state.admitted
                labels = (queue, "held" if held else "admitted")
                counts[labels] = counts.get(labels, 0) + 1
            for labels in seen - set(counts):
                self.metrics.admission_bindings.labels(*labels).set(0)
            for labels, count in counts.items():
                self.metrics.admission_bindings.labels(*labels).set(count)
            seen |= set(counts)
            await asyncio.sleep(interval)
