"""Builders for the objects tether works with: claims, bindings, clusters, the plugin ConfigMap, workloads.

Used by the demo, the benchmarks and the tests, so that every sample object in the project has one shape. The
defaults are the smallest objects a real API server accepts (they are checked against the CRDs in
``ops/crds`` by the emulator).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tether.core import api
from tether.core.commands import CreateDataSource
from tether.core.keys import DATASOURCE_FINALIZER, LOCATION_ANNOTATION, PERMANENT_ID_LABEL

PLUGIN_NAMESPACE = "volcano-global"
PLUGIN_CONFIGMAP = "volcano-global-datasource-plugins"


def claim(
    name: str,
    *,
    namespace: str = "default",
    table: str,
    system: str = "amoro",
    type_: str = "table",
    workload: str | None = None,
    workload_kind: str = "Deployment",
    workload_api_version: str = "apps/v1",
    workload_namespace: str | None = None,
    attributes: dict[str, str] | None = None,
    locality: api.LocalityPreference | None = None,
    dataset: api.DatasetReference | None = None,
) -> dict[str, Any]:
    """A DataSourceClaim on ``table`` for a workload (``workload`` or the claim's own name), written through the
    kind's type (:class:`tether.core.api.DataSourceClaimSpec`): the fields it describes, as it names them."""
    spec = api.DataSourceClaimSpec(
        system=system, data_source_type=type_, data_source_name=table, attributes=attributes or {},
        workload=api.WorkloadReference(api_version=workload_api_version, kind=workload_kind, name=workload or name,
                                       namespace=workload_namespace or ""), locality=locality, dataset=dataset)
    return {
        "apiVersion": api.DATASOURCECLAIM.api_version,
        "kind": api.DATASOURCECLAIM.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": msgspec.to_builtins(spec),
    }


def resource_binding(
    workload: str,
    *,
    namespace: str = "default",
    kind: str = "Deployment",
    api_version: str = "apps/v1",
    replicas: int = 1,
    cluster_names: list[str] | None = None,
    exclude: list[str] | None = None,
    suspended: bool = False,
    cpu: str = "100m",
) -> dict[str, Any]:
    """A ResourceBinding as Karmada's detector creates it (name ``<workload>-<kind>``, policy label)."""
    affinity: dict[str, Any] = {}
    if cluster_names:
        affinity["clusterNames"] = cluster_names
    if exclude:
        affinity["exclude"] = exclude
    spec: dict[str, Any] = {
        "resource": {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": workload},
        "replicas": replicas,
        "replicaRequirements": {"resourceRequest": {"cpu": cpu}},
        "placement": {"clusterAffinity": affinity,
                      "replicaScheduling": {"replicaSchedulingType": "Duplicated"}},
    }
    if suspended:
        spec["suspension"] = {"scheduling": True}
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": f"{workload}-{kind.lower()}",
            "namespace": namespace,
            "labels": {PERMANENT_ID_LABEL: f"pp-{namespace}-{workload}"},
        },
        "spec": spec,
    }


# What a member cluster's Cluster reports as served APIs (as in Karmada's examples): karmada-scheduler filters out a
# cluster whose ``status.apiEnablements`` lacks a binding's resource kind ("did not have the API resource").
API_ENABLEMENTS = [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]},
                   {"groupVersion": "v1", "resources": [{"name": "pods", "kind": "Pod"},
                                                        {"name": "services", "kind": "Service"}]}]


def cluster(name: str, *, ready: bool = True, region: str = "", cpu: str = "64",
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Push-mode Karmada Cluster with the status karmada-cluster-status-controller would report for a healthy
    member (Ready, complete API enablements, node and resource summaries): what karmada-scheduler needs to place a
    Deployment's binding on it. Create it, then write ``status`` through the status subresource."""
    spec: dict[str, Any] = {"syncMode": "Push", "apiEndpoint": f"https://{name}.invalid:6443"}
    if region:
        spec["region"] = region
    stamp = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "cluster.karmada.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {**({"region": region} if region else {}), **(labels or {})}},
        "spec": spec,
        "status": {
            "kubernetesVersion": "v1.28.0",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "ClusterReady" if ready else "ClusterNotReachable", "message": "",
                            "lastTransitionTime": stamp},
                           {"type": "CompleteAPIEnablements", "status": "True", "reason": "CompleteAPIEnablements",
                            "message": "collected complete APIs from member cluster", "lastTransitionTime": stamp}],
            "apiEnablements": json.loads(json.dumps(API_ENABLEMENTS)),
            "nodeSummary": {"totalNum": 3, "readyNum": 3 if ready else 0},
            "resourceSummary": {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "1000"},
                                "allocating": {"cpu": "0", "memory": "0", "pods": "0"},
                                "allocated": {"cpu": "0", "memory": "0", "pods": "0"}},
        },
    }


def plugin_entry(
    *,
    system: str = "amoro",
    url: str = "http://amoro.invalid",
    port: int | None = 1630,
    mapping: dict[str, list[str]],
    **extra: Any,
) -> str:
    doc: dict[str, Any] = {"system": system, "endpoint": {"url": url}, "locationMapping": mapping}
    if port is not None:
        doc["endpoint"]["port"] = port
    doc.update(extra)
    return json.dumps(doc, sort_keys=True)


def plugin_configmap(entries: dict[str, str], *, namespace: str = PLUGIN_NAMESPACE,
                     name: str = PLUGIN_CONFIGMAP) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": entries}


def deployment(name: str, *, namespace: str = "default", replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }


def data_source_manifest(command: CreateDataSource) -> dict[str, Any]:
    """The DataSource a CreateDataSource asks for (shared with the Kubernetes executor), written through the kind's
    type (:class:`tether.core.api.DataSourceSpec`)."""
    identity = command.identity
    spec = api.DataSourceSpec(system=identity.system, type=identity.type, name=identity.name,
                              attributes=dict(identity.attributes),
                              locality=api.Locality(cluster_names=list(command.cluster_names)),
                              reclaim_policy=command.reclaim_policy)
    return {
        "apiVersion": api.DATASOURCE.api_version,
        "kind": api.DATASOURCE.kind,
        "metadata": {
            "name": command.name,
            "finalizers": [DATASOURCE_FINALIZER],
            "annotations": {LOCATION_ANNOTATION: command.location},
        },
        "spec": msgspec.to_builtins(spec),
    }
