"""KubeExecutor applies each command idempotently: the second application of the same request is a no-op; with
an ObjectCache it writes without reading first, never over a version it did not see, and reports a no-op only
from a fresh read."""

from __future__ import annotations

from typing import Any

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS, EVENTS, KubeClient
from tether.adapters.kubernetes.competing import CompetingWrites
from tether.adapters.kubernetes.executor import KubeExecutor, ObjectCache, keep_transition_times, reschedule_needed
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.core.commands import (
    AddFinalizer,
    EmitKubernetesEvent,
    RemoveFinalizer,
    UpdateClaimStatus,
    command_id,
    command_target,
)
from tether.core.envelope import CommandRecord
from tether.core.events import CommandFailed, CommandSucceeded
from tether.core.kube import Condition, ObjectRef, trim


async def test_the_same_status_applied_twice_is_a_noop(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    client = KubeClient(kube.api_client)
    created = await client.create(CLAIMS, manifests.claim("c", namespace=kube.namespace, table="db.t"),
                                  namespace=kube.namespace)
    ref = ObjectRef(api_version=created["apiVersion"], kind="DataSourceClaim", name="c", namespace=kube.namespace,
                    uid=created["metadata"]["uid"])
    command = UpdateClaimStatus(claim=ref, phase="Pending", bound_data_source="", conditions=(
        Condition(type="Bound", status="False", reason="Resolving", message="looking it up",
                  last_transition_time="2026-01-01T00:00:00Z", observed_generation=1),))
    record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                           causation="0:1")
    executor = KubeExecutor(client)
    first, = await executor.apply(record)
    second, = await executor.apply(record)
    assert isinstance(first, CommandSucceeded) and not first.noop
    assert isinstance(second, CommandSucceeded) and second.noop  # compared as the API stores it, not as tuples
    assert first.result is not None and second.result is not None
    assert second.result.metadata.resource_version == first.result.metadata.resource_version


class CountingClient(KubeClient):
    """A KubeClient that counts its GETs (round trips saved by the executor's cache)."""

    gets = 0

    async def get(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        self.gets += 1
        return await super().get(*args, **kwargs)


async def _claim(kube: KubeEnv, client: KubeClient, name: str) -> tuple[dict[str, Any], ObjectRef]:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    created = await client.create(CLAIMS, manifests.claim(name, namespace=kube.namespace, table="db.t"),
                                  namespace=kube.namespace)
    return created, ObjectRef(api_version=created["apiVersion"], kind="DataSourceClaim", name=name,
                              namespace=kube.namespace, uid=created["metadata"]["uid"])


def _status(ref: ObjectRef, reason: str) -> CommandRecord:
    command = UpdateClaimStatus(claim=ref, phase="Pending", bound_data_source="", conditions=(
        Condition(type="Bound", status="False", reason=reason, message=reason,
                  last_transition_time="2026-01-01T00:00:00Z", observed_generation=1),))
    return CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                         causation="0:1")


async def test_a_cached_version_saves_the_read_and_its_answer_keeps_the_cache_current(kube: KubeEnv) -> None:
    client = CountingClient(kube.api_client)
    created, ref = await _claim(kube, client, "cached")
    cache = ObjectCache()
    cache.observe(trim(created))  # as the claims watch would
    executor = KubeExecutor(client, cache=cache)
    first, = await executor.apply(_status(ref, "A"))
    second, = await executor.apply(_status(ref, "B"))  # from the version the first write returned
    assert isinstance(first, CommandSucceeded) and not first.noop
    assert isinstance(second, CommandSucceeded) and not second.noop
    assert client.gets == 0
    stored = await client.get(CLAIMS, "cached", namespace=kube.namespace)
    assert stored is not None and stored["status"]["conditions"][0]["reason"] == "B"
    cached = cache.get(trim(stored).key)
    assert cached is not None and cached.metadata.resource_version == stored["metadata"]["resourceVersion"]


async def test_a_stale_cached_version_is_never_written_over(kube: KubeEnv) -> None:
    client = CountingClient(kube.api_client)
    created, ref = await _claim(kube, client, "stale")
    cache = ObjectCache()
    cache.observe(trim(created))
    # someone else writes after the cache saw the claim: its version is stale
    await client.patch(CLAIMS, "stale", {"metadata": {"labels": {"someone": "else"}}}, namespace=kube.namespace)
    executor = KubeExecutor(client, cache=cache)
    outcome, = await executor.apply(_status(ref, "A"))
    assert isinstance(outcome, CommandSucceeded) and not outcome.noop
    assert client.gets == 1  # the write built from the stale version got a 409; the retry read afresh
    stored = await client.get(CLAIMS, "stale", namespace=kube.namespace)
    assert stored is not None and stored["metadata"]["labels"]["someone"] == "else"
    assert stored["status"]["conditions"][0]["reason"] == "A"


