"""Prometheus metrics of the daemon (prometheus-client: the reference implementation, text format for free).

One registry per runtime (not the global default), so tests and the demo can run several daemons in one
process without their counters mixing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
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
        self.leader = Gauge("tether_leader", "1 while this replica is the leader", registry=r)
        self.watch_errors = Gauge("tether_watch_errors", "Watch errors since start", ["resource"], registry=r)
        self.watch_absent = Gauge(
            "tether_watch_resource_absent", "1 while an optional resource is not served (its CRD is not installed): "
            "listed as empty, asked for again periodically", ["resource"], registry=r)
        self.claims = Gauge("tether_claims", "DataSourceClaims by phase", ["phase"], registry=r)
        self.timers = Gauge("tether_timers_pending", "Armed timers", registry=r)
        self.lists_pending = Gauge(
            "tether_lists_pending", "Watch lists started and not ended: while above 0 nothing is decided", registry=r)
        self.admission_bindings = Gauge("tether_admission_bindings", "Queue-managed bindings by queue and state "
                                        "(held: suspended, waiting; admitted)", ["queue", "state"], registry=r)
        self.admission_config_valid = Gauge(
            "tether_admission_config_valid",
            "0 while the admission ConfigMap is refused (the previous configuration stays in force), else 1",
            registry=r)
        self.admission_cycle = Histogram("tether_admission_cycle_seconds", "One admission cycle (decider step)",
                                         buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=r)
        self.webhook_latency = Histogram(
            "tether_webhook_seconds", "Webhook answers, server side (recording included), by webhook path "
            "(/mutate/resourcebindings, /mutate/pods/{cluster}) and outcome", ["webhook", "outcome"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=r)
        self.competing_writes = Counter(
            "tether_competing_writes_total", "Changes to fields tether owns that this process did not make (another "
            "tether without leader election, another controller), by kind", ["kind"], registry=r)
        self.gc_frozen = Gauge("tether_gc_frozen_objects",
                               "Objects moved out of the cyclic GC's reach at startup (DaemonConfig.freeze_heap)",
                               registry=r)
