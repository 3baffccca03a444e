"""Admission's configuration: Volcano's ``volcano-scheduler.conf`` (actions and tiers of plugins), parsed strictly.

A Volcano configuration is accepted as it is: plugins that act on pods and nodes (the member clusters' own
schedulers do that) are listed as ignored rather than refused, and the switches tether has no use for are
skipped. Anything else unknown — an action, a plugin, an option, an argument or its type — is refused with the
tier and plugin named, so that a typo never silently changes who is admitted.

The text is someone else's, so the YAML is read defensively (:func:`load_yaml`): no aliases (``*name``: a few
lines of them expand into billions of elements for whoever walks the result — a ``repr`` in an error message, an
encoder), no longer than :data:`MAX_YAML_CHARS` and nested no deeper than :data:`MAX_YAML_DEPTH` (the fold parses
it on the decider's path, and PyYAML is slow: some 20k lines a second, and seconds over a thousand nested ``[``,
so the brackets are counted before its scanner sees them), and every error one line of bounded length, as it ends
up in a log line and the daemon's status.
"""

from __future__ import annotations

import itertools
import re
import reprlib

import yaml

from ..world.admission_state import (
    RECLAIM_POLICIES,
    WITHIN_QUEUE_POLICIES,
    AdmissionConfig,
    PluginOption,
    QueuePolicy,
    Tier,
)
from .plugins import PLUGINS

_MAX_ERROR = 400
_brief = reprlib.Repr()  # a value in an error message, in brief (Python 3.11's Repr takes no arguments)
_brief.maxlevel, _brief.maxdict, _brief.maxlist, _brief.maxstring, _brief.maxother = 3, 4, 4, 40, 40
_show = _brief.repr


