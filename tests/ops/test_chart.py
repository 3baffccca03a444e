"""tether's Helm chart (``ops/chart``), rendered by a real Helm engine (Helm's Go SDK, ``helm-python-sdk``) with its
default values and with non-default ones, and every rendered object validated:

* against the Kubernetes API's schemas — the OpenAPI-generated models of kubernetes-asyncio: every field known to
  the kind (a typo is an error, as ``kubectl apply --validate=strict`` would say), of its type, the required ones
  present; CRD kinds (cert-manager, Prometheus Operator) by their required fields;
* against each other — selectors match the labels they select, every mount has its volume, the probes' ports
  exist, Services reach the ports they name, the leader-only Services are the ones the daemon writes EndpointSlices
  for, the webhook configuration names the webhook Service, hooks run in order;
* against tether itself — every flag in the StatefulSet exists in ``tether run --help``;
* and ``helm lint`` finds no error. ``ops/deploy`` is the default rendering (``ops/chart/render.py --check``).

The RBAC the chart puts on Karmada's API server is checked against the API calls in the code by
``tests/ops/test_manifests.py`` (which renders the chart with every feature on).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes_asyncio import client as k8s

from tether.adapters.cli.run import run_cmd
from tether.adapters.kubernetes.leader_endpoints import slice_name
from tether.core.plugin_config import parse_plugin_configmap

ROOT = Path(__file__).resolve().parents[2]
RENDER = ROOT / "ops" / "chart" / "render.py"


def _load_renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_chart_render", RENDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


chart = _load_renderer()

SAMPLE_PLUGIN = chart.EXAMPLE_PLUGIN

#: Every feature on (the RBAC test in test_manifests.py renders this one too).
EVERYTHING: dict[str, Any] = {
    "push": {"enabled": True},
    "webhooks": {"binding": {"enabled": True, "maxHold": "5m"}, "pod": {"enabled": True},
                 "service": {"type": "LoadBalancer"},
                 "certificates": {"certManager": {"dnsNames": ["tether.example.com"]}}},
    "admission": {"enabled": True, "volcanoJobs": True},
    "members": {"fromKarmada": True, "kubeconfigs": [{"name": "member1", "secretName": "tether-member1"}]},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "networkPolicy": {"enabled": True, "webhookFrom": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "karmada-system"}}}]},
    "pluginConfig": {"create": True, "plugins": {"amoro": SAMPLE_PLUGIN}},
    "karmada": {"extraSubjects": [{"kind": "User", "name": "tether", "apiGroup": "rbac.authorization.k8s.io"}]},
    "refreshInterval": "60", "watchNamespace": "ml", "extraArgs": ["--console-logs"],
}

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": EVERYTHING,
    # Kafka, one replica without a Lease, self-signed binding webhook (the release in karmada.namespace)
    "kafka-single-selfsigned": {"replicas": 1, "leaderElection": {"enabled": False},
                                "log": {"type": "kafka", "kafka": {"url": "kafka://kafka.kafka.svc:9092/tether"}},
                                "webhooks": {"binding": {"enabled": True, "failurePolicy": "Ignore"},
                                             "certificates": {"mode": "selfSigned"}},
                                "podDisruptionBudget": {"enabled": False}},
    # an operator's own certificate and CA, a webhook reached by URL, an admin kubeconfig for the setup Job
    "own-certificate": {"webhooks": {"binding": {"enabled": True, "url": "https://tether.example.com/mutate/rb"},
                                     "certificates": {"mode": "secret", "secretName": "my-tls", "caBundle": "Q0E="}},
                        "karmada": {"setup": {"kubeconfigSecret": {"name": "karmada-admin", "key": "config"}}},
                        "log": {"sqlite": {"persistence": {"enabled": False}}}},
    "print": {"karmada": {"setup": {"mode": "print"}}, "admission": {"enabled": True}},
}


@functools.cache
def rendered(case: str) -> dict[str, str]:
    return dict(chart.render(CASES[case]))


def host_objects(case: str) -> list[dict[str, Any]]:
    """What the release creates in the host cluster (hooks included; Karmada's objects excluded)."""
    return chart.objects({p: t for p, t in rendered(case).items() if p != chart.KARMADA_TEMPLATE})


def karmada_side(case: str) -> list[dict[str, Any]]:
    """What goes on Karmada's API server: the setup Job's ConfigMap, or the print mode's output."""
    if CASES[case].get("karmada", {}).get("setup", {}).get("mode") == "print":
        return chart.objects({chart.KARMADA_TEMPLATE: rendered(case)[chart.KARMADA_TEMPLATE]})
    setup = one(host_objects(case), "ConfigMap", "tether-karmada-setup")
    return [d for d in yaml.safe_load_all(setup["data"]["objects.yaml"]) if d]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


# ------------------------------------------------------------------------------- Kubernetes schema validation

_PRIMITIVES = {"str": str, "int": int, "float": (int, float), "bool": bool, "datetime": str, "date": str}
_GROUP_PREFIX = {"": "V1", "apps": "V1", "batch": "V1", "policy": "V1", "rbac.authorization.k8s.io": "V1",
                 "networking.k8s.io": "V1", "admissionregistration.k8s.io": "V1", "apiextensions.k8s.io": "V1",
                 "discovery.k8s.io": "V1", "coordination.k8s.io": "V1"}
#: Kinds of CRDs the chart uses: no model in the client; their required fields (their CRDs' schemas).
_CRD_REQUIRED = {("cert-manager.io", "Issuer"): ["spec"],
                 ("cert-manager.io", "Certificate"): ["spec.secretName", "spec.issuerRef.name"],
                 ("monitoring.coreos.com", "ServiceMonitor"): ["spec.selector", "spec.endpoints"]}


@functools.cache
def _required(model: type) -> frozenset[str]:
    """The attributes whose setter refuses None: the schema's required fields."""
    out = set()
    for attr in model.openapi_types:
        setter = getattr(model, attr).fset
        if setter is not None and "must not be `None`" in inspect.getsource(setter):
            out.add(attr)
    return frozenset(out)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    group, _, version = api_version.rpartition("/")
    if (group, kind) in _CRD_REQUIRED:
        errors = []
        for path in ["metadata.name", *_CRD_REQUIRED[(group, kind)]]:
            node: Any = obj
            for part in path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node in (None, "", [], {}):
                errors.append(f"{kind}: {path} is required")
        return errors
    if group not in _GROUP_PREFIX or version != "v1":
        return [f"{api_version} {kind}: not a kind this chart should make"]
    model = getattr(k8s, f"V1{kind}", None)
    if model is None:
        return [f"{api_version} {kind}: no such kind"]
    errors: list[str] = []
    _walk(obj, model, kind, errors)
    return errors


def _walk(value: Any, type_name: Any, path: str, errors: list[str]) -> None:
    if isinstance(type_name, type):
        model = type_name
    elif type_name == "object":
        return  # int-or-string, raw extensions: anything
    elif type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (type_name in ("int", "float")
                                                                and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__} {value!r}")
        return
    elif type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(item, type_name[5:-1], f"{path}[{i}]", errors)
        return
    elif type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            _walk(item, inner, f"{path}.{key}", errors)
        return
    else:
        model = getattr(k8s, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({model.__name__})")
        return
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, item in value.items():
        attr = by_json.get(key)
        if attr is None:
            errors.append(f"{path}: unknown field {key!r} in {model.__name__}")
            continue
        if item is not None:
            _walk(item, model.openapi_types[attr], f"{path}.{key}", errors)
    for attr in _required(model):
        if value.get(model.attribute_map[attr]) is None:
            errors.append(f"{path}: {model.attribute_map[attr]} is required in {model.__name__}")


def test_the_validator_catches_what_the_api_server_refuses() -> None:
    ok = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
          "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
    assert schema_errors(ok) == []
    typo = {**ok, "spec": {"ports": [{"name": "http", "prot": 80}]}}
    assert any("unknown field 'prot'" in e for e in schema_errors(typo))
    assert any("port is required" in e for e in schema_errors(typo))
    wrong_type = {**ok, "spec": {"ports": [{"port": "80"}]}}
    assert any("expected int" in e for e in schema_errors(wrong_type))
    no_selector = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
                   "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    assert any("selector is required" in e for e in schema_errors(no_selector))
    assert schema_errors({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c"},
                          "spec": {"issuerRef": {}}}) == ["Certificate: spec.secretName is required",
                                                          "Certificate: spec.issuerRef.name is required"]


# ------------------------------------------------------------------------------------------------- the chart

@pytest.mark.parametrize("case", CASES)
def test_the_chart_renders_objects_the_api_servers_accept(case: str) -> None:
    everything = host_objects(case) + karmada_side(case)
    assert everything
    for obj in everything:
        errors = schema_errors(obj)
        assert not errors, f"{obj['kind']}/{obj['metadata'].get('name')}:\n" + "\n".join(errors)
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                               "MutatingWebhookConfiguration"):
            assert obj["metadata"].get("namespace"), f"{obj['kind']}/{obj['metadata']['name']}: no namespace"
    for side in (host_objects(case), karmada_side(case)):  # (two API servers: a name may exist on both)
        names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in side]
        assert len(names) == len(set(names)), "an object rendered twice"


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_finds_no_error(case: str) -> None:
    import helm_python as helm

    report = helm.lint(str(chart.CHART), CASES[case], namespace=chart.NAMESPACE, strict=False)
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 3], report


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("case", CASES)
def test_the_objects_hang_together(case: str) -> None:
    objects = host_objects(case)
    sts = one(objects, "StatefulSet", "tether")
    pod = sts["spec"]["template"]
    labels, spec = pod["metadata"]["labels"], pod["spec"]
    (container,) = spec["containers"]
    assert matches(sts["spec"]["selector"]["matchLabels"], labels)
    governing = one(objects, "Service", sts["spec"]["serviceName"])
    assert governing["spec"]["clusterIP"] == "None" and governing["spec"]["publishNotReadyAddresses"] is True
    # volumes: every mount has its volume (or claim template), every volume is mounted
    volumes = {v["name"] for v in spec["volumes"]} | {t["metadata"]["name"] for t in
                                                      sts["spec"].get("volumeClaimTemplates") or []}
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts == volumes, (mounts, volumes)
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/var/lib/tether", "/tmp", "/etc/tether/karmada"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Services: with a selector they select the pods and name container ports; without one, the leader writes
    # their EndpointSlice (--leader-service), whose port names are the daemon's: http, webhook
    args = container["args"]
    leader_services = {a.split("=", 1)[1] for a in args if a.startswith("--leader-service=")}
    for svc in (o for o in objects if o["kind"] == "Service"):
        selector = svc["spec"].get("selector")
        if selector:
            assert matches(selector, labels), svc["metadata"]["name"]
            for port in svc["spec"]["ports"]:
                assert port["targetPort"] in ports, (svc["metadata"]["name"], port)
        else:
            assert svc["metadata"]["name"] in leader_services
            assert {p["name"] for p in svc["spec"]["ports"]} <= {"http", "webhook"} and \
                {p["name"] for p in svc["spec"]["ports"]} <= set(ports)
    selectorless = {s["metadata"]["name"] for s in objects if s["kind"] == "Service" and not s["spec"].get("selector")}
    assert selectorless == leader_services
    if leader_services:  # the leader may write exactly those slices in the host cluster
        role = one(objects, "Role", "tether-leader-endpoints")
        named = next(r for r in role["rules"] if r.get("resourceNames"))
        assert set(named["resourceNames"]) == {slice_name(s) for s in leader_services}
        assert {"POD_IP", "POD_NAMESPACE", "POD_NAME"} <= {e["name"] for e in container["env"]}
        binding = one(objects, "RoleBinding", "tether-leader-endpoints")
        assert binding["subjects"][0]["name"] == spec["serviceAccountName"]
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for obj in (o for o in objects if o["kind"] == kind):
            selector = obj["spec"].get("selector") or obj["spec"].get("podSelector")
            assert matches(selector["matchLabels"], labels), kind
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        assert matches(monitor["spec"]["selector"]["matchLabels"], governing["metadata"]["labels"])
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in governing["spec"]["ports"]}
    # hooks: the manifests before the Job that applies them, each group in its own phase
    hooks = [o for o in objects if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    for phase in ("pre-install,pre-upgrade", "pre-delete"):
        group = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks
                 if o["metadata"]["annotations"]["helm.sh/hook"] == phase}
        if group:
            assert group["ConfigMap"] < group["Job"]
            job = next(o for o in hooks if o["kind"] == "Job" and o["metadata"]["annotations"]["helm.sh/hook"] == phase)
            cm = next(o for o in hooks if o["kind"] == "ConfigMap"
                      and o["metadata"]["annotations"]["helm.sh/hook"] == phase)
            assert {v["configMap"]["name"] for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v} \
                == {cm["metadata"]["name"]}


