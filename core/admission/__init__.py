"""Admission (seeds 004 + 002): a binding is never scheduled before tether has had its say.

* :mod:`.webhook_decision` — the ResourceBinding webhook's decision: inject the data placement, suspend a
  queue-managed or still-resolving binding (recorded as an event before the answer);
* :mod:`.model` — the types the session and its plugins share (bindings, their state in a session, what a cycle
  decides), so neither imports the other for them (the Queue and the parsed configuration, which the world holds,
  are ``core.world.admission_state``'s);
* :mod:`.plugins` — Volcano-style plugins (priority, gang, capacity, proportion, drf, datadependency);
* :mod:`.config` — ``volcano-scheduler.conf``: actions and tiers of plugins;
* :mod:`.session` — one admission cycle as a pure function: round robin across queues, backfill, recheck;
* :mod:`.objects` — queue names, priorities, Volcano Queues and cluster capacity read from Kubernetes objects;
* :mod:`.decider` — the decider: when a cycle runs and which commands (resume, hold, queue status) it yields.

Admission reads data dependency's public decision (where a binding's data is) — the one place a capability
imports another; data dependency never imports admission.
"""
