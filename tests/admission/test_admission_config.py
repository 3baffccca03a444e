"""Parsing volcano-scheduler.conf-shaped configuration; errors name the tier and the plugin."""

from __future__ import annotations

import pytest

from tether.core.admission.config import DEFAULT_ADMISSION_CONFIG_YAML, AdmissionConfigError, parse_admission_config
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG, PluginOption


def test_default_config() -> None:
    config = DEFAULT_ADMISSION_CONFIG
    assert config.actions == ("enqueue", "allocate", "backfill")
    assert [[p.name for p in tier.plugins] for tier in config.tiers] == [
        ["priority", "gang", "datadependency"], ["drf", "capacity", "proportion"]]


def test_the_default_config_is_what_its_yaml_parses_to() -> None:
    """The world's default (a literal in ``core.world.admission_state``, below the parser) and the documented YAML
    are one configuration."""
    assert parse_admission_config(DEFAULT_ADMISSION_CONFIG_YAML) == DEFAULT_ADMISSION_CONFIG


def test_volcano_config_with_switches_arguments_and_node_level_plugins() -> None:
    config = parse_admission_config("""
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
    enableJobOrder: false
    enablePreemptable: false
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: capacity
    arguments:
      clusters: false
  - name: nodeorder
""")
    assert config.ignored == ("conformance", "predicates", "nodeorder")
    assert config.tiers[0].plugins[0] == PluginOption(name="priority", enable_binding_order=False)
    assert config.tiers[1].plugins[1].arguments == {"clusters": False}


@pytest.mark.parametrize(("text", "tier", "plugin", "message"), [
    ("tiers:\n- plugins:\n  - name: fairness\n", 1, "fairness", "unknown plugin"),
    ("tiers:\n- plugins:\n  - name: gang\n- plugins:\n  - name: gang\n", 2, "gang", "configured twice"),
    ("tiers:\n- plugins:\n  - name: capacity\n    arguments: {cluster: true}\n", 1, "capacity", "unknown argument"),
    ("tiers:\n- plugins:\n  - name: capacity\n    arguments: {clusters: 'no'}\n", 1, "capacity", "expected bool"),
    ("tiers:\n- plugins:\n  - name: drf\n    arguments: [1]\n", 1, "drf", "expected a mapping"),
    ("tiers:\n- plugins:\n  - name: drf\n    enableQueueOrder: maybe\n", 1, "drf", "unknown option"),
    ("tiers:\n- plugins:\n  - name: drf\n    weight: 2\n", 1, "drf", "unknown option"),
    ("tiers:\n- plugins:\n  - name: drf\n- plugins: []\n", 2, None, "has no plugins"),
    ("tiers:\n- plugins:\n  - {}\n", 1, None, "needs a name"),
    ("tiers:\n- plugin: [gang]\n", 1, None, "expected {plugins"),
])
def test_errors_name_the_tier_and_plugin(text: str, tier: int, plugin: str | None, message: str) -> None:
    with pytest.raises(AdmissionConfigError) as caught:
        parse_admission_config(text)
    assert caught.value.tier == tier
    assert caught.value.plugin == plugin
    assert message in str(caught.value)
    assert f"tier {tier}" in str(caught.value)
    if plugin:
        assert repr(plugin) in str(caught.value)


@pytest.mark.parametrize(("text", "message"), [
    ("actions: [", "not YAML"),
    ("- a list", "expected a mapping"),
    ('actions: "allocate"\ntiers:\n- plugins:\n  - name: gang\n', "must include 'enqueue'"),
    ('actions: "enqueue, dance"\ntiers:\n- plugins:\n  - name: gang\n', "unknown action 'dance'"),
    ("actions: 3\ntiers:\n- plugins:\n  - name: gang\n", "actions: expected"),
    ("actions: enqueue\n", "tiers: expected"),
    ("tiers: []\n", "tiers: expected"),
    ("tier:\n- plugins: []\n", "unknown keys ['tier']"),
])
def test_document_errors(text: str, message: str) -> None:
    with pytest.raises(AdmissionConfigError, match="admission config") as caught:
        parse_admission_config(text)
    assert message in str(caught.value)
    assert caught.value.tier is None


def test_a_config_too_long_to_read_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(AdmissionConfigError, match=r"longer than 32768 characters"):
        parse_admission_config("# padding\n" * 4000 + 'actions: "enqueue, allocate"\n')
