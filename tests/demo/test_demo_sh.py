"""``bash ops/demo.sh`` from a user's directory: the log lands there, and the commands the demo prints at the end
run as printed — in a shell where ``tether`` is not on PATH (the script installs it into the checkout's .venv
without activating it in the caller's shell)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def shell_without_tether() -> dict[str, str]:
    """The environment of a shell that has not activated the checkout's virtualenv."""
    venv_bin = Path(sys.executable).parent.resolve()
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = path
    return env


def test_the_demo_script_leaves_its_log_here_and_its_hints_run_as_printed(tmp_path: Path) -> None:
    env = shell_without_tether()
    demo = subprocess.run(["bash", str(ROOT / "ops" / "demo.sh"), "--no-live", "--speed", "20"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (tmp_path / "tether-demo.db").is_file()  # in the caller's directory ...
    assert not (ROOT / "tether-demo.db").exists() or (ROOT / "tether-demo.db").stat().st_mtime < \
        (tmp_path / "tether-demo.db").stat().st_mtime  # ... not written at the checkout's root
    lines = demo.stdout.splitlines()
    hints = [line.strip() for line in lines if " replay tether-demo.db " in line or " log tail tether-demo.db" in line]
    assert len(hints) == 3, demo.stdout
    for hint in hints:
        ran = subprocess.run(["bash", "-c", hint], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, f"{hint}\n{ran.stdout}{ran.stderr}"
        assert ran.stdout.strip(), hint
    script = ROOT / ".venv" / "bin" / "tether"
    assert all(hint.startswith(f"{script} ") for hint in hints), hints  # the full path: PATH has no tether
    assert f"tether is not on your PATH: the commands below use its full path; or first run `. {script.parent}/" \
        "activate`" in demo.stdout
