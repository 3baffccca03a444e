"""A small world with something of everything, for the hostile-input tests to aim at.

The control plane: three Karmada clusters, the amoro plugin, a claim bound to a table in the east and its
workload's ResourceBinding (settled through the pipeline by :class:`Harness`). The member ``m1``: four nodes in
two racks, a Godel PodGroup of two with a required rack, a Fluid DataLoad that completed on node ``m1-n0`` and a
DataProcess that runs after it with ``Require``, its Job, and a pod of each.
"""

from __future__ import annotations

import copy
from typing import Any

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.events import ObjectObserved
from tether.core.kube import trim

MEMBER = "m1"
NS = "ml"
HOST = "kubernetes.io/hostname"
GROUP_ANNOTATION = "godel.bytedance.com/pod-group-name"


def node(name: str, rack: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {HOST: name, "rack": rack}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}


POD_GROUP: dict[str, Any] = {
    "apiVersion": "scheduling.godel.kubewharf.io/v1alpha1", "kind": "PodGroup",
    "metadata": {"name": "g", "namespace": NS, "uid": "pg"},
    "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60, "affinity": {"podGroupAffinity": {
        "required": [{"topologyKey": "rack"}], "preferred": [{"topologyKey": HOST}],
        "sortRules": [{"resource": "CPU", "dimension": "Available", "order": "Descending"}],
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}]}}}},
}

DATA_LOAD: dict[str, Any] = {
    "apiVersion": "data.fluid.io/v1alpha1", "kind": "DataLoad",
    "metadata": {"name": "load", "namespace": NS, "uid": "uid-load"},
    "spec": {"dataset": {"name": "d", "namespace": NS}},
    "status": {"phase": "Complete", "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": ["m1-n0"]}]}]}}},
}

DATA_PROCESS: dict[str, Any] = {
    "apiVersion": "data.fluid.io/v1alpha1", "kind": "DataProcess",
    "metadata": {"name": "proc", "namespace": NS, "uid": "uid-proc"},
    "spec": {"dataset": {"name": "d", "namespace": NS}, "parallelism": 1,
             "runAfter": {"kind": "DataLoad", "name": "load", "namespace": NS, "affinityStrategy": {
                 "policy": "Require", "requires": [{"name": HOST}], "prefers": [{"name": "rack", "weight": 50}]}},
             "processor": {"script": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "Exists"}]}]}}}}},
    "status": {"phase": "Executing"},
}

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "proc-job", "namespace": NS, "ownerReferences": [
        {"apiVersion": "data.fluid.io/v1alpha1", "kind": "DataProcess", "name": "proc", "uid": "uid-proc"}]},
}


def pod(name: str, *, group: str = "", job: str = "", gated: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if group:
        meta["annotations"] = {GROUP_ANNOTATION: group}
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j"}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "tether.dev/placement"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def member_objects() -> list[dict[str, Any]]:
    """The member's objects, in the order a list delivers them (a copy each call)."""
    return copy.deepcopy([
        *(node(f"{MEMBER}-n{i}", "r1" if i < 2 else "r2") for i in range(4)),
        POD_GROUP, DATA_LOAD, DATA_PROCESS, JOB,
        pod("g-0", group="g"), pod("proc-0", job="proc-job"),
    ])


def world() -> Harness:
    """The world of the module doc. The member's commands are left unapplied (the fake cluster has no members):
    feed more member events with ``h.feed``, never ``h.apply`` after this."""
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]})}))
    h.cluster.catalog["amoro/table/db.t"] = "s3://east/db/t"
    h.apply(m.claim("k", namespace=NS, table="db.t", workload="w"))
    h.apply(m.resource_binding("w", namespace=NS))
    for raw in member_objects():
        h.feed(ObjectObserved(obj=trim(raw), cluster=MEMBER))
    return h
