"""Write every CustomResourceDefinition in ``ops/crds``: ``python ops/crds/generate.py`` (``--check``: exit 1 when
the committed files differ from a fresh generation, and write nothing). tether's own CRDs are also written into
the Helm chart (``ops/chart/files/crds``), which applies them to Karmada's API server.

Two sources, one output path:

* **tether's own kinds** (``datadependency.volcano.sh_*.yaml``) come from the msgspec types in
  :mod:`tether.core.api`. msgspec renders a JSON Schema (draft 2020-12); Kubernetes wants a *structural* OpenAPI v3
  schema, so :func:`structural` rewrites it: ``$ref`` inlined, the ``anyOf: [X, null]`` of an optional field
  collapsed to ``X`` (tether omits unset fields rather than writing ``null``), titles and struct docstrings dropped,
  zero-value defaults dropped (they mean "optional", see :mod:`tether.core.api`), ``type: object`` on every object,
  required lists sorted, a ``Literal``'s bare enum given its type. Any keyword outside the small set the API server
  accepts and tether uses raises, so a new type that msgspec renders in some other way fails here rather than
  producing a CRD the API server refuses. kubectl presentation (printer columns, short names, categories) is not
  part of the types and lives below in :data:`PRESENTATION`.

* **upstream kinds** (``upstream/*.yaml``: Karmada's bindings, clusters and policies, Volcano's queues and pod
  groups, Godel's pod groups, Fluid's data operations) are tether's own *minimal* schemas: just the fields tether,
  the emulator's Karmada scheduler stand-in, the demo and the tests read or write, typed, with
  ``x-kubernetes-preserve-unknown-fields: true`` on every object so that everything else is stored as given. They
  are described compactly in :data:`UPSTREAM` (a few helpers, one line per field) rather than as msgspec types or
  handwritten YAML: these are not tether's types (nothing decodes into them), a field list is easy to hold against
  the code that reads it, and going through this generator gives them the same envelope, ordering and ``--check``
  as tether's own. The real CRDs are installed with Karmada, Volcano, Godel and Fluid; tests that want their exact
  validation load them from ``../shared/reference`` at test time. Defaults and status subresources follow upstream
  (they change what is stored and how writes behave); enums appear only where the stand-ins branch on the value.

Output is deterministic: keys sorted, one document per file, a header naming this script.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from tether.core import api

HERE = Path(__file__).resolve().parent
UPSTREAM_DIR = HERE / "upstream"
CHART_CRDS = HERE.parent / "chart" / "files" / "crds"  # the Helm chart applies tether's CRDs to Karmada's API server

Schema = dict[str, Any]

# ------------------------------------------------------------------------------ msgspec JSON Schema → structural

#: Keywords copied as they are (after their values are converted). Everything else msgspec might emit is refused.
_PLAIN = frozenset({"type", "description", "enum", "format", "pattern", "minimum", "maximum", "minLength", "maxLength",
                    "minItems", "maxItems", "minProperties", "maxProperties", "nullable"})
_DROPPED = frozenset({"title"})
_ZERO_VALUES: tuple[Any, ...] = ("", 0, [], {}, None)


def _is_zero(value: Any) -> bool:
    # ``False == 0`` in Python, so booleans are zero values too — as in Go's omitempty.
    return any(type(value) is type(z) and value == z for z in _ZERO_VALUES) or value is False


def structural(json_schema: Mapping[str, Any]) -> Schema:
    """A structural OpenAPI v3 schema from msgspec's JSON Schema of one type (``msgspec.json.schema(T)``)."""
    defs: Mapping[str, Any] = json_schema.get("$defs", {})
    return _convert({k: v for k, v in json_schema.items() if k != "$defs"}, defs, "")


