"""The two plugin-config checks the catalog client depends on (fixed with the resolvers)."""

from __future__ import annotations

import pytest

from tether.core.plugin_config import parse_plugin


def test_quoted_false_does_not_disable_tls_verification():
    with pytest.raises(ValueError, match="insecureSkipVerify: expected true or false"):
        parse_plugin("a", '{"endpoint": {"tls": {"insecureSkipVerify": "false"}}}')
    assert parse_plugin("a", '{"endpoint": {"tls": {"insecureSkipVerify": true}}}').tls.insecure_skip_verify


@pytest.mark.parametrize("value", ['"x"', "0", "2.5", "true"])
def test_breaker_threshold_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"circuitBreaker\.failureThreshold"):
        parse_plugin("a", f'{{"circuitBreaker": {{"failureThreshold": {value}}}}}')


def test_a_broken_entry_is_reported_under_its_system_too() -> None:
    from tether.core.plugin_config import parse_plugin_configmap

    plugins = parse_plugin_configmap({"hive-plugin": '{"system": "hive", "retryConfig": {"maxRetries": -1}}'})
    assert "hive" not in plugins.plugins
    assert "maxRetries" in plugins.errors["hive-plugin"]
    assert "hive-plugin" in plugins.errors["hive"] and "maxRetries" in plugins.errors["hive"]


def test_the_smallest_allowed_threshold_and_multiplier_are_accepted_and_below_them_refused() -> None:
    """One failure may open the breaker, and a multiplier of 1 (a constant backoff) is a choice, not a mistake; a
    multiplier below 1 would shrink the backoff on every retry."""
    plugin = parse_plugin("a", '{"circuitBreaker": {"failureThreshold": 1}, "retryConfig": {"backoffMultiplier": 1}}')
    assert (plugin.circuit_breaker.failure_threshold, plugin.retry.backoff_multiplier) == (1, 1.0)
    for multiplier in ("0.5", "0", '"2"', "true"):
        with pytest.raises(ValueError, match=r"retryConfig\.backoffMultiplier: expected a number >= 1"):
            parse_plugin("a", f'{{"retryConfig": {{"backoffMultiplier": {multiplier}}}}}')