async def test_nothing_to_do_is_only_concluded_from_a_fresh_read(kube: KubeEnv) -> None:
    client = CountingClient(kube.api_client)
    _, ref = await _claim(kube, client, "reverted")
    cache = ObjectCache()
    executor = KubeExecutor(client, cache=cache)
    written, = await executor.apply(_status(ref, "A"))  # the cache now holds the claim with status A
    assert isinstance(written, CommandSucceeded) and not written.noop
    # someone reverts the status; the cache still says it is A
    await client.patch(CLAIMS, "reverted", {"status": {"conditions": None}}, namespace=kube.namespace,
                       subresource="status")
    again, = await executor.apply(_status(ref, "A"))
    assert isinstance(again, CommandSucceeded) and not again.noop  # written again, not reported as done
    stored = await client.get(CLAIMS, "reverted", namespace=kube.namespace)
    assert stored is not None and stored["status"]["conditions"][0]["reason"] == "A"
    # and a command that really has nothing to do is a no-op, confirmed by a read
    reads = client.gets
    done, = await executor.apply(_status(ref, "A"))
    assert isinstance(done, CommandSucceeded) and done.noop and client.gets == reads + 1


async def test_a_repeated_event_is_counted_on_the_one_event_on_record(kube: KubeEnv) -> None:
    """As client-go's recorder: the same (object, reason, message) again bumps ``count`` and ``lastTimestamp``
    of the Event already recorded instead of being dropped, or recorded anew."""
    client = KubeClient(kube.api_client)
    ref = ObjectRef(api_version="v1", kind="ConfigMap", name="noted", namespace=kube.namespace, uid="u-1")
    command = EmitKubernetesEvent(involved=ref, event_type="Warning", reason="LookupFailed", message="catalog down")
    record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                           causation="0:1")
    executor = KubeExecutor(client)
    for _ in range(3):
        outcome, = await executor.apply(record)
        assert isinstance(outcome, CommandSucceeded) and not outcome.noop
    events, _ = await client.list(EVENTS, namespace=kube.namespace)
    mine = [e for e in events if (e.get("involvedObject") or {}).get("uid") == "u-1"]
    assert len(mine) == 1
    assert mine[0]["count"] == 3
    assert mine[0]["reason"] == "LookupFailed" and mine[0]["type"] == "Warning"