def _convert(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> Schema:
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        # The definition's title and description describe the Python type; the field's own description (a sibling
        # of $ref) is what the API publishes.
        target = {k: v for k, v in defs[name].items() if k not in ("title", "description")}
        return _convert(target | {k: v for k, v in node.items() if k != "$ref"}, defs, path)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1 or len(node["anyOf"]) != 2:
            raise ValueError(f"{path or '<root>'}: only `X | None` unions map onto a structural schema")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return _convert(dict(options[0]) | rest, defs, path)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "default":
            if not _is_zero(value):
                out[key] = value
        elif key == "properties":
            out[key] = {name: _convert(sub, defs, f"{path}.{name}" if path else name) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, f"{path}[*]")
            elif value is not False:  # False: unknown fields are pruned anyway
                raise ValueError(f"{path}: additionalProperties: {value!r} is not structural")
        elif key == "required":
            if value:
                out[key] = sorted(value)
        elif key in _PLAIN or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise ValueError(f"{path or '<root>'}: {key!r} has no place in a structural schema")
    if ("properties" in out or "additionalProperties" in out) and out.setdefault("type", "object") != "object":
        raise ValueError(f"{path}: properties on a non-object")
    if "enum" in out and "type" not in out:  # msgspec renders a Literal as a bare enum
        kinds = {type(v) for v in out["enum"]}
        if kinds not in ({str}, {int}, {bool}):
            raise ValueError(f"{path}: an enum must have values of one JSON type")
        out["type"] = {str: "string", int: "integer", bool: "boolean"}[kinds.pop()]
    if not out.get("type") and not out.get("x-kubernetes-int-or-string"):
        raise ValueError(f"{path or '<root>'}: every node of a structural schema needs a type")
    return out


# --------------------------------------------------------------------------------------------------- envelopes


def _root(*, api_version: str, kind: str, description: str, spec: Schema, status: Schema | None) -> Schema:
    props: Schema = {
        "apiVersion": {"type": "string", "description": f"The API version of this object: {api_version}."},
        "kind": {"type": "string", "description": f"The kind of this object: {kind}."},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        props["status"] = status
    return {"type": "object", "description": description, "properties": props}


def _crd(*, group: str, version: str, kind: str, plural: str, singular: str, scope: str, schema: Schema,
         status_subresource: bool, short_names: Iterable[str] = (), categories: Iterable[str] = (),
         columns: Iterable[Schema] = ()) -> Schema:
    names: Schema = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    served: Schema = {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if status_subresource:
        served["subresources"] = {"status": {}}
    if columns:
        served["additionalPrinterColumns"] = list(columns)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": scope, "versions": [served]},
    }


# ------------------------------------------------------------------------------------------------ tether's kinds


def _column(name: str, json_path: str, description: str, *, type_: str = "string") -> Schema:
    return {"name": name, "type": type_, "jsonPath": json_path, "description": description}


_AGE = _column("Age", ".metadata.creationTimestamp", "Time since the object was created.", type_="date")

#: How kubectl shows tether's kinds. ``ds`` is DaemonSet's short name, hence ``dsrc``.
PRESENTATION: dict[str, Schema] = {
    "DataSourceClaim": {
        "short_names": ["dsc"],
        "categories": ["tether", "datadependency"],
        "columns": [
            _column("Phase", ".status.phase", "Pending or Bound."),
            _column("DataSource", ".status.boundDataSource", "The DataSource the claim is bound to."),
            _column("System", ".spec.system", "The data system."),
            _column("Table", ".spec.dataSourceName", "The data's name inside the system."),
            _AGE,
        ],
    },
    "DataSource": {
        "short_names": ["dsrc"],
        "categories": ["tether", "datadependency"],
        "columns": [
            _column("System", ".spec.system", "The data system."),
            _column("Name", ".spec.name", "The data's name inside the system."),
            _column("Clusters", ".spec.locality.clusterNames", "The clusters next to the data."),
            _column("Claims", ".status.boundClaims", "How many claims are bound.", type_="integer"),
            _AGE,
        ],
    },
}


def tether_crd(kind: api.ApiKind) -> Schema:
    """The CRD of one of tether's kinds, from its types."""
    spec = structural(msgspec.json.schema(kind.spec))
    spec["description"] = kind.spec_description
    status = structural(msgspec.json.schema(kind.status))
    status["description"] = kind.status_description
    shown = PRESENTATION[kind.kind]
    return _crd(group=api.GROUP, version=api.VERSION, kind=kind.kind, plural=kind.plural, singular=kind.singular,
                scope=kind.scope, status_subresource=True, short_names=shown["short_names"],
                categories=shown["categories"], columns=shown["columns"],
                schema=_root(api_version=kind.api_version, kind=kind.kind, description=kind.description,
                             spec=spec, status=status))


# ---------------------------------------------------------------------------------------- upstream, compactly

STR: Schema = {"type": "string"}
INT32: Schema = {"type": "integer", "format": "int32"}
INT64: Schema = {"type": "integer", "format": "int64"}
BOOL: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "format": "date-time"}
QUANTITY: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
#: An object tether passes through whole (a pod affinity, a node selector it hands on untouched, …).
OPAQUE: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def obj(fields: Mapping[str, Schema], *, required: Iterable[str] = ()) -> Schema:
    """An object with these fields typed and every other field kept as given."""
    out: Schema = {"type": "object", "properties": dict(fields), "x-kubernetes-preserve-unknown-fields": True}
    if required:
        out["required"] = sorted(required)
    return out


def arr(item: Schema) -> Schema:
    return {"type": "array", "items": item}


def map_of(value: Schema) -> Schema:
    return {"type": "object", "additionalProperties": value}


def enum(*values: str, default: str | None = None) -> Schema:
    out: Schema = {"type": "string", "enum": list(values)}
    if default is not None:
        out["default"] = default
    return out


def with_default(schema: Schema, default: Any) -> Schema:
    return schema | {"default": default}


RESOURCES = map_of(QUANTITY)
CONDITIONS = arr(obj({"type": STR, "status": STR, "reason": STR, "message": STR, "lastTransitionTime": TIME,
                      "observedGeneration": INT64}, required=["type", "status"]))
LABEL_SELECTOR = obj({"matchLabels": map_of(STR),
                      "matchExpressions": arr(obj({"key": STR, "operator": STR, "values": arr(STR)},
                                                  required=["key", "operator"]))})
NODE_SELECTOR_TERM = obj({"matchExpressions": arr(obj({"key": STR, "operator": STR, "values": arr(STR)},
                                                      required=["key", "operator"])),
                          "matchFields": arr(OPAQUE)})
NODE_SELECTOR = obj({"nodeSelectorTerms": arr(NODE_SELECTOR_TERM)}, required=["nodeSelectorTerms"])

# Karmada: the scheduler stand-in reads the affinity terms, tolerations and replica scheduling; tether's executor
# writes exclusions into clusterAffinity / clusterAffinities and sets rescheduleTriggeredAt; the admission side
# lifts suspension.scheduling and orders by schedulePriority.
CLUSTER_AFFINITY_FIELDS: Schema = {
    "clusterNames": arr(STR),
    "exclude": arr(STR),
    "labelSelector": LABEL_SELECTOR,
    "fieldSelector": obj({"matchExpressions": arr(obj({"key": STR, "operator": STR, "values": arr(STR)},
                                                       required=["key", "operator"]))}),
}
PLACEMENT = obj({
    "clusterAffinity": obj(CLUSTER_AFFINITY_FIELDS),
    "clusterAffinities": arr(obj({"affinityName": STR, **CLUSTER_AFFINITY_FIELDS}, required=["affinityName"])),
    "clusterTolerations": arr(obj({"key": STR, "operator": STR, "value": STR, "effect": STR,
                                   "tolerationSeconds": INT64})),
    "spreadConstraints": arr(OPAQUE),
    "replicaScheduling": obj({
        "replicaSchedulingType": enum("Duplicated", "Divided", default="Divided"),
        "replicaDivisionPreference": enum("Aggregated", "Weighted"),
        "weightPreference": obj({
            "staticWeightList": arr(obj({"targetCluster": obj(CLUSTER_AFFINITY_FIELDS), "weight": INT64},
                                        required=["targetCluster", "weight"])),
            "dynamicWeight": enum("AvailableReplicas"),
        }),
    }),
})
BINDING_SPEC = obj({
    "resource": obj({"apiVersion": STR, "kind": STR, "namespace": STR, "name": STR, "uid": STR,
                     "resourceVersion": STR}, required=["apiVersion", "kind", "name"]),
    "replicas": INT32,
    "replicaRequirements": obj({"resourceRequest": RESOURCES, "priorityClassName": STR}),
    # Karmada v1.16+: a workload of several pod templates (queue admission charges their sum)
    "components": arr(obj({"name": {**STR, "maxLength": 32}, "replicas": INT32,
                           "replicaRequirements": obj({"resourceRequest": RESOURCES, "priorityClassName": STR})},
                          required=["name", "replicas"])),
    "clusters": arr(obj({"name": STR, "replicas": INT32}, required=["name"])),
    "placement": PLACEMENT,
    "schedulerName": STR,
    "rescheduleTriggeredAt": TIME,
    "suspension": obj({"scheduling": BOOL, "dispatching": BOOL,
                       "dispatchingOnClusters": obj({"clusterNames": arr(STR)})}),
    "schedulePriority": obj({"priority": with_default(INT32, 0)}),
    "conflictResolution": enum("Abort", "Overwrite", default="Abort"),
}, required=["resource"])
BINDING_STATUS = obj({
    "schedulerObservedGeneration": INT64,
    "schedulerObservingAffinityName": STR,
    "lastScheduledTime": TIME,
    "conditions": CONDITIONS,
})

CLUSTER_SPEC = obj({
    "syncMode": STR,
    "apiEndpoint": STR,
    "provider": STR,
    "region": STR,
    "zone": STR,
    "zones": arr(STR),
    "taints": arr(obj({"key": STR, "value": STR, "effect": STR, "timeAdded": TIME}, required=["key", "effect"])),
}, required=["syncMode"])
CLUSTER_STATUS = obj({
    "kubernetesVersion": STR,
    "conditions": CONDITIONS,
    "apiEnablements": arr(obj({"groupVersion": STR, "resources": arr(obj({"name": STR, "kind": STR},
                                                                        required=["name", "kind"]))},
                              required=["groupVersion"])),
    "nodeSummary": obj({"totalNum": INT32, "readyNum": INT32}),
    "resourceSummary": obj({"allocatable": RESOURCES, "allocating": RESOURCES, "allocated": RESOURCES}),
})

POLICY_SPEC = obj({
    "resourceSelectors": arr(obj({"apiVersion": STR, "kind": STR, "namespace": STR, "name": STR,
                                  "labelSelector": LABEL_SELECTOR}, required=["apiVersion", "kind"])),
    "placement": PLACEMENT,
    "schedulerName": with_default(STR, "default-scheduler"),
    "priority": with_default(INT32, 0),
    "conflictResolution": enum("Abort", "Overwrite", default="Abort"),
    "preemption": enum("Always", "Never", default="Never"),
}, required=["resourceSelectors"])

# Volcano: what queue admission reads of a queue, and what a gang needs of a pod group.
QUEUE_SPEC = obj({
    "weight": with_default(INT32, 1),
    "capability": RESOURCES,
    "deserved": RESOURCES,
    "guarantee": obj({"resource": RESOURCES}),
    "priority": INT32,
    "reclaimable": BOOL,
    "parent": STR,
    "dequeueStrategy": enum("fifo", "traverse", default="traverse"),
})
QUEUE_STATUS = obj({"state": STR, "allocated": RESOURCES})
VOLCANO_PODGROUP_SPEC = obj({
    "minMember": INT32,
    "minResources": RESOURCES,
    "minTaskMember": map_of(INT32),
    "queue": with_default(STR, "default"),
    "priorityClassName": STR,
})
VOLCANO_PODGROUP_STATUS = obj({"phase": STR, "conditions": arr(obj({"type": STR, "status": STR})),
                               "running": INT32, "succeeded": INT32, "failed": INT32})

# Godel: the job-level affinity the topology placement follows.
TOPOLOGY_TERMS = arr(obj({"topologyKey": STR}))
GODEL_PODGROUP_SPEC = obj({
    "minMember": INT32,
    "scheduleTimeoutSeconds": INT32,
    "affinity": obj({
        "podGroupAffinity": obj({
            "required": TOPOLOGY_TERMS,
            "preferred": TOPOLOGY_TERMS,
            # CPU|GPU|Memory, Capacity|Available, Ascending|Descending: Godel's CRD leaves them open, so do we.
            "sortRules": arr(obj({"resource": STR, "dimension": STR, "order": STR})),
            "nodeSelector": NODE_SELECTOR,
        }),
        "podGroupAntiAffinity": obj({"required": TOPOLOGY_TERMS, "preferred": TOPOLOGY_TERMS}),
    }),
})
GODEL_PODGROUP_STATUS = obj({"phase": STR})

# Fluid: a data operation's place in a data flow and the placement it records for its successors.
OPERATION_REF = {"apiVersion": STR, "kind": enum("DataLoad", "DataBackup", "DataMigrate", "DataProcess"),
                 "name": STR, "namespace": STR}
RUN_AFTER = obj({
    **OPERATION_REF,
    "affinityStrategy": obj({
        "policy": STR,  # "", Require or Prefer; Fluid refuses nothing here, the decider reports the rest
        "requires": arr(obj({"name": STR}, required=["name"])),
        "prefers": arr(obj({"name": STR, "weight": INT32}, required=["name", "weight"])),
        "dependOn": obj(OPERATION_REF, required=["kind", "name"]),
    }),
}, required=["kind", "name"])
FLUID_STATUS = obj({"phase": STR, "nodeAffinity": OPAQUE, "conditions": arr(obj({"type": STR, "status": STR}))})
#: Repeated operations (policy Cron) record no placement, so the decider reads the policy.
FLUID_REPEATABLE: Schema = {"policy": enum("Once", "Cron", "OnEvent", default="Once"), "schedule": STR}


class Upstream(msgspec.Struct, kw_only=True, frozen=True):
    """One upstream kind, described by the fields tether touches."""

    file: str
    group: str
    version: str
    kind: str
    plural: str
    scope: str
    spec: Schema
    status: Schema | None
    status_subresource: bool
    project: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()


def _fluid(kind: str, plural: str, short: tuple[str, ...], extra: Schema) -> Upstream:
    return Upstream(file=f"data.fluid.io_{plural}.yaml", group="data.fluid.io", version="v1alpha1", kind=kind,
                    plural=plural, scope="Namespaced", spec=obj({"runAfter": RUN_AFTER} | extra), status=FLUID_STATUS,
                    status_subresource=True, project="Fluid", short_names=short,
                    categories=("fluid",) if short else ())


UPSTREAM: tuple[Upstream, ...] = (
    Upstream(file="work.karmada.io_resourcebindings.yaml", group="work.karmada.io", version="v1alpha2",
             kind="ResourceBinding", plural="resourcebindings", scope="Namespaced", spec=BINDING_SPEC,
             status=BINDING_STATUS, status_subresource=True, project="Karmada", short_names=("rb",),
             categories=("karmada-io",)),
    Upstream(file="work.karmada.io_clusterresourcebindings.yaml", group="work.karmada.io", version="v1alpha2",
             kind="ClusterResourceBinding", plural="clusterresourcebindings", scope="Cluster", spec=BINDING_SPEC,
             status=BINDING_STATUS, status_subresource=True, project="Karmada", short_names=("crb",),
             categories=("karmada-io",)),
    Upstream(file="cluster.karmada.io_clusters.yaml", group="cluster.karmada.io", version="v1alpha1",
             kind="Cluster", plural="clusters", scope="Cluster", spec=CLUSTER_SPEC, status=CLUSTER_STATUS,
             status_subresource=True, project="Karmada (served by its aggregated API server, not a CRD)"),
    Upstream(file="policy.karmada.io_propagationpolicies.yaml", group="policy.karmada.io", version="v1alpha1",
             kind="PropagationPolicy", plural="propagationpolicies", scope="Namespaced", spec=POLICY_SPEC,
             status=None, status_subresource=False, project="Karmada", short_names=("pp",),
             categories=("karmada-io",)),
    Upstream(file="scheduling.volcano.sh_queues.yaml", group="scheduling.volcano.sh", version="v1beta1",
             kind="Queue", plural="queues", scope="Cluster", spec=QUEUE_SPEC, status=QUEUE_STATUS,
             status_subresource=True, project="Volcano", short_names=("q",)),
    Upstream(file="scheduling.volcano.sh_podgroups.yaml", group="scheduling.volcano.sh", version="v1beta1",
             kind="PodGroup", plural="podgroups", scope="Namespaced", spec=VOLCANO_PODGROUP_SPEC,
             status=VOLCANO_PODGROUP_STATUS, status_subresource=False, project="Volcano", short_names=("pg",)),
    Upstream(file="scheduling.godel.kubewharf.io_podgroups.yaml", group="scheduling.godel.kubewharf.io",
             version="v1alpha1", kind="PodGroup", plural="podgroups", scope="Namespaced", spec=GODEL_PODGROUP_SPEC,
             status=GODEL_PODGROUP_STATUS, status_subresource=True, project="Godel"),
    _fluid("DataLoad", "dataloads", ("load",), {"affinity": OPAQUE, **FLUID_REPEATABLE}),
    _fluid("DataMigrate", "datamigrates", ("migrate",),
           {"affinity": OPAQUE, "parallelism": with_default(INT32, 1), **FLUID_REPEATABLE}),
    _fluid("DataProcess", "dataprocesses", (),
           {"processor": obj({"job": obj({"podSpec": obj({"affinity": OPAQUE})})}), **FLUID_REPEATABLE}),
    _fluid("DataBackup", "databackups", ("backup",), {}),
)


def upstream_crd(u: Upstream) -> Schema:
    root = _root(api_version=f"{u.group}/{u.version}", kind=u.kind, spec=u.spec, status=u.status,
                 description=f"tether's minimal schema of {u.project}'s {u.kind}: the fields tether and its "
                             "sandbox use, typed; everything else is kept as given.")
    return _crd(group=u.group, version=u.version, kind=u.kind, plural=u.plural, singular=u.kind.lower(),
                scope=u.scope, schema=root, status_subresource=u.status_subresource, short_names=u.short_names,
                categories=u.categories)


# ------------------------------------------------------------------------------------------------------ output


def _dump(header: str, doc: Schema) -> str:
    body = yaml.safe_dump(doc, sort_keys=True, width=110, default_flow_style=False, allow_unicode=True)
    return f"{header}---\n{body}"


def render() -> dict[Path, str]:
    """Every generated file (path → content), tether's kinds first."""
    out: dict[Path, str] = {}
    for kind in api.KINDS:
        header = ("# tether's API, generated by ops/crds/generate.py from tether.core.api: edit the types there and\n"
                  "# run `python ops/crds/generate.py`.\n")
        out[HERE / f"{api.GROUP}_{kind.plural}.yaml"] = out[CHART_CRDS / f"{api.GROUP}_{kind.plural}.yaml"] = \
            _dump(header, tether_crd(kind))
    for u in UPSTREAM:
        header = (f"# tether's minimal schema of {u.project}'s {u.kind} for its sandbox and tests, generated by\n"
                  f"# ops/crds/generate.py (see README.md here). The real CRD comes with {u.project.split(' ')[0]}.\n")
        out[UPSTREAM_DIR / u.file] = _dump(header, upstream_crd(u))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a committed file differs from a fresh generation")
    args = parser.parse_args(argv)
    files = render()
    generated_upstream = {p.name for p in files if p.parent == UPSTREAM_DIR}
    stray = sorted(p for p in UPSTREAM_DIR.glob("*.yaml") if p.name not in generated_upstream)
    if args.check:
        stale = []
        for path, text in files.items():
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current != text:
                stale.append(path)
                sys.stdout.writelines(difflib.unified_diff(current.splitlines(keepends=True),
                                                           text.splitlines(keepends=True),
                                                           str(path), f"{path} (generated)", n=1))
        for path in stray:
            print(f"{path}: not generated by this script")
        if stale or stray:
            print(f"{len(stale) + len(stray)} CRD file(s) out of date: run `python ops/crds/generate.py`")
            return 1
        return 0
    UPSTREAM_DIR.mkdir(exist_ok=True)
    CHART_CRDS.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parents[1])}")
    for path in stray:
        print(f"{path.relative_to(HERE.parents[1])}: not generated by this script (remove it or describe it here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
