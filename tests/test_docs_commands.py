"""What README.md and docs/*.md tell a user to type or to open is true (issue 38 item 5).

Links are checked by ``test_docs_links.py``; this checks the rest of what a reader copies:

* **every repository path** named (``ops/deploy/plugin-configmap.yaml``, ``adapters/daemon/``,
  ``tests/…/test_x.py::test_y``) exists — ``docs/operations.md`` named ``ops/deploy/rbac.yaml`` and
  ``ops/deploy/deployment.yaml`` long after the chart had replaced them;
* **every ``tether`` command** names a command that exists and only options it has (``tether replay LOG
  --explain KEY``, ``tether run --http-port``...), whether in a code block or inline;
* **every ``kubectl`` command on a tether workload** (``kubectl -n tether-system logs deploy/tether``) names the kind
  the chart deploys (a StatefulSet: ``ops/deploy/host-cluster.yaml`` is the chart rendered with its defaults);
* **the demo's objects are explained from the demo's log**: a ``tether replay LOG --explain KEY`` whose KEY the
  demo's log explains (it is run there) reads the file the demo writes, ``tether-demo.db`` — the README's example
  read ``tether.db``, which only ``tether run`` writes.

Placeholders (``<N>``, ``*``, ``…``) are not paths. Each check has a test that it can fail.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from tether.adapters.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: The repository's top-level folders a path may start with.
TOP = ("adapters", "core", "projections", "ops", "docs", "tests", "tether")
_PATH = re.compile(rf"(?<![\w./~$-])(?:{'|'.join(TOP)})/[\w./-]*")
_PLACEHOLDER = set("<{*…$[")
#: kubectl's names of the workload kinds, to the kind.
WORKLOADS = {"deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
             "sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
             "ds": "DaemonSet", "daemonset": "DaemonSet", "job": "Job", "jobs": "Job"}
_WORKLOAD = re.compile(r"\b(" + "|".join(WORKLOADS) + r")/(tether[\w-]*)")
_INLINE = re.compile(r"`([^`\n]+)`")
_DEMO_LOG = "tether-demo.db"


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def path_problems(text: str) -> list[str]:
    out = []
    for match in _PATH.finditer(text):
        path = match.group().rstrip(".-")
        following = text[match.end():match.end() + 1]
        if (following and following in _PLACEHOLDER) or "..." in path:
            continue
        path = path.split("::")[0]
        if not (ROOT / path).exists():
            out.append(f"{path}: no such file or folder")
    return out


def _commands(text: str) -> list[str]:
    """Every ``tether …`` command line: in code blocks (after a prompt or at the start of a line), and inline when
    the word after ``tether`` is one of its commands (``tether excludes member1`` is a phrase of the output, ``tether
    run: no kubeconfig…`` an error message)."""
    out: list[str] = []
    fenced, shell = False, False
    commands = set(main.list_commands(click.Context(main)))

    def a_command(line: str, *, any_word: bool) -> bool:
        words = line.split()
        return len(words) > 1 and words[0] == "tether" and (words[1] in commands or (any_word
                                                             and not words[1].endswith(":")))

    for line in re.sub(r"\\\n\s*", " ", text).splitlines():  # (a line continued with "\\" is one command)
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            shell = fenced and line.strip().strip("`~").strip() in ("bash", "sh", "shell", "console")
            continue
        if fenced:
            command = line.strip().removeprefix("$ ")
            if a_command(command, any_word=shell):  # (a block of output may say "tether excludes member1")
                out.append(command)
        else:
            out += [span for span in _INLINE.findall(line) if a_command(span, any_word=False)]
    return out


def _words(command: str) -> list[str]:
    command = command.split(" #", 1)[0].split("|", 1)[0] if " | " in command or " #" in command else command
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def command_problems(command: str) -> list[str]:
    words = _words(command)[1:]
    ctx = click.Context(main, info_name="tether")
    cmd: click.Command = main
    consumed = ["tether"]
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        name = words[0]
        if "[" in name or "…" in name or name.isupper():
            return []  # (a placeholder: "tether [OPTIONS] COMMAND")
        sub = cmd.get_command(ctx, name)
        if sub is None:
            return [f"{command}: {' '.join(consumed)} has no command {name!r}"]
        consumed.append(name)
        cmd, words = sub, words[1:]
    known = {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
    out = []
    for word in words:
        for part in word.strip("[]()|,.;").split("/"):
            option = part.split("=", 1)[0].strip("[]()|,.;")
            if option.startswith("--") and len(option) > 2 and "…" not in option and option not in known:
                out.append(f"{command}: {' '.join(consumed)} has no option {option}")
    return out


def _chart_workloads() -> set[tuple[str, str]]:
    found = set()
    for manifest in (ROOT / "ops" / "deploy").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") in WORKLOADS.values():
                found.add((doc["kind"], doc["metadata"]["name"]))
    return found


def kubectl_problems(text: str, workloads: set[tuple[str, str]]) -> list[str]:
    out = []
    for line in text.splitlines():
        if "kubectl" not in line:
            continue
        for short, name in _WORKLOAD.findall(line):
            if (WORKLOADS[short], name) not in workloads:
                deployed = sorted(f"{k}/{n}" for k, n in workloads if n == name) or ["nothing of that name"]
                out.append(f"{short}/{name}: the chart deploys {', '.join(deployed)}")
    return out


def explain(log: Path, words: list[str]) -> Result:
    """``tether replay LOG --explain …`` with the arguments of a documented command, on ``log``."""
    return CliRunner().invoke(main, ["replay", str(log), *words[3:]], terminal_width=400)


def demo_log_problems(text: str, demo_log: Path) -> list[str]:
    """Every ``tether replay LOG --explain KEY`` whose KEY the demo's log explains must read the demo's log."""
    out = []
    for command in _commands(text):
        words = _words(command)
        if words[1:2] != ["replay"] or len(words) < 5 or words[3] != "--explain" or words[2].isupper():
            continue  # (tether replay LOG --explain KEY: the syntax, not an example)
        result = explain(demo_log, words)
        if result.exit_code != 0:
            continue  # not one of the demo's objects (a member's pod, a daemon's claim): any log may hold it
        if words[2] != _DEMO_LOG:
            out.append(f"{command}: the demo's objects are in the log it writes, {_DEMO_LOG}, not {words[2]}")
    return out


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = tmp_path_factory.mktemp("demo") / _DEMO_LOG
    result = CliRunner().invoke(main, ["demo", "--log", str(log), "--speed", "100", "--no-live"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return log


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_named_exists(page: Path) -> None:
    problems = path_problems(_text(page))
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_tether_command_has_its_command_and_options(page: Path) -> None:
    problems = [p for command in _commands(_text(page)) for p in command_problems(command)]
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_kubectl_command_names_the_workload_the_chart_deploys(page: Path) -> None:
    problems = kubectl_problems(_text(page), _chart_workloads())
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_demo_objects_are_explained_from_the_demo_log(page: Path, demo_log: Path) -> None:
    problems = demo_log_problems(_text(page), demo_log)
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_the_demo_writes_the_log_the_docs_explain_from() -> None:
    demo = main.get_command(click.Context(main), "demo")
    assert demo is not None
    assert next(p for p in demo.params if p.name == "log_path").default == _DEMO_LOG


def test_the_checks_can_fail(demo_log: Path) -> None:
    assert path_problems("see `ops/deploy/rbac.yaml` and ops/deploy/deployment.yaml") == [
        "ops/deploy/rbac.yaml: no such file or folder", "ops/deploy/deployment.yaml: no such file or folder"]
    assert path_problems("`tests/data/old_logs/v<N>-<commit>.db`, https://example.com/ops/x, ops/crds/") == []
    assert command_problems("tether replay x.db --explian K") == [
        "tether replay x.db --explian K: tether replay has no option --explian"]
    assert command_problems("tether rn --kubeconfig k") == ["tether rn --kubeconfig k: tether has no command 'rn'"]
    assert _commands("```bash\ntether rn --kubeconfig k\n```\n```\ntether excludes member1\n```\n"
                     "`tether excludes member1` and `tether run --x`") == ["tether rn --kubeconfig k", "tether run --x"]
    assert command_problems("tether run [--leader-elect/--no-leader-elect] --http-port 1") == []
    assert kubectl_problems("kubectl -n tether-system logs deploy/tether", {("StatefulSet", "tether")}) == [
        "deploy/tether: the chart deploys StatefulSet/tether"]
    assert kubectl_problems("kubectl logs statefulset/tether", {("StatefulSet", "tether")}) == []
    assert demo_log_problems("```bash\ntether replay tether.db --explain deploy/ml/clicks-train\n```\n"
                             "`tether replay tether.db --explain Pod/ml/trainer-0 --cluster member1`", demo_log) == [
        "tether replay tether.db --explain deploy/ml/clicks-train: the demo's objects are in the log it writes, "
        "tether-demo.db, not tether.db"]
