"""ops/kafka/docker-compose.yml cannot run here (no Docker engine): check it parses and says what the docs say."""

from __future__ import annotations

from pathlib import Path

import yaml

from tether.adapters.log.kafka_config import parse_kafka_url

COMPOSE = Path(__file__).resolve().parents[2] / "ops" / "kafka" / "docker-compose.yml"


def test_compose_file_parses_and_runs_tether_on_kafka() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    command = services["tether"]["command"]
    assert command[0] == "run"
    url = command[command.index("--log") + 1]
    config = parse_kafka_url(url)
    assert (config.bootstrap, config.prefix, config.events_partitions) == ("kafka:9092", "tether", 1)
    assert services["tether"]["depends_on"]["kafka"]["condition"] == "service_healthy"
