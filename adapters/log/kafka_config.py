"""A ``kafka://`` URL and the :class:`KafkaConfig` it says: brokers, topic prefix, partitions, group, tuning.

``kafka://host:port[,host:port]/<prefix>?param=value…``: every field of :class:`KafkaConfig` is a query parameter
of the same name. The URL is checked when it is parsed — brokers as ``host:port`` with a port number, known
parameters of the right type, partition counts of at least one — so that a typo stops ``tether run`` before
anything starts, with the parameter named, instead of surfacing from deep inside aiokafka's connection code later.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tether.core.integers import decimal_digits


@dataclass(frozen=True)
class KafkaConfig:
    """Everything a ``kafka://`` URL can say; field names are the URL's query parameters."""

    bootstrap: str
    prefix: str = "tether"
    events_partitions: int = 1
    commands_partitions: int = 6
    group: str = "tether"
    replication: int = 1
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    client_id: str = "tether"
    linger_ms: int = 5
    max_batch_bytes: int = 256 * 1024
    fetch_max_wait_ms: int = 500
    append_timeout_s: float = 120.0
    unordered_events: bool = False
    commit_pipeline: int = 4
    handoff_bytes: int = 32 * 1024 * 1024

    def topic(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}/{self.prefix}"


def _convert(name: str, text: str, kind: Any) -> Any:
    if kind in (bool, "bool"):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"kafka URL parameter {name}={text!r} is not a boolean")
    if kind in (int, "int"):
        if (number := decimal_digits(text)) is None:
            raise ValueError(f"kafka URL parameter {name}={text!r} is not a whole number")
        return number
    if kind in (float, "float"):
        return float(text)
    return text


def _check_broker(broker: str) -> None:
    """``host:port`` with a port number: checked when the URL is parsed, not when the first client connects (aiokafka
    would raise a bare ``ValueError`` from deep inside its connection code, after the daemon started)."""
    host, sep, port = broker.rpartition(":")
    if not sep or not host:
        raise ValueError(f"kafka broker {broker!r} is not host:port (e.g. kafka://broker:9092/tether)")
    if not 0 < (decimal_digits(port) or 0) < 65536:
        raise ValueError(f"kafka broker {broker!r}: port {port!r} is not a number from 1 to 65535")


def parse_kafka_url(url: str, **overrides: Any) -> KafkaConfig:
    """``kafka://host:port[,host:port]/<prefix>?param=value…`` → :class:`KafkaConfig` (keywords override)."""
    parts = urlsplit(url)
    if parts.scheme != "kafka":
        raise ValueError(f"not a kafka:// URL: {url!r}")
    if not parts.netloc:
        raise ValueError(f"kafka URL without brokers: {url!r}")
    for broker in parts.netloc.split(","):
        _check_broker(broker)
    prefix = parts.path.strip("/") or "tether"
    if "/" in prefix:
        raise ValueError(f"kafka URL topic prefix may not contain '/': {prefix!r}")
    known = {f.name: f.type for f in fields(KafkaConfig)}
    values: dict[str, Any] = {"bootstrap": parts.netloc, "prefix": prefix}
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name not in known or name in ("bootstrap", "prefix"):
            raise ValueError(f"unknown kafka URL parameter {name!r} (known: {', '.join(sorted(known))})")
        values[name] = _convert(name, text, known[name])
    values.update(overrides)
    config = KafkaConfig(**values)
    if config.events_partitions < 1 or config.commands_partitions < 1:
        raise ValueError("partition counts must be at least 1")
    return config


__all__ = ["KafkaConfig", "parse_kafka_url"]
