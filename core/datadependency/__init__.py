"""Data-dependency scheduling (seed 000): claims → one catalog lookup per table → DataSource → binding exclusions.

* :mod:`.decider` — the decider: claims, DataSources and ResourceBindings computed level-triggered from the world;
* :mod:`.exclusions` — the exclusion arithmetic on a binding's ``spec.placement`` (what tether adds, and takes back).

Volcano Global's plugin ConfigMap (catalog systems, location mapping, retry, auth) is ``core.plugin_config``: the
world holds it and the catalog adapter reads it, so it is shared language. The room imports the shared language
(``core.commands``, ``core.world`` …) and nothing else: no other capability, nothing of ``projections/``.
"""
