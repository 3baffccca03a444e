"""``tether replay``: rebuild the world from the log, explain a decision, diff the deciders, re-decide under
another configuration.

* :mod:`.rebuild` — rebuild the world: the events stream folded (from a snapshot when one covers a prefix);
* :mod:`.trail` — the decision trail of one log key (``--explain``), from the log's indexes;
* :mod:`.diff` — re-run the deciders over the recorded events and compare (``--diff``);
* :mod:`.whatif` — re-decide the history under a candidate configuration (``--what-if``);
* :mod:`.command` — the click command and what each mode prints.
"""
