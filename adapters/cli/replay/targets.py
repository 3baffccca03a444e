"""What an ``--explain`` argument means: a log key, a workload, or neither (and then the nearest that exist).

People type kinds the way ``kubectl`` taught them: ``deploy``, ``deployments``, ``Deployment``, ``deployments.apps``;
``rb`` for a ResourceBinding, ``dsc`` for a DataSourceClaim. The log keys objects as ``Kind/namespace/name``
(``Kind//name`` when cluster-scoped, ``<cluster>:Kind/ns/name`` in a member), with the kind as the API spells it.
:func:`resolve` turns the one into the other:

* the kind is looked up case-insensitively, as typed, as a short name (:data:`SHORT_NAMES`) or as a plural, among
  the kinds the log and the world actually hold (every key's kind, and the kinds the bindings' ``spec.resource``
  and the claims' ``spec.workload`` name) and the kinds tether knows;
* ``kind.group`` (``deployments.apps``) keeps the group, so that two workloads of one kind, namespace and name in
  different API groups (a ``batch/Job`` and a Volcano ``batch.volcano.sh/Job``) can be told apart;
* a workload need not be in the log at all: tether watches Deployments only with admission on, and other kinds
  never, so a workload is found through the bindings and claims that name it.

When nothing matches, :func:`suggest` offers the nearest existing keys (``difflib``), compared case-insensitively.
A short name that ``kubectl`` gives to another kind keeps kubectl's meaning (``ds`` is a DaemonSet): muscle memory
should not explain the wrong object. A DataSource is ``datasource`` (or its plural).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import msgspec

from tether.core.events import split_member_key

#: Short names → kinds: kubectl's for the built-in kinds, the CRDs' own (``shortNames``) for Karmada's, Volcano's
#: and Fluid's, and tether's for DataSourceClaim. Plurals and full names need no entry (:func:`_candidates`).
SHORT_NAMES: dict[str, str] = {
    "deploy": "Deployment", "sts": "StatefulSet", "ds": "DaemonSet", "rs": "ReplicaSet", "cj": "CronJob",
    "po": "Pod", "cm": "ConfigMap", "no": "Node", "ns": "Namespace", "pc": "PriorityClass",
    "rb": "ResourceBinding", "crb": "ClusterResourceBinding", "pp": "PropagationPolicy",
    "dsc": "DataSourceClaim",
    "q": "Queue", "pg": "PodGroup", "vcjob": "Job", "vj": "Job",
    "backup": "DataBackup", "migrate": "DataMigrate",
}

#: Kinds tether knows even before it has seen one in a log.
KNOWN_KINDS: tuple[str, ...] = (
    "DataSourceClaim", "DataSource", "ResourceBinding", "ClusterResourceBinding", "Cluster", "ConfigMap", "Queue",
    "PriorityClass", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "PodGroup",
    "Node", "Namespace", "DataLoad", "DataProcess", "DataMigrate", "DataBackup", "PropagationPolicy",
    "ClusterPropagationPolicy",
)


class Target(msgspec.Struct, frozen=True):
    """An ``--explain`` argument, resolved: ``key`` is the log key it names (whether or not the log holds it)."""

    typed: str
    key: str
    kind: str
    namespace: str
    name: str
    cluster: str = ""  # a member cluster's object
    group: str | None = None  # given as kind.group; None: any group

    def matches_workload(self, workload: str) -> bool:
        """Whether a workload key (``group/Kind/namespace/name``, as ``core.world.views.workload_key``) is this."""
        group, _, rest = workload.partition("/")
        return rest == f"{self.kind}/{self.namespace}/{self.name}" and (self.group is None or self.group == group)


def kind_of(key: str) -> str:
    """The kind of a log key (``Kind/ns/name`` or ``<cluster>:Kind/ns/name``)."""
    return split_member_key(key)[1].partition("/")[0]


def _candidates(word: str) -> list[str]:
    """``word`` and what it would be if it were a plural (deployments, classes, policies)."""
    out = [word]
    if word.endswith("ies"):
        out.append(word[:-3] + "y")
    if word.endswith("es"):
        out.append(word[:-2])
    if word.endswith("s"):
        out.append(word[:-1])
    return out


def canonical_kind(typed: str, kinds: Iterable[str]) -> str | None:
    """The kind ``typed`` names among ``kinds`` and :data:`KNOWN_KINDS` (case-insensitive; short names, plurals)."""
    by_lower = {k.lower(): k for k in KNOWN_KINDS}
    by_lower.update({k.lower(): k for k in kinds if k})  # the log's own spelling wins
    for word in _candidates(typed.lower()):
        if word in by_lower:
            return by_lower[word]
        if word in SHORT_NAMES:
            return SHORT_NAMES[word]
    return None


def resolve(typed: str, *, kinds: Iterable[str]) -> Target:
    """The :class:`Target` ``typed`` names. An unknown kind is kept as typed (the key then matches nothing, and
    the caller suggests what exists). ``Kind/name`` is cluster-scoped (``Kind//name``)."""
    text = typed.strip()
    cluster, rest = split_member_key(text)
    kind_part, _, path = rest.partition("/")
    kind_word, _, group = kind_part.partition(".")
    if path.count("/") >= 1:
        namespace, _, name = path.partition("/")
    else:
        namespace, name = "", path
    kind = canonical_kind(kind_word, kinds) or kind_word
    key = f"{kind}/{namespace}/{name}"
    return Target(typed=typed, key=f"{cluster}:{key}" if cluster else key, kind=kind, namespace=namespace,
                  name=name, cluster=cluster, group=group or None)


def workload_display(workload: str) -> str:
    """``apps/Deployment/ml/x`` → ``Deployment/ml/x`` (how people type it; the group is in the details)."""
    return workload.partition("/")[2] or workload


def suggest(typed: str, existing: Iterable[str], *, count: int = 5) -> list[str]:
    """The existing keys nearest to ``typed`` (case-insensitive), best first. List pseudo-keys (``Kind/ns/*``,
    ``*/lists``) are left out: nobody means them."""
    by_lower: dict[str, str] = {}
    for key in existing:
        if not key.endswith("*") and "*/" not in key:
            by_lower.setdefault(key.lower(), key)
    wanted = typed.lower()
    close = difflib.get_close_matches(wanted, list(by_lower), n=count, cutoff=0.5)
    if not close:  # a name typed right under a wrong kind or namespace: match on the name alone
        name = wanted.rsplit("/", 1)[-1]
        close = sorted(k for k in by_lower if k.rsplit("/", 1)[-1] == name)[:count]
    return [by_lower[k] for k in close]
