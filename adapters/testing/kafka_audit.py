"""What a broker restart must leave of a tether Kafka log, checked on the bytes the broker stores.

:func:`read_log` reads every record of the log's events and commands topics, raw (partition, offset, key, value),
up to the high-water marks seen when it starts: a cut of what the broker had *acknowledged* then. Taken just before
the broker is killed, and again at the end of the run, :func:`audit` compares them:

* ``lost``: a record of the earlier cut that is not at its offset in the later one, or not byte for byte the same —
  an acknowledged append that the restart lost or rewrote;
* ``disorder``: a partition whose offsets do not strictly increase — the offsets did not go on from where they
  were;
* ``holes`` (reported, not a failure): offsets missing inside a partition. tansu's object-store engine reserves a
  batch's offsets (its high-water mark object) *before* it stores the batch, so an append in flight at the kill
  can leave its offsets empty: never acknowledged, so the producer sends it again, after the hole. Kafka consumers
  step over holes (compacted topics have them too) and tether does; a hole where a record had been acknowledged
  is ``lost``;
* ``conflicts``: a command id stored, for one causing event, with different bytes — decided twice with different
  results. (A command's bytes are a function of its causing event: its id hashes its content and its ``at_ms`` is
  its event's; so a decider that re-processes an event after the restart must append the very same bytes.)
* ``redecided``: how many (command id, causing event) pairs are stored more than once — the at-least-once
  re-decisions a restart causes, counted to show what the run exercised (not a failure: the same bytes again).

Duplicated *events* are not checked here: an outcome event re-reported after a restart may carry another time;
deciders fold a repeated event to the same state, which ``tether replay --diff`` and the run's convergence check.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from tether.adapters.log.kafka_config import parse_kafka_url
from tether.core.envelope import decode_command

STREAMS = ("events", "commands")

#: ``{(stream, partition): [(offset, key, value), …]}`` in offset order.
LogContents = dict[tuple[str, int], list[tuple[int, bytes | None, bytes]]]


@dataclass
class Audit:
    lost: list[str] = field(default_factory=list)
    disorder: list[str] = field(default_factory=list)
    holes: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    redecided: int = 0
    checked: int = 0  # records of the earlier cuts found unchanged
    appended_after: int = 0  # records of the final contents past the last cut (the offsets went on from there)

    def report(self) -> dict[str, object]:
        return {"lost_records": self.lost[:20], "lost_count": len(self.lost), "offset_disorder": self.disorder[:20],
                "offset_holes": self.holes[:20],
                "command_conflicts": self.conflicts[:20], "redecided_commands": self.redecided,
                "records_checked": self.checked, "appended_after_restarts": self.appended_after}


async def read_log(url: str, *, within: float = 120.0) -> LogContents:
    """Every record of the events and commands topics of the ``kafka://`` log ``url``, up to the high-water marks
    of the first fetch answers (module doc)."""
    config = parse_kafka_url(url)
    # Small fetches: a broker on object storage (kafka_durable.py) reads one object per stored batch, and a fetch
    # of a megabyte of small batches can take longer than a request may.
    consumer = AIOKafkaConsumer(bootstrap_servers=config.bootstrap, enable_auto_commit=False,
                                fetch_max_wait_ms=100, max_partition_fetch_bytes=64 * 1024, fetch_max_bytes=256 * 1024)
    await consumer.start()
    try:
        await consumer.topics()  # metadata of every topic
        streams = {config.topic(s): s for s in STREAMS}
        tps = [TopicPartition(topic, p) for topic in streams
               for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out: LogContents = {(streams[tp.topic], tp.partition): [] for tp in tps}
        stops: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + within

        async def behind() -> bool:
            return len(stops) < len(tps) or any([await consumer.position(tp) < stop for tp, stop in stops.items()])

        while await behind():
            if time.monotonic() > deadline:
                at = {f"{tp.topic}[{tp.partition}]": (await consumer.position(tp), stops.get(tp)) for tp in tps}
                raise TimeoutError(f"could not read the log {config.prefix} to its end within {within:g} s "
                                   f"(position, end of every partition: {at})")
            fetched = await consumer.getmany(timeout_ms=200, max_records=4096)
            for tp in tps:
                mark = consumer.highwater(tp)
                if mark is not None and tp not in stops:
                    stops[tp] = mark
            for tp, messages in fetched.items():
                stop = stops.get(tp, consumer.highwater(tp) or 0)
                out[(streams[tp.topic], tp.partition)] += [(m.offset, m.key, m.value) for m in messages
                                                           if m.offset < stop]
        return out
    finally:
        await consumer.stop()


def audit(cuts: list[LogContents], final: LogContents) -> Audit:
    """Compare earlier cuts of a log with its final contents (module doc)."""
    result = Audit()
    for cut in cuts:
        for (stream, partition), records in cut.items():
            now = {offset: (key, value) for offset, key, value in final.get((stream, partition), [])}
            for offset, key, value in records:
                if offset not in now:
                    result.lost.append(f"{stream}[{partition}]@{offset}: gone")
                elif now[offset] != (key, value):
                    result.lost.append(f"{stream}[{partition}]@{offset}: changed")
                else:
                    result.checked += 1
    copies: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for (stream, partition), records in sorted(final.items()):
        offsets = [offset for offset, _, _ in records]
        result.disorder += [f"{stream}[{partition}]: offset {b} after {a}" for a, b in pairwise(offsets) if b <= a]
        expected = 0
        for offset in offsets:
            if offset > expected:
                result.holes.append(f"{stream}[{partition}]: {expected}..{offset - 1}")
            expected = max(expected, offset + 1)
        if stream != "commands":
            continue
        for offset, _, value in records:
            try:
                command = decode_command(value)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
                result.conflicts.append(f"commands[{partition}]@{offset}: undecodable")
                continue
            pair = (command.id, command.causation)
            copies[pair].add(value)
            count[pair] += 1
    result.conflicts += [f"{cid} of event {cause}: {len(values)} different contents"
                         for (cid, cause), values in sorted(copies.items()) if len(values) > 1]
    result.redecided = sum(1 for n in count.values() if n > 1)
    if cuts:
        result.appended_after = sum(map(len, final.values())) - sum(map(len, cuts[-1].values()))
    return result