@functools.cache
def run_flags() -> dict[str, bool]:
    """``tether run``'s options → whether each takes a value; also checked to appear in ``--help``."""
    help_text = CliRunner().invoke(run_cmd, ["--help"], terminal_width=200).output
    flags: dict[str, bool] = {}
    for param in run_cmd.params:
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("--"):
                flags[opt] = not getattr(param, "is_flag", False)
                assert opt in help_text or opt in ("--help",), opt
    return flags


@pytest.mark.parametrize("case", CASES)
def test_every_flag_of_the_statefulset_exists_in_tether_run(case: str) -> None:
    sts = one(host_objects(case), "StatefulSet", "tether")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "run"
    flags = run_flags()
    for arg in args[1:]:
        name, has_value, _ = arg.partition("=")
        assert name in flags, f"{arg}: not an option of `tether run`"
        assert flags[name] == bool(has_value), f"{arg}: {'needs' if flags[name] else 'takes no'} value"
    for arg in args:  # every file the flags name is mounted
        for prefix in ("--kubeconfig=", "--webhook-cert-dir="):
            if arg.startswith(prefix):
                path = arg.removeprefix(prefix)
                assert any(path.startswith(m["mountPath"]) for m in container["volumeMounts"]), arg


def test_the_defaults_run_two_replicas_on_persistent_sqlite_with_a_lease() -> None:
    sts = one(host_objects("defaults"), "StatefulSet", "tether")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert sts["spec"]["replicas"] == 2 and "--leader-elect" in args
    assert "--log=sqlite:///var/lib/tether/tether.db" in args
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "log" and claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert not any(a.startswith(("--leader-service", "--binding-webhook")) for a in args)  # nothing leader-only on
    kinds = {o["kind"] for o in karmada_side("defaults")}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role"} <= kinds
    assert "MutatingWebhookConfiguration" not in kinds


