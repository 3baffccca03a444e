"""Admission's configuration: Volcano's ``volcano-scheduler.conf`` (actions and tiers of plugins), parsed strictly.

A Volcano configuration is accepted as it is: plugins that act on pods and nodes (the member clusters' own
schedulers do that) are listed as ignored rather than refused, and the switches tether has no use for are
skipped. Anything else unknown — an action, a plugin, an option, an argument or its type — is refused with the
tier and plugin named, so that a typo never silently changes who is admitted.
"""

from __future__ import annotations

import yaml

from .model import AdmissionConfig, PluginOption, Tier
from .plugins import PLUGINS


class AdmissionConfigError(ValueError):
    """A configuration tether cannot run; the message names the tier (from 1) and the plugin."""

    def __init__(self, message: str, *, tier: int | None = None, plugin: str | None = None) -> None:
        where = " ".join(part for part in (f"tier {tier}" if tier else "", f"plugin {plugin!r}" if plugin else "")
                         if part)
        super().__init__(f"admission config: {where + ': ' if where else ''}{message}")
        self.tier = tier
        self.plugin = plugin


#: Volcano's actions. tether's admission is ``enqueue``; placing (``allocate``) is karmada-scheduler's, and
#: taking an admission back (``preempt``, ``reclaim``) is impossible once a binding is scheduled.
KNOWN_ACTIONS = frozenset({"enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle"})
NODE_LEVEL_PLUGINS = frozenset({
    "conformance", "predicates", "nodeorder", "binpack", "overcommit", "tdm", "sla", "task-topology", "numaaware",
    "extender", "deviceshare", "resource-strategy-fit", "network-topology-aware", "usage", "cdp", "rescheduling",
    "pdb", "nodegroup",
})
_SWITCHES = {"enableQueueOrder": "enable_queue_order", "enableJobOrder": "enable_binding_order",
             "enablePredicate": "enable_predicate"}

DEFAULT_ADMISSION_CONFIG_YAML = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: datadependency
- plugins:
  - name: drf
  - name: capacity
  - name: proportion
"""


def parse_admission_config(text: str) -> AdmissionConfig:
    """Parse a ``volcano-scheduler.conf`` document; raises :class:`AdmissionConfigError` naming what is wrong."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise AdmissionConfigError(f"not YAML: {error}") from None
    if not isinstance(document, dict):
        raise AdmissionConfigError("expected a mapping with 'actions' and 'tiers'")
    unknown = sorted(set(document) - {"actions", "tiers", "configurations", "metrics"})
    if unknown:
        raise AdmissionConfigError(f"unknown keys {unknown}")
    raw_actions = document.get("actions", "enqueue")
    if isinstance(raw_actions, str):
        actions = tuple(a.strip() for a in raw_actions.split(",") if a.strip())
    elif isinstance(raw_actions, list) and all(isinstance(a, str) for a in raw_actions):
        actions = tuple(a.strip() for a in raw_actions)
    else:
        raise AdmissionConfigError(f"actions: expected a comma-separated string, got {raw_actions!r}")
    for action in actions:
        if action not in KNOWN_ACTIONS:
            raise AdmissionConfigError(f"unknown action {action!r} (known: {', '.join(sorted(KNOWN_ACTIONS))})")
    if "enqueue" not in actions:
        raise AdmissionConfigError("actions must include 'enqueue' (admission is Volcano's enqueue action)")
    raw_tiers = document.get("tiers")
    if not isinstance(raw_tiers, list) or not raw_tiers:
        raise AdmissionConfigError("tiers: expected a non-empty list of {plugins: [...]}")
    tiers: list[Tier] = []
    ignored: list[str] = []
    seen: set[str] = set()
    for number, raw_tier in enumerate(raw_tiers, start=1):
        if not isinstance(raw_tier, dict) or set(raw_tier) != {"plugins"} or not isinstance(raw_tier["plugins"], list):
            raise AdmissionConfigError("expected {plugins: [...]}", tier=number)
        options: list[PluginOption] = []
        for raw in raw_tier["plugins"]:
            name = raw.get("name") if isinstance(raw, dict) else None
            if not isinstance(name, str) or not name:
                raise AdmissionConfigError(f"a plugin needs a name, got {raw!r}", tier=number)
            if name in seen:
                raise AdmissionConfigError("configured twice", tier=number, plugin=name)
            seen.add(name)
            if name in NODE_LEVEL_PLUGINS:
                ignored.append(name)
                continue
            plugin = PLUGINS.get(name)
            if plugin is None:
                raise AdmissionConfigError(f"unknown plugin (known: {', '.join(sorted(PLUGINS))})", tier=number,
                                           plugin=name)
            switches: dict[str, bool] = {}
            for key, value in raw.items():
                if key in ("name", "arguments"):
                    continue
                if not key.startswith("enable") or not isinstance(value, bool):
                    raise AdmissionConfigError(f"unknown option {key}: {value!r}", tier=number, plugin=name)
                if key in _SWITCHES:  # other Volcano switches (enablePreemptable, ...) have no meaning here
                    switches[_SWITCHES[key]] = value
            arguments = raw.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise AdmissionConfigError(f"arguments: expected a mapping, got {arguments!r}", tier=number,
                                           plugin=name)
            for key, value in arguments.items():
                expected = plugin.arguments.get(key)
                if expected is None:
                    known = ", ".join(sorted(plugin.arguments)) or "none"
                    raise AdmissionConfigError(f"unknown argument {key!r} (known: {known})", tier=number, plugin=name)
                if type(value) is not expected:
                    raise AdmissionConfigError(f"argument {key}: expected {expected.__name__}, got {value!r}",
                                               tier=number, plugin=name)
            options.append(PluginOption(name=name, arguments=dict(arguments), **switches))
        if not options and not ignored:
            raise AdmissionConfigError("has no plugins", tier=number)
        tiers.append(Tier(plugins=tuple(options)))
    return AdmissionConfig(actions=actions, tiers=tuple(tiers), ignored=tuple(ignored))


DEFAULT_ADMISSION_CONFIG = parse_admission_config(DEFAULT_ADMISSION_CONFIG_YAML)


__all__ = [
    "DEFAULT_ADMISSION_CONFIG", "DEFAULT_ADMISSION_CONFIG_YAML", "AdmissionConfigError", "parse_admission_config",
]
