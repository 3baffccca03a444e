"""Errors a user can fix are one line on stderr, saying what to fix, with exit code 2 — never a traceback.

One test per message (adapters/cli/errors.py, adapters/daemon/preflight.py, adapters/kubernetes/kubeconfig.py).
The CLI runs in-process through click's CliRunner; where an API server is needed, the emulator serves on the test's
event loop and ``tether`` runs as a process of its own, as a user runs it.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tether.adapters.cli import ENVIRONMENT, main
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.crds import crd_dir

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def one_line(result: Result | Ran, *expected: str) -> str:
    """The single line ``result`` printed on stderr (nothing on stdout), exit code 2, containing ``expected``."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.stderr
    assert result.stdout == "", result.stdout
    assert "Traceback" not in result.output
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


async def run_tether(*args: str, within: float = 60) -> Ran:
    """``tether ARGS`` in a child process (this checkout's code), while the caller's loop keeps serving; a process
    still running after ``within`` seconds is killed and fails the test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from tether.adapters.cli import main; main(prog_name='tether')", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"tether {' '.join(args)} did not end within {within} s")
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def kubeconfig(tmp_path: Path, server: str, *, name: str = "kubeconfig", current: bool = True) -> Path:
    path = tmp_path / name
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n"
        + ("current-context: ctx\n" if current else ""))
    return path


# --- the kubeconfig --------------------------------------------------------------------------------------------


def test_a_missing_kubeconfig_names_the_file_and_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    line = one_line(invoke("run", "--kubeconfig", str(missing), "--log", str(tmp_path / "t.db")),
                    f"no kubeconfig at {missing}", "--kubeconfig", "KUBECONFIG")
    assert "current-context" not in line  # what the library said: blaming the content of a file that is not there
    assert not (tmp_path / "t.db").exists()  # nothing started


def test_a_missing_kubeconfig_from_the_environment_names_every_file(tmp_path: Path) -> None:
    one_line(invoke("run", "--log", str(tmp_path / "t.db"), env={"KUBECONFIG": f"{tmp_path}/a:{tmp_path}/b"}),
             f"no kubeconfig at {tmp_path}/a, {tmp_path}/b")


def test_a_kubeconfig_that_is_not_yaml_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n")
    one_line(invoke("run", "--kubeconfig", str(bad)), f"kubeconfig {bad} is not valid YAML", "line 2",
             "--kubeconfig")


def test_a_kubeconfig_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    odd = tmp_path / "list.yaml"
    odd.write_text("- a\n- b\n")
    one_line(invoke("run", "--kubeconfig", str(odd)), f"kubeconfig {odd} is not a kubeconfig")


def test_a_kubeconfig_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe clusters")  # not UTF-8 (a permission would not stop root, which CI may be)
    one_line(invoke("run", "--kubeconfig", str(binary)), f"kubeconfig {binary} cannot be read", "check its permissions")


def test_a_kubeconfig_with_a_malformed_entry_says_how_to_look_at_it(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "http://127.0.0.1:1")
    path.write_text(path.read_text().replace("  user:\n    token: t\n", "  user: t\n"))  # a user that is a string
    one_line(invoke("run", "--kubeconfig", str(path)), f"kubeconfig {path} cannot be used",
             f"kubectl --kubeconfig {path} config view")


def test_a_context_that_is_not_there_lists_the_ones_that_are(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "http://127.0.0.1:1")
    one_line(invoke("run", "--kubeconfig", str(path), "--context", "prod"), "has no context 'prod'", "it has: ctx",
             "--context")


def test_a_kubeconfig_without_current_context_asks_for_one(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "http://127.0.0.1:1", current=False)
    one_line(invoke("run", "--kubeconfig", str(path)), "sets no current-context", "it has: ctx", "--context NAME")


def test_in_cluster_outside_a_pod_says_so() -> None:
    one_line(invoke("run", "--in-cluster", env={"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""}),
             "--in-cluster", "not a pod", "--kubeconfig")


def test_a_member_kubeconfig_is_checked_before_the_start(tmp_path: Path) -> None:
    one_line(invoke("run", "--member", f"east={tmp_path}/east.yaml"), "--member",
             f"no kubeconfig at {tmp_path}/east.yaml")


# --- the log ---------------------------------------------------------------------------------------------------


def test_a_kafka_url_whose_port_is_not_a_number_is_refused_before_the_start(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "http://127.0.0.1:1")
    line = one_line(invoke("run", "--kubeconfig", str(path), "--log", "kafka://host:notaport/x"),
                    "'--log'", "port 'notaport' is not a number")
    assert "stopped" not in line  # was: "tether stopped, exit_code 0" logged, then a ValueError
    one_line(invoke("run", "--kubeconfig", str(path), "--log", "kafka://host:²/x"),  # isdigit() passed it to int()
             "'--log'", "port '²' is not a number")


def test_replay_of_a_kafka_log_where_nothing_listens() -> None:
    port = free_port()
    one_line(invoke("replay", f"kafka://127.0.0.1:{port}/x"), f"cannot reach the log kafka://127.0.0.1:{port}/x",
             f"nothing answers at 127.0.0.1:{port}", "start it there, or fix the address")


def test_run_with_a_kafka_log_where_nothing_listens(tmp_path: Path) -> None:
    port = free_port()
    path = kubeconfig(tmp_path, "http://127.0.0.1:1")
    one_line(invoke("run", "--kubeconfig", str(path), "--log", f"kafka://127.0.0.1:{port}/x"),
             f"cannot reach the log kafka://127.0.0.1:{port}/x")


def test_a_log_that_is_not_a_database_is_refused_by_every_command(tmp_path: Path) -> None:
    garbage = tmp_path / "notadb.db"
    garbage.write_text("garbage\n")
    for command in (("replay",), ("log", "tail")):
        one_line(invoke(*command, str(garbage)), f"{garbage} is not a tether log", "file is not a database")
    one_line(invoke("run", "--kubeconfig", str(kubeconfig(tmp_path, "http://127.0.0.1:1")), "--log", str(garbage)),
             "--log", f"{garbage} is not a tether log")
    assert garbage.read_text() == "garbage\n"  # left as it was


def test_a_directory_as_the_log_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    for command in (("replay",), ("log", "tail")):
        one_line(invoke(*command, str(folder)), f"{folder} is a directory", f"{folder}/tether.db")
    one_line(invoke("run", "--kubeconfig", str(kubeconfig(tmp_path, "http://127.0.0.1:1")), "--log", str(folder)),
             "--log", f"{folder} is a directory")


def test_a_log_in_a_directory_that_does_not_exist_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    one_line(invoke("run", "--kubeconfig", str(kubeconfig(tmp_path, "http://127.0.0.1:1")), "--log",
                    f"sqlite://{missing}/t.db"), "--log", f"the directory {missing} does not exist", "create it")
    assert not (tmp_path / "nonexistent").exists()


# --- the ports -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--http-port", "--webhook-port"])
def test_a_port_out_of_range_is_refused(flag: str) -> None:
    one_line(invoke("run", flag, "99999"), f"'{flag}'", "99999 is not in the range 0<=x<=65535")


def taken(address: str = "127.0.0.1") -> socket.socket:
    """A socket listening on a free port of ``address``: what another process holding the port looks like."""
    holder = socket.socket()
    holder.bind((address, 0))
    holder.listen()
    return holder


async def test_a_taken_port_ends_the_daemon_in_one_line(tmp_path: Path) -> None:
    """The daemon got past every check, bound nothing and hung for ever with its log's threads running (a
    traceback, then no exit); now each taken port is one line and exit 2, and the log is closed."""
    async with KubeEmulator(crds=[crd_dir()]) as emulator:
        config = str(emulator.kubeconfig_path(tmp_path))
        with taken() as holder:
            port = holder.getsockname()[1]
            result = await run_tether("run", "--kubeconfig", config, "--log", str(tmp_path / "a.db"),
                                      "--no-leader-elect", "--http-port", str(port), within=20)  # on 0.0.0.0
            one_line(result, "--http-address/--http-port", f"cannot listen on 0.0.0.0:{port}",
                     "Address already in use")
            result = await run_tether("run", "--kubeconfig", config, "--log", str(tmp_path / "b.db"),
                                      "--no-leader-elect", "--http-address", "127.0.0.1", "--http-port", "0",
                                      "--binding-webhook", "--webhook-self-signed", "--webhook-cert-dir",
                                      str(tmp_path / "certs"), "--webhook-address", "127.0.0.1",
                                      "--webhook-port", str(port), within=20)
            one_line(result, "--webhook-address/--webhook-port", f"cannot listen on 127.0.0.1:{port}",
                     "Address already in use")


async def test_an_address_this_host_does_not_have_is_refused(tmp_path: Path) -> None:
    """``--http-address`` is where the endpoints listen: one this host does not have (TEST-NET-1) cannot be bound."""
    async with KubeEmulator(crds=[crd_dir()]) as emulator:
        result = await run_tether("run", "--kubeconfig", str(emulator.kubeconfig_path(tmp_path)), "--log",
                                  str(tmp_path / "t.db"), "--no-leader-elect", "--http-address", "192.0.2.1",
                                  within=20)
    one_line(result, "--http-address/--http-port", "cannot listen on 192.0.2.1:8080")


# --- the API server --------------------------------------------------------------------------------------------


async def test_an_api_server_without_tether_crds_is_named(tmp_path: Path) -> None:
    async with KubeEmulator() as emulator:  # no CRDs at all
        config = emulator.kubeconfig_path(tmp_path)
        result = await run_tether("run", "--kubeconfig", str(config), "--log", str(tmp_path / "t.db"))
    one_line(result, f"the API server at {emulator.url} serves no tether CRDs", "datasourceclaims",
             "kubectl apply -k ops/crds", "Karmada API server")


async def test_an_api_server_missing_karmada_resources_names_them(tmp_path: Path) -> None:
    async with KubeEmulator(crds=sorted(crd_dir().glob("datadependency.*.yaml"))) as emulator:  # not Karmada's
        config = emulator.kubeconfig_path(tmp_path)
        result = await run_tether("run", "--kubeconfig", str(config), "--log", str(tmp_path / "t.db"))
    line = one_line(result, f"the API server at {emulator.url} does not serve", "resourcebindings.work.karmada.io",
                    "clusters.cluster.karmada.io")
    assert "datasourceclaims" not in line


def test_an_api_server_that_does_not_answer(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    one_line(invoke("run", "--kubeconfig", str(kubeconfig(tmp_path, server)), "--log", str(tmp_path / "t.db")),
             f"cannot reach the API server at {server}", "server address")


# --- flags -----------------------------------------------------------------------------------------------------


def test_demo_speed_zero_is_refused() -> None:
    one_line(invoke("demo", "--speed", "0"), "'--speed'", "0.1")


@pytest.mark.parametrize("command", ["run", "demo"])
def test_log_level_takes_only_valid_choices(command: str) -> None:
    one_line(invoke(command, "--log-level", "loud"), "'--log-level'", "'loud' is not one of", "'debug'",
             f"tether {command} --help")


def test_an_option_without_its_value_names_the_command() -> None:
    one_line(invoke("replay", "x.db", "--explain"), "tether replay: ", "'--explain' requires an argument")


# --- the push token --------------------------------------------------------------------------------------------


def test_the_push_token_file_must_exist(tmp_path: Path) -> None:
    one_line(invoke("run", "--push-token-file", str(tmp_path / "token")), "'--push-token-file'", "does not exist")


def test_an_empty_push_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    one_line(invoke("run", "--push-token-file", str(tmp_path / "token")), "--push-token-file", "is empty")


def test_a_push_token_given_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    one_line(invoke("run", "--push-token-file", str(tmp_path / "token"), env={"TETHER_PUSH_TOKEN": "other"}),
             "given twice", "TETHER_PUSH_TOKEN", "keep one")


def test_the_push_token_is_not_taken_from_the_command_line() -> None:
    one_line(invoke("run", "--push-token", "s3cret"), "No such option", "--push-token-file")


def test_the_push_token_comes_from_the_file_or_the_environment(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.adapters.cli.run import push_token

    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.delenv("TETHER_PUSH_TOKEN", raising=False)
    assert push_token(None) == ""
    assert push_token(str(tmp_path / "token")) == "from-file"
    monkeypatch.setenv("TETHER_PUSH_TOKEN", "from-env")
    assert push_token(None) == "from-env"


# --- the environment in --help ---------------------------------------------------------------------------------


def test_help_lists_every_environment_variable_tether_reads() -> None:
    """Every variable the product code reads (``os.environ``, ``os.getenv``, click's ``envvar=``) is in
    ``ENVIRONMENT``, and ``tether --help`` shows each one."""
    read: set[str] = set()
    pattern = re.compile(r"""(?:os\.environ(?:\.get)?[\[(]|os\.getenv\(|envvar=)\s*["']([A-Z_]+)["']""")
    for folder in ("adapters", "core", "projections"):
        for source in (ROOT / folder).rglob("*.py"):
            if "testing" in source.parts or source.name == "testing.py" or "bench" in source.parts:
                continue  # test harnesses read their own variables (TETHER_TEST_KUBECONFIG...)
            read |= set(pattern.findall(source.read_text()))
    read |= {"TETHER_PUSH_TOKEN"}  # (read through a constant: adapters/cli/run.py PUSH_TOKEN_ENV)
    listed = {name.strip() for names, _ in ENVIRONMENT for name in names.split(",")}
    assert read <= listed, read - listed
    help_text = invoke("--help").output
    for name in sorted(listed):
        assert name in help_text
    run_help = invoke("run", "--help").output
    for name in ("KUBECONFIG", "TETHER_LOG", "TETHER_PUSH_TOKEN", "POD_NAME"):
        assert name in run_help


# --- tether status ---------------------------------------------------------------------------------------------


def test_status_where_no_daemon_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    one_line(invoke("status", "--url", url), f"no tether daemon answers at {url}", "--http-port")


def test_status_of_something_that_is_not_a_daemon(tmp_path: Path) -> None:
    one_line(invoke("status", "--url", "ftp://example"), "--url ftp://example", "expected http://HOST:PORT")


@pytest.mark.parametrize("flag", ["--plugin-configmap", "--admission-configmap"])
@pytest.mark.parametrize("value", ["noslash", "/name", "ns/", "Upper/name", "ns/name/more"])
def test_a_configmap_that_is_not_namespace_slash_name_is_refused(flag: str, value: str) -> None:
    """``--plugin-configmap noslash`` was accepted: nothing was watched, and every claim went UnknownSystem."""
    one_line(invoke("run", flag, value), f"'{flag}'", f"{value!r} is not NAMESPACE/NAME of a ConfigMap")


def test_a_max_hold_that_is_not_a_duration_is_refused_in_one_line(tmp_path: Path) -> None:
    one_line(invoke("run", "--max-hold", "ten minutes", "--log", str(tmp_path / "t.db")), "--max-hold",
             "expected a duration", "'ten minutes'")
    one_line(invoke("run", "--max-hold", "-1m", "--log", str(tmp_path / "t.db")), "--max-hold")
