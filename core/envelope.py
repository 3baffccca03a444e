"""The envelope around every record of the log, and its (de)coding.

Two streams make up the log: **events** (facts, :class:`EventRecord`) and **commands** (requests derived
from events by the deciders, :class:`CommandRecord`). Each record carries:

* ``offset`` — its position in its stream, assigned by the log on append (0 until then), numbered from 1 in
  every backend. Kafka offsets are per partition: the Kafka adapter fills ``partition`` and sets ``offset`` to
  the Kafka offset + 1, so a position ``{partition: offset}`` is exactly Kafka's committed offset.
* ``at_ms`` — the append time (milliseconds since the epoch, UTC). This is the *only* clock the deciders
  see: a condition's lastTransitionTime or a timer's due time are computed from it, never from ``time.time()``.
* ``source`` — who appended it (``watch``, ``catalog``, ``executor``, ``timer``, ``cli``…).
* ``key`` — the object (or data identity) it is about; the Kafka message key.
* ``schema`` — the schema version of the payload; older records are upcast on read (:func:`upcast`).
* ``causation`` — what led to it: a command id for an outcome event, an event position for a command.

Records are encoded as JSON with msgspec: readable with ``sqlite3``/``kcat``, schema-described for outside
consumers, and decoded straight into typed structs at several hundred thousand records per second.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

import msgspec

from .commands import COMMAND_TYPES, Command
from .events import EVENT_SCHEMA_VERSION, CommandSucceeded, Event, ObjectObserved, member_key
from .integers import decimal_digits
from .kube import KubeObject

COMMAND_SCHEMA_VERSION = 1


class EventRecord(msgspec.Struct, gc=False, omit_defaults=True):
    at_ms: int
    source: str
    key: str
    event: Event
    causation: str = ""
    schema: int = EVENT_SCHEMA_VERSION
    offset: int = 0
    partition: int = 0


class CommandRecord(msgspec.Struct, gc=False, omit_defaults=True):
    """A command, with the event that caused it and the decider's reason in plain words."""

    id: str
    at_ms: int
    key: str
    command: Command
    causation: str
    reason: str = ""
    decider: str = ""
    schema: int = COMMAND_SCHEMA_VERSION
    offset: int = 0
    partition: int = 0


_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(EventRecord)
_command_decoder = msgspec.json.Decoder(CommandRecord)

#: Upcasters by (stream, schema version they read): each turns a raw record dict of that version into the
#: next version. Version 1 is the first; upcasters are added here when a payload changes incompatibly.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def encode(record: EventRecord | CommandRecord) -> bytes:
    return _encoder.encode(record)


def upcast(stream: str, raw: dict[str, Any], *, current: int) -> dict[str, Any]:
    version = int(raw.get("schema", 1))
    if version > current:
        raise ValueError(f"{stream} record has schema {version}, newer than this tether understands ({current})")
    while version < current:
        step = UPCASTERS.get((stream, version))
        if step is None:
            raise ValueError(f"no upcaster for {stream} schema {version}")
        raw = step(raw)
        version += 1
        raw["schema"] = version
    return raw


def _decode(data: bytes | str, decoder: msgspec.json.Decoder[Any], stream: str, current: int, cls: type[Any]) -> Any:
    """Decode a record; a JSON document nested deeper than the decoder can recurse is a ``ValueError`` like any
    other bad record (the readers dead-letter it), never a ``RecursionError`` that would stop them."""
    try:
        return _decode_record(data, decoder, stream, current, cls)
    except RecursionError:
        raise ValueError(f"{stream} record nested too deeply to decode") from None


def _decode_record(data: bytes | str, decoder: msgspec.json.Decoder[Any], stream: str, current: int,
                   cls: type[Any]) -> Any:
    """Decode a record straight into its struct; a record of an older schema goes through the upcasters."""
    try:
        record = decoder.decode(data)
    except msgspec.ValidationError:
        raw = msgspec.json.decode(data)
        if not isinstance(raw, dict) or int(raw.get("schema", 1)) == current:
            raise
        return msgspec.convert(upcast(stream, raw, current=current), cls)
    if record.schema != current:
        return msgspec.convert(upcast(stream, msgspec.json.decode(data), current=current), cls)
    return record


def decode_event(data: bytes | str) -> EventRecord:
    """Decode an event record; records of an older schema are upcast. Raises msgspec/ValueError if bad."""
    record: EventRecord = _decode(data, _event_decoder, "events", EVENT_SCHEMA_VERSION, EventRecord)
    return record


def decode_command(data: bytes | str) -> CommandRecord:
    record: CommandRecord = _decode(data, _command_decoder, "commands", COMMAND_SCHEMA_VERSION, CommandRecord)
    return record


class CommandType(msgspec.Struct, gc=False):
    """A command's tag alone (its class name: ``SetBindingPlacement``), the rest of it skipped."""

    type: str


