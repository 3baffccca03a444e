"""tether's Kubernetes API: the DataSourceClaim and DataSource kinds, as types.

These structs are the single description of the two kinds tether serves (``datadependency.volcano.sh/v1alpha1``,
the group Volcano Global defined, so that a cluster running Volcano Global's data-dependency controller can switch
to tether without touching its objects). ``ops/crds/generate.py`` turns them into the CustomResourceDefinitions in
``ops/crds`` (``python ops/crds/generate.py``; a test fails when the committed files drift from these types), so a
field is added here, once, and the CRD follows.

Conventions the generator relies on — they keep the published schema exactly as strict as intended:

* A field without a default is **required**; a field whose default is a zero value (``""``, ``0``, ``[]``, ``{}``)
  is optional and simply absent when unset (tether writes objects with ``omit_defaults``); any other default (the
  claim's ``phase: Pending``) is published as the CRD's default, which the API server fills in.
* Descriptions come from ``Meta(description=...)`` on the fields (they are what ``kubectl explain`` shows). Struct
  docstrings are for readers of this module and are not published.
* ``x-kubernetes-*`` markers that describe merge semantics ride along in ``Meta(extra_json_schema=...)``.

The other descriptions of the two kinds follow these: ``adapters/kubernetes/manifests.py`` writes the objects by
encoding these structs, and the executors name the fields they patch through :func:`field_names`; the views'
readers (``core/world/views.py``) decode a projection of them, each reader struct declared with the kind's struct it
reads (``READS``), and ``tests/ops/test_resource_descriptions.py`` fails when a reader field is not the kind's, or
when what tether writes is not what the CRD accepts and the reader reads back.

Compatibility with Volcano Global is a rule, not an accident: every field, type and enum of its CRDs must be
accepted here and tether may require nothing it does not (``tests/ops/test_crd_compat.py`` checks it path by path
against Volcano Global's published CRDs). That is why, for instance, ``phase`` and ``reclaimPolicy`` carry no enum
although only two values mean anything, and why a claim reference requires none of its fields.

Conditions are :class:`~tether.core.kube.Condition`, the one type tether writes and reads them as; it carries the
descriptions and Kubernetes' value checks the CRDs publish (status True/False/Unknown, an RFC 3339
lastTransitionTime, a non-negative observedGeneration).

Pure data: no I/O, nothing here talks to an API server.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from .commands import DATA_GROUP_VERSION
from .kube import Condition

GROUP, VERSION = DATA_GROUP_VERSION.split("/")


def _doc(text: str) -> Meta:
    return Meta(description=text)


class WorkloadReference(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """The workload a claim moves; its ResourceBinding is the one tether edits."""

    api_version: Annotated[str, _doc("API version of the workload, e.g. apps/v1 or batch.volcano.sh/v1alpha1.")]
    kind: Annotated[str, _doc("Kind of the workload, e.g. Deployment or Job.")]
    name: Annotated[str, _doc("Name of the workload.")]
    namespace: Annotated[str, _doc("Namespace of the workload; empty means the claim's own namespace.")] = ""


ConditionItem = Annotated[Condition, _doc("One observation (a Kubernetes metav1.Condition).")]

Attributes = Annotated[
    dict[str, str],
    _doc("Further key/value qualifiers of the data. They are part of its identity: a claim and a DataSource "
         "match only when their attributes are equal, and they contribute a hash to the DataSource's name."),
]


class LocalityPreference(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """How strictly the workload is kept next to the data (docs/locality-tiers.md). Every field is optional and
    overrides what the plugin ConfigMap says for the system or the table's prefix."""

    policy: Annotated[
        str, Meta(description="Required (the default): the workload runs only on the clusters next to the data, "
                              "and waits while they are full. Preferred: the binding's placement lists ordered "
                              "cluster groups (data, near-data, anywhere when allowed) and Karmada falls over to "
                              "the next group only when one cannot hold the workload.",
                  extra_json_schema={"enum": ["Required", "Preferred"]})] = ""
    topology_key: Annotated[
        str, _doc("A label of the Karmada Clusters (e.g. topology.karmada.io/region): with Preferred, the "
                  "near-data group is every cluster sharing its value with a cluster next to the data.")] = ""
    anywhere: Annotated[
        bool, _doc("With Preferred, a last group: any cluster the binding's own affinity allows.")] = False


