"""What tether may write on a Fluid operation's status, and when.

A Fluid operation (DataLoad, DataMigrate, DataProcess, DataBackup) belongs to Fluid: its controller writes
``status`` whole, and Fluid's CRDs require ``status.conditions``, ``status.duration`` and ``status.phase`` whenever a
status is written at all. tether reports the outcome of DataFlow inheritance as one condition of its own
(:data:`CONDITION_TYPE`) next to Fluid's; measured on kube-apiserver v1.28 with Fluid's CRDs, a merge patch of
``status.conditions`` onto an operation whose status Fluid has not written yet is refused — ``422 Invalid: [duration:
Required value, phase: Required value]`` — and writing ``phase`` or ``duration`` ourselves would be inventing Fluid's
state machine for it (Fluid reads an empty phase as "not started").

So the rule, valid whatever state Fluid's controller is in:

* **Fluid has written its status** (:func:`accepts_conditions`: ``phase`` and ``duration`` are there): tether
  merge-patches ``status.conditions`` only — Fluid's own conditions verbatim, its own replaced by type — guarded by
  the resourceVersion it read, so everything Fluid wrote stays as it was and a concurrent write of Fluid's wins
  (409, then a fresh read).
* **It has not** (no controller yet, or not reconciled yet): the outcome goes out as a Kubernetes Event on the
  operation and is kept on tether's side — in the log (the decision and its Event, ``tether replay --explain``) and
  in the world (``MemberState.outcomes``, noted when the Event is issued) — and the condition is written when the
  status appears (the operation's observation brings the decider back to it).
* Fluid's controller may later replace ``status.conditions`` wholesale (it builds the status from its own copy);
  the outcome kept in the world is then written again, once per such write — never a loop, since each of tether's
  writes makes the observed condition equal to the outcome.

The outcome's condition is a function of the outcome alone (:func:`outcome_condition`): ``True`` only when the
pods inherited their predecessor's placement. What the condition carries is what Fluid's condition schema has
(``type``, ``status``, ``reason``, ``message``, ``lastTransitionTime``), so the server prunes nothing from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..kube import Condition

#: The condition tether sets on a Fluid operation whose pods it gated (status.conditions, next to Fluid's own).
CONDITION_TYPE = "AffinityInherited"
#: The outcome reason of an inheritance that happened (the condition's only ``True``).
REASON_INHERITED = "AffinityInherited"
#: What Fluid's status schema requires besides ``conditions`` — fields tether never writes, so they must be Fluid's.
FLUID_STATUS_FIELDS = ("phase", "duration")


def accepts_conditions(status: Mapping[str, Any] | None) -> bool:
    """Whether a merge patch of ``status.conditions`` alone onto an operation with ``status`` is valid against Fluid's
    schema: its controller has written the fields tether does not (module doc)."""
    return isinstance(status, Mapping) and all(field in status for field in FLUID_STATUS_FIELDS)


def outcome_condition(*, reason: str, message: str, at: str) -> Condition:
    """The condition reporting an inheritance outcome decided at ``at`` (RFC 3339, the deciding event's time)."""
    return Condition(type=CONDITION_TYPE, status="True" if reason == REASON_INHERITED else "False", reason=reason,
                     message=message, last_transition_time=at)


def same_outcome(a: Condition | None, b: Condition | None) -> bool:
    """Whether two conditions report the same outcome (their times aside)."""
    if a is None or b is None:
        return a is b
    return (a.status, a.reason, a.message) == (b.status, b.reason, b.message)


__all__ = ["CONDITION_TYPE", "FLUID_STATUS_FIELDS", "REASON_INHERITED", "accepts_conditions", "outcome_condition",
           "same_outcome"]
