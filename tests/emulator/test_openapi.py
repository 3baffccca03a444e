"""The emulator serves enough OpenAPI for ``kubectl apply`` to validate (adapters/sandbox/kube_emulator/openapi.py).

Without kubectl: the index and the documents say, for each kind, what kubectl looks for (a PATCH operation with the
kind and the ``fieldValidation`` parameter), the schemas are the CRDs', a new CRD shows up with a new hash, and a
write with ``fieldValidation=Strict`` naming an unknown field is refused as a real server refuses it. With kubectl
(``/usr/bin/kubectl``, or on PATH): ``kubectl apply`` of tether's sample claim works without ``--validate=false``
and refuses a misspelt field; ``kubectl explain`` reads the schema, and ``kubectl get`` prints the server's columns
(tables.py) — with each kubectl found (kubectl 1.28 also reads the v2 document, as protobuf, before anything else).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.crds import crd_dir
from tether.adapters.sandbox.kube_emulator.openapi import V2_PROTOBUF, V2_PROTOBUF_TYPE
from tether.adapters.testing.kubectl import KUBECTLS, kubectl, kubectl_binary

TETHER_CRDS = sorted(crd_dir().glob("datadependency.*.yaml"))
CLAIMS_GV = "apis/datadependency.volcano.sh/v1alpha1"
CLAIM = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim",
         "metadata": {"name": "clicks", "namespace": "default"},
         "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "prod.events.clicks",
                  "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"}}}


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def default_namespace(emulator: KubeEmulator) -> None:
    async with aiohttp.ClientSession(emulator.url) as http, http.post(
            "/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    ) as created:
        assert created.status == 201, await created.text()


def server_validates(document: dict[str, Any], group: str, version: str, kind: str) -> bool:
    """kubectl's question (its queryParamVerifierV3): does the PATCH operation of this kind take fieldValidation?"""
    for item in document["paths"].values():
        operation = item.get("patch")
        if operation and operation.get("x-kubernetes-group-version-kind") == {"group": group, "version": version,
                                                                              "kind": kind}:
            return any(p["name"] == "fieldValidation" and p["in"] == "query" for p in operation["parameters"])
    return False


async def test_the_served_documents_answer_what_kubectl_asks() -> None:
    async with KubeEmulator(crds=TETHER_CRDS) as emulator, aiohttp.ClientSession() as http:
        index = (await get(http, f"{emulator.url}/openapi/v3"))["paths"]
        assert {"api/v1", "apis/apps/v1", CLAIMS_GV, "apis/apiextensions.k8s.io/v1"} <= set(index)
        claims_doc = await get(http, emulator.url + index[CLAIMS_GV]["serverRelativeURL"])
        core_doc = await get(http, emulator.url + index["api/v1"]["serverRelativeURL"])
        assert claims_doc["openapi"].startswith("3.")
        for kind in ("DataSourceClaim", "DataSource"):
            assert server_validates(claims_doc, "datadependency.volcano.sh", "v1alpha1", kind)
        for kind in ("Namespace", "ConfigMap", "Pod"):
            assert server_validates(core_doc, "", "v1", kind)
        assert not server_validates(claims_doc, "datadependency.volcano.sh", "v1alpha1", "Deployment")

        schema = claims_doc["components"]["schemas"]["sh.volcano.datadependency.v1alpha1.DataSourceClaim"]
        assert schema["x-kubernetes-group-version-kind"] == [
            {"group": "datadependency.volcano.sh", "version": "v1alpha1", "kind": "DataSourceClaim"}]
        assert {"system", "dataSourceName", "workload"} <= set(schema["properties"]["spec"]["properties"])
        assert "/apis/datadependency.volcano.sh/v1alpha1/namespaces/{namespace}/datasourceclaims/{name}" \
            in claims_doc["paths"]
        assert "/apis/datadependency.volcano.sh/v1alpha1/datasources/{name}" in claims_doc["paths"]

        # a CRD registered later: its group version appears, the others keep their document and hash
        await emulator.register_crds("scheduling.volcano.sh_queues")
        later = (await get(http, f"{emulator.url}/openapi/v3"))["paths"]
        assert "apis/scheduling.volcano.sh/v1beta1" in later and later[CLAIMS_GV] == index[CLAIMS_GV]
        queues_doc = await get(http, emulator.url + later["apis/scheduling.volcano.sh/v1beta1"]["serverRelativeURL"])
        assert server_validates(queues_doc, "scheduling.volcano.sh", "v1beta1", "Queue")
        async with http.get(f"{emulator.url}/openapi/v3/apis/nothing.example.com/v1") as missing:
            assert missing.status == 404 and (await missing.json())["reason"] == "NotFound"


