"""The data-source plugin configuration, in Volcano Global's ConfigMap format (plus tether's optional keys).

Volcano Global reads the ConfigMap ``volcano-global/volcano-global-datasource-plugins``: one key per plugin,
whose value is a JSON document::

    {"system": "amoro",
     "endpoint": {"url": "http://amoro:1630", "port": 1630,
                  "auth": {"type": "none|basic|bearer|token|apikey", "username": "", "password": "",
                           "token": "", "extra": {}},
                  "tls": {"insecureSkipVerify": false, "caFile": "..."}},
     "locationMapping": {"s3://warehouse-dc1/": ["cluster1", "cluster2"]},
     "retryConfig": {"maxRetries": 3, "initialBackoff": "1s", "maxBackoff": "30s",
                     "backoffMultiplier": 2.0, "timeout": "30s"}}

tether accepts that unchanged and understands a few optional keys of its own, all documented in the README:
``type`` (which resolver serves the system: ``amoro``, ``iceberg-rest``, ``s3``, ``hdfs`` or a third-party
entry point; default: the system name), ``basePath`` and ``prefix`` (Iceberg REST addressing), ``auth.type:
oauth2`` with ``tokenUrl``/``clientId``/``clientSecret``/``scope``, ``concurrency``, ``circuitBreaker``
``{failureThreshold, resetTimeout}``, ``refreshInterval`` (the migration poll), ``reclaimPolicy`` (for the
DataSources this plugin's lookups create) and ``locality`` (``Required`` or ``Preferred`` locality tiers, for the
system and per table prefix: ``core.locality``). A malformed ``locality`` does not spoil its plugin: it is reported
in :attr:`PluginSet.locality_errors` and the plugin's previous locality stays in force.

**Secrets by reference.** Volcano Global's format puts ``password``, ``token`` and ``clientSecret`` in the
ConfigMap itself — readable by whoever may read ConfigMaps, and recorded in tether's event log with every
observation of it. tether also takes each by reference: ``passwordFile``/``passwordEnv``, ``tokenFile``/
``tokenEnv``, ``clientSecretFile``/``clientSecretEnv`` name a file (a mounted Secret) or an environment variable of
the daemon, read when a request is sent; only the name is in the ConfigMap and the log. One source per secret.

Parsing is pure and total: a malformed plugin entry does not spoil the others, it is reported in
:attr:`PluginSet.errors` under its key and every claim of that system gets a condition saying so.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from .locality import NO_PLUGIN_LOCALITY, PluginLocality, parse_plugin_locality

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object, *, field: str) -> float:
    """``"1s"``, ``"500ms"``, ``"5m"``, ``"1.5h"`` or a bare number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    raise ValueError(f"{field}: expected a duration such as '1s' or '500ms', got {value!r}")


class AuthConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str = "none"
    username: str = ""
    password: str = ""
    token: str = ""
    header: str = ""  # apikey: header name (default X-API-Key)
    token_url: str = ""
    client_id: str = ""
    client_secret: str = ""
    scope: str = ""
    extra: dict[str, str] = {}
    # where a secret is, instead of the secret (module doc): a file (a mounted Secret) or an environment variable,
    # read by the catalog adapter when it sends a request — the ConfigMap, and so the log, never holds it
    password_file: str = ""
    password_env: str = ""
    token_file: str = ""
    token_env: str = ""
    client_secret_file: str = ""
    client_secret_env: str = ""


#: The secrets of ``endpoint.auth`` that may be given by reference: field → (its File key, its Env key).
SECRET_REFERENCES = {"password": ("passwordFile", "passwordEnv"), "token": ("tokenFile", "tokenEnv"),
                     "clientSecret": ("clientSecretFile", "clientSecretEnv")}


def _secret_references(auth_raw: dict[str, Any]) -> dict[str, str]:
    """The ``*File``/``*Env`` keys of ``endpoint.auth`` as AuthConfig fields; at most one source per secret."""
    out: dict[str, str] = {}
    for field, keys in SECRET_REFERENCES.items():
        given = [k for k in (field, *keys) if auth_raw.get(k) not in (None, "")]
        if len(given) > 1:
            raise ValueError(f"endpoint.auth: give one of {', '.join(given)}, not several")
        for key in keys:
            value = _str(auth_raw, key, "endpoint.auth")
            if value:
                out[re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()] = value
    return out


class TlsConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    insecure_skip_verify: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


class RetryConfig(msgspec.Struct, frozen=True):
    max_retries: int = 3
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    backoff_multiplier: float = 2.0
    timeout: float = 30.0


class CircuitBreakerConfig(msgspec.Struct, frozen=True):
    failure_threshold: int = 5
    reset_timeout: float = 30.0


