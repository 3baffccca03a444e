"""One record of every event and command type, as this version writes them: ``records-v<E>.<C>.jsonl``.

``python tests/data/old_logs/records.py`` writes ``records-v<EVENT_SCHEMA_VERSION>.<COMMAND_SCHEMA_VERSION>.jsonl``
next to this file: one JSON line per record, ``{"stream": "events" | "commands", "body": "<the record exactly as
the log stores it, as a string>"}``. A line once committed is never rewritten: it is what that record version
wrote. A type added within a version (additive: old records keep their meaning) gets its line appended to the
version's file by running the script again; a payload that changes meaning bumps the schema version, and the new
version's file is written next to the old ones. ``tests/log/test_old_logs.py`` decodes every committed file with the
current code, and checks that the current version's file covers every type.

The values are small but shaped like the real thing (the objects are trimmed Kubernetes objects).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tether.core.commands import (
    AddFinalizer,
    AdmitRequest,
    CheckStatus,
    Command,
    CreateDataSource,
    CreateQueue,
    DeleteDataSource,
    EmitKubernetesEvent,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    ReleasePod,
    RemoveFinalizer,
    ResumeBinding,
    SetAdmissionChecks,
    SetAdmissionHold,
    SetBindingPlacement,
    SetBindingTiers,
    SetMemberCondition,
    StartTimer,
    SuspendDispatching,
    TierTerm,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
    command_id,
    command_target,
)
from tether.core.envelope import COMMAND_SCHEMA_VERSION, CommandRecord, EventRecord, encode
from tether.core.events import (
    EVENT_SCHEMA_VERSION,
    BindingAdmissionDecided,
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
    ListsStarted,
    MemberDisconnected,
    ObjectDeleted,
    ObjectObserved,
    ObjectsListed,
    PodGateDecided,
    SettingsApplied,
    TimerFired,
    event_key,
)
from tether.core.identity import make_identity
from tether.core.kube import (
    Condition,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectRef,
    PreferredSchedulingTerm,
    trim,
)

AT = 1_767_225_600_000
CLAIM = trim({"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim",
              "metadata": {"name": "etl-input", "namespace": "team-a", "uid": "uid-1", "resourceVersion": "7",
                           "generation": 1, "finalizers": ["datadependency.volcano.sh/finalizer"]},
              "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "prod.sales.orders",
                       "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "etl"}},
              "status": {"phase": "Bound", "boundDataSource": "amoro-table-prod.sales.orders-1a2b3c4d"}})
BINDING = trim({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": "etl-deployment", "namespace": "team-a", "uid": "uid-2",
                             "resourceVersion": "9", "generation": 2,
                             "annotations": {"datadependency.volcano.sh/placement-injected": "true"}},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "etl"},
                         "placement": {"clusterAffinity": {"exclude": ["west1"]}}, "suspension": {"scheduling": True}}})
POD = trim({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "worker-0", "namespace": "team-a", "uid": "uid-3", "resourceVersion": "11"},
            "spec": {"schedulingGates": [{"name": "tether.dev/placement"}], "containers": [{"name": "c"}]}})
IDENTITY = make_identity("amoro", "table", "prod.sales.orders", {"branch": "main"})
CLAIM_REF = ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name="etl-input",
                      namespace="team-a", uid="uid-1")
BINDING_REF = ObjectRef(api_version="work.karmada.io/v1alpha2", kind="ResourceBinding", name="etl-deployment",
                        namespace="team-a", uid="uid-2")
POD_REF = ObjectRef(api_version="v1", kind="Pod", name="worker-0", namespace="team-a", uid="uid-3")
CONDITION = Condition(type="Bound", status="True", reason="DataSourceBound", message="bound",
                      last_transition_time="2026-01-01T00:00:00Z", observed_generation=1)
TERM = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(key="topology.kubernetes.io/zone",
                                                                   operator="In", values=("z1",)),))

EVENTS: tuple[Event, ...] = (
    ObjectObserved(obj=CLAIM),
    ObjectObserved(obj=POD, cluster="member1"),
    ObjectDeleted(obj=BINDING),
    ObjectsListed(kind="DataSourceClaim", keys=("DataSourceClaim/team-a/etl-input",), namespace="team-a"),
    ListsStarted(sources=("DataSourceClaim/team-a", "ResourceBinding/team-a")),
    DataLocationResolved(identity=IDENTITY, location="s3://warehouse-east/prod/sales/orders", trigger="push"),
    DataSourceNotInCatalog(identity=IDENTITY, message="table 'prod.sales.orders' not found in catalog"),
    DataLocationLookupFailed(identity=IDENTITY, message="GET … answered 503", retryable=True),
    CommandSucceeded(command_id="c1", command="add_finalizer", target="DataSourceClaim/team-a/etl-input",
                     result=CLAIM),
    CommandFailed(command_id="c2", command="set_binding_placement", target="ResourceBinding/team-a/etl-deployment",
                  reason="Conflict", message="the object has been modified", retryable=True),
    TimerFired(timer_id="retry-command|set_binding_placement|1|ResourceBinding/team-a/etl-deployment",
               purpose="retry-command", subject="ResourceBinding/team-a/etl-deployment"),
    MemberDisconnected(cluster="member2", reason="its Cluster was deleted"),
    SettingsApplied(max_hold_ms=600_000, plugin_configmap="volcano-global/volcano-global-datasource-plugins",
                    admission_configmap="tether-system/tether-admission"),
    PodGateDecided(cluster="member1", namespace="team-a", request_uid="req-1", gated=True, generate_name="worker-",
                   patch=({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "tether.dev/placement"}]},),
                   reason="a PodGroup pod", decided_at="0:41"),
    BindingAdmissionDecided(key="ResourceBinding/team-a/etl-deployment", operation="CREATE", obj=BINDING,
                            patch=({"op": "add", "path": "/spec/suspension", "value": {"scheduling": True}},),
                            reason="queue default is full", decided_at=40, suspended=True),
)

COMMANDS: tuple[Command, ...] = (
    AddFinalizer(target=CLAIM_REF, finalizer="datadependency.volcano.sh/finalizer"),
    RemoveFinalizer(target=CLAIM_REF, finalizer="datadependency.volcano.sh/finalizer"),
    UpdateClaimStatus(claim=CLAIM_REF, phase="Bound", bound_data_source="amoro-table-prod.sales.orders-1a2b3c4d",
                      conditions=(CONDITION,)),
    UpdateDataSourceStatus(name="amoro-table-prod.sales.orders-1a2b3c4d", claim_refs=(CLAIM_REF,), bound_claims=1,
                           conditions=(CONDITION,)),
    CreateDataSource(name="amoro-table-prod.sales.orders-1a2b3c4d", identity=IDENTITY,
                     cluster_names=("east1", "east2"), location="s3://warehouse-east/prod/sales/orders"),
    UpdateDataSourceLocality(name="amoro-table-prod.sales.orders-1a2b3c4d", cluster_names=("west1",),
                             location="s3://warehouse-west/prod/sales/orders"),
    DeleteDataSource(name="amoro-table-prod.sales.orders-1a2b3c4d", uid="uid-4"),
    SetBindingPlacement(binding=BINDING_REF, excluded_clusters=("west1",), reschedule_at="2026-01-01T00:00:00Z"),
    LookupDataLocation(identity=IDENTITY, trigger="retry", attempt=2),
    StartTimer(timer_id="lookup-retry|amoro/table/prod.sales.orders|2", fire_at_ms=AT + 5_000,
               purpose="lookup-retry", subject="Data/amoro/table/prod.sales.orders"),
    EmitKubernetesEvent(involved=CLAIM_REF, event_type="Normal", reason="DataSourceBound", message="bound"),
    ReleasePod(cluster="member1", pod=POD_REF, gate="tether.dev/placement", required=(TERM,),
               preferred=(PreferredSchedulingTerm(weight=50, preference=TERM),), note="group g1 in zone z1"),
    SetMemberCondition(cluster="member1", target=POD_REF, condition=CONDITION),
    EmitMemberEvent(cluster="member1", involved=POD_REF, event_type="Warning", reason="GroupTooBig",
                    message="no domain fits"),
    ResumeBinding(binding=BINDING_REF, admitted_request=(("cpu", "2"), ("memory", "4Gi")), reason="admitted"),
    SetAdmissionHold(binding=BINDING_REF, annotation="tether.dev/admission", text="queue default is full"),
    UpdateQueueStatus(queue=ObjectRef(api_version="scheduling.volcano.sh/v1beta1", kind="Queue", name="default"),
                      allocated=(("cpu", "2"),), pending=1, running=3, inqueue=1),
    CreateQueue(name="default", weight=1),
    SetBindingTiers(binding=BINDING_REF, terms=(
        TierTerm(name="data-3f2a1c", tier="data", user_term=0, clusters=("member1",)),
        TierTerm(name="near-data-3f2a1c", tier="near-data", user_term=0, clusters=("member2",)),
        TierTerm(name="anywhere-3f2a1c", tier="anywhere", user_term=0, clusters=None)),
        note="", reschedule_at=""),
    SetAdmissionChecks(binding=BINDING_REF, checks=(
        CheckStatus(name="data-bound", state="Ready", attempt=1, since_ms=AT, reason="1 claim Bound"),
        CheckStatus(name="data-loaded", state="Retry", attempt=1, since_ms=AT, until_ms=AT + 10_000,
                    reason="every DataLoad of Dataset team-a/orders failed: team-a/load in member1"))),
    EvictBinding(binding=BINDING_REF, for_binding="team-a/urgent-train", queue="default", policy="preempt",
                 reason="queue default: evicted for team-a/urgent-train (priority 100 > 0; withinQueue: "
                        "LowerPriority); waiting until it is admitted"),
    SuspendDispatching(binding=BINDING_REF, reason="queue default: cpu 6/4 after its request grew since admission"),
    AdmitRequest(binding=BINDING_REF, admitted_request=(("cpu", "6"),), reason="queue default: its growth fits"),
)


def records() -> list[EventRecord | CommandRecord]:
    out: list[EventRecord | CommandRecord] = []
    for i, event in enumerate(EVENTS, start=1):
        out.append(EventRecord(at_ms=AT + i, source="watch", key=event_key(event), event=event,
                               causation="c1" if isinstance(event, CommandSucceeded | CommandFailed) else ""))
    for i, command in enumerate(COMMANDS, start=1):
        out.append(CommandRecord(id=command_id(command), at_ms=AT + i, key=command_target(command), command=command,
                                 causation=f"0:{i}", reason="why it was decided", decider="data-dependency"))
    return out


def _type_of(line: dict[str, str]) -> str:
    body = json.loads(line["body"])
    return str((body.get("event") or body.get("command") or {}).get("type", ""))


def main() -> int:
    path = Path(__file__).with_name(f"records-v{EVENT_SCHEMA_VERSION}.{COMMAND_SCHEMA_VERSION}.jsonl")
    kept = path.read_text().splitlines() if path.exists() else []
    have = {_type_of(json.loads(line)) for line in kept if line.strip()}
    lines = [json.dumps({"stream": "events" if isinstance(r, EventRecord) else "commands",
                         "body": encode(r).decode()}, ensure_ascii=False) for r in records()]
    added = [line for line in lines if _type_of(json.loads(line)) not in have]  # (the committed lines stay)
    path.write_text("\n".join([*kept, *added]) + "\n")
    print(f"{path}: {len(kept)} records kept, {len(added)} added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