async def test_strict_field_validation_refuses_unknown_fields() -> None:
    misspelt = {**CLAIM, "spec": {**CLAIM["spec"], "tabel": "x"}}
    claims = "/apis/datadependency.volcano.sh/v1alpha1/namespaces/default/datasourceclaims"
    async with KubeEmulator(crds=TETHER_CRDS) as emulator, aiohttp.ClientSession(emulator.url) as http:
        await default_namespace(emulator)
        async with http.post(f"{claims}?fieldValidation=Strict", json=misspelt) as refused:
            assert refused.status == 400
            status = await refused.json()
        assert status["reason"] == "BadRequest"
        assert status["message"] == ('DataSourceClaim in version "v1alpha1" cannot be handled as a DataSourceClaim: '
                                     'strict decoding error: unknown field "spec.tabel"')
        async with http.post(f"{claims}?fieldValidation=Strict", json=CLAIM) as created:
            assert created.status == 201
        patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"tabel": "x"}}
        async with http.patch(f"{claims}/clicks?fieldValidation=Strict", json=patch,
                              headers={"Content-Type": "application/merge-patch+json"}) as refused_patch:
            assert refused_patch.status == 400
            assert 'unknown field "spec.tabel"' in (await refused_patch.json())["message"]
        # without Strict (Ignore, or an older client): pruned, as a real server does
        async with http.post(claims, json={**misspelt, "metadata": {"name": "other"}}) as pruned:
            assert pruned.status == 201
            assert "tabel" not in (await pruned.json())["spec"]


@pytest.mark.parametrize("binary", KUBECTLS or [None])
async def test_kubectl_apply_explain_and_get_work_against_the_emulator(tmp_path: Path, binary: str | None) -> None:
    kubectl_binary(binary)
    import yaml

    good, bad = tmp_path / "claim.yaml", tmp_path / "misspelt.yaml"
    good.write_text(yaml.safe_dump(CLAIM))
    bad.write_text(yaml.safe_dump({**CLAIM, "metadata": {"name": "misspelt", "namespace": "default"},
                                   "spec": {**CLAIM["spec"], "tabel": "x"}}))
    async with KubeEmulator(crds=TETHER_CRDS) as emulator:
        await default_namespace(emulator)
        config, cache = emulator.kubeconfig_path(tmp_path / "kube"), tmp_path / "cache"  # (a new directory)
        code, out = await kubectl("apply", "-f", str(good), kubeconfig=config, cache=cache, binary=binary)
        assert code == 0 and "datasourceclaim.datadependency.volcano.sh/clicks created" in out, out
        assert "validate" not in out
        code, out = await kubectl("apply", "-f", str(bad), kubeconfig=config, cache=cache, binary=binary)
        assert code == 1 and 'strict decoding error: unknown field "spec.tabel"' in out, out
        # a patch, validated
        code, out = await kubectl("apply", "-f", str(good), kubeconfig=config, cache=cache, binary=binary)
        assert code == 0 and "unchanged" in out, out
        code, out = await kubectl("explain", "datasourceclaims.spec.workload", kubeconfig=config, cache=cache,
                                  binary=binary)
        assert code == 0 and "KIND:       DataSourceClaim" in out and "apiVersion" in out, out
        assert emulator.store.get_obj(("datadependency.volcano.sh", "datasourceclaims"), "default",
                                      "misspelt") is None
        # kubectl get prints the columns the server chose (tables.py): the CRD's, and an Event's own
        code, out = await kubectl("get", "datasourceclaims", kubeconfig=config, cache=cache, binary=binary)
        assert code == 0 and out.split("\n")[0].split() == ["NAME", "PHASE", "DATASOURCE", "SYSTEM", "TABLE", "AGE"]
        assert out.split("\n")[1].split()[:1] == ["clicks"], out
        await emulator.apply({"apiVersion": "v1", "kind": "Event",
                              "metadata": {"name": "clicks.1", "namespace": "default"},
                              "involvedObject": {"kind": "DataSourceClaim", "namespace": "default", "name": "clicks"},
                              "type": "Warning", "reason": "CatalogUnreachable", "message": "prod.events.clicks: 503",
                              "lastTimestamp": "2026-01-01T00:00:00Z"})
        code, out = await kubectl("get", "events", kubeconfig=config, cache=cache, binary=binary)
        header, row = out.split("\n")[:2]
        assert code == 0 and header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], out
        assert row.split()[1:] == ["Warning", "CatalogUnreachable", "datasourceclaim/clicks", "prod.events.clicks:",
                                   "503"], out