class PluginConfig(msgspec.Struct, frozen=True):
    """One plugin entry, validated and normalised."""

    key: str
    system: str
    type: str
    url: str = ""
    base_path: str = ""
    prefix: str = ""
    auth: AuthConfig = AuthConfig()
    tls: TlsConfig = TlsConfig()
    location_mapping: tuple[tuple[str, tuple[str, ...]], ...] = ()
    retry: RetryConfig = RetryConfig()
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    concurrency: int = 8
    refresh_interval: float = 300.0
    reclaim_policy: str = "Retain"
    locality: PluginLocality = NO_PLUGIN_LOCALITY
    locality_error: str = ""  # why the entry's locality was refused (parse_plugin_configmap keeps the previous one)


class PluginSet(msgspec.Struct, frozen=True):
    """All plugins of one ConfigMap, indexed by system; ``errors`` maps a ConfigMap key to what is wrong;
    ``locality_errors`` a system to why its ``locality`` was refused (its previous one stays in force)."""

    plugins: dict[str, PluginConfig] = {}
    errors: dict[str, str] = {}
    locality_errors: dict[str, str] = {}


EMPTY_PLUGINS = PluginSet()

#: Systems whose ``name`` already is the data's location: no catalog lookup is needed.
PATH_SYSTEMS = frozenset({"s3", "hdfs", "oss", "gs", "abfs", "file"})


def _obj(value: object, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{field}: expected an object, got {type(value).__name__}")
    return value


def _str(d: dict[str, Any], name: str, field: str, default: str = "") -> str:
    value = d.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):  # (the type only: the field may be a password given as a number)
        raise ValueError(f"{field}.{name}: expected a string, got {type(value).__name__}")
    return value


def _bool(d: dict[str, Any], name: str, field: str) -> bool:
    # bool("false") is True: a quoted "false" must not silently switch TLS verification off
    value = d.get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"{field}.{name}: expected true or false, got {value!r}")
    return value


def _endpoint_url(endpoint: dict[str, Any]) -> str:
    url = _str(endpoint, "url", "endpoint")
    port = endpoint.get("port")
    if url and port is not None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"endpoint.port: expected a port number, got {port!r}")
        scheme, sep, rest = url.partition("://")
        hostport = rest.split("/", 1)[0] if sep else url.split("/", 1)[0]
        if ":" not in hostport.rsplit("]", 1)[-1]:  # VG appends the port only when the URL has none
            path = rest[len(hostport):] if sep else url[len(hostport):]
            url = f"{scheme}://{hostport}:{port}{path}" if sep else f"{hostport}:{port}{path}"
    return url.rstrip("/")


