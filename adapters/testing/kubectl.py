"""kubectl, as the tests run it: every distinct binary on this machine, and one call with its output.

Tests that read what an operator reads (``kubectl get``, ``describe``, ``apply``) run it against the emulator or
the real cluster; a machine without kubectl skips them, saying so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

#: Every distinct kubectl here (on PATH, and /usr/bin's): their versions read the OpenAPI documents differently.
KUBECTLS = sorted({os.path.realpath(found) for found in (shutil.which("kubectl"), "/usr/bin/kubectl")
                   if found and Path(found).exists()})


def kubectl_binary(binary: str | None = None) -> str:
    found = binary or (KUBECTLS[0] if KUBECTLS else None)
    if found is None:
        pytest.skip("kubectl is not installed (looked on PATH and at /usr/bin/kubectl)")
    return found


async def kubectl(*args: str, kubeconfig: Path, cache: Path, binary: str | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        kubectl_binary(binary), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()
