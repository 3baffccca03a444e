"""``tether replay --explain`` and ``--what-if`` on the log the demo leaves: "why is my Deployment there", in one call.

The demo runs once for the module (fast: ``--speed 100 --no-live``); each test reads its log. The demo's story is
known: ``ml/clicks-train``'s table ``prod.events.clicks`` moves east → west, so its binding ends on ``member3``,
the one cluster the prefix ``s3://warehouse-west/`` maps to, and tether excludes ``member1`` and ``member2``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from tether.adapters.cli import main
from tether.adapters.kubernetes import manifests

CHAIN = ("Deployment/ml/clicks-train ← ResourceBinding/ml/clicks-train-deployment ← DataSourceClaim/ml/clicks-train"
         " ← DataSource//amoro-table-prod.events.clicks ← s3://warehouse-west/prod/events/clicks"
         " ← s3://warehouse-west/ → member3")
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = tmp_path_factory.mktemp("demo") / "demo.db"
    result = CliRunner().invoke(main, ["demo", "--log", str(log), "--speed", "100", "--no-live"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return log


def explain(log: Path, key: str, *extra: str) -> Result:
    return CliRunner().invoke(main, ["replay", str(log), "--explain", key, *extra], terminal_width=400)


def section(out: str, title: str) -> str:
    """The lines of one link's section (from its title to the next unindented line)."""
    lines = out.splitlines()
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.parametrize("key", ["Deployment/ml/clicks-train", "deployment/ml/clicks-train",
                                 "deployments/ml/clicks-train", "deploy/ml/clicks-train",
                                 "deployments.apps/ml/clicks-train", "deploy/clicks-train"])
def test_explain_a_deployment_prints_the_chain_to_its_clusters(demo_log: Path, key: str) -> None:
    result = explain(demo_log, key)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.splitlines()[0].startswith("Why Deployment/ml/clicks-train is where it is")
    assert f"  {CHAIN}" in out.splitlines()
    assert "  scheduled now on member3" in out.splitlines()  # spec.clusters of the binding's latest observation


def test_each_link_shows_its_decision_with_time_cause_and_reason(demo_log: Path) -> None:
    out = explain(demo_log, "Deployment/ml/clicks-train").output
    binding = section(out, "ResourceBinding/ml/clicks-train-deployment")
    assert "tether excludes member1, member2" in binding
    # the last placement: the move west, caused by the DataSource's new locality, with the decider's reason
    assert re.search(rf"{TIME}  C\d+ data-dependency SetBindingPlacement: exclude member1,member2 reschedule@", binding)
    assert re.search(r"cause  E\d+ executor DataSource//amoro-table-prod.events.clicks CommandSucceeded: "
                     r"update_data_source_locality applied", binding)
    assert "reason workload apps/Deployment/ml/clicks-train must run where its data is: excluding member1,member2; " \
           "rescheduling away from member1,member2" in binding
    assert "no webhook or queue-admission decision recorded" in binding  # the demo runs without admission
    claim = section(out, "DataSourceClaim/ml/clicks-train")
    assert "Bound to DataSource amoro-table-prod.events.clicks" in claim
    assert re.search(rf"status +{TIME}  C\d+ data-dependency UpdateClaimStatus: phase=Bound", claim)
    source = section(out, "DataSource//amoro-table-prod.events.clicks")
    assert "clusters member3; location s3://warehouse-west/prod/events/clicks" in source
    assert re.search(r"UpdateDataSourceLocality: moved to s3://warehouse-west/prod/events/clicks → member3", source)
    assert "reason amoro/table/prod.events.clicks now lives at s3://warehouse-west/prod/events/clicks" in source
    location = section(out, "location s3://warehouse-west/prod/events/clicks")
    assert "cause  a push notification (POST /v1/notifications/table-moved)" in location
    assert re.search(r"cause  answer to C\d+ data-dependency LookupDataLocation", location)  # the first lookup
    mapping = section(out, "mapping s3://warehouse-west/ → member3")
    assert "plugin amoro of ConfigMap/volcano-global/volcano-global-datasource-plugins" in mapping
    assert re.search(rf"ConfigMap +{TIME}  E\d+ watch/configmaps ObjectObserved", mapping)


def test_a_binding_or_a_claim_prints_its_trail_then_its_workloads_chain(demo_log: Path) -> None:
    for key in ("rb/ml/clicks-train-deployment", "dsc/ml/clicks-train"):
        result = explain(demo_log, key)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].startswith("Decision trail of ")
        assert any(line.startswith("Why Deployment/ml/clicks-train is where it is") for line in lines)
        assert f"  {CHAIN}" in lines


def test_a_claim_whose_table_is_not_in_the_catalog_says_where_the_chain_stops(demo_log: Path) -> None:
    out = explain(demo_log, "Deployment/ml/refunds-model").output
    assert ("  Deployment/ml/refunds-model ← ResourceBinding/ml/refunds-model-deployment ← "
            "DataSourceClaim/ml/refunds-model ← (no DataSource for amoro/table/prod.sales.refunds) ← "
            "(no location: not-found: ") in out
    assert "tether excludes nothing" in out and "Pending: DataSourceNotFound" in out


def test_an_unknown_key_suggests_the_nearest_that_exist(demo_log: Path) -> None:
    result = explain(demo_log, "Deployment/ml/clicks-trian")
    assert result.exit_code == 1
    assert "no record about Deployment/ml/clicks-trian in" in result.output
    assert re.search(r"did you mean: Deployment/ml/clicks-train\b", result.output)
    wrong_kind = explain(demo_log, "statefulset/ml/clicks-train")
    assert wrong_kind.exit_code == 1 and "Deployment/ml/clicks-train" in wrong_kind.output


def test_what_if_a_mapping_change_lists_the_workloads_that_would_move(demo_log: Path, tmp_path: Path) -> None:
    candidate = tmp_path / "plugins.yaml"
    entry = manifests.plugin_entry(url="http://catalog.invalid", port=None, mapping={
        "s3://warehouse-east/": ["member1", "member2"], "s3://warehouse-west/": ["member2"]})
    candidate.write_text(yaml.safe_dump(manifests.plugin_configmap({"amoro": entry})))
    result = CliRunner().invoke(main, ["replay", str(demo_log), "--what-if", str(candidate)], terminal_width=400)
    assert result.exit_code == 0, result.output
    out = result.output
    # the two workloads on the moved table and the one on a western table go west → member2; the others stay
    for workload, binding in [("Deployment/ml/clicks-train", "ResourceBinding/ml/clicks-train-deployment"),
                              ("Deployment/analytics/clicks-dashboard",
                               "ResourceBinding/analytics/clicks-dashboard-deployment"),
                              ("Deployment/ml/customer-churn", "ResourceBinding/ml/customer-churn-deployment")]:
        assert f"  {workload} ({binding}): member3 → member2" in out.splitlines(), out
    assert "Deployment/analytics/orders-report (" not in out  # its data stays east, on member1, member2
    assert "3 workload(s) would move" in out
