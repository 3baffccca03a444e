"""The fold: the world (``core.world``) filled from the event log, one event at a time (``fold``) or a replay at once
(``replay_fold``), snapshots of it, and ``step``, the composition root (the fold, then every capability's decider).
Imports only ``core/``."""
