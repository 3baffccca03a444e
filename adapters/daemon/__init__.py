"""The long-running daemon (``tether run``).

* :mod:`.daemon` — :class:`~.daemon.Daemon` and its configuration: sources, the log, executors, endpoints wired;
* :mod:`.loops` — the decider loop (recover, fold, decide, commit) and the pipelined executor loop;
* :mod:`.timers` — serves ``StartTimer`` commands (timers are events);
* :mod:`.endpoints` — ``/healthz``, ``/readyz``, ``/metrics`` and the table-moved push endpoint;
* :mod:`.metrics` — the Prometheus metrics the daemon sets.
"""
