"""The resource registry: which kinds exist, how they are addressed and which semantics apply.

Built-in kinds are declared here by hand (no OpenAPI schema; their validation lives in small per-kind hooks);
custom resources are registered from ``CustomResourceDefinition`` objects, exactly as on a real cluster, and carry
their per-version ``openAPIV3Schema``. Multi-version CRDs use the ``None`` conversion strategy: one stored object,
served under each version with only ``apiVersion`` rewritten — what a real server does without a conversion webhook.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import invalid

ResourceKey = tuple[str, str]


@dataclass(eq=False)
class ResourceType:
    group: str
    versions: list[str]
    plural: str
    singular: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    builtin: bool = True
    extra_subresources: tuple[str, ...] = ()
    schemas: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    # A custom resource's additionalPrinterColumns, by version (server-side printing: tables.py).
    printer_columns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Built-ins like ConfigMap accept a PUT without resourceVersion; custom resources do not.
    unconditional_update: bool = True
    # What DELETE answers when the object is gone at once: the object (CRDs, pods) or a Status.
    returns_deleted_object: bool = False
    tracks_generation: bool = False
    # apps/v1 Deployments: annotations are copied onto ReplicaSets, so changing them is a new generation too.
    annotations_bump_generation: bool = False
    name_rule: str = "subdomain"  # subdomain | label | path

    @property
    def key(self) -> ResourceKey:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def schema(self, version: str) -> dict[str, Any] | None:
        return self.schemas.get(version)

    def verbs(self) -> list[str]:
        return ["create", "delete", "get", "list", "patch", "update", "watch"]


def builtin_types() -> list[ResourceType]:
    core = dict(group="", versions=["v1"])
    return [
        ResourceType(**core, plural="namespaces", singular="namespace", kind="Namespace", namespaced=False,
                     status_subresource=True, short_names=["ns"], name_rule="label"),
        ResourceType(**core, plural="configmaps", singular="configmap", kind="ConfigMap", namespaced=True,
                     short_names=["cm"]),
        ResourceType(**core, plural="secrets", singular="secret", kind="Secret", namespaced=True),
        ResourceType(**core, plural="pods", singular="pod", kind="Pod", namespaced=True, status_subresource=True,
                     short_names=["po"], extra_subresources=("binding",), returns_deleted_object=True),
        ResourceType(**core, plural="nodes", singular="node", kind="Node", namespaced=False,
                     status_subresource=True, short_names=["no"]),
        ResourceType(**core, plural="events", singular="event", kind="Event", namespaced=True, short_names=["ev"],
                     name_rule="path"),
        ResourceType(group="batch", versions=["v1"], plural="jobs", singular="job", kind="Job", namespaced=True,
                     status_subresource=True, tracks_generation=True),
        ResourceType(group="coordination.k8s.io", versions=["v1"], plural="leases", singular="lease",
                     kind="Lease", namespaced=True),
        ResourceType(group="discovery.k8s.io", versions=["v1"], plural="endpointslices", singular="endpointslice",
                     kind="EndpointSlice", namespaced=True),
        ResourceType(group="scheduling.k8s.io", versions=["v1"], plural="priorityclasses", singular="priorityclass",
                     kind="PriorityClass", namespaced=False, short_names=["pc"]),
        ResourceType(group="apps", versions=["v1"], plural="deployments", singular="deployment",
                     kind="Deployment", namespaced=True, status_subresource=True, short_names=["deploy"],
                     tracks_generation=True, annotations_bump_generation=True),
        ResourceType(group="apiextensions.k8s.io", versions=["v1"], plural="customresourcedefinitions",
                     singular="customresourcedefinition", kind="CustomResourceDefinition", namespaced=False,
                     status_subresource=True, short_names=["crd", "crds"], tracks_generation=True),
        ResourceType(group="admissionregistration.k8s.io", versions=["v1"],
                     plural="mutatingwebhookconfigurations", singular="mutatingwebhookconfiguration",
                     kind="MutatingWebhookConfiguration", namespaced=False, tracks_generation=True),
        ResourceType(group="admissionregistration.k8s.io", versions=["v1"],
                     plural="validatingwebhookconfigurations", singular="validatingwebhookconfiguration",
                     kind="ValidatingWebhookConfiguration", namespaced=False, tracks_generation=True),
    ]


def type_from_crd(crd: dict[str, Any]) -> ResourceType:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    served = [v for v in spec.get("versions") or [] if v.get("served", True)]
    storage = [v for v in served if v.get("storage")] + [v for v in served if not v.get("storage")]
    status = any("status" in (v.get("subresources") or {}) for v in served)
    return ResourceType(
        group=spec.get("group", ""),
        versions=[v["name"] for v in storage],
        plural=names.get("plural", ""),
        singular=names.get("singular") or names.get("kind", "").lower(),
        kind=names.get("kind", ""),
        namespaced=spec.get("scope") == "Namespaced",
        status_subresource=status,
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        builtin=False,
        schemas={v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") for v in served},
        printer_columns={v["name"]: list(v.get("additionalPrinterColumns") or spec.get("additionalPrinterColumns")
                                         or []) for v in served},
        unconditional_update=False,
        returns_deleted_object=True,
        tracks_generation=True,
    )


_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_QUALIFIED_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                  "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
                  "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def qualified_name_causes(path: str, value: str) -> list[tuple[str, str, str]]:
    """``ValidateQualifiedName``: an optional DNS subdomain prefix and ``/``, then a name part of at most 63
    characters of the qualified-name alphabet; each rule it breaks is a cause, as a real API server lists them."""
    def cause(detail: str) -> tuple[str, str, str]:
        return path, "FieldValueInvalid", f'Invalid value: "{value}": {detail}'

    parts = value.split("/")
    if len(parts) > 2:
        return [cause("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                      "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
                      "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
                      "prefix and '/' (e.g. 'example.com/MyName')")]
    causes = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            causes.append(cause("prefix part must be non-empty"))
        elif len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix):
            causes.append(cause("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
                                "'example.com', regex used for validation is "
                                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"))
    if not name:
        causes.append(cause("name part must be non-empty"))
    elif len(name) > 63:
        causes.append(cause("name part must be no more than 63 characters"))
    if not _QUALIFIED.fullmatch(name):
        causes.append(cause(_QUALIFIED_MSG))
    return causes


def label_causes(labels: object) -> list[tuple[str, str, str]]:
    """metadata.labels rules (``ValidateLabels``): a key is a qualified name (:func:`qualified_name_causes`), a value
    at most 63 characters of the label alphabet. The causes a real API server reports (a ``/`` in a value is the
    usual mistake)."""
    causes: list[tuple[str, str, str]] = []
    if not isinstance(labels, dict):
        return causes
    for key, value in labels.items():
        causes += qualified_name_causes("metadata.labels", str(key))
        if isinstance(value, str):
            if len(value) > 63:
                causes.append(("metadata.labels", "FieldValueInvalid",
                               f'Invalid value: "{value}": must be no more than 63 characters'))
            elif not _LABEL_VALUE.fullmatch(value):
                causes.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": {_LABEL_VALUE_MSG}'))
    return causes


def validate_name(rt: ResourceType, name: str) -> None:
    """metadata.name rules: DNS-1123 label for namespaces, subdomain for most kinds, path segment for events."""
    if rt.name_rule == "path":
        bad = name in (".", "..") or "/" in name or "%" in name
        msg = f"Invalid value: \"{name}\": may not contain '/' or '%'"
    elif rt.name_rule == "label":
        bad = len(name) > 63 or not _LABEL.match(name)
        msg = (f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case alphanumeric '
               "characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
               "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    else:
        bad = len(name) > 253 or not _SUBDOMAIN.match(name)
        msg = (f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
               "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
               "'example.com', regex used for validation is "
               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    if bad:
        raise invalid(kind=rt.kind, group=rt.group, name=name, causes=[("metadata.name", "FieldValueInvalid", msg)])
