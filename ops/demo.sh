#!/usr/bin/env bash
# The README's demo command: installs tether into the checkout's .venv on first use, then runs `tether demo` in the
# directory it was started from (its log, ./tether-demo.db, lands there, where the commands it prints next expect it).
# The environment is not activated in the calling shell: the demo prints the full path of `tether` when the shell
# cannot find it (adapters/sandbox/demo_command.py, runnable_tether).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(. "$root/ops/env.sh")  # in a subshell: env.sh activates the environment and changes to the checkout's root
exec "$root/.venv/bin/tether" demo "$@"