def test_everything_on_wires_each_feature() -> None:
    objects = host_objects("everything")
    args = one(objects, "StatefulSet", "tether")["spec"]["template"]["spec"]["containers"][0]["args"]
    for flag in ("--binding-webhook", "--pod-webhook", "--admission", "--admission-volcano-jobs",
                 "--members-from-karmada", "--member=member1=/etc/tether/members/member1/kubeconfig",
                 "--webhook-inject-ca", "--leader-service=tether-push", "--leader-service=tether-webhook",
                 "--watch-namespace=ml", "--refresh-interval=60", "--console-logs", "--max-hold=5m"):
        assert flag in args, flag
    certificate = one(objects, "Certificate", "tether-webhook")
    assert "tether-webhook.tether-system.svc" in certificate["spec"]["dnsNames"]
    assert "tether.example.com" in certificate["spec"]["dnsNames"]
    assert one(objects, "Issuer", "tether-webhook-ca")["spec"]["ca"]["secretName"] == "tether-webhook-ca"
    karmada = karmada_side("everything")
    [config] = [o for o in karmada if o["kind"] == "MutatingWebhookConfiguration"]
    [hook] = config["webhooks"]
    assert hook["clientConfig"]["service"] == {"name": "tether-webhook", "namespace": "tether-system",
                                               "path": "/mutate/resourcebindings", "port": 443}
    assert "caBundle" not in hook["clientConfig"]  # injected by the leader; re-applying never erases it
    assert f"--webhook-configuration={config['metadata']['name']}" in args
    assert "tether-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    plugins = one(karmada, "ConfigMap", "volcano-global-datasource-plugins")
    parsed = parse_plugin_configmap(plugins["data"])
    assert not parsed.errors and set(parsed.plugins) == {"amoro"}
    admission = one(karmada, "ConfigMap", "tether-admission")
    assert "volcano-scheduler.conf" in admission["data"]
    binding = one(karmada, "ClusterRoleBinding", "tether")
    assert {"kind": "User", "name": "tether", "apiGroup": "rbac.authorization.k8s.io"} in binding["subjects"]


