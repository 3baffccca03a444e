#!/usr/bin/env bash
# The README's test command. Installs what it needs into .venv on first use, then runs the whole suite
# (unit, property, emulator, Kafka-protocol broker and integration tests). Extra arguments go to pytest.
set -euo pipefail
. "$(dirname "$0")/env.sh"
set +e
python -m pytest "$@"
status=$?
set -e
exit $status
