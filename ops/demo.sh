#!/usr/bin/env bash
# The README's demo command: installs tether into .venv on first use, then runs `tether demo`.
set -euo pipefail
. "$(dirname "$0")/env.sh"
exec tether demo "$@"
