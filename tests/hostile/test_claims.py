"""Hostile claim specs, folded and decided: every DataSourceClaim gets a Bound condition with a reason — bound,
pending for a catalog reason, or ``InvalidSpec`` naming the field — and nothing raises.

A claim's spec is the user's: the CRD's schema is the API server's first check, but a cluster may run an older
schema, a schema may be disabled, and tether must stand on its own. Each example is a valid claim bent out of
shape (:func:`~tether.adapters.testing.hostile.bent`) or a spec of any JSON at all, applied to a world with the
plugin, three clusters and the claim's workload bound, driven to quiescence by the pipeline
(``adapters/testing/fake_cluster.Harness``), then deleted. What was logged on the way must decode again.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.adapters.testing.hostile import bent, fuzz_settings, json_values
from tether.core.envelope import decode_command, decode_event, encode
from tether.core.kube import trim
from tether.core.world.views import parse_claim

MAPPING = {"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]}
VALID = m.claim("k", namespace="n", table="db.t", workload="w", attributes={"region": "eu"})


def world() -> Harness:
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)}))
    h.cluster.catalog["amoro/table/db.t?region=eu"] = "s3://east/db/t"
    h.apply(m.resource_binding("w", namespace="n"))
    return h


def bound_condition(h: Harness) -> dict[str, Any]:
    claim = h.obj("DataSourceClaim", "n", "k")
    assert claim is not None
    conditions = [c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == "Bound"]
    assert len(conditions) == 1, claim.get("status")
    return conditions[0]


def assert_log_decodes(h: Harness) -> None:
    """Whatever the pipeline logged can be read back: a record that cannot is a poison pill for every reader."""
    for event in h.events:
        assert decode_event(encode(event)) == event
    for command in h.commands:
        assert decode_command(encode(command)) == command


specs = st.one_of(
    bent(VALID["spec"], max_changes=3),
    st.dictionaries(st.sampled_from(["system", "dataSourceType", "dataSourceName", "workload", "attributes", "x"]),
                    json_values(), max_size=5),
)


@fuzz_settings()
@given(spec=specs)
def test_a_hostile_claim_spec_gets_a_condition_never_an_exception(spec: dict[str, Any]) -> None:
    h = world()
    h.apply({**VALID, "spec": spec})
    condition = bound_condition(h)
    assert condition["status"] in ("True", "False") and condition["reason"]
    problem = parse_claim(trim({**VALID, "spec": spec})).problem
    if problem:  # an invalid spec is said so, with the reason the view found
        assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
        assert problem in condition["message"]
    h.delete("DataSourceClaim", "n", "k")  # the finalizer comes off whatever the spec was
    assert h.obj("DataSourceClaim", "n", "k") is None
    assert_log_decodes(h)


@fuzz_settings()
@given(claim=bent(VALID, max_changes=2, keep=(("metadata",), ("kind",), ("apiVersion",))),
       status=json_values())
def test_a_hostile_claim_status_is_folded_without_an_exception(claim: dict[str, Any], status: Any) -> None:
    """The status is tether's to write, but someone else may have written it first (kubectl, another controller)."""
    h = world()
    raw = {**claim, "status": status if isinstance(status, dict) else {"conditions": status, "phase": status}}
    try:
        trim(raw)
    except msgspec.ValidationError:  # not shaped like an object (a spec that is a string): the watch logs and skips it
        assert not isinstance(raw.get("spec"), dict)
        return
    h.apply(raw)
    bound_condition(h)
    assert_log_decodes(h)
