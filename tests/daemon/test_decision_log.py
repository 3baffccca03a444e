"""The decision log's phrases and lines (``adapters/daemon/decision_log.py``): every command type has a phrase, and
a line carries the causing event's offset, the command id and the key, at info only when the world changed."""

from __future__ import annotations

import logging
import typing
from typing import Any

import pytest

from tether.adapters.daemon.decision_log import PHRASES, DecisionLog, phrase
from tether.core.commands import (
    COMMAND_TYPES,
    Command,
    EmitMemberEvent,
    LookupDataLocation,
    SetBindingPlacement,
    SetMemberCondition,
    UpdateClaimStatus,
)
from tether.core.envelope import CommandRecord
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
)
from tether.core.identity import make_identity
from tether.core.kube import Condition, ObjectRef

REF = ObjectRef(api_version="work.karmada.io/v1alpha2", kind="ResourceBinding", name="w", namespace="ml", uid="u")
CLAIM = ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name="c", namespace="ml")


class Recorder:
    """A logger that keeps its lines (level, event, fields) and filters below ``level``, as structlog's does."""

    def __init__(self, level: int = logging.INFO) -> None:
        self.level = level
        self.lines: list[tuple[int, str, dict[str, Any]]] = []

    def is_enabled_for(self, level: int) -> bool:
        return level >= self.level

    def log(self, level: int, event: str, **fields: Any) -> None:
        if level >= self.level:
            self.lines.append((level, event, fields))

    def debug(self, event: str, **fields: Any) -> None:
        self.log(logging.DEBUG, event, **fields)


def record(command: Command, *, causation: str = "0:42", key: str = "ResourceBinding/ml/w") -> CommandRecord:
    return CommandRecord(id="c0ffee", at_ms=1, key=key, command=command, causation=causation, reason="because",
                         decider="data-dependency")


def test_every_command_type_has_a_phrase() -> None:
    union = set(typing.get_args(Command))
    assert union == set(COMMAND_TYPES)  # (the tuple the phrases are checked against lists the whole union)
    assert set(PHRASES) == union, f"no phrase for {sorted(t.__name__ for t in union - set(PHRASES))}"


PLACE = SetBindingPlacement(binding=REF, excluded_clusters=("c3",))


@pytest.mark.parametrize(("command", "level", "text"), [
    (PLACE, logging.INFO, "binding placed"),
    (SetBindingPlacement(binding=REF, excluded_clusters=("c1", "c2"), reschedule_at="t"), logging.INFO,
     "binding rescheduled"),
    (SetBindingPlacement(binding=REF, excluded_clusters=(), injected=False), logging.INFO,
     "binding placement stripped"),
    (UpdateClaimStatus(claim=CLAIM, phase="Bound", bound_data_source="ds", conditions=(
        Condition(type="Bound", status="True", reason="DataSourceBound", message="m"),)), logging.INFO,
     "claim bound"),
    (UpdateClaimStatus(claim=CLAIM, phase="Pending", bound_data_source="", conditions=()), logging.INFO,
     "claim pending"),
    (LookupDataLocation(identity=make_identity("amoro", "table", "db.t", None)), logging.DEBUG, "data lookup"),
    (EmitMemberEvent(cluster="m1", involved=ObjectRef(api_version="v1", kind="PodGroup", name="g"),
                     event_type="Normal", reason="Placed", message="m"), logging.INFO, "pod group placed"),
    (EmitMemberEvent(cluster="m1", involved=ObjectRef(api_version="v1", kind="PodGroup", name="g"),
                     event_type="Warning", reason="Unschedulable", message="m"), logging.INFO, "pod group held"),
    (SetMemberCondition(cluster="m1", target=REF, condition=Condition(
        type="AffinityInherited", status="True", reason="AffinityInherited", message="m")), logging.INFO,
     "Fluid affinity inherited"),
])
def test_phrases(command: Command, level: int, text: str) -> None:
    assert phrase(command)[:2] == (level, text)


def outcome(**kw: Any) -> list[Event]:
    return [CommandSucceeded(command_id="c0ffee", command="set_binding_placement", target="ResourceBinding/ml/w",
                             **kw)]


def test_a_change_is_one_info_line_with_offset_command_id_and_key() -> None:
    recorder = Recorder()
    DecisionLog(recorder).applied(record(PLACE), outcome())
    assert recorder.lines == [(logging.INFO, "binding placed", {
        "offset": 42, "command_id": "c0ffee", "key": "ResourceBinding/ml/w", "decider": "data-dependency",
        "why": "because", "excluded": "c3"})]


def test_a_no_op_is_debug_a_failure_warning_and_partitions_are_named() -> None:
    recorder = Recorder(logging.DEBUG)
    decisions = DecisionLog(recorder)
    decisions.applied(record(PLACE), outcome(noop=True))
    decisions.applied(record(PLACE, causation="3:7"), [CommandFailed(
        command_id="c0ffee", command="set_binding_placement", target="ResourceBinding/ml/w", reason="Conflict",
        message="the object has been modified", retryable=True)])
    decisions.superseded(record(PLACE), by=record(PLACE))
    assert [(level, text) for level, text, _ in recorder.lines] == [
        (logging.DEBUG, "binding placed: already so"), (logging.WARNING, "binding placed: failed"),
        (logging.DEBUG, "binding placed: superseded")]
    assert recorder.lines[2][2]["superseded_by"] == "c0ffee"
    failed = recorder.lines[1][2]
    assert (failed["partition"], failed["offset"], failed["failure"], failed["retryable"]) == (3, 7, "Conflict", True)
    info = Recorder()
    DecisionLog(info).applied(record(PLACE), outcome(noop=True))
    DecisionLog(info).decided([record(PLACE)])
    assert info.lines == []  # at info: nothing for work that changed nothing, nor for decisions not yet applied


def test_catalog_answers_have_their_own_lines() -> None:
    identity = make_identity("amoro", "table", "db.t", None)
    recorder = Recorder()
    lookup = record(LookupDataLocation(identity=identity), key="Data/amoro/table/db.t")
    decisions = DecisionLog(recorder)
    decisions.applied(lookup, [DataLocationResolved(identity=identity, location="s3://east/t")])
    decisions.applied(lookup, [DataSourceNotInCatalog(identity=identity, message="no such table")])
    decisions.applied(lookup, [DataLocationLookupFailed(identity=identity, message="timeout")])
    assert [(level, text, fields.get("key")) for level, text, fields in recorder.lines] == [
        (logging.INFO, "data located", "Data/amoro/table/db.t"),
        (logging.INFO, "data not in catalog", "Data/amoro/table/db.t"),
        (logging.WARNING, "data lookup failed", "Data/amoro/table/db.t")]
