"""The two plugin-config checks the catalog client depends on (fixed with the resolvers)."""

from __future__ import annotations

import pytest

from tether.core.datadependency.plugin_config import parse_plugin


def test_quoted_false_does_not_disable_tls_verification():
    with pytest.raises(ValueError, match="insecureSkipVerify: expected true or false"):
        parse_plugin("a", '{"endpoint": {"tls": {"insecureSkipVerify": "false"}}}')
    assert parse_plugin("a", '{"endpoint": {"tls": {"insecureSkipVerify": true}}}').tls.insecure_skip_verify


@pytest.mark.parametrize("value", ['"x"', "0", "2.5", "true"])
def test_breaker_threshold_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"circuitBreaker\.failureThreshold"):
        parse_plugin("a", f'{{"circuitBreaker": {{"failureThreshold": {value}}}}}')


def test_a_broken_entry_is_reported_under_its_system_too() -> None:
    from tether.core.datadependency.plugin_config import parse_plugin_configmap

    plugins = parse_plugin_configmap({"hive-plugin": '{"system": "hive", "retryConfig": {"maxRetries": -1}}'})
    assert "hive" not in plugins.plugins
    assert "maxRetries" in plugins.errors["hive-plugin"]
    assert "hive-plugin" in plugins.errors["hive"] and "maxRetries" in plugins.errors["hive"]
