"""Conformance: objects read ``as=Table`` (``kubectl get``), on the emulator and on a real API server
(``TETHER_TEST_KUBECONFIG``): a CRD's printer columns, their cells, the row objects, a watch's events, and the
built-in kinds the emulator prints (Events, Pods, Nodes, Deployments, Jobs, Leases, ConfigMaps, Namespaces).

Measured on kube-apiserver v1.28 (apiextensions' table convertor), and asserted here for both. tether's CRDs
declare Phase, DataSource, System, Table and Age for claims, and System, Name, Clusters (a list), Claims (an
integer) and Age for DataSources.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether.adapters.sandbox.kube_emulator.crds import crd_dir
from tether.adapters.sandbox.kube_emulator.printers import (
    AGE_DESCRIPTION,
    NAME_DESCRIPTION,
    human_duration,
    label_selector,
)
from tether.adapters.sandbox.kube_emulator.resources import ResourceType
from tether.adapters.sandbox.kube_emulator.tables import cell, table
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.reference import crd_under_group

pytestmark = pytest.mark.cluster

#: tether's CRDs are served under a group of the tests' own: a lived-in control plane may serve
#: datadependency.volcano.sh with Volcano Global's CRDs (no printer columns), and a test never replaces a CRD.
OWN_GROUP = "datadependency-tables.tether.dev"
GROUP = f"/apis/{OWN_GROUP}/v1alpha1"
#: What kubectl get sends.
AS_TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io," \
           "application/json"
AGE = re.compile(r"^\d+s$")  # (just created)


def claim(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{OWN_GROUP}/v1alpha1", "kind": "DataSourceClaim",
            "metadata": {"name": name},
            "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "prod.events.clicks",
                     "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"}}}


async def own_crd(kube: KubeEnv, directory: Path, plural: str) -> None:
    """tether's CRD of ``plural`` (its printer columns), served under :data:`OWN_GROUP`."""
    await kube.register_crds(crd_under_group(crd_dir() / f"datadependency.volcano.sh_{plural}.yaml", group=OWN_GROUP,
                                             directory=directory))


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


async def call(kube: KubeEnv, method: str, path: str, *, body: Any = None, accept: str = "application/json",
               content_type: str = "application/json") -> Any:
    base, _, query = path.partition("?")
    response = await kube.api_client.call_api(
        base, method, query_params=[tuple(kv.split("=", 1)) for kv in query.split("&") if kv],
        header_params={"Accept": accept, "Content-Type": content_type}, body=body, auth_settings=["BearerToken"],
        _preload_content=False)
    try:
        raw = await response.read()
        if response.status >= 300:
            raise Refused(response.status, msgspec.json.decode(raw).get("message", ""))
        return [msgspec.json.decode(line) for line in raw.splitlines() if line.strip()] if "watch=true" in path \
            else msgspec.json.decode(raw)
    finally:
        response.release()