class DatasetReference(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """A Fluid Dataset (data.fluid.io) in the member clusters."""

    name: Annotated[str, _doc("Name of the Dataset.")]
    namespace: Annotated[str, _doc("Namespace of the Dataset in the member clusters; empty means the "
                                   "workload's.")] = ""


class DataSourceClaimSpec(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """What a workload reads: system + type + name (+ attributes) identify the data."""

    system: Annotated[str, _doc("The data system that holds the data and is asked where it lives, e.g. amoro.")]
    data_source_type: Annotated[str, _doc("What dataSourceName names inside the system, e.g. table.")]
    data_source_name: Annotated[
        str, _doc("The data's name inside the system, e.g. a table as namespace.table. A DataSource caching the "
                  "same system, type, name and attributes is shared by every claim on that data.")]
    attributes: Attributes = {}
    workload: Annotated[
        WorkloadReference,
        _doc("The workload that reads the data. tether keeps its Karmada ResourceBinding on the clusters "
             "next to the data, and moves it when the data moves."),
    ]
    locality: Annotated[
        LocalityPreference | None,
        _doc("How strictly the workload is kept next to the data (Required by default). Optional: the plugin "
             "ConfigMap may say it for the system or a table prefix."),
    ] = None
    dataset: Annotated[
        DatasetReference | None,
        _doc("The Fluid Dataset the data is loaded into in the member clusters: a queue whose admission checks "
             "include data-loaded admits the workload only once a DataLoad of it completed, onto those clusters."),
    ] = None


class DataSourceClaimStatus(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """Where the claim stands; written by tether on the status subresource."""

    phase: Annotated[
        str, _doc("Pending until the claim is bound to a DataSource, then Bound. The Bound condition says why a "
                  "claim is still Pending.")] = "Pending"
    bound_data_source: Annotated[str, _doc("Name of the DataSource the claim is bound to.")] = ""
    conditions: Annotated[list[ConditionItem], _doc("Observations of the claim's state (type Bound).")] = []


class Locality(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """Where the data is, in Karmada's terms."""

    cluster_names: Annotated[
        list[str], _doc("The Karmada clusters next to the data. The bindings of claiming workloads exclude every "
                        "other cluster.")]


class DataSourceSpec(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """A cached answer to "where does this data live?", shared by the claims on the same data."""

    system: Annotated[str, _doc("The data system that holds the data, e.g. amoro.")]
    type: Annotated[str, _doc("What name names inside the system, e.g. table.")]
    name: Annotated[str, _doc("The data's name inside the system, e.g. namespace.table.")]
    attributes: Attributes = {}
    locality: Annotated[Locality, _doc("Where the data is, as last learnt from the catalog.")]
    reclaim_policy: Annotated[
        str, _doc("What happens when the last claim bound to this DataSource is deleted: Retain (also when "
                  "empty) keeps it as a cache entry, Delete removes it.")] = ""


class ClaimReference(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """A reference to a bound claim, shaped like Kubernetes' ObjectReference (every field optional, replaced
    as a whole on merge)."""

    api_version: Annotated[str, _doc("API version of the claim.")] = ""
    kind: Annotated[str, _doc("Kind of the referent, DataSourceClaim.")] = ""
    namespace: Annotated[str, _doc("Namespace of the claim.")] = ""
    name: Annotated[str, _doc("Name of the claim.")] = ""
    uid: Annotated[str, _doc("UID of the claim, telling a recreated claim of the same name apart.")] = ""
    resource_version: Annotated[str, _doc("The claim's resourceVersion when referenced, if recorded.")] = ""
    field_path: Annotated[str, _doc("A part of the referent, if the reference is to one (unused by tether).")] = ""


AtomicClaimReference = Annotated[ClaimReference, Meta(extra_json_schema={"x-kubernetes-map-type": "atomic"})]


class DataSourceStatus(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True, rename="camel"):
    """Which claims use the DataSource; written by tether on the status subresource."""

    claim_refs: Annotated[list[AtomicClaimReference], _doc("The claims bound to this DataSource.")] = []
    bound_claims: Annotated[
        int, Meta(description="How many claims are bound: the length of claimRefs.",
                  extra_json_schema={"format": "int32"})] = 0
    conditions: Annotated[list[ConditionItem], _doc("Observations of the DataSource's state.")] = []


class ApiKind(msgspec.Struct, kw_only=True, frozen=True):
    """One kind of the API: its names, its scope and the types of its spec and status."""

    kind: str
    plural: str
    singular: str
    scope: Literal["Namespaced", "Cluster"]
    spec: type[msgspec.Struct]
    status: type[msgspec.Struct]
    description: str
    spec_description: str
    status_description: str

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{VERSION}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


DATASOURCECLAIM = ApiKind(
    kind="DataSourceClaim", plural="datasourceclaims", singular="datasourceclaim", scope="Namespaced",
    spec=DataSourceClaimSpec, status=DataSourceClaimStatus,
    description="A workload's claim on the data it reads. tether binds it to the DataSource caching where that "
                "data lives and keeps the workload's Karmada ResourceBinding on the clusters next to it.",
    spec_description="The data a workload reads, and that workload. Written by the workload's owner.",
    status_description="Whether and to which DataSource the claim is bound. Written by tether.",
)

DATASOURCE = ApiKind(
    kind="DataSource", plural="datasources", singular="datasource", scope="Cluster",
    spec=DataSourceSpec, status=DataSourceStatus,
    description="Where a piece of data lives, cached from its catalog and shared by every claim on that data. "
                "Created and kept current by tether.",
    spec_description="The data and the clusters next to it. Written by tether from the catalog's answers.",
    status_description="The claims bound to this DataSource. Written by tether.",
)

KINDS: tuple[ApiKind, ...] = (DATASOURCECLAIM, DATASOURCE)


def field_names(struct: type[msgspec.Struct]) -> dict[str, str]:
    """Each field's name on the wire (``bound_data_source`` → ``boundDataSource``), by its Python name: how code that
    writes a kind's fields one by one (a merge patch, a status written whole) names them, so that it follows the type.
    A Python name the type does not have is a KeyError, not a field silently written under a wrong name."""
    return {field.name: field.encode_name for field in msgspec.structs.fields(struct)}
