# Sourced by ops/test.sh and ops/demo.sh: create the project's virtualenv on first use, then activate it.
# Re-running is cheap: pip is only invoked when pyproject.toml changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -x "$root/.venv/bin/python" ]; then
  python3 -m venv "$root/.venv"
fi
# shellcheck disable=SC1091
. "$root/.venv/bin/activate"
stamp="$root/.venv/.tether-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q -e "$root[test]"
  touch "$stamp"
fi
cd "$root"