async def test_claims_listed_as_a_table_have_the_crds_columns(kube: KubeEnv, tmp_path: Path) -> None:
    await own_crd(kube, tmp_path, "datasourceclaims")
    claims = f"{GROUP}/namespaces/{kube.namespace}/datasourceclaims"
    created = await call(kube, "POST", claims, body=claim("clicks"))
    listed = await call(kube, "GET", claims, accept=AS_TABLE)
    assert (listed["kind"], listed["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert listed["metadata"]["resourceVersion"]
    columns = listed["columnDefinitions"]
    assert [(c["name"], c["type"], c["format"], c["priority"]) for c in columns] == [
        ("Name", "string", "name", 0), ("Phase", "string", "", 0), ("DataSource", "string", "", 0),
        ("System", "string", "", 0), ("Table", "string", "", 0), ("Age", "date", "", 0)]
    assert columns[0]["description"] == NAME_DESCRIPTION
    assert columns[1]["description"] == "Pending or Bound."
    [row] = listed["rows"]
    name, phase, source, system, table, age = row["cells"]
    assert (name, phase, source, system, table) == ("clicks", None, None, "amoro", "prod.events.clicks")
    assert AGE.match(age), age
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["apiVersion"] == "meta.k8s.io/v1"
    assert row["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    assert "spec" not in row["object"]
    bare = await call(kube, "GET", f"{claims}?includeObject=None", accept=AS_TABLE)
    assert bare["rows"][0]["object"] is None
    whole = await call(kube, "GET", f"{claims}?includeObject=Object", accept=AS_TABLE)
    assert whole["rows"][0]["object"]["kind"] == "DataSourceClaim"
    assert whole["rows"][0]["object"]["spec"]["system"] == "amoro"
    for refused in (claims, f"{claims}/clicks", f"{claims}?watch=true&timeoutSeconds=1"):
        with pytest.raises(Refused) as bad:
            await call(kube, "GET", f"{refused}{'&' if '?' in refused else '?'}includeObject=Everything",
                       accept=AS_TABLE)
        assert bad.value.status == 400
        assert bad.value.message == ("Unable to convert to Table as requested: includeObject: Invalid value: "
                                     "\"Everything\": must be 'Metadata', 'Object', 'None', or empty")
    plain = await call(kube, "GET", claims)  # without asking for a Table: the list
    assert plain["kind"] == "DataSourceClaimList"


async def test_a_data_source_read_as_a_table_prints_lists_as_json_and_integers_as_numbers(kube: KubeEnv,
                                                                                          tmp_path: Path) -> None:
    await own_crd(kube, tmp_path, "datasources")
    name = f"tether-test-table-{uuid.uuid4().hex[:8]}"
    source = {"apiVersion": f"{OWN_GROUP}/v1alpha1", "kind": "DataSource", "metadata": {"name": name},
              "spec": {"system": "amoro", "type": "table", "name": "prod.events.clicks", "reclaimPolicy": "Retain",
                       "locality": {"clusterNames": ["member1", "member2"]}}}
    path = f"{GROUP}/datasources/{name}"
    await call(kube, "POST", f"{GROUP}/datasources", body=source)
    try:
        patched = await call(kube, "PATCH", f"{path}/status", body={"status": {"boundClaims": 3}},
                             content_type="application/merge-patch+json")
        printed = await call(kube, "GET", path, accept=AS_TABLE)
        assert printed["kind"] == "Table"
        assert printed["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
        assert [c["name"] for c in printed["columnDefinitions"]] == ["Name", "System", "Name", "Clusters", "Claims",
                                                                     "Age"]
        assert printed["columnDefinitions"][-1]["description"] == "Time since the object was created."
        [row] = printed["rows"]
        assert row["cells"][:5] == [name, "amoro", "prod.events.clicks", '["member1","member2"]', 3]
        assert AGE.match(row["cells"][5])
    finally:
        await call(kube, "DELETE", path)


async def test_a_watch_read_as_a_table_sends_the_columns_with_its_first_event_only(kube: KubeEnv,
                                                                                  tmp_path: Path) -> None:
    await own_crd(kube, tmp_path, "datasourceclaims")
    claims = f"{GROUP}/namespaces/{kube.namespace}/datasourceclaims"
    for name in ("first", "second"):
        await call(kube, "POST", claims, body=claim(name))
    events = await call(kube, "GET", f"{claims}?watch=true&timeoutSeconds=2", accept=AS_TABLE)
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]
    assert [e["object"]["kind"] for e in events] == ["Table", "Table"]
    assert [c["name"] for c in events[0]["object"]["columnDefinitions"]][:2] == ["Name", "Phase"]
    assert events[1]["object"]["columnDefinitions"] is None
    assert sorted(e["object"]["rows"][0]["cells"][0] for e in events) == ["first", "second"]


def _ago(now: datetime, seconds: int, *, micro: bool = False) -> str:
    return (now - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


async def test_events_are_printed_with_the_columns_kubectl_get_events_shows(kube: KubeEnv) -> None:
    """``kubectl get events``: a real server prints an Event's last and first sighting, type, reason, object and
    message (and, for ``-o wide``, at priority 1, its subobject, source, count and name), from the core API's times
    and count, or from an events.k8s.io-style event's ``eventTime`` and ``series``."""
    now = datetime.now(UTC)
    events = f"/api/v1/namespaces/{kube.namespace}/events"
    await call(kube, "POST", events, body={
        "metadata": {"name": "bound"}, "type": "Normal", "reason": "Bound", "message": "  bound to its DataSource \n",
        "involvedObject": {"kind": "DataSourceClaim", "namespace": kube.namespace, "name": "clicks",
                           "fieldPath": "spec"},
        "source": {"component": "tether", "host": "replica-0"}, "count": 3,
        "firstTimestamp": _ago(now, 50 * 3600 + 10), "lastTimestamp": _ago(now, 5 * 3600 + 10)})
    await call(kube, "POST", events, body={
        "metadata": {"name": "series"}, "type": "Warning", "reason": "Unreachable", "message": "catalog",
        "involvedObject": {"kind": "Cluster", "namespace": kube.namespace},
        "reportingComponent": "tether", "reportingInstance": "replica-1", "action": "Lookup",
        "eventTime": _ago(now, 600 + 10, micro=True),
        "series": {"count": 7, "lastObservedTime": _ago(now, 130 + 10, micro=True)}})
    await call(kube, "POST", events, body={
        "metadata": {"name": "bare"}, "reason": "Noted", "message": "m",
        "involvedObject": {"kind": "Pod", "namespace": kube.namespace, "name": "p"}})
    listed = await call(kube, "GET", events, accept=AS_TABLE)
    assert [(c["name"], c["type"], c["format"], c["priority"]) for c in listed["columnDefinitions"]] == [
        ("Last Seen", "string", "", 0), ("Type", "string", "", 0), ("Reason", "string", "", 0),
        ("Object", "string", "", 0), ("Subobject", "string", "", 1), ("Source", "string", "", 1),
        ("Message", "string", "", 0), ("First Seen", "string", "", 1), ("Count", "string", "", 1),
        ("Name", "string", "name", 1)]
    rows = {row["cells"][-1]: row for row in listed["rows"]}
    assert rows["bound"]["cells"] == ["5h", "Normal", "Bound", "datasourceclaim/clicks", "spec", "tether, replica-0",
                                      "bound to its DataSource", "2d2h", 3, "bound"]
    assert rows["series"]["cells"] == ["2m20s", "Warning", "Unreachable", "cluster", "", "tether, replica-1",
                                       "catalog", "10m", 7, "series"]
    assert rows["bare"]["cells"] == ["<unknown>", "", "Noted", "pod/p", "", "", "m", "<unknown>", 1, "bare"]
    assert rows["bare"]["object"]["kind"] == "PartialObjectMetadata"
    one = await call(kube, "GET", f"{events}/bound?includeObject=Object", accept=AS_TABLE)
    [row] = one["rows"]
    assert (row["object"]["kind"], row["object"]["apiVersion"], row["object"]["reason"]) == ("Event", "v1", "Bound")
    assert one["metadata"]["resourceVersion"] == row["object"]["metadata"]["resourceVersion"]


async def test_leases_configmaps_and_namespaces_print_their_holder_keys_and_status(kube: KubeEnv) -> None:
    """What an operator of tether reads with ``kubectl get``: which replica holds the leader Lease, how many keys a
    plugin ConfigMap has (``data`` and ``binaryData``), and whether a namespace is Active. A built-in kind's Age is a
    string column (a custom resource's is a date)."""
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{kube.namespace}/leases"
    await call(kube, "POST", leases, body={"metadata": {"name": "held"}, "spec": {"holderIdentity": "tether-0"}})
    await call(kube, "POST", leases, body={"metadata": {"name": "free"}, "spec": {}})
    printed = await call(kube, "GET", leases, accept=AS_TABLE)
    assert [(c["name"], c["type"], c["format"]) for c in printed["columnDefinitions"]] == [
        ("Name", "string", "name"), ("Holder", "string", ""), ("Age", "string", "")]
    cells = sorted(row["cells"] for row in printed["rows"])
    assert [c[:2] for c in cells] == [["free", ""], ["held", "tether-0"]]
    assert all(AGE.match(c[2]) for c in cells), cells
    configmaps = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    await call(kube, "POST", configmaps, body={"metadata": {"name": "plugins"}, "data": {"a": "1", "b": "2"},
                                               "binaryData": {"c": "AA=="}})
    printed = await call(kube, "GET", f"{configmaps}/plugins", accept=AS_TABLE)
    assert [c["name"] for c in printed["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert printed["rows"][0]["cells"][:2] == ["plugins", 3]
    whole = await call(kube, "GET", f"{configmaps}?includeObject=Object", accept=AS_TABLE)
    [row] = [r for r in whole["rows"] if r["cells"][0] == "plugins"]
    assert (row["object"]["kind"], row["object"]["apiVersion"], row["object"]["data"]) == \
        ("ConfigMap", "v1", {"a": "1", "b": "2"})
    printed = await call(kube, "GET", f"/api/v1/namespaces/{kube.namespace}", accept=AS_TABLE)
    assert [c["name"] for c in printed["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert printed["rows"][0]["cells"][:2] == [kube.namespace, "Active"]


#: A scheduler nobody runs: the pods below keep the status the test writes.
UNSCHEDULED = "tether-test-unscheduled"


async def test_pods_print_their_readiness_status_and_restarts(kube: KubeEnv) -> None:
    """``kubectl get pods`` in a member: READY, STATUS (gated at tether's scheduling gate, initializing, crashing,
    running, completed), RESTARTS with the last restart's age, and, at priority 1, IP, NODE, NOMINATED NODE and
    READINESS GATES; a finished pod's row is Completed."""
    now = datetime.now(UTC)
    pods = f"/api/v1/namespaces/{kube.namespace}/pods"
    container = {"name": "c", "image": "registry.invalid/train:1"}
    statuses: dict[str, dict[str, Any]] = {
        "gated": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
        "initializing": {"initContainerStatuses": [
            {"name": "fetch", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "warm", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
             "state": {"waiting": {"reason": "PodInitializing"}}}]},
        "crashing": {"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": False, "restartCount": 3, "image": "x", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": _ago(now, 5 * 3600 + 10)}}}]},
        "running": {"phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}],
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "tether.io/placed", "status": "True"}],
                    "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
                                           "state": {"running": {"startedAt": _ago(now, 60)}}}]},
        "done": {"phase": "Succeeded", "containerStatuses": [
            {"name": "c", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
    }
    for name, status in statuses.items():
        spec: dict[str, Any] = {"schedulerName": UNSCHEDULED, "containers": [container]}
        if name == "initializing":
            spec["initContainers"] = [{"name": "fetch", "image": "x"}, {"name": "warm", "image": "x"}]
        if name == "running":
            spec["readinessGates"] = [{"conditionType": "tether.io/placed"}, {"conditionType": "tether.io/other"}]
        created = await call(kube, "POST", pods, body={"metadata": {"name": name}, "spec": spec})
        await call(kube, "PUT", f"{pods}/{name}/status", body={**created, "status": status})
    listed = await call(kube, "GET", pods, accept=AS_TABLE)
    assert [(c["name"], c["type"], c["priority"]) for c in listed["columnDefinitions"]] == [
        ("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0),
        ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1)]
    rows = {row["cells"][0]: row for row in listed["rows"]}
    cells = {name: row["cells"][1:4] + row["cells"][5:] for name, row in rows.items()}
    assert cells == {
        "gated": ["0/1", "SchedulingGated", "0", "<none>", "<none>", "<none>", "<none>"],
        "initializing": ["0/1", "Init:1/2", "0", "<none>", "<none>", "<none>", "<none>"],
        "crashing": ["0/1", "CrashLoopBackOff", "3 (5h ago)", "<none>", "<none>", "<none>", "<none>"],
        "running": ["1/1", "Running", "0", "10.0.0.7", "<none>", "<none>", "1/2"],
        "done": ["0/1", "Completed", "0", "<none>", "<none>", "<none>", "<none>"]}
    assert rows["done"]["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                           "message": "The pod has completed successfully."}]
    assert "conditions" not in rows["running"]


async def test_nodes_print_their_readiness_roles_and_kubelet(kube: KubeEnv) -> None:
    """``kubectl get nodes`` in a member: STATUS from the Ready condition (and SchedulingDisabled when cordoned),
    ROLES from the role labels, the kubelet's VERSION, and the addresses and system info at priority 1."""
    name = await kube.create_node("tether-test-printed", labels={"node-role.kubernetes.io/worker": "",
                                                                "kubernetes.io/role": "gpu"})
    await call(kube, "PATCH", f"/api/v1/nodes/{name}", body={"spec": {"unschedulable": True}},
               content_type="application/merge-patch+json")
    await call(kube, "PATCH", f"/api/v1/nodes/{name}/status", content_type="application/merge-patch+json",
               body={"status": {"nodeInfo": {"kubeletVersion": "v1.28.0", "osImage": "", "kernelVersion": "6.1",
                                             "containerRuntimeVersion": "", "machineID": "", "systemUUID": "",
                                             "bootID": "", "kubeProxyVersion": "", "operatingSystem": "linux",
                                             "architecture": "amd64"},
                                "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}})
    printed = await call(kube, "GET", f"/api/v1/nodes/{name}", accept=AS_TABLE)
    assert [(c["name"], c["priority"]) for c in printed["columnDefinitions"]] == [
        ("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Internal-IP", 1), ("External-IP", 1),
        ("OS-Image", 1), ("Kernel-Version", 1), ("Container-Runtime", 1)]
    [row] = printed["rows"]
    assert row["cells"][:3] == [name, "Ready,SchedulingDisabled", "gpu,worker"]
    assert row["cells"][4:] == ["v1.28.0", "10.0.0.9", "<none>", "<unknown>", "6.1", "<unknown>"]


async def test_deployments_and_jobs_print_their_replicas_completions_and_templates(kube: KubeEnv) -> None:
    """``kubectl get deployments`` (the workloads tether places: READY, UP-TO-DATE, AVAILABLE; the template's
    containers, images and selector at priority 1) and ``kubectl get jobs`` (COMPLETIONS, DURATION). Both are
    created idle (a paused Deployment, a suspended Job), so that a real cluster's controllers leave them as they are."""
    labels = {"app": "train", "tier": "a", "gpu": "1"}
    containers = [{"name": "train", "image": "registry.invalid/train:1"},
                  {"name": "fetch", "image": "registry.invalid/fetch:2"}]
    template = {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": containers}}
    deployments = f"/apis/apps/v1/namespaces/{kube.namespace}/deployments"
    await call(kube, "POST", deployments, body={
        "metadata": {"name": "train"}, "spec": {
            "replicas": 2, "paused": True,
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
            "selector": {"matchLabels": {"app": "train"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]}, {"key": "gpu", "operator": "Exists"}]}}})
    printed = await call(kube, "GET", deployments, accept=AS_TABLE)
    assert [(c["name"], c["priority"]) for c in printed["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Up-to-date", 0), ("Available", 0), ("Age", 0), ("Containers", 1), ("Images", 1),
        ("Selector", 1)]
    [row] = printed["rows"]
    assert row["cells"][:4] == ["train", "0/2", 0, 0]
    assert row["cells"][5:] == ["train,fetch", "registry.invalid/train:1,registry.invalid/fetch:2",
                                "app=train,gpu,tier in (a,b)"]
    jobs = f"/apis/batch/v1/namespaces/{kube.namespace}/jobs"
    await call(kube, "POST", jobs, body={"metadata": {"name": "etl"},
                                         "spec": {"suspend": True, "parallelism": 3, "template": template}})
    printed = await call(kube, "GET", f"{jobs}/etl", accept=AS_TABLE)
    assert [(c["name"], c["priority"]) for c in printed["columnDefinitions"]] == [
        ("Name", 0), ("Completions", 0), ("Duration", 0), ("Age", 0), ("Containers", 1), ("Images", 1),
        ("Selector", 1)]
    [row] = printed["rows"]
    assert row["cells"][:3] == ["etl", "0/1 of 3", ""]  # (not started: no duration)
    assert row["cells"][4:6] == ["train,fetch", "registry.invalid/train:1,registry.invalid/fetch:2"]


@pytest.mark.parametrize(("selector", "printed"), [
    (None, ""), ({}, ""), ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
    ({"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["y", "x", "y"]},
                           {"key": "m", "operator": "DoesNotExist"}]}, "!m,z notin (x,y)"),
])
def test_a_label_selector_is_written_as_apimachinery_writes_it(selector: Any, printed: str) -> None:
    assert label_selector(selector) == printed


@pytest.mark.parametrize("bad", [{"key": "a", "operator": "In", "values": []},
                                 {"key": "a", "operator": "Exists", "values": ["x"]},
                                 {"key": "a", "operator": "Matches", "values": ["x"]}])
def test_a_selector_that_does_not_parse_is_printed_invalid(bad: dict[str, Any]) -> None:
    """A Deployment's selector cell is ``<invalid>``, a Job's ``<error>``, as ``printDeployment`` and
    ``FormatLabelSelector`` print one ``LabelSelectorAsSelector`` refuses."""
    with pytest.raises(ValueError):
        label_selector({"matchExpressions": [bad]})
    kinds = {kind: ResourceType(group=group, versions=["v1"], plural=f"{kind.lower()}s", singular=kind.lower(),
                                kind=kind, namespaced=True)
             for group, kind in (("apps", "Deployment"), ("batch", "Job"))}
    for kind, expected in (("Deployment", "<invalid>"), ("Job", "<error>")):
        obj = {"metadata": {"name": "x"}, "spec": {"selector": {"matchExpressions": [bad]}}}
        [row] = table(kinds[kind], "v1", [obj], metadata={}, table_api="v1", include_object="None")["rows"]
        assert row["cells"][-1] == expected


def test_a_finished_job_s_duration_runs_from_its_start_to_its_completion() -> None:
    jobs = ResourceType(group="batch", versions=["v1"], plural="jobs", singular="job", kind="Job", namespaced=True)
    job = {"metadata": {"name": "etl"}, "spec": {"completions": 4},
           "status": {"succeeded": 4, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:12:00Z"}}
    [row] = table(jobs, "v1", [job], metadata={}, table_api="v1", include_object="None",
                  now=datetime(2026, 6, 1, tzinfo=UTC))["rows"]
    assert row["cells"][1:3] == ["4/4", "12m"]
    assert row["cells"][-1] == "<none>"  # (no selector)


@pytest.mark.parametrize(("seconds", "printed"), [
    (-2.5, "<invalid>"), (-1.5, "0s"), (0, "0s"), (119.9, "119s"), (120, "2m"), (130, "2m10s"), (600, "10m"),
    (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 180, "3h3m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
    (48 * 3600, "2d"), (50 * 3600, "2d2h"), (8 * 86400, "8d"), (2 * 365 * 86400, "2y"),
    ((2 * 365 + 1) * 86400, "2y1d"), (8 * 365 * 86400, "8y"),
])
def test_ages_read_as_kubernetes_prints_them(seconds: float, printed: str) -> None:
    """apimachinery's HumanDuration, at each of its boundaries."""
    assert human_duration(seconds) == printed


@pytest.mark.parametrize(("path", "expected"), [
    ('.status.conditions[?(@.type=="Scheduled")].status', "True"),
    (".status.conditions[?(@.type=='FullyApplied')].status", "False"),
    ('.status.conditions[?(@.type=="Missing")].status', None),
    (".status.conditions[1].reason", "Pending"),
    (".metadata.labels['app.kubernetes.io/name']", "train"),
    (".spec.clusters", '[{"name":"member1","replicas":2}]'),
    (".spec.nothing.here", None),
])
def test_a_string_column_reads_simple_paths_and_condition_filters(path: str, expected: str | None) -> None:
    """The JSONPaths printer columns use, Karmada's condition filters included (``[?(@.type=="Scheduled")]``)."""
    binding = {"metadata": {"name": "b", "labels": {"app.kubernetes.io/name": "train"}},
               "spec": {"clusters": [{"replicas": 2, "name": "member1"}]},
               "status": {"conditions": [{"type": "Scheduled", "status": "True"},
                                         {"type": "FullyApplied", "status": "False", "reason": "Pending"}]}}
    assert cell({"name": "c", "type": "string", "jsonPath": path}, binding, datetime.now(UTC)) == expected


def test_a_crd_without_printer_columns_is_printed_with_name_and_age() -> None:
    """apiextensions' default columns (``serveDefaultColumnsIfEmpty``): Name, and Age from the creation time."""
    plain = ResourceType(group="example.tether.test", versions=["v1"], plural="things", singular="thing",
                         kind="Thing", namespaced=True, builtin=False)
    printed = table(plain, "v1", [{"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}}],
                    metadata={"resourceVersion": "7"}, table_api="v1", include_object="",
                    now=datetime(2026, 1, 1, 0, 5, 10, tzinfo=UTC))
    assert [(c["name"], c["type"], c["description"]) for c in printed["columnDefinitions"]] == [
        ("Name", "string", NAME_DESCRIPTION), ("Age", "date", AGE_DESCRIPTION)]
    assert printed["rows"][0]["cells"] == ["a", "5m10s"]
    assert printed["metadata"] == {"resourceVersion": "7"}


def _terminated(code: int, *, reason: str = "", signal: int = 0) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, **({"reason": reason} if reason else {}),
                           **({"signal": signal} if signal else {})}}


@pytest.mark.parametrize(("spec", "status", "metadata", "ready", "printed"), [
    # an init container that failed: its reason, else its signal, else its exit code
    ({"initContainers": [{"name": "i"}]},
     {"initContainerStatuses": [{"name": "i", "state": _terminated(1, reason="Error")}]}, {}, "0/1", "Init:Error"),
    ({"initContainers": [{"name": "i"}]}, {"initContainerStatuses": [{"name": "i", "state": _terminated(1, signal=9)}]},
     {}, "0/1", "Init:Signal:9"),
    ({"initContainers": [{"name": "i"}]}, {"initContainerStatuses": [{"name": "i", "state": _terminated(2)}]},
     {}, "0/1", "Init:ExitCode:2"),
    ({"initContainers": [{"name": "i"}]}, {"initContainerStatuses": [{"name": "i", "state": {"waiting": {
        "reason": "ImagePullBackOff"}}}]}, {}, "0/1", "Init:ImagePullBackOff"),
    # a sidecar (an init container that restarts Always) counts as a container, and is ready once started
    ({"initContainers": [{"name": "s", "restartPolicy": "Always"}]},
     {"phase": "Running", "initContainerStatuses": [{"name": "s", "started": True, "ready": True, "state": {
         "running": {}}}], "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}]},
     {}, "2/2", "Running"),
    # a container that finished without a reason: its signal, else its exit code
    ({}, {"phase": "Running", "containerStatuses": [{"name": "c", "state": _terminated(0, signal=15)}]}, {}, "0/1",
     "Signal:15"),
    ({}, {"phase": "Failed", "containerStatuses": [{"name": "c", "state": _terminated(137)}]}, {}, "0/1",
     "ExitCode:137"),
    # one container completed while another runs: Running if the pod is Ready, else NotReady
    ({"containers": [{"name": "a"}, {"name": "b"}]},
     {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
         {"name": "a", "state": _terminated(0, reason="Completed")}, {"name": "b", "ready": True, "state": {
             "running": {}}}]}, {}, "1/2", "Running"),
    ({"containers": [{"name": "a"}, {"name": "b"}]},
     {"phase": "Running", "containerStatuses": [
         {"name": "a", "state": _terminated(0, reason="Completed")}, {"name": "b", "ready": True, "state": {
             "running": {}}}]}, {}, "1/2", "NotReady"),
    # being deleted: Terminating, or Unknown when its node was lost
    ({}, {"phase": "Running"}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "0/1", "Terminating"),
    ({}, {"phase": "Running", "reason": "NodeLost"}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "0/1", "Unknown"),
    ({}, {"phase": "Failed", "reason": "Evicted"}, {}, "0/1", "Evicted"),
])
def test_a_pod_s_status_is_derived_as_kube_apiserver_derives_it(
        spec: dict[str, Any], status: dict[str, Any], metadata: dict[str, Any], ready: str, printed: str) -> None:
    """The branches of ``printPod`` (kube-apiserver 1.28) the conformance test above does not reach on a real
    server without a kubelet."""
    pods = ResourceType(group="", versions=["v1"], plural="pods", singular="pod", kind="Pod", namespaced=True)
    pod = {"metadata": {"name": "p", **metadata}, "spec": {"containers": [{"name": "c"}], **spec}, "status": status}
    [row] = table(pods, "v1", [pod], metadata={}, table_api="v1", include_object="None")["rows"]
    assert row["cells"][1:3] == [ready, printed]