class CommandHead(msgspec.Struct, gc=False):
    """A recorded command without its body: what ``tether replay`` needs to note most commands as issued (the
    command's type, its target — the record's ``key`` — and its id), decoded in about half the time of the whole
    record and a fraction of its objects. :meth:`record` decodes the whole record when the body is needed.

    ``body`` is the stored record (kept, not decoded); ``decoded`` the whole record once decoded (or when the head
    was made from it, :meth:`of`). Neither is ever encoded: a head is only read. The body is not checked until it
    is decoded: a record damaged inside its command's body is read by its head (its type, target and id) where a
    whole decode would skip it; the executor, which decodes commands whole, dead-letters it."""

    id: str
    at_ms: int
    key: str
    command: CommandType
    causation: str
    schema: int = COMMAND_SCHEMA_VERSION
    offset: int = 0
    partition: int = 0
    body: Any = b""  # bytes or str (as stored); Any: a decoder takes no union of the two
    decoded: CommandRecord | None = None

    @classmethod
    def of(cls, record: CommandRecord) -> CommandHead:
        """The head of a whole record (a backend that decodes whole records, a test)."""
        return cls(id=record.id, at_ms=record.at_ms, key=record.key, command=CommandType(type(record.command).__name__),
                   causation=record.causation, schema=record.schema, offset=record.offset,
                   partition=record.partition, decoded=record)

    def record(self) -> CommandRecord:
        """The whole record (decoded on first call)."""
        if self.decoded is None:
            self.decoded = decode_command(self.body)
            self.decoded.offset, self.decoded.partition = self.offset, self.partition
        return self.decoded


_head_decoder = msgspec.json.Decoder(CommandHead)
_COMMAND_TAGS = frozenset(cls.__name__ for cls in COMMAND_TYPES)


def decode_command_head(data: bytes | str) -> CommandHead:
    """The head of a stored command record (:class:`CommandHead`); a record of another schema version, or one the
    head does not fit, is decoded whole (upcast) and its head made from that. Raises as :func:`decode_command`."""
    try:
        head = _head_decoder.decode(data)
    except (msgspec.ValidationError, RecursionError):
        head = None
    if head is None or head.schema != COMMAND_SCHEMA_VERSION or head.command.type not in _COMMAND_TAGS:
        return CommandHead.of(decode_command(data))  # (raises for a tag no command has, as a whole record would)
    head.body, head.decoded = data, None  # (a stored record names neither: these are the reader's)
    return head


def cause_position(causation: str) -> tuple[int, int] | None:
    """The events position (partition, offset) a command's causation names (``partition:offset``, as
    ``projections.step`` records it); None for anything else (a command id: the causation of an outcome event)."""
    partition_text, _, offset_text = causation.partition(":")
    partition, offset = decimal_digits(partition_text), decimal_digits(offset_text)
    return None if partition is None or offset is None else (partition, offset)


def object_version(record: EventRecord) -> str:
    """The resourceVersion of the object ``record`` carries under its own key — an observation's object, or a write's
    result whose target is the record's key — else ``""``. A log may store it beside the record (the SQLite log's
    ``version`` column) so that a replay can tell which version of an object is the latest without decoding the
    others (:class:`StoredEvent`)."""
    event = record.event
    if isinstance(event, ObjectObserved):
        obj: KubeObject | None = event.obj
        cluster = event.cluster
    elif isinstance(event, CommandSucceeded):
        obj, cluster = event.result, ""
    else:
        return ""
    if obj is None or record.key != member_key(cluster, obj.key):
        return ""
    return obj.metadata.resource_version


class StoredEvent(msgspec.Struct, gc=False):
    """An event record as its log stored it, not decoded yet: what the log's columns say of it (its type, its key,
    and the resourceVersion of the object it carries under that key: :func:`object_version`) and its body.

    A replay holds only the latest version of most objects (``projections.replay_fold``); reading each record whole
    costs as much as folding it, and most versions are superseded before anything reads them. A log that stores those
    columns hands such records over undecoded, and :meth:`obj` decodes the one version that is kept."""

    offset: int
    type: str  # the event's tag: ObjectObserved, CommandSucceeded
    key: str  # the record's key: Kind/namespace/name, or <cluster>:Kind/namespace/name for a member's object
    version: str  # the object's resourceVersion
    body: Any  # bytes or str, as stored
    partition: int = 0

    @property
    def at_ms(self) -> int:
        """The record's time (decoded: a reader needs it of few records, the last one folded)."""
        return self.record().at_ms

    def record(self) -> EventRecord:
        """The whole record (decoded at each call). Raises as :func:`decode_event`."""
        record = decode_event(self.body)
        record.offset, record.partition = self.offset, self.partition
        return record

    def obj(self) -> KubeObject:
        """The object the record carries (a ``KubeObject``). Raises ``ValueError`` if the body does not decode to an
        object of this key and version (the columns and the body disagree: a damaged log)."""
        try:
            event = self.record().event
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            raise ValueError(f"events record {self.offset} ({self.key}) does not decode: {exc}") from exc
        obj = event.obj if isinstance(event, ObjectObserved) else \
            event.result if isinstance(event, CommandSucceeded) else None
        if obj is None or obj.metadata.resource_version != self.version:
            raise ValueError(f"events record {self.offset} ({self.key}) is not version {self.version!r} of it")
        return obj


#: The last second :func:`rfc3339` formatted, and its text. Consecutive events mostly fall in the same second,
#: and every decision that writes a condition formats its event's time. The memo is keyed by the (immutable)
#: second itself, so it can never answer for another time: it only saves the ``strftime``.
_last_rfc3339: tuple[int | None, str] = (None, "")


def rfc3339(at_ms: int) -> str:
    """Kubernetes' time format (second precision, UTC) for a log time. Pure: no clock is read."""
    global _last_rfc3339
    second = at_ms // 1000
    last = _last_rfc3339
    if last[0] == second:
        return last[1]
    text = _dt.datetime.fromtimestamp(second, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _last_rfc3339 = (second, text)
    return text


def parse_rfc3339_ms(text: str) -> int | None:
    """The inverse of :func:`rfc3339` (accepts fractions and offsets); None when unparseable."""
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return int(when.timestamp() * 1000)
