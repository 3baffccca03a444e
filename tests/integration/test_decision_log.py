"""Every decision in the daemon's own log, and Kubernetes Events on the ResourceBindings, on a running daemon.

A story like the demo's, on the emulator with Karmada's scheduler stand-in (or a real cluster, ``karmada_kube``): a
claim on an east table and its workload's binding, placed and scheduled east; a claim on a table the catalog does
not have; the table moves west (pushed), the binding is rescheduled west. Then:

* at ``info``, one line per decision that changed the world — for every command whose outcome was a change and
  whose phrase is ``info``, exactly one line, carrying the offset of the event that caused it, its command id and
  its key; none for a no-op;
* one key's lines are its story, in log order (``grep KEY`` on the stream);
* the binding carries the Events ``Placed`` and ``Rescheduled``, once each, and a restart (which relists every
  object) decides no Event again and leaves them as they were.

And with the binding webhook: a binding suspended in its own write is logged (``binding suspended``) and carries
``Suspended``, then ``Placed`` and ``Admitted``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
from structlog.testing import LogCapture

from tether.adapters.daemon.decision_log import phrase
from tether.adapters.kubernetes import manifests
from tether.adapters.log import scan
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.commands import EmitKubernetesEvent
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandSucceeded

from .test_admission_e2e import admission_stack, binding
from .test_migration import placed_in_east, push


@contextmanager
def captured_info() -> Iterator[list[dict[str, Any]]]:
    """The process's structlog lines at info and up, as dicts (the daemon runs in this process)."""
    saved = dict(structlog.get_config())
    saved["processors"] = list(saved["processors"])
    capture = LogCapture()
    structlog.configure(processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield capture.entries
    finally:
        structlog.configure(**saved)


async def records(stack: Stack) -> tuple[list[EventRecord], list[CommandRecord]]:
    assert stack.log is not None
    events: list[EventRecord] = []
    commands: list[CommandRecord] = []
    async for chunk in scan(stack.log, "events"):
        events.extend(r for r in chunk if isinstance(r, EventRecord))
    async for chunk in scan(stack.log, "commands"):
        commands.extend(r for r in chunk if isinstance(r, CommandRecord))
    return events, commands


def decision_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "command_id" in line]


async def binding_events(stack: Stack, name: str) -> list[tuple[str, str, int]]:
    """tether's Events on the binding ``name`` (a real karmada-scheduler reports on bindings too:
    ``ScheduleBindingSucceed``)."""
    return sorted((e["reason"], e["metadata"]["name"], int(e.get("count") or 1))
                  for e in await stack.events_for(name)
                  if (e.get("involvedObject") or {}).get("kind") == "ResourceBinding"
                  and (e.get("source") or {}).get("component") == "tether")


