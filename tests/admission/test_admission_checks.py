"""Admission checks (issue 36): a queue may name data-readiness checks a binding must pass before it is admitted —
``data-bound`` and ``data-loaded`` — each Pending, Ready, Retry or Rejected, with a timeout and a retry policy.

Through the real pipeline on the fake cluster (``Harness``): cycles and check timers are timer events, the checks
are noted when issued, the DataLoads are member objects as the member watches report them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core import api
from tether.core.admission.checks import parse_checks, transition
from tether.core.admission.config import AdmissionConfigError
from tether.core.commands import CheckStatus, ResumeBinding, SetAdmissionChecks
from tether.core.events import ObjectObserved
from tether.core.keys import ADMISSION_ANNOTATION, ADMISSION_CHECKS_ANNOTATION, DATASET_ANNOTATION
from tether.core.world.admission_checks import CheckPolicy

MANAGED = "kinds: [apps/Deployment]\n"
RB = "ResourceBinding"


def checks_config(checks: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tether-admission",
                                                                  "namespace": "tether-system"},
            "data": {"queue-managed": MANAGED, "admission-checks": checks}}


def universe(checks: str) -> Harness:
    h = Harness()
    for name in ("c1", "c2"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"]})}))
    h.cluster.catalog["amoro/table/db.orders"] = "s3://east/db/orders"
    h.apply(checks_config(checks))
    h.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "ml"},
             "spec": {"weight": 1}})
    return h


def workload(h: Harness, name: str = "w", *, dataset: str | None = "ds1") -> None:
    h.apply(m.claim(name, table="db.orders",
                    dataset=api.DatasetReference(name=dataset) if dataset is not None else None))
    deployment = m.deployment(name)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "ml"}
    h.apply(deployment)
    binding = m.resource_binding(name, suspended=True)
    binding["metadata"]["annotations"] = {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}
    binding["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    h.apply(binding)


def dataload(h: Harness, cluster: str, phase: str, *, name: str = "load-1", dataset: str = "ds1") -> None:
    raw = {"apiVersion": "data.fluid.io/v1alpha1", "kind": "DataLoad",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"dataset": {"name": dataset, "namespace": "default"}},
           "status": {"phase": phase, "duration": "1s", "conditions": []}}
    h.feed(ObjectObserved(obj=h.cluster.put(raw, cluster=cluster), cluster=cluster))  # (as a member's watch)
    h.settle()


def rb(h: Harness, name: str = "w") -> dict[str, Any]:
    obj = h.obj(RB, "default", f"{name}-deployment")
    assert obj is not None
    return obj


def checks(h: Harness, name: str = "w") -> dict[str, Any]:
    raw = rb(h, name)["metadata"].get("annotations", {}).get(ADMISSION_CHECKS_ANNOTATION)
    return json.loads(raw) if raw else {}


def admitted(h: Harness) -> bool:
    return any(isinstance(c.command, ResumeBinding) for c in h.commands)


def test_a_binding_is_held_while_its_dataload_runs_and_admitted_onto_its_cluster_once_complete() -> None:
    h = universe("queues: {ml: [data-bound, data-loaded]}\n")
    workload(h)
    h.advance(1_000)
    assert checks(h)["data-bound"]["state"] == "Ready"
    assert checks(h)["data-loaded"]["state"] == "Pending" and "no DataLoad of Dataset default/ds1" in \
        checks(h)["data-loaded"]["reason"]
    dataload(h, "c2", "Executing")
    h.advance(1_000)
    assert checks(h)["data-loaded"]["state"] == "Pending" and "is Executing" in checks(h)["data-loaded"]["reason"]
    held = rb(h)
    assert held["spec"]["suspension"] == {"scheduling": True}
    assert held["metadata"]["annotations"][ADMISSION_ANNOTATION].startswith("admission checks: data-loaded Pending")
    assert not admitted(h)
    dataload(h, "c2", "Complete")
    assert checks(h)["data-loaded"] | {"reason": ""} == {"state": "Ready", "attempt": 1, "clusters": ["c2"],
                                                         "reason": ""}
    assert rb(h)["spec"]["placement"]["clusterAffinity"]["exclude"] == ["c1"]  # onto the DataLoad's cluster only
    h.advance(0)  # the checks passed and the placement is in: a cycle is due now, not a second after the last
    assert admitted(h) and not (rb(h)["spec"].get("suspension") or {}).get("scheduling")
    event = next(e for e in h.cluster.kube_events if e.reason == "Admitted")
    assert "admission checks passed: data-bound (1 claim Bound); data-loaded (default/ds1 loaded in c2)" in \
        event.message


def test_a_failed_dataload_gives_retry_then_rejected_after_its_limit_with_the_reason() -> None:
    h = universe("queues:\n  ml:\n  - name: data-loaded\n    retryLimit: 1\n    backoff: 2s\n")
    workload(h)
    dataload(h, "c1", "Failed")
    state = checks(h)["data-loaded"]
    assert (state["state"], state["attempt"]) == ("Retry", 1) and "failed: default/load-1 in c1" in state["reason"]
    h.advance(1_000)
    assert checks(h)["data-loaded"]["state"] == "Retry"  # the backoff is not over
    h.advance(2_000)  # the next attempt finds the DataLoad failed still: over the limit
    state = checks(h)["data-loaded"]
    assert (state["state"], state["attempt"]) == ("Rejected", 2) and "(after 2 attempts)" in state["reason"]
    rejected = [e for e in h.cluster.kube_events if e.reason == "AdmissionCheckRejected"]
    assert len(rejected) == 1 and rejected[0].event_type == "Warning" and "failed" in rejected[0].message
    h.advance(5_000)
    assert not admitted(h) and rb(h)["metadata"]["annotations"][ADMISSION_ANNOTATION].startswith(
        "admission checks: data-loaded Rejected")
    assert len([e for e in h.cluster.kube_events if e.reason == "AdmissionCheckRejected"]) == 1  # once
    dataload(h, "c1", "Complete", name="load-2")  # the data becomes ready after all
    h.advance(1_000)
    assert checks(h)["data-loaded"]["state"] == "Ready" and admitted(h)


def test_a_pending_attempt_past_its_timeout_fails() -> None:
    h = universe("queues:\n  ml:\n  - name: data-loaded\n    timeout: 3s\n    retryLimit: 0\n")
    workload(h)
    h.advance(1_000)
    assert checks(h)["data-loaded"]["state"] == "Pending"
    h.advance(3_000)
    state = checks(h)["data-loaded"]
    assert state["state"] == "Rejected" and "Pending for 3s, its timeout" in state["reason"]


def test_data_bound_is_pending_while_a_claim_resolves_and_a_queue_without_checks_is_as_before() -> None:
    h = universe("queues: {other: [data-bound]}\n")
    workload(h, dataset=None)
    h.advance(1_000)
    assert admitted(h) and checks(h) == {}
    assert not [c for c in h.commands if isinstance(c.command, SetAdmissionChecks)]


def test_no_claim_naming_a_dataset_makes_data_loaded_ready() -> None:
    h = universe("queues: {ml: [data-loaded]}\n")
    workload(h, dataset=None)
    h.advance(1_000)
    h.advance(1_000)
    assert checks(h)["data-loaded"]["reason"] == "no claim names a Fluid Dataset" and admitted(h)


@pytest.mark.parametrize(("text", "error"), [
    ("queues: {ml: [data-warm]}\n", "unknown check 'data-warm'"),
    ("queues: {ml: [{name: data-loaded, retryLimit: -1}]}\n", "retryLimit: expected a non-negative integer"),
    ("queues: {ml: [{name: data-loaded, timeout: soon}]}\n", "timeout: expected a duration"),
    ("queues: {ml: [{name: data-loaded, every: 1s}]}\n", "unknown keys ['every']"),
    ("queues: {ml: [data-bound, data-bound]}\n", "a check is named twice"),
    ("queues: {ml: data-bound}\n", "expected a list of checks"),
    ("checks: {}\n", "expected {queues:"),
])
def test_a_malformed_check_is_refused_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(AdmissionConfigError, match="admission-checks") as raised:
        parse_checks(text)
    assert error in str(raised.value)


def test_a_refused_configmap_keeps_the_previous_checks_and_nothing_admitted_changes() -> None:
    h = universe("queues: {ml: [data-loaded]}\n")
    workload(h, "a", dataset=None)
    h.advance(1_000)
    h.advance(1_000)
    assert admitted(h)
    before = len(h.commands)
    h.apply(checks_config("queues: {ml: [data-warm]}\n"))
    state = h.world.admission
    assert "unknown check 'data-warm'" in state.config_error
    assert [p.name for p in state.checks_config.queues["ml"]] == ["data-loaded"]
    h.advance(3_000)
    assert not [c for c in h.commands[before:] if c.key.endswith("a-deployment")
                and c.command.__class__.__name__ != "StartTimer"]


def test_transitions() -> None:
    policy = CheckPolicy(name="data-loaded", timeout_ms=1_000, retry_limit=1, backoff_ms=500, max_backoff_ms=800)

    class R:
        def __init__(self, outcome: str, reason: str = "r", clusters: tuple[str, ...] = ()) -> None:
            self.outcome, self.reason, self.clusters = outcome, reason, clusters

    pending = transition(policy, None, R("pending"), 0)  # type: ignore[arg-type]
    assert (pending.state, pending.attempt, pending.until_ms) == ("Pending", 1, 1_000)
    assert transition(policy, pending, R("pending"), 999) == pending  # type: ignore[arg-type]
    retry = transition(policy, pending, R("pending"), 1_000)  # type: ignore[arg-type]
    assert (retry.state, retry.attempt, retry.until_ms) == ("Retry", 1, 1_500)
    assert transition(policy, retry, R("failed"), 1_499) == retry  # type: ignore[arg-type]
    again = transition(policy, retry, R("pending"), 1_500)  # type: ignore[arg-type]
    assert (again.state, again.attempt, again.since_ms) == ("Pending", 2, 1_500)
    rejected = transition(policy, again, R("failed", "boom"), 1_600)  # type: ignore[arg-type]
    assert (rejected.state, rejected.reason) == ("Rejected", "boom (after 2 attempts)")
    assert transition(policy, rejected, R("pending"), 9_000) == rejected  # type: ignore[arg-type]
    ready = transition(policy, rejected, R("ready", "ok", ("c1",)), 9_000)  # type: ignore[arg-type]
    assert ready == CheckStatus(name="data-loaded", state="Ready", attempt=2, since_ms=9_000, reason="ok",
                                clusters=("c1",))
    assert policy.backoff(1) == 500 and policy.backoff(2) == 800  # doubling, capped


def test_a_claim_under_a_crd_without_spec_dataset_names_its_dataset_by_annotation() -> None:
    h = universe("queues: {ml: [data-loaded]}\n")
    claim = m.claim("w", table="db.orders")
    claim["metadata"]["annotations"] = {DATASET_ANNOTATION: "ds1"}  # (Volcano Global's CRD prunes spec.dataset)
    h.apply(claim)
    deployment = m.deployment("w")
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "ml"}
    h.apply(deployment)
    binding = m.resource_binding("w", suspended=True)
    binding["metadata"]["annotations"] = {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}
    h.apply(binding)
    h.advance(1_000)
    assert "no DataLoad of Dataset default/ds1" in checks(h)["data-loaded"]["reason"]
