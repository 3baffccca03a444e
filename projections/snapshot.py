"""Snapshots of the world: msgpack-encoded state plus the log position it covers.

A snapshot lets a restart (or ``tether replay``) fold only the tail of the log. It is stored by the log backend
next to the position it covers (``adapters.log.Snapshot``), so the two can never disagree. The encoding is
msgspec's msgpack of the :class:`~tether.core.world.World` struct; a snapshot written by another schema
version is simply ignored (the log is the source of truth — a snapshot is only a cache of a fold).
"""

from __future__ import annotations

import msgspec

from tether.core.world import World

from .fold import canonical_indexes

#: Bump when World changes shape; older snapshots are then discarded and the log is replayed from the start.
SNAPSHOT_VERSION = 13  # 8: World.claims_namespace; a DataSource location another writer wrote is adopted; 9: settings
# from the log (SettingsApplied), data holds, Fluid operations' status and outcomes; 10: a binding keeps its placement
# only (placement_json) and tether's annotations only; 11: World.statuses_in_flight, and the deciders of issue 35 (no
# claim finalizer, Events only where they change something); 12: Clusters' places (labels, fields), a claim's locality
# and dataset, a binding's observed affinity group, the plugins' locality (issue 36); 13: admission keeps when each
# binding was admitted and the evictions under way, a binding its components, dispatching suspension and whom it was
# evicted for, a Queue whether it is reclaimable, the configuration the queues' preemption policies (issue 37)


class _Envelope(msgspec.Struct):
    version: int
    world: World


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Envelope)


def encode_world(world: World) -> bytes:
    return _encoder.encode(_Envelope(version=SNAPSHOT_VERSION, world=world))


def decode_world(data: bytes) -> World | None:
    """The world in a snapshot, or None when the snapshot is unreadable or of another version."""
    try:
        envelope = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if envelope.version != SNAPSHOT_VERSION:
        return None
    canonical_indexes(envelope.world)  # (the indexes' entries decode as lists)
    return envelope.world
