"""How strictly a workload is kept next to its data: the locality policy, and where it is configured.

``Required`` (the default, and Volcano Global's behaviour): a workload runs only on the clusters holding its data;
when they are full it waits. ``Preferred``: tether writes the binding's ``placement.clusterAffinities`` as ordered
groups — the data's clusters, then the clusters near them (sharing the value of a topology label such as
``topology.karmada.io/region``), then, when configured, any cluster — and karmada-scheduler falls over to the next
group only when one cannot hold the workload (``core.datadependency.tiers``; docs/locality-tiers.md).

Three levels may say it, each overriding what the one before it sets, field by field:

1. the plugin ConfigMap's entry of the claim's system: ``"locality": {"policy": ..., "topologyKey": ...,
   "anywhere": ...}``;
2. in that entry, the longest prefix of the claim's table (``dataSourceName``) under ``"byTablePrefix"``;
3. the claim's own ``spec.locality`` (tether's CRD; with Volcano Global's CRD installed the API server prunes the
   field, and the ConfigMap is the way to say it).

The ConfigMap is Volcano Global's format plus a key of tether's own, so it works with either CRD. A malformed
``locality`` never spoils its plugin (that would unbind every claim of the system and strip their bindings): it is
refused with a reason and the plugin's previous locality stays in force (``core.plugin_config``). Whether a cluster
carries the topology label is a question about the world, answered where the tiers are planned.

Pure data and parsing: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

REQUIRED, PREFERRED = "Required", "Preferred"
POLICIES = (REQUIRED, PREFERRED)

#: A label key: an optional DNS-subdomain prefix and ``/``, then a name of at most 63 characters (Kubernetes' rule).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"^({_PREFIX}/)?{_NAME}$")


class LocalitySetting(msgspec.Struct, frozen=True, kw_only=True):
    """What one level says: only the fields it sets (``""`` / ``None``: not set here)."""

    policy: str = ""
    topology_key: str = ""
    anywhere: bool | None = None
    problem: str = ""  # a claim's spec.locality that does not parse: why (the setting is then refused)

    @property
    def empty(self) -> bool:
        return not self.policy and not self.topology_key and self.anywhere is None


class Locality(msgspec.Struct, frozen=True, kw_only=True):
    """A claim's locality, every level applied. ``source`` says which levels set something (for reasons)."""

    policy: str = REQUIRED
    topology_key: str = ""
    anywhere: bool = False
    source: str = ""

    @property
    def preferred(self) -> bool:
        return self.policy == PREFERRED

    def over(self, setting: LocalitySetting, where: str) -> Locality:
        """This locality with ``setting`` applied on top (``where`` it comes from)."""
        if setting.empty:
            return self
        return Locality(policy=setting.policy or self.policy, topology_key=setting.topology_key or self.topology_key,
                        anywhere=self.anywhere if setting.anywhere is None else setting.anywhere,
                        source=f"{self.source}, {where}" if self.source else where)


DEFAULT_LOCALITY = Locality()
NO_SETTING = LocalitySetting()


class PluginLocality(msgspec.Struct, frozen=True):
    """A plugin's ``locality``: its own setting and the settings of table prefixes."""

    default: LocalitySetting = NO_SETTING
    by_prefix: tuple[tuple[str, LocalitySetting], ...] = ()

    @property
    def configured(self) -> bool:
        return not self.default.empty or bool(self.by_prefix)

    def for_table(self, table: str) -> tuple[str, LocalitySetting]:
        """The longest table prefix matching ``table`` and its setting (``("", NO_SETTING)``: none)."""
        best: tuple[str, LocalitySetting] = ("", NO_SETTING)
        for prefix, setting in self.by_prefix:
            if table.startswith(prefix) and len(prefix) > len(best[0]):
                best = (prefix, setting)
        return best


NO_PLUGIN_LOCALITY = PluginLocality()


def label_key_problem(key: str) -> str:
    """Why ``key`` is not a label key ("" when it is one)."""
    if not _LABEL_KEY.match(key) or len(key.partition("/")[0]) > 253:
        return f"{key!r} is not a label key (an optional DNS prefix and '/', then a name of up to 63 characters)"
    return ""


def parse_setting(doc: Any, field: str) -> LocalitySetting:
    """One level's setting from its JSON/YAML form (``{policy, topologyKey, anywhere}``); raises ``ValueError``
    naming the field."""
    if doc is None:
        return NO_SETTING
    if not isinstance(doc, dict):
        raise ValueError(f"{field}: expected an object with policy, topologyKey, anywhere")
    unknown = sorted(str(k) for k in doc if k not in ("policy", "topologyKey", "anywhere"))
    if unknown:
        raise ValueError(f"{field}: unknown keys {unknown} (known: policy, topologyKey, anywhere)")
    policy = doc.get("policy") or ""
    if policy and policy not in POLICIES:
        raise ValueError(f"{field}.policy: expected Required or Preferred, got {policy!r}")
    key = doc.get("topologyKey") or ""
    if not isinstance(key, str):
        raise ValueError(f"{field}.topologyKey: expected a label key, got {key!r}")
    if key and (problem := label_key_problem(key)):
        raise ValueError(f"{field}.topologyKey: {problem}")
    anywhere = doc.get("anywhere")
    if anywhere is not None and not isinstance(anywhere, bool):
        raise ValueError(f"{field}.anywhere: expected true or false, got {anywhere!r}")
    return LocalitySetting(policy=policy, topology_key=key, anywhere=anywhere)


def parse_plugin_locality(doc: Any) -> PluginLocality:
    """A plugin entry's ``locality`` (``{policy, topologyKey, anywhere, byTablePrefix: {prefix: {...}}}``); raises
    ``ValueError`` naming the field."""
    if doc is None:
        return NO_PLUGIN_LOCALITY
    if not isinstance(doc, dict):
        raise ValueError("locality: expected an object")
    prefixes = doc.get("byTablePrefix")
    if prefixes is not None and not isinstance(prefixes, dict):
        raise ValueError("locality.byTablePrefix: expected an object of table prefix → {policy, topologyKey, anywhere}")
    default = parse_setting({k: v for k, v in doc.items() if k != "byTablePrefix"}, "locality")
    by_prefix = tuple(sorted((str(prefix), parse_setting(setting, f"locality.byTablePrefix[{prefix!r}]"))
                             for prefix, setting in (prefixes or {}).items()))
    return PluginLocality(default=default, by_prefix=by_prefix)


def resolve_locality(plugin: PluginLocality, table: str, claim: LocalitySetting | None) -> Locality:
    """A claim's locality: the plugin's, then its table prefix's, then the claim's own (module doc)."""
    locality = DEFAULT_LOCALITY.over(plugin.default, "the plugin ConfigMap")
    prefix, setting = plugin.for_table(table)
    if prefix:
        locality = locality.over(setting, f"table prefix {prefix!r}")
    if claim is not None:
        locality = locality.over(claim, "the claim")
    return locality


__all__ = [
    "DEFAULT_LOCALITY", "NO_PLUGIN_LOCALITY", "NO_SETTING", "POLICIES", "PREFERRED", "REQUIRED", "Locality",
    "LocalitySetting", "PluginLocality", "label_key_problem", "parse_plugin_locality", "parse_setting",
    "resolve_locality",
]