async def test_a_transition_another_writer_recorded_keeps_its_time(kube: KubeEnv) -> None:
    """Two writers deciding the same transition (a second daemon; a decision from a world one write behind) carry
    their own clocks' times: the second finds the condition as it wants it but for the time, and writes nothing
    (issue 21: what tether writes must not depend on who writes it). A real transition takes the command's time."""
    client = KubeClient(kube.api_client)
    _, ref = await _claim(kube, client, "transition")
    executor = KubeExecutor(client)

    def status(condition_status: str, at: str) -> CommandRecord:
        command = UpdateClaimStatus(claim=ref, phase="Pending", bound_data_source="", conditions=(
            Condition(type="Bound", status=condition_status, reason="Resolving", message="looking it up",
                      last_transition_time=at, observed_generation=1),))
        return CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                             causation="0:1")

    first, = await executor.apply(status("False", "2026-01-01T00:00:00Z"))
    other, = await executor.apply(status("False", "2026-01-01T00:00:07Z"))  # the other writer's clock
    assert isinstance(first, CommandSucceeded) and not first.noop
    assert isinstance(other, CommandSucceeded) and other.noop
    stored = await client.get(CLAIMS, "transition", namespace=kube.namespace)
    assert stored is not None and stored["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    moved, = await executor.apply(status("Unknown", "2026-01-01T00:00:09Z"))
    assert isinstance(moved, CommandSucceeded) and not moved.noop
    stored = await client.get(CLAIMS, "transition", namespace=kube.namespace)
    assert stored is not None and stored["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:09Z"


def test_keep_transition_times_only_where_the_status_is_the_same() -> None:
    current = [{"type": "Bound", "status": "True", "lastTransitionTime": "T1"},
               {"type": "PlacementInjected", "status": "False", "lastTransitionTime": "T1"}]
    wanted = [{"type": "Bound", "status": "True", "reason": "R", "lastTransitionTime": "T2"},
              {"type": "PlacementInjected", "status": "True", "lastTransitionTime": "T2"},
              {"type": "New", "status": "True", "lastTransitionTime": "T2"}]
    assert [c["lastTransitionTime"] for c in keep_transition_times(wanted, current)] == ["T1", "T2", "T2"]
    assert keep_transition_times(wanted, None) == wanted and keep_transition_times(wanted, "garbage") == wanted


def test_a_reschedule_is_written_only_while_it_has_a_job_to_do() -> None:
    """``rescheduleTriggeredAt`` means "schedule afresh": satisfied when the binding runs on no excluded cluster,
    or while a trigger is pending (later than Karmada's last schedule) — a second writer does not move it."""
    on_c1 = {"clusters": [{"name": "c1", "replicas": 1}]}
    at = "2026-01-01T00:01:00Z"
    assert reschedule_needed(on_c1, {}, at, excluded=("c1",))
    assert not reschedule_needed(on_c1, {}, at, excluded=("c2",))  # nothing to move away from
    assert not reschedule_needed({"clusters": []}, {}, at, excluded=("c1",))
    pending = {**on_c1, "rescheduleTriggeredAt": "2026-01-01T00:00:30Z"}
    assert not reschedule_needed(pending, {"lastScheduledTime": "2026-01-01T00:00:00Z"}, at, excluded=("c1",))
    assert not reschedule_needed(pending, {}, at, excluded=("c1",))  # never scheduled since: pending
    done = {"lastScheduledTime": "2026-01-01T00:00:40Z"}  # scheduled after that trigger, and still on c1
    assert reschedule_needed(pending, done, at, excluded=("c1",))
    assert not reschedule_needed(pending, done, "2026-01-01T00:00:20Z", excluded=("c1",))  # not later
    assert not reschedule_needed(on_c1, {}, "", excluded=("c1",))
    assert reschedule_needed({**on_c1, "rescheduleTriggeredAt": "not a time"}, done, at, excluded=("c1",)) is not None


async def test_retry_after_is_honoured_and_a_long_one_fails_at_once(kube: KubeEnv) -> None:
    """A 429 with Retry-After: the executor waits at least that long before asking again (the emulator sends the
    header and the Status's ``details.retryAfterSeconds``); one longer than ``max_retry_after`` is not waited for
    inside a command — it fails as retryable at once and the decider's timer asks again later."""
    emulator = kube.require_emulator("429 with Retry-After on demand (the emulator's fault rules)")
    client = KubeClient(kube.api_client)
    _, ref = await _claim(kube, client, "throttled")
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    executor = KubeExecutor(client, sleep=sleep, backoff=0.01, max_retry_after=10.0)
    emulator.faults.fail(code=429, verb="patch", resource="datasourceclaims/status", times=2, retry_after=3)
    done, = await executor.apply(_status(ref, "A"))
    assert isinstance(done, CommandSucceeded) and sleeps == [3.0, 3.0]

    sleeps.clear()
    rule = emulator.faults.fail(code=429, verb="patch", resource="datasourceclaims/status", times=1, retry_after=60)
    failed, = await executor.apply(_status(ref, "B"))
    assert isinstance(failed, CommandFailed) and failed.retryable and failed.reason == "TooManyRequests"
    assert sleeps == [] and rule.fired == 1  # not asked again inside the command


async def test_a_command_about_a_recreated_object_does_not_apply_to_the_new_one(kube: KubeEnv) -> None:
    """The uid precondition: a claim deleted and created again under its name is another object. Commands decided
    about the old one — from the cache (which saw the new one) or from a read — leave the new one untouched."""
    client = CountingClient(kube.api_client)
    _, old = await _claim(kube, client, "again")
    await client.delete(CLAIMS, "again", namespace=kube.namespace)
    created, new = await _claim(kube, client, "again")
    assert new.uid != old.uid
    for cache in (None, ObjectCache()):
        if cache is not None:
            cache.observe(trim(created))  # the watch saw the new claim
        executor = KubeExecutor(client, cache=cache)
        status, = await executor.apply(_status(old, "for the old claim"))
        assert isinstance(status, CommandSucceeded) and status.noop and status.result is None
        command = AddFinalizer(target=old, finalizer="datadependency.volcano.sh/finalizer")
        record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                               causation="0:1")
        finalizer, = await executor.apply(record)
        assert isinstance(finalizer, CommandFailed) and finalizer.reason == "NotFound" and not finalizer.retryable
    stored = await client.get(CLAIMS, "again", namespace=kube.namespace)
    assert stored is not None and stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert "finalizers" not in stored["metadata"] and "status" not in stored


class CountingPatches(KubeClient):
    """A client that counts the PATCH requests it sends."""

    patches = 0

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.patches += 1
        return await super().patch(*args, **kwargs)


async def test_an_invalid_write_is_not_taken_for_a_failed_precondition(kube: KubeEnv) -> None:
    """A 422 is a failed JSON-patch ``test`` (the object moved: re-read and retry) only when json-patch says so;
    a finalizer refused on a deleting object named "latest" (with "test" in it) is refused once, not six times."""
    client = CountingPatches(kube.api_client)  # (the PATCH requests sent: on the emulator or a real server)
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    raw = manifests.claim("latest", namespace=kube.namespace, table="db.t")
    raw["metadata"]["finalizers"] = ["example.com/hold"]
    created = await client.create(CLAIMS, raw, namespace=kube.namespace)
    await client.delete(CLAIMS, "latest", namespace=kube.namespace)  # deleting: no new finalizer allowed
    ref = ObjectRef(api_version=created["apiVersion"], kind="DataSourceClaim", name="latest",
                    namespace=kube.namespace, uid=created["metadata"]["uid"])
    command = AddFinalizer(target=ref, finalizer="datadependency.volcano.sh/finalizer")
    record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                           causation="0:1")
    patches = client.patches
    outcome, = await KubeExecutor(client).apply(record)
    assert isinstance(outcome, CommandFailed) and outcome.reason == "Invalid" and not outcome.retryable
    assert client.patches == patches + 1
    await client.patch(CLAIMS, "latest", {"metadata": {"finalizers": None}}, namespace=kube.namespace)


