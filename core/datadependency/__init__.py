"""Data-dependency scheduling (seed 000): claims → one catalog lookup per table → DataSource → binding exclusions.

* :mod:`.decider` — the decider: claims, DataSources and ResourceBindings computed level-triggered from the world;
* :mod:`.exclusions` — the exclusion arithmetic on a binding's ``spec.placement`` (what tether adds, and takes back);
* :mod:`.plugin_config` — Volcano Global's plugin ConfigMap (catalog systems, location mapping, retry, auth).

The room imports the shared language (``core.commands``, ``core.events`` …) and ``projections``; nothing in it
imports another capability.
"""