class AdmissionConfigError(ValueError):
    """A configuration tether cannot run; the message names the tier (from 1) and the plugin."""

    def __init__(self, message: str, *, tier: int | None = None, plugin: str | None = None) -> None:
        where = " ".join(part for part in (f"tier {tier}" if tier else "", f"plugin {plugin!r}" if plugin else "")
                         if part)
        text = " ".join(f"admission config: {where + ': ' if where else ''}{message}".split())
        super().__init__(text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…")
        self.tier = tier
        self.plugin = plugin


#: How deeply the YAML of a configuration may nest (Volcano's needs four levels), and how long it may be (a
#: volcano-scheduler.conf is a few hundred characters, a queue-managed list of namespaces a few thousand).
MAX_YAML_DEPTH = 32
MAX_YAML_CHARS = 32 * 1024
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


class _DefensiveLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses aliases and nesting deeper than :data:`MAX_YAML_DEPTH` (module doc)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not accepted",
                                              self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                              self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _flow_depth(text: str) -> int:
    """An upper bound of how deeply ``[...]`` and ``{...}`` nest in ``text`` (brackets inside quotes count too)."""
    if text.count("[") + text.count("{") <= MAX_YAML_DEPTH:
        return 0
    brackets = _NOT_A_BRACKET.sub("", text)
    return max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def load_yaml(text: str, *, what: str = "") -> object:
    """A YAML document, read defensively (module doc); raises :class:`AdmissionConfigError` saying why not."""
    if len(text) > MAX_YAML_CHARS:  # PyYAML reads some 20k lines a second: a megabyte would stall the decider
        raise AdmissionConfigError(f"{what}longer than {MAX_YAML_CHARS} characters")
    if _flow_depth(text) > MAX_YAML_DEPTH:  # before PyYAML's scanner, which is quadratic in a flow's depth
        raise AdmissionConfigError(f"{what}not YAML: nested deeper than {MAX_YAML_DEPTH} levels")
    try:
        return yaml.load(text, Loader=_DefensiveLoader)  # a SafeLoader: constructs plain data only
    except yaml.YAMLError as error:
        raise AdmissionConfigError(f"{what}not YAML: {error}") from None
    except RecursionError:
        raise AdmissionConfigError(f"{what}not YAML: nested too deeply") from None


#: Volcano's actions. tether's admission is ``enqueue``; placing (``allocate``) is karmada-scheduler's; ``preempt``
#: and ``reclaim`` turn on the queues' preemption policies (:func:`parse_policies`).
KNOWN_ACTIONS = frozenset({"enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle"})
NODE_LEVEL_PLUGINS = frozenset({
    "conformance", "predicates", "nodeorder", "binpack", "overcommit", "tdm", "sla", "task-topology", "numaaware",
    "extender", "deviceshare", "resource-strategy-fit", "network-topology-aware", "usage", "cdp", "rescheduling",
    "pdb", "nodegroup",
})
_SWITCHES = {"enableQueueOrder": "enable_queue_order", "enableJobOrder": "enable_binding_order",
             "enablePredicate": "enable_predicate"}

#: The default ``volcano-scheduler.conf``: it parses to ``core.world.admission_state.DEFAULT_ADMISSION_CONFIG``.
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
    document = load_yaml(text)
    if not isinstance(document, dict):
        raise AdmissionConfigError("expected a mapping with 'actions' and 'tiers'")
    unknown = sorted(map(str, set(document) - {"actions", "tiers", "configurations", "metrics"}))
    if unknown:
        raise AdmissionConfigError(f"unknown keys {unknown}")
    raw_actions = document.get("actions", "enqueue")
    if isinstance(raw_actions, str):
        actions = tuple(a.strip() for a in raw_actions.split(",") if a.strip())
    elif isinstance(raw_actions, list) and all(isinstance(a, str) for a in raw_actions):
        actions = tuple(a.strip() for a in raw_actions)
    else:
        raise AdmissionConfigError(f"actions: expected a comma-separated string, got {_show(raw_actions)}")
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
                raise AdmissionConfigError(f"a plugin needs a name, got {_show(raw)}", tier=number)
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
                if not isinstance(key, str) or not key.startswith("enable") or not isinstance(value, bool):
                    raise AdmissionConfigError(f"unknown option {_show(key)}: {_show(value)}", tier=number,
                                               plugin=name)
                if key in _SWITCHES:  # other Volcano switches (enablePreemptable, ...) have no meaning here
                    switches[_SWITCHES[key]] = value
            arguments = raw.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise AdmissionConfigError(f"arguments: expected a mapping, got {_show(arguments)}", tier=number,
                                           plugin=name)
            for key, value in arguments.items():
                expected = plugin.arguments.get(key)
                if expected is None:
                    known = ", ".join(sorted(plugin.arguments)) or "none"
                    raise AdmissionConfigError(f"unknown argument {_show(key)} (known: {known})", tier=number,
                                               plugin=name)
                if type(value) is not expected:
                    raise AdmissionConfigError(f"argument {key}: expected {expected.__name__}, got {_show(value)}",
                                               tier=number, plugin=name)
            options.append(PluginOption(name=name, arguments=dict(arguments), **switches))
        if not options and not ignored:
            raise AdmissionConfigError("has no plugins", tier=number)
        tiers.append(Tier(plugins=tuple(options)))
    policies = parse_policies(document.get("configurations"))
    return AdmissionConfig(actions=actions, tiers=tuple(tiers), ignored=tuple(ignored), policies=policies)


#: What a queue's policy may say, and the values each takes (the first is the default).
_POLICY_FIELDS = {"withinQueue": ("within_queue", WITHIN_QUEUE_POLICIES), "reclaim": ("reclaim", RECLAIM_POLICIES)}


def parse_policies(configurations: object) -> dict[str, QueuePolicy]:
    """The queues' preemption policies from Volcano's ``configurations`` (a list of ``{name: <action>,
    arguments: {...}}``): the ``preempt`` action's argument ``queues`` maps a queue's name to its policy in Kueue's
    terms, ``{withinQueue: Never | LowerPriority, reclaim: Never | LowerPriority | Any}``. Everything of it is read
    strictly (an unknown queue field or value is refused, naming the queue); the other arguments of ``preempt`` and
    the other actions' configurations are Volcano's node-level settings and are passed over, as they always were."""
    if not isinstance(configurations, list):
        return {}
    preempt = [entry for entry in configurations if isinstance(entry, dict) and entry.get("name") == "preempt"]
    if len(preempt) > 1:
        raise AdmissionConfigError("configurations: 'preempt' configured twice")
    if not preempt:
        return {}
    arguments = preempt[0].get("arguments") or {}
    if not isinstance(arguments, dict):
        raise AdmissionConfigError(f"configurations: preempt: arguments: expected a mapping, got {_show(arguments)}")
    queues = arguments.get("queues")
    if queues is None:
        return {}
    if not isinstance(queues, dict):
        raise AdmissionConfigError(f"configurations: preempt: queues: expected a mapping of queue name to "
                                   f"{{withinQueue, reclaim}}, got {_show(queues)}")
    policies: dict[str, QueuePolicy] = {}
    for name, raw in sorted(queues.items(), key=lambda item: str(item[0])):
        where = f"configurations: preempt: queue {_show(name)}"
        if not isinstance(name, str) or not name:
            raise AdmissionConfigError(f"{where}: a queue name is a non-empty string")
        if not isinstance(raw, dict):
            raise AdmissionConfigError(f"{where}: expected {{withinQueue, reclaim}}, got {_show(raw)}")
        fields: dict[str, str] = {}
        for key, value in raw.items():
            known = _POLICY_FIELDS.get(key) if isinstance(key, str) else None
            if known is None:
                raise AdmissionConfigError(f"{where}: unknown field {_show(key)} (known: withinQueue, reclaim)")
            field, allowed = known
            if value not in allowed:
                raise AdmissionConfigError(f"{where}: {key}: unknown policy {_show(value)} (known: "
                                           f"{', '.join(allowed)})")
            fields[field] = value
        policies[name] = QueuePolicy(**fields)
    return policies


__all__ = [
    "DEFAULT_ADMISSION_CONFIG_YAML", "AdmissionConfigError", "load_yaml",
    "parse_admission_config", "parse_policies",
]
