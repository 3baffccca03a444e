"""tether: an async event-sourced control plane that ties compute to its data and topology.

The code lives in the repository's top-level ``core/``, ``projections/`` and ``adapters/`` folders (the layout
of the design card); this package makes them importable as ``tether.core``, ``tether.projections`` and
``tether.adapters`` through symbolic links, so that nothing with a generic top-level name is ever installed.
"""

__version__ = "0.1.0"
