"""Adapters: tether's contact with the outside world, one folder per outside system or role.

Product (what ``tether run`` and the CLI use):

* :mod:`.log` — the event-log seam and its backends (SQLite, Kafka), ``open_log(url)``;
* :mod:`.kubernetes` — the API client, watch sources, the command executor, leader election, manifests;
* :mod:`.catalog` — Iceberg REST / Amoro resolvers, their HTTP machinery, the registry, the catalog executor;
* :mod:`.daemon` — the daemon's wiring, the decider loop and executor pipeline, timers, endpoints, metrics;
* :mod:`.cli` — the ``tether`` command, one module per command group.

Not product:

* :mod:`.sandbox` — the Kubernetes API emulator, the sandbox catalog and the demo's world (only ``tether demo``
  imports from here);
* :mod:`.testing` — stacks and doubles for tests and ``ops/bench`` (never imported by the product).

``tests/test_layout.py`` enforces these import rules.
"""
