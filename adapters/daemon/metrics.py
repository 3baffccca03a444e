"""Prometheus metrics of the daemon (prometheus-client: the reference implementation, text format for free).

One registry per daemon (not the global default), so tests and the demo can run several daemons in one
process without their counters mixing.

**Every number means what it says**, so that a dashboard or an alert never has to know tether's configuration:

* ``tether_leader`` is 1 on the replica that acts — the Lease holder, or the only replica when leader election is
  off — and 0 on a standby (and once a replica stops acting);
* a gauge that only means something with a feature on is not exported with the feature off: with admission off
  there is no ``tether_admission_config_valid`` (a 0 would read "configuration refused");
* counters are Counters, named ``*_total`` (prometheus-client appends the suffix); what is a count of something
  that exists now (claims by phase, DataSources, bindings) is a Gauge.

:data:`METRIC_NAMES` lists every series name tether can export (with admission on): the dashboard and the alert
rules in ``ops/monitoring`` are checked against it (``tests/ops/test_monitoring.py``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, *, admission: bool = True) -> None:
        """``admission``: register the gauges that only exist with queue admission on (``--admission``)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("tether_events_total", "Events folded by the decider", ["type"], registry=r)
        self.commands = Counter("tether_commands_total", "Commands decided", ["command"], registry=r)
        self.outcomes = Counter("tether_command_outcomes_total", "Command outcomes", ["command", "outcome"],
                                registry=r)
        self.lookups = Counter("tether_catalog_lookups_total", "Catalog answers", ["system", "outcome"], registry=r)
        self.decision_latency = Histogram(
            "tether_decision_latency_seconds", "From an event's append to the commit of what it caused",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5), registry=r)
        self.apply_latency = Histogram(
            "tether_command_apply_seconds", "Time to apply one command", ["command"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30), registry=r)
        self.lag = Gauge("tether_consumer_lag_records", "Records not yet processed", ["consumer"], registry=r)
        self.events_per_second = Gauge("tether_events_per_second", "Events folded per second (last 10 s)",
                                       registry=r)
        self.leader = Gauge("tether_leader", "1 while this replica acts: the Lease holder, or the only replica "
                            "when leader election is off; 0 on a standby", registry=r)
        self.watch_errors = Counter("tether_watch_errors_total", "Watch and list failures (each is retried with "
                                    "backoff)", ["resource"], registry=r)
        self.watch_absent = Gauge(
            "tether_watch_resource_absent", "1 while an optional resource is not served (its CRD is not installed): "
            "listed as empty, asked for again periodically", ["resource"], registry=r)
        self.claims = Gauge("tether_claims", "DataSourceClaims by phase", ["phase"], registry=r)
        self.datasources = Gauge("tether_datasources", "DataSources by state: located (a location is known), "
                                 "unlocated, deleting", ["state"], registry=r)
        self.bindings = Gauge("tether_bindings", "ResourceBindings observed", registry=r)
        self.bindings_injected = Gauge("tether_bindings_injected", "ResourceBindings carrying tether's cluster "
                                       "exclusions (its data placement)", registry=r)
        self.bindings_held = Gauge("tether_bindings_held", "ResourceBindings tether holds suspended, by reason: "
                                   "data (a claim still resolving), queue (queue admission)", ["reason"], registry=r)
        self.lookups_in_flight = Gauge("tether_lookups_in_flight", "Catalog lookups asked and not answered yet",
                                       registry=r)
        self.timers = Gauge("tether_timers_pending", "Armed timers", registry=r)
        self.lists_pending = Gauge(
            "tether_lists_pending", "Watch lists started and not ended: while above 0 nothing is decided", registry=r)
        self.plugin_config_valid = Gauge(
            "tether_plugin_config_valid", "Per system of the plugin ConfigMap: 1 while its entry is in force, 0 while "
            "it is refused (every claim of the system is Pending, PluginConfigInvalid)", ["system"], registry=r)
        self.admission_bindings = Gauge("tether_admission_bindings", "Queue-managed bindings by queue and state "
                                        "(held: suspended, waiting; admitted)", ["queue", "state"], registry=r)
        self.admission_config_valid: Gauge | None = Gauge(
            "tether_admission_config_valid",
            "0 while the admission ConfigMap is refused (the previous configuration stays in force), else 1; "
            "exported only with admission on", registry=r) if admission else None
        self.admission_checks: Gauge | None = Gauge(
            "tether_admission_checks", "Admission checks of queue-managed bindings by check and state (Pending, "
            "Ready, Retry, Rejected); exported only with admission on", ["check", "state"],
            registry=r) if admission else None
        self.admission_evictions = Counter(
            "tether_admission_evictions_total", "Admitted bindings queue admission evicted to make room for another "
            "(decided), by the evicted binding's queue and the policy that allowed it (preempt, reclaim)",
            ["queue", "policy"], registry=r)
        self.admission_cycle = Histogram("tether_admission_cycle_seconds", "One admission cycle (decider step)",
                                         buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=r)
        self.webhook_latency = Histogram(
            "tether_webhook_seconds", "Webhook answers, server side (recording included), by webhook path "
            "(/mutate/resourcebindings, /mutate/pods/{cluster}) and outcome", ["webhook", "outcome"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=r)
        self.competing_writes = Counter(
            "tether_competing_writes_total", "Changes to fields tether owns that this process did not make (another "
            "tether without leader election, another controller), by kind", ["kind"], registry=r)
        self.events_dropped = Counter(
            "tether_events_dropped_total", "Kubernetes Events not written because their object's bucket was empty (25, "
            "refilled at one per 5 minutes, as client-go's recorder; the decision stays in the log)", registry=r)
        self.locality_config_valid = Gauge(
            "tether_locality_config_valid", "0 while a locality setting in force is refused (a plugin ConfigMap's "
            "malformed locality, whose previous one stays in force; a topology key no Cluster carries; a claim's "
            "malformed spec.locality), else 1", registry=r)
        self.bindings_by_tier = Gauge("tether_bindings_by_tier", "ResourceBindings placed by locality tiers, by the "
                                      "tier karmada-scheduler placed them in (none: not placed yet)", ["tier"],
                                      registry=r)
        self.gc_frozen = Gauge("tether_gc_frozen_objects",
                               "Objects moved out of the cyclic GC's reach at startup (DaemonConfig.freeze_heap)",
                               registry=r)


def series() -> dict[str, tuple[str, frozenset[str]]]:
    """Every series name tether can export (with admission on) → its type and its labels.

    A histogram ``h`` exports ``h_bucket`` (labels plus ``le``), ``h_sum`` and ``h_count``; a counter ``c`` exports
    ``c_total``; both also ``…_created`` (the time the series began)."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for metric in vars(Metrics(admission=True)).values():
        if not isinstance(metric, Counter | Gauge | Histogram):
            continue
        name, labels = metric._name, frozenset(metric._labelnames)  # (prometheus-client's own attributes)
        if isinstance(metric, Histogram):
            out[f"{name}_bucket"] = ("histogram", labels | {"le"})
            for suffix in ("_sum", "_count", "_created"):
                out[name + suffix] = ("histogram", labels)
        elif isinstance(metric, Counter):
            out[f"{name}_total"] = out[f"{name}_created"] = ("counter", labels)
        else:
            out[name] = ("gauge", labels)
    return out


SERIES = series()
METRIC_NAMES = {name: kind for name, (kind, _) in SERIES.items()}
