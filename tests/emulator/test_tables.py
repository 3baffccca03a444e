"""Conformance: objects read ``as=Table`` (``kubectl get``), on the emulator and on a real API server
(``TETHER_TEST_KUBECONFIG``): a CRD's printer columns, their cells, the row objects, a watch's events, and the
built-in kinds the emulator prints (Events, Leases, ConfigMaps, Namespaces).

Measured on kube-apiserver v1.28 (apiextensions' table convertor), and asserted here for both. tether's CRDs
declare Phase, DataSource, System, Table and Age for claims, and System, Name, Clusters (a list), Claims (an
integer) and Age for DataSources.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from tether.adapters.sandbox.kube_emulator.resources import ResourceType
from tether.adapters.sandbox.kube_emulator.tables import (
    AGE_DESCRIPTION,
    NAME_DESCRIPTION,
    cell,
    human_duration,
    table,
)
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv

pytestmark = pytest.mark.cluster

GROUP = "/apis/datadependency.volcano.sh/v1alpha1"
#: What kubectl get sends.
AS_TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io," \
           "application/json"
AGE = re.compile(r"^\d+s$")  # (just created)


def claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim",
            "metadata": {"name": name},
            "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "prod.events.clicks",
                     "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"}}}


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


async def test_claims_listed_as_a_table_have_the_crds_columns(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
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


async def test_a_data_source_read_as_a_table_prints_lists_as_json_and_integers_as_numbers(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasources")
    name = f"tether-test-table-{uuid.uuid4().hex[:8]}"
    source = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSource", "metadata": {"name": name},
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


async def test_a_watch_read_as_a_table_sends_the_columns_with_its_first_event_only(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
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
