"""Hostile ConfigMaps: Volcano Global's plugin ConfigMap and the admission ConfigMap (``volcano-scheduler.conf``),
parsed and folded. A broken plugin entry is an error for its system only (claims of that system get
``PluginConfigInvalid``), a broken admission configuration is ``config_error`` while the previous one stays in
force — and nothing raises, whatever the text: not JSON or YAML, wrong types, keys that are not strings, nesting
deeper than a parser recurses, YAML aliases that expand a few lines into billions of elements.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.adapters.testing.hostile import ODD_STRINGS, bent, fuzz_settings, json_values
from tether.core.admission.config import DEFAULT_ADMISSION_CONFIG_YAML, AdmissionConfigError, parse_admission_config
from tether.core.plugin_config import parse_plugin_configmap
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG
from tether.projections.admission_fold import CONFIG_KEY, MANAGED_KEY

PLUGIN = json.loads(m.plugin_entry(
    mapping={"s3://east/": ["c1"]}, reclaimPolicy="Delete", refreshInterval="5m",
    retryConfig={"maxRetries": 2, "initialBackoff": "10ms", "maxBackoff": "1s", "timeout": "2s",
                 "backoffMultiplier": 2},
    circuitBreaker={"failureThreshold": 3, "resetTimeout": "30s"},
    endpoint={"url": "https://amoro.invalid", "port": 1630,
              "auth": {"type": "oauth2", "tokenUrl": "https://idp.invalid/token", "clientId": "tether",
                       "clientSecret": "s", "scope": "catalog", "extra": {"a": "b"}},
              "tls": {"insecureSkipVerify": False, "caFile": "/ca.pem"}}))
ADMISSION = yaml.safe_load(DEFAULT_ADMISSION_CONFIG_YAML) | {"configurations": [], "metrics": {}}
ADMISSION["tiers"][1]["plugins"][1]["arguments"] = {"clusters": False}
ADMISSION["tiers"][0]["plugins"][0]["enableJobOrder"] = True


def deep(depth: int, *, flow: str = "[]") -> str:
    return flow[0] * depth + flow[1] * depth


#: Texts that break parsers rather than validators.
NASTY_TEXTS = (
    "", "null", "[]", "{}", "{", "\x00", deep(5000), deep(5000, flow="{}").replace("{}", "{a: 1}", 1),
    '{"a":' * 5000 + "1" + "}" * 5000,
    "1: x\nb: y\n",  # keys of two types
    "actions: enqueue\ntiers:\n- plugins:\n  - name: priority\n    1: true\n",  # an option that is not a string
    # a few lines that expand into 9^9 list elements when walked (the "billion laughs")
    "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\nactions: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n",
    "!!python/object/apply:os.system ['true']",
)

plugin_texts = st.one_of(
    bent(PLUGIN, max_changes=3).map(json.dumps),
    json_values().map(json.dumps),
    st.sampled_from(NASTY_TEXTS + ODD_STRINGS),
    st.text(max_size=40),
)


@fuzz_settings()
@given(entries=st.dictionaries(st.sampled_from(["amoro", "iceberg", "x", "", " "]), plugin_texts, min_size=1,
                               max_size=3))
def test_a_hostile_plugin_configmap_is_an_error_per_system(entries: dict[str, str]) -> None:
    parsed = parse_plugin_configmap(entries)
    for key in entries:  # every key is a plugin or an error, by key
        assert key in parsed.errors or any(p.key == key for p in parsed.plugins.values())
    assert all(isinstance(e, str) and e and len(e) < 2_000 for e in parsed.errors.values())

    h = Harness()
    h.apply(m.cluster("c1"))
    h.apply(m.plugin_configmap(entries))
    h.apply(m.claim("k", namespace="n", table="db.t", workload="w"))
    claim = h.obj("DataSourceClaim", "n", "k")
    assert claim is not None
    [bound] = [c for c in claim["status"]["conditions"] if c["type"] == "Bound"]
    if "amoro" not in parsed.plugins and "amoro" in parsed.errors:
        assert (bound["status"], bound["reason"]) == ("False", "PluginConfigInvalid")
    elif "amoro" not in parsed.plugins:
        assert (bound["status"], bound["reason"]) == ("False", "UnknownSystem")


def admission_world() -> Harness:
    h = Harness()
    h.apply({"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "tether-admission", "namespace": "tether-system"},
             "data": {CONFIG_KEY: yaml.safe_dump(ADMISSION)}})
    assert not h.world.admission.config_error
    return h


admission_texts = st.one_of(
    bent(ADMISSION, max_changes=3).map(lambda doc: yaml.safe_dump(doc, allow_unicode=True)),
    json_values().map(lambda doc: yaml.safe_dump(doc, allow_unicode=True)),
    st.sampled_from(NASTY_TEXTS + ODD_STRINGS),
    st.text(max_size=40),
)
managed_texts = st.one_of(
    bent({"kinds": ["apps/Deployment", "batch.volcano.sh/Job"], "namespaces": ["ml"]}).map(yaml.safe_dump),
    st.sampled_from(NASTY_TEXTS),
)


@fuzz_settings()
@given(config=admission_texts, managed=st.none() | managed_texts)
def test_a_hostile_admission_configmap_is_a_config_error_and_the_previous_stays(config: str,
                                                                               managed: str | None) -> None:
    h = admission_world()
    before = h.world.admission.config
    data: dict[str, Any] = {CONFIG_KEY: config, **({MANAGED_KEY: managed} if managed is not None else {})}
    h.apply({"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "tether-admission", "namespace": "tether-system"}, "data": data})
    state = h.world.admission
    if state.config_error:  # refused: said in one bounded line, and the previous configuration stays in force
        assert state.config_error.startswith("ConfigMap tether-system/tether-admission: ")
        assert len(state.config_error) < 2_000 and "\n" not in state.config_error.strip()
        assert state.config == before
    else:
        assert state.config.tiers or state.config == DEFAULT_ADMISSION_CONFIG


@pytest.mark.parametrize("text", NASTY_TEXTS, ids=[f"nasty{i}" for i in range(len(NASTY_TEXTS))])
def test_every_nasty_text_is_refused_or_read_by_both_parsers(text: str) -> None:
    """The texts that break parsers, each one every run (the properties above draw from them at random)."""
    parsed = parse_plugin_configmap({"amoro": text})
    assert "amoro" in parsed.plugins or len(parsed.errors["amoro"]) <= 300
    try:
        parse_admission_config(text)
    except AdmissionConfigError as error:
        assert len(str(error)) <= 400 and "\n" not in str(error)
    else:
        raise AssertionError(f"{text[:40]!r} was accepted as an admission configuration")
