"""Machinery for tests and ``ops/bench`` — never imported by the product.

* :mod:`.daemon` — a whole stack (emulator or real cluster, sandbox catalog, daemon) in-process or as a child;
* :mod:`.kafka` — the tansu Kafka-protocol test broker;
* :mod:`.fake_cluster` — an in-memory cluster that applies commands, for decider scenarios and synthetic logs;
* :mod:`.synthetic_log` — large realistic logs for the replay and Kafka benchmarks;
* :mod:`.reference` — where other projects' reference material is (``../shared/reference``), for tests that
  compare tether with it.
"""
