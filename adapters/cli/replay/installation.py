"""Which ConfigMaps the daemon that wrote a log read: the plugin ConfigMap and the admission ConfigMap.

The world folds the plugin ConfigMap (the location mapping) and the admission ConfigMap by name
(:class:`~tether.core.world.Settings`), and ``tether run`` lets both be renamed (``--plugin-configmap``,
``--admission-configmap``). The log records the observations but not the daemon's flags, so a replay with the
default names of a log written under others would fold no mapping at all: ``--explain`` would say "no plugin",
``--diff`` would differ, ``--what-if`` would compare nothing. A snapshot carries the daemon's settings; without one,
:func:`infer_settings` reads them from the log:

* a name given on the command line wins;
* else the default name, when the log observed a ConfigMap of that name;
* else the one observed ConfigMap whose data reads as such: plugin entries that parse (the plugin ConfigMap), or
  the ``volcano-scheduler.conf`` / ``queue-managed`` keys (the admission ConfigMap). Two candidates, or none,
  leave the default (the answer then says "no plugin … in ConfigMap/<default>", which names what to pass).

Logs written since the daemon records its settings (:class:`~tether.core.events.SettingsApplied`, appended with its
first lists) say it themselves: the fold applies the recorded names from that event on, whatever was inferred or
given here — which then only matters for the events before it (a log written by an older daemon).
"""

from __future__ import annotations

from tether.core.events import ObjectObserved
from tether.core.plugin_config import parse_plugin_configmap
from tether.core.world import Settings
from tether.projections.admission_fold import CONFIG_KEY, MANAGED_KEY

from .targets import kind_of
from .trail import Bounds, LogIndex, events_by_key

CONFIGMAP = "ConfigMap"


async def infer_settings(index: LogIndex, *, plugin_configmap: str | None = None,
                         admission_configmap: str | None = None) -> Settings:
    """The :class:`Settings` the log was written under (module docstring)."""
    default = Settings()
    names = sorted(k.partition("/")[2] for k in await index.keys("events")
                   if kind_of(k) == CONFIGMAP and ":" not in k and not k.endswith("/*"))
    if plugin_configmap is not None and admission_configmap is not None:
        return Settings(plugin_configmap=plugin_configmap, admission_configmap=admission_configmap)
    plugins: list[str] = []
    admissions: list[str] = []
    for name in names:
        observed = [e.event for e in await events_by_key(index, f"{CONFIGMAP}/{name}", Bounds())
                    if isinstance(e.event, ObjectObserved)]
        if not observed:
            continue
        data = dict(observed[-1].obj.data)
        if CONFIG_KEY in data or MANAGED_KEY in data:
            admissions.append(name)
        elif data and parse_plugin_configmap(data).plugins:
            plugins.append(name)

    def pick(given: str | None, default_name: str, found: list[str]) -> str:
        if given is not None:
            return given
        if default_name in names or len(found) != 1:
            return default_name
        return found[0]

    return Settings(plugin_configmap=pick(plugin_configmap, default.plugin_configmap, plugins),
                    admission_configmap=pick(admission_configmap, default.admission_configmap, admissions))