def protobuf_fields(data: bytes) -> dict[int, list[bytes]]:
    """The length-delimited fields of a protobuf message, by number (the only wire type the v2 document's strings
    and messages use); fails on any other."""
    fields: dict[int, list[bytes]] = {}
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while at < len(data):
        key = varint()
        assert key & 7 == 2, f"wire type {key & 7}"
        length = varint()
        fields.setdefault(key >> 3, []).append(data[at:at + length])
        at += length
    assert at == len(data)
    return fields


async def test_the_v2_document_is_served_as_protobuf_to_whoever_asks_for_it() -> None:
    """What client-go's OpenAPISchema asks for and parses: gnostic's Document (swagger = 1, info = 2; Info's title
    = 1, version = 2), with the Content-Type a real server answers; JSON to anyone else."""
    async with KubeEmulator(crds=TETHER_CRDS) as emulator, aiohttp.ClientSession() as http:
        async with http.get(f"{emulator.url}/openapi/v2", headers={"Accept": V2_PROTOBUF}) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == V2_PROTOBUF_TYPE
            document = protobuf_fields(await response.read())
        assert document[1] == [b"2.0"]
        info = protobuf_fields(document[2][0])
        assert info[1][0].startswith(b"Kubernetes") and info[2][0].startswith(b"v1.")
        assert set(document) == {1, 2}  # no paths nor definitions (the module doc says why)
        as_json = await get(http, f"{emulator.url}/openapi/v2")
        assert as_json["swagger"] == "2.0" and as_json["info"]["version"] == info[2][0].decode()


async def test_the_standalone_emulator_starts_with_a_real_servers_namespaces(tmp_path: Path) -> None:
    """``python -m tether.adapters.sandbox.kube_emulator`` (for kubectl, and tether run as a process) has what a
    real API server has from the start: ``default``, its kubeconfig's namespace (``kubectl create deployment`` works
    at once), and the three system namespaces."""
    import yaml

    from tether.adapters.testing.chaos import emulator_process

    async with emulator_process(tmp_path / "emulator") as kubeconfig:
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["contexts"][0]["context"]["namespace"] == "default"
        server = config["clusters"][0]["cluster"]["server"]
        async with aiohttp.ClientSession() as http:
            listed = await get(http, f"{server}/api/v1/namespaces")
        assert {n["metadata"]["name"]: n["status"]["phase"] for n in listed["items"]} == {
            "default": "Active", "kube-system": "Active", "kube-public": "Active", "kube-node-lease": "Active"}