async def test_every_decision_is_one_line_and_the_binding_has_its_events(karmada_kube: KubeEnv) -> None:
    with captured_info() as lines:
        async with tether_stack(karmada_kube) as stack:
            table, rb = await placed_in_east(stack, "orders")
            missing = stack.table("missing")  # not in the catalog
            await stack.apply(manifests.claim("lost", namespace=stack.namespace, table=missing))
            await stack.wait_claim("lost", reason="DataSourceNotFound")
            stack.catalog.move_table(table, f"s3://warehouse-west/{stack.suffix}/orders")
            assert (await push(stack, {"system": "amoro", "dataSourceName": table}))[0] == 202
            await stack.wait_excluded(rb, [stack.clusters["east1"], stack.clusters["east2"]])
            await stack.wait_scheduled(rb, [stack.clusters["west1"]])
            await stack.wait_idle()
            events, commands = await records(stack)
            logged = decision_lines(lines)

            # (a) one info line per command that changed the world, with its event offset, id and key
            changed = {e.event.command_id for e in events
                       if isinstance(e.event, CommandSucceeded) and not e.event.noop}
            expected = {c.id: c for c in commands if c.id in changed and phrase(c.command)[0] == logging.INFO}
            by_id: dict[str, list[dict[str, Any]]] = {}
            for line in logged:
                by_id.setdefault(line["command_id"], []).append(line)
            for cid, command in expected.items():
                assert len(by_id.get(cid, [])) == 1, (command, by_id.get(cid))
                line = by_id[cid][0]
                assert line["log_level"] == "info" and line["event"] == phrase(command.command)[1]
                assert (line["key"], f"0:{line['offset']}") == (command.key, command.causation)
            noops = {e.event.command_id for e in events if isinstance(e.event, CommandSucceeded) and e.event.noop}
            assert not [line for line in logged if line["command_id"] in noops and line["log_level"] == "info"]
            phrases = {line["event"] for line in logged}
            assert {"claim bound", "claim pending", "DataSource created", "data moved", "data located",
                    "data not in catalog", "binding rescheduled"} <= phrases

            # (b) one key's lines are its story, in order
            key = f"ResourceBinding/{stack.namespace}/{rb}"
            story = [line for line in logged if line["key"] == key]
            assert [line["event"] for line in story][-1] == "binding rescheduled"
            assert story[0]["event"] in ("binding placed", "binding rescheduled")  # (Karmada may have been first)
            assert [line["offset"] for line in story] == sorted(line["offset"] for line in story)
            data = [line["event"] for line in logged if line["key"] == f"Data/amoro/table/{table}"]
            assert data[0] == "data located"
            claim = [line["event"] for line in logged if line["key"] == f"DataSourceClaim/{stack.namespace}/orders"]
            # a cache miss resolved within the bookkeeping delay goes from nothing to Bound in one write (issue 35)
            assert claim[0] == "claim bound" and claim[-1] == "claim bound"

            # (c) Events on the binding: rescheduled with the move, once (its first placement is no Event: issue 35)
            placed = await binding_events(stack, rb)
            assert [(reason, count) for reason, _, count in placed] == [("Rescheduled", 1)]
            moved = next(e for e in await stack.events_for(rb) if e["reason"] == "Rescheduled")
            assert stack.clusters["east1"] in moved["message"] and "rescheduling away from" in moved["message"]

            # ... and not again after a restart (every object relisted)
            assert stack.log is not None
            before = (await stack.log.end("commands")).get(0, 0)
            await stack.stop_daemon()
            await stack.start_daemon()
            await stack.wait_idle()
            _, after = await records(stack)
            assert [c for c in after[before:] if isinstance(c.command, EmitKubernetesEvent)
                    and c.command.involved.kind == "ResourceBinding"] == []
            assert await binding_events(stack, rb) == placed


async def test_the_webhooks_suspension_is_logged_and_said_on_the_binding(karmada_kube: KubeEnv,
                                                                          tmp_path: Path) -> None:
    """The binding webhook suspends a binding whose claim is still resolving, in the write: no command does it, and
    still the log says so and the binding carries ``Suspended``, then ``Admitted`` when it goes."""
    with captured_info() as lines:
        async with admission_stack(karmada_kube, tmp_path) as stack:
            table = stack.add_table("clicks", "west")
            stack.catalog.delay_next(1, 3.0, table=table)  # past the claim's deferred status (1 s)
            await stack.apply(manifests.claim("clicks", namespace=stack.namespace, table=table, workload="train"))
            await stack.wait_claim("clicks", reason="Resolving")
            created = await stack.apply(binding(stack, "train-deployment", "train"))
            assert created["spec"]["suspension"] == {"scheduling": True}
            await stack.wait_scheduled("train-deployment", [stack.clusters["west1"]])
            await stack.wait_idle()

            async def said() -> list[str] | None:
                reasons = [reason for reason, _, _ in await binding_events(stack, "train-deployment")]
                return reasons if len(reasons) == 2 else None

            assert sorted(await stack.eventually(said, what="two Events")) == ["Admitted", "Suspended"]
            key = f"ResourceBinding/{stack.namespace}/train-deployment"
            suspended = [line for line in lines if line["event"] == "binding suspended" and line["key"] == key]
            assert len(suspended) == 1 and suspended[0]["offset"] > 0 and suspended[0]["log_level"] == "info"
            story = [line["event"] for line in decision_lines(lines) if line["key"] == key]
            assert story[-1] == "binding admitted" and "binding placed" in story
