"""Pod-level placement in the member clusters: job-level topology affinity (seed 003, Godel PodGroups) and
DataFlow affinity inheritance (seed 001, Fluid operations).

* :mod:`.webhook_decision` — the pod webhook's decision: which new pods are created behind tether's scheduling
  gate (recorded as an event before the answer);
* :mod:`.decider` — the decider: releases gated pods with tightened node affinity, holds and reports the others;
* :mod:`.pod_group_spec` — a Godel PodGroup's spec, parsed and validated (into ``core.world.pod_group``);
* :mod:`.topology_planner` — the planner: one topology domain for a whole group, with Godel's sort rules;
* :mod:`.group_affinity` — a planned placement as node affinity for a pod of the group;
* :mod:`.dataflow` — Fluid operations (read into ``core.world.data_operation``), their recorded placements and the
  inheritance decision;
* :mod:`.node_affinity` — node selectors evaluated as Kubernetes does, and the one merge into a gated pod.

The room imports the shared language (the members' state is ``core.world.member_state``) and nothing else: no
other capability, nothing of ``projections/``.
"""