def test_non_default_values_change_what_they_say() -> None:
    objects = host_objects("kafka-single-selfsigned")
    sts = one(objects, "StatefulSet", "tether")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log=kafka://kafka.kafka.svc:9092/tether" in args and "--no-leader-elect" in args
    assert "--webhook-self-signed" in args and "--webhook-inject-ca" not in args
    assert "volumeClaimTemplates" not in sts["spec"]
    assert not [o for o in objects if o["kind"] in ("Certificate", "Issuer", "PodDisruptionBudget")]
    [config] = [o for o in karmada_side("kafka-single-selfsigned") if o["kind"] == "MutatingWebhookConfiguration"]
    assert config["webhooks"][0]["failurePolicy"] == "Ignore"
    assert not [o for o in karmada_side("kafka-single-selfsigned") if o["metadata"]["name"] == "tether-leader-election"]

    own = host_objects("own-certificate")
    sts = one(own, "StatefulSet", "tether")
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-certs"]["secret"]["secretName"] == "my-tls" and "emptyDir" in volumes["log"]
    assert not any(a.startswith(("--webhook-inject-ca", "--webhook-self-signed"))
                   for a in sts["spec"]["template"]["spec"]["containers"][0]["args"])
    [config] = [o for o in karmada_side("own-certificate") if o["kind"] == "MutatingWebhookConfiguration"]
    assert config["webhooks"][0]["clientConfig"] == {"url": "https://tether.example.com/mutate/rb", "caBundle": "Q0E="}
    job = one(own, "Job", "tether-karmada-setup")
    [kubeconfig] = [v for v in job["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert kubeconfig["secret"]["secretName"] == "karmada-admin"
    assert "--kubeconfig=/etc/karmada/config" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    # print mode: no Job, the objects printed instead
    assert not [o for o in host_objects("print") if o["kind"] == "Job"]
    assert one(karmada_side("print"), "Role", "tether-admission-config")


@pytest.mark.parametrize(("values", "message"), [
    ({"replicas": 3, "leaderElection": {"enabled": False}}, "needs leaderElection.enabled"),
    ({"log": {"type": "kafka"}}, "needs log.kafka.url"),
    ({"log": {"type": "postgres"}}, "log.type must be sqlite or kafka"),
    ({"webhooks": {"pod": {"enabled": True}, "certificates": {"mode": "selfSigned"}}}, "does not change with the"),
    ({"webhooks": {"binding": {"enabled": True}, "certificates": {"mode": "secret"}}}, "secretName is required"),
    ({"karmada": {"setup": {"mode": "later"}}}, "karmada.setup.mode must be job or print"),
])
def test_impossible_values_are_refused_with_what_to_change(values: dict[str, Any], message: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=message):
        chart.render(values)
    with pytest.raises(helm.HelmError, match="install the release in that namespace"):
        chart.render({"webhooks": {"binding": {"enabled": True}, "certificates": {"mode": "selfSigned"}}},
                     namespace="elsewhere")


@pytest.mark.parametrize(("values", "message"), [
    ({"replicaz": 3}, "additional properties 'replicaz' not allowed"),
    ({"webhooks": {"binding": {"enabeld": True}}}, "at '/webhooks/binding': additional properties 'enabeld'"),
    ({"replicas": "3"}, "at '/replicas': got string, want integer"),
    ({"replicas": 0}, "at '/replicas': minimum: got 0, want 1"),
    ({"webhooks": {"port": 99999}}, "at '/webhooks/port': maximum"),
    ({"webhooks": {"binding": {"failurePolicy": "fail"}}}, "value must be one of 'Fail', 'Ignore'"),
    ({"members": {"kubeconfigs": [{"name": "m1"}]}}, "missing property 'secretName'"),
    ({"logLevel": "verbose"}, "at '/logLevel': value must be one of"),
])
def test_values_the_chart_does_not_know_are_refused(values: dict[str, Any], message: str) -> None:
    """``replicaz: 3`` rendered silently (two replicas, the typo ignored); values.schema.json refuses it."""
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=re.escape(message)):
        chart.render(values)


def test_the_service_account_token_is_mounted_only_where_it_is_used() -> None:
    """Karmada is reached with the kubeconfig Secret; the host cluster's token only lets the leader write the
    leader-only Services' EndpointSlices. Without those Services (the defaults), no pod mounts a token."""
    for case, used in (("defaults", False), ("everything", True), ("own-certificate", True)):
        objects = host_objects(case)
        sts = one(objects, "StatefulSet", "tether")["spec"]["template"]["spec"]
        args = sts["containers"][0]["args"]
        assert any(a.startswith("--leader-service=") for a in args) is used, case
        assert sts["automountServiceAccountToken"] is used, case
        for job in (o for o in objects if o["kind"] == "Job"):
            assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, job["metadata"]["name"]


def test_ops_deploy_is_the_charts_default_rendering() -> None:
    result = subprocess.run([sys.executable, str(RENDER), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    [example] = [d for d in yaml.safe_load_all((chart.DEPLOY / "plugin-configmap.yaml").read_text()) if d]
    parsed = parse_plugin_configmap(example["data"])
    assert not parsed.errors and set(parsed.plugins) == {"amoro"}


def test_the_chart_carries_the_generated_crds() -> None:
    crds = ROOT / "ops" / "crds"
    for path in sorted(crds.glob("datadependency.volcano.sh_*.yaml")):
        assert (chart.CHART / "files" / "crds" / path.name).read_text() == path.read_text()
    names = {o["metadata"]["name"] for o in karmada_side("defaults") if o["kind"] == "CustomResourceDefinition"}
    assert names == {"datasourceclaims.datadependency.volcano.sh", "datasources.datadependency.volcano.sh"}
