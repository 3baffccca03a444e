"""Events as client-go's recorder writes them (``adapters/kubernetes/events.py``), on the emulator or a real cluster.

A repeat is one PATCH of the count on the Event already written (no read, no second Event); more than ten similar
Events of one object within ten minutes become one combined Event; an object's bucket of 25 Events refilled at one
per five minutes cuts a flood. Each is asserted on the Events the server holds, and the writes on the server's own
``apiserver_request_total`` (exactly on the emulator).
"""

from __future__ import annotations

import pytest

from tether.adapters.kubernetes.client import CONFIGMAPS, EVENTS, KubeClient
from tether.adapters.kubernetes.events import AGGREGATE_AFTER, COMBINED, SPAM_BURST, SPAM_REFILL, EventRecorder
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.request_metrics import request_totals, writes
from tether.core.commands import EmitKubernetesEvent
from tether.core.kube import ObjectRef

pytestmark = pytest.mark.cluster


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def _subject(kube: KubeEnv) -> tuple[KubeClient, ObjectRef]:
    client = KubeClient(kube.api_client)
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "subject"}}, namespace=kube.namespace)
    return client, ObjectRef(api_version="v1", kind="ConfigMap", name="subject", namespace=kube.namespace,
                             uid=cm["metadata"]["uid"])


def _event(ref: ObjectRef, reason: str = "Held", message: str = "queue q is full") -> EmitKubernetesEvent:
    return EmitKubernetesEvent(involved=ref, event_type="Warning", reason=reason, message=message)


async def _ours(client: KubeClient, kube: KubeEnv) -> list[dict]:
    events, _ = await client.list(EVENTS, namespace=kube.namespace)
    return [e for e in events if (e.get("involvedObject") or {}).get("name") == "subject"]


async def test_a_repeat_is_counted_on_the_event_written_without_reading_it(kube: KubeEnv) -> None:
    client, ref = await _subject(kube)
    recorder = EventRecorder(client, clock=Clock())
    before = await request_totals(kube.api_client)
    for _ in range(4):
        assert await recorder.record(_event(ref))
    after = await request_totals(kube.api_client)
    (event,) = await _ours(client, kube)
    assert event["count"] == 4 and event["reason"] == "Held"
    written = writes(before, after)
    if kube.is_emulated:  # one creation, three counts, and not one read of the Event
        assert (written["events POST"], written["events PATCH"]) == (1, 3)
        assert not [k for k, v in (after - before).items() if k.resource == "events" and k.verb == "GET" and v]


async def test_a_new_recorder_counts_on_the_event_another_wrote(kube: KubeEnv) -> None:
    client, ref = await _subject(kube)
    assert await EventRecorder(client, clock=Clock()).record(_event(ref))
    assert await EventRecorder(client, clock=Clock()).record(_event(ref))  # a restart: the name says it is the same
    (event,) = await _ours(client, kube)
    assert event["count"] == 2


async def test_more_than_ten_similar_events_become_one_combined_event(kube: KubeEnv) -> None:
    client, ref = await _subject(kube)
    recorder = EventRecorder(client, clock=Clock())
    n = AGGREGATE_AFTER + 5
    for i in range(n):
        assert await recorder.record(_event(ref, message=f"queue q is full: {i} waiting"))
    events = await _ours(client, kube)
    combined = [e for e in events if e["message"].startswith(COMBINED)]
    assert len(events) == AGGREGATE_AFTER + 1 and len(combined) == 1
    assert combined[0]["count"] == n - AGGREGATE_AFTER and combined[0]["message"].endswith(f"{n - 1} waiting")


async def test_a_flood_on_one_object_is_cut_and_the_bucket_refills(kube: KubeEnv) -> None:
    client, ref = await _subject(kube)
    clock = Clock()
    recorder = EventRecorder(client, clock=clock)
    written = [await recorder.record(_event(ref, reason=f"R{i}")) for i in range(SPAM_BURST + 3)]
    assert written == [True] * SPAM_BURST + [False] * 3 and recorder.dropped == 3
    clock.t += SPAM_REFILL  # one token back
    assert await recorder.record(_event(ref, reason="Later"))
    assert not await recorder.record(_event(ref, reason="Later2"))
    assert len(await _ours(client, kube)) == SPAM_BURST + 1