async def test_an_unreachable_api_server_is_a_retryable_failure_after_the_executor_retries() -> None:
    """Connection refused is status 0 ``Unavailable``: retried with backoff by the executor, then handed to the
    decider as retryable (its retry timer re-decides later) — never a crash of the executor loop."""
    import socket

    from kubernetes_asyncio import client as k8s

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens once the block ends
    api = k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{port}"))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    try:
        ref = ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name="c",
                        namespace="ns", uid="u")
        outcome, = await KubeExecutor(KubeClient(api), sleep=sleep, error_retries=3).apply(_status(ref, "A"))
    finally:
        await api.close()
    assert isinstance(outcome, CommandFailed) and outcome.retryable
    assert outcome.reason == "Unavailable" and "Connect" in outcome.message
    assert len(slept) == 3  # backed off between the attempts, as many times as asked


def _record(command: AddFinalizer | RemoveFinalizer) -> CommandRecord:
    return CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                         causation="0:1")


async def test_a_finalizer_removal_that_fails_once_is_retried_like_any_write(kube: KubeEnv) -> None:
    emulator = kube.require_emulator("a 500 on demand (the emulator's fault rules)")
    client = KubeClient(kube.api_client)
    _, ref = await _claim(kube, client, "finalized")
    executor = KubeExecutor(client, backoff=0.01)
    added, = await executor.apply(_record(AddFinalizer(target=ref, finalizer="test.tether.io/held")))
    assert isinstance(added, CommandSucceeded)
    rule = emulator.faults.fail(code=500, verb="patch", resource="datasourceclaims", times=1)
    removed, = await executor.apply(_record(RemoveFinalizer(target=ref, finalizer="test.tether.io/held")))
    assert isinstance(removed, CommandSucceeded) and not removed.noop and rule.fired == 1
    stored = await client.get(CLAIMS, "finalized", namespace=kube.namespace)
    assert stored is not None and "test.tether.io/held" not in (stored["metadata"].get("finalizers") or [])


class EchoFirst(KubeClient):
    """A client whose watch delivers a write's new version before the write's own answer arrives."""

    writes: CompetingWrites

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = await super().patch(*args, **kwargs)
        self.writes.observed(trim(out))  # the watch's event first
        return out


async def test_a_write_seen_on_the_watch_before_its_answer_is_still_the_executors_own(kube: KubeEnv) -> None:
    client = EchoFirst(kube.api_client)
    _, ref = await _claim(kube, client, "echoed")
    client.writes = CompetingWrites()
    executor = KubeExecutor(client, writes=client.writes)
    for reason in ("A", "B"):
        done, = await executor.apply(_status(ref, reason))
        assert isinstance(done, CommandSucceeded) and not done.noop
    assert client.writes.foreign == 0