def parse_plugin(key: str, text: str) -> PluginConfig:
    """Parse one ConfigMap value; raises ValueError with a message naming the faulty field."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    doc = _obj(doc, "plugin")
    system = _str(doc, "system", "plugin") or key
    endpoint = _obj(doc.get("endpoint"), "endpoint")
    auth_raw = _obj(endpoint.get("auth"), "endpoint.auth")
    auth_type = _str(auth_raw, "type", "endpoint.auth", "none") or "none"
    if auth_type not in {"none", "basic", "bearer", "token", "apikey", "oauth2"}:
        raise ValueError(f"endpoint.auth.type: unknown auth type {auth_type!r}")
    extra = _obj(auth_raw.get("extra"), "endpoint.auth.extra")
    auth = AuthConfig(
        type="bearer" if auth_type == "token" else auth_type,
        username=_str(auth_raw, "username", "endpoint.auth"),
        password=_str(auth_raw, "password", "endpoint.auth"),
        token=_str(auth_raw, "token", "endpoint.auth"),
        header=_str(auth_raw, "header", "endpoint.auth"),
        token_url=_str(auth_raw, "tokenUrl", "endpoint.auth"),
        client_id=_str(auth_raw, "clientId", "endpoint.auth"),
        client_secret=_str(auth_raw, "clientSecret", "endpoint.auth"),
        scope=_str(auth_raw, "scope", "endpoint.auth"),
        extra={str(k): str(v) for k, v in extra.items()},
        **_secret_references(auth_raw),
    )
    tls_raw = _obj(endpoint.get("tls"), "endpoint.tls")
    tls = TlsConfig(
        insecure_skip_verify=_bool(tls_raw, "insecureSkipVerify", "endpoint.tls"),
        ca_file=_str(tls_raw, "caFile", "endpoint.tls"),
        cert_file=_str(tls_raw, "certFile", "endpoint.tls"),
        key_file=_str(tls_raw, "keyFile", "endpoint.tls"),
    )
    mapping_raw = _obj(doc.get("locationMapping"), "locationMapping")
    mapping: list[tuple[str, tuple[str, ...]]] = []
    for prefix, clusters in mapping_raw.items():
        if not isinstance(clusters, list) or not all(isinstance(c, str) and c for c in clusters):
            raise ValueError(f"locationMapping[{prefix!r}]: expected a list of cluster names")
        mapping.append((prefix, tuple(sorted(set(clusters)))))
    retry_raw = _obj(doc.get("retryConfig"), "retryConfig")
    defaults = RetryConfig()
    max_retries = retry_raw.get("maxRetries", defaults.max_retries)
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise ValueError(f"retryConfig.maxRetries: expected a non-negative integer, got {max_retries!r}")
    multiplier = retry_raw.get("backoffMultiplier", defaults.backoff_multiplier)
    if not isinstance(multiplier, int | float) or isinstance(multiplier, bool) or multiplier < 1:
        raise ValueError(f"retryConfig.backoffMultiplier: expected a number >= 1, got {multiplier!r}")
    retry = RetryConfig(
        max_retries=max_retries,
        initial_backoff=parse_duration(
            retry_raw.get("initialBackoff", defaults.initial_backoff), field="retryConfig.initialBackoff"
        ),
        max_backoff=parse_duration(
            retry_raw.get("maxBackoff", defaults.max_backoff), field="retryConfig.maxBackoff"
        ),
        backoff_multiplier=float(multiplier),
        timeout=parse_duration(retry_raw.get("timeout", defaults.timeout), field="retryConfig.timeout"),
    )
    cb_raw = _obj(doc.get("circuitBreaker"), "circuitBreaker")
    threshold = cb_raw.get("failureThreshold", 5)
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        raise ValueError(f"circuitBreaker.failureThreshold: expected a positive integer, got {threshold!r}")
    cb = CircuitBreakerConfig(
        failure_threshold=threshold,
        reset_timeout=parse_duration(cb_raw.get("resetTimeout", 30.0), field="circuitBreaker.resetTimeout"),
    )
    concurrency = doc.get("concurrency", 8)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ValueError(f"concurrency: expected a positive integer, got {concurrency!r}")
    reclaim = _str(doc, "reclaimPolicy", "plugin", "Retain") or "Retain"
    if reclaim not in {"Retain", "Delete"}:
        raise ValueError(f"reclaimPolicy: expected Retain or Delete, got {reclaim!r}")
    locality, locality_error = NO_PLUGIN_LOCALITY, ""
    try:
        locality = parse_plugin_locality(doc.get("locality"))
    except ValueError as exc:  # refused alone: the plugin serves its claims as before (module doc)
        locality_error = _one_line(str(exc))
    return PluginConfig(
        key=key,
        system=system,
        type=_str(doc, "type", "plugin") or system,
        url=_endpoint_url(endpoint),
        base_path=_str(doc, "basePath", "plugin"),
        prefix=_str(doc, "prefix", "plugin"),
        auth=auth,
        tls=tls,
        location_mapping=tuple(sorted(mapping)),
        retry=retry,
        circuit_breaker=cb,
        concurrency=concurrency,
        refresh_interval=parse_duration(doc.get("refreshInterval", 300.0), field="refreshInterval"),
        reclaim_policy=reclaim,
        locality=locality,
        locality_error=locality_error,
    )


def _declared_system(text: str) -> str:
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return ""
    system = doc.get("system") if isinstance(doc, dict) else None
    return system if isinstance(system, str) else ""


#: An error lands on every claim of its system (a condition, an Event): one line, and short.
_MAX_ERROR = 300


def _one_line(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= _MAX_ERROR else message[: _MAX_ERROR - 1] + "…"


def parse_plugin_configmap(data: dict[str, str], previous: PluginSet | None = None) -> PluginSet:
    """Every key of the ConfigMap's ``data``; bad entries land in ``errors`` instead of raising. A refused
    ``locality`` lands in ``locality_errors``, and the plugin keeps the one it had in ``previous``."""
    plugins: dict[str, PluginConfig] = {}
    errors: dict[str, str] = {}
    locality_errors: dict[str, str] = {}
    for key in sorted(data):
        try:
            plugin = parse_plugin(key, data[key])
        except ValueError as exc:
            errors[key] = message = _one_line(str(exc))
            system = _declared_system(data[key])
            if system and system != key:  # claims name the system, not the key: say it under both
                errors.setdefault(system, _one_line(f"(ConfigMap key {key!r}) {message}"))
            continue
        if plugin.system in plugins:
            errors[key] = _one_line(f"system {plugin.system!r} is already configured by key "
                                    f"{plugins[plugin.system].key!r}")
            continue
        if plugin.locality_error:
            locality_errors[plugin.system] = plugin.locality_error
            before = previous.plugins.get(plugin.system) if previous is not None else None
            plugin = msgspec.structs.replace(plugin, locality=before.locality if before is not None
                                             else NO_PLUGIN_LOCALITY)
        plugins[plugin.system] = plugin
    return PluginSet(plugins=plugins, errors=errors, locality_errors=locality_errors)


def map_location(
    mapping: tuple[tuple[str, tuple[str, ...]], ...], location: str
) -> tuple[str, ...] | None:
    """Clusters holding ``location``: the longest matching prefix wins; None when no prefix matches."""
    best: tuple[str, tuple[str, ...]] | None = None
    for prefix, clusters in mapping:
        if location.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, clusters)
    return None if best is None else best[1]
