"""The chaos harness's supervisor and webhook "Service" (``Daemons.supervise``, adapters/testing/chaos.py).

A daemon that exits on its own — a crash, or a leader giving its Lease up — is started again, the exit recorded
with the reason its log gives, and the webhook proxy moves to the replica that is now the ready leader. Before, the
proxy moved only when the run killed a leader itself: a leader that crashed after a broker cut left it on a dead
port, every binding creation failed for 180 s and the Kafka chaos run never converged (seed 522469301).

The replicas here are stand-ins: real processes (a "daemon" is a Python one-liner that writes a log line and
exits, or sleeps), with readiness and leadership set by the test instead of asked over HTTP.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tether.adapters.testing.chaos import LOST_LEADERSHIP, Daemons, Replica, exit_reason
from tether.adapters.testing.kafka_broker import TcpProxy

CRASH = ('{"component": "runtime", "error": "CancelledError() raised inside the component", '
         '"event": "component failed", "level": "error"}')
LOST = '{"lease": "ns/tether-leader", "event": "lost leadership", "level": "error"}'


class StandIn(Replica):
    """A replica whose readiness and leadership the test sets."""

    leading = False

    async def ready(self) -> bool:
        return self.leading and self.proc is not None and self.proc.returncode is None

    async def leader(self) -> bool:
        return await self.ready()


class StandInDaemons(Daemons):
    """Starts, for each replica, the next of ``scripts`` (Python code run as its process), or a sleeper."""

    scripts: list[str]
    restarted: asyncio.Event

    async def start(self, replica: Replica) -> None:
        self.starts += 1
        if self.starts > len(self.replicas):
            self.restarted.set()
        replica.log_path = self.log_dir / f"{replica.name}.{self.starts}.log"
        code = self.scripts.pop(0) if self.scripts else "import time; time.sleep(600)"
        with replica.log_path.open("wb") as err:
            replica.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code,
                                                                stdout=subprocess.DEVNULL, stderr=err)


def _writes(line: str) -> str:
    return f"import sys; sys.stderr.write({line!r} + '\\n'); sys.exit(1)"


async def test_a_crashed_leader_is_restarted_recorded_and_the_proxy_follows_the_new_one(tmp_path: Path) -> None:
    proxy = TcpProxy(0).start()
    first, second = StandIn("tether-0", 1, 1001), StandIn("tether-1", 2, 1002)
    daemons = StandInDaemons(args=[], replicas=[first, second], log_dir=tmp_path, webhook_proxy=proxy)
    daemons.scripts, daemons.restarted = [_writes(CRASH)], asyncio.Event()  # tether-0's first process crashes
    try:
        await daemons.start_all()
        assert first.proc is not None
        first.leading = True
        await first.proc.wait()  # it crashed while leading (the proxy still points at it, as after a kill)
        proxy.target_port = first.webhook_port
        first.leading, second.leading = False, True  # the standby took the Lease over

        assert await daemons.leader(within=30) is second

        assert proxy.target_port == second.webhook_port  # the "Service" follows the ready leader
        assert len(daemons.unplanned_exits) == 1
        exit_ = daemons.unplanned_exits[0]
        assert exit_["replica"] == "tether-0" and exit_["code"] == 1
        assert '"component failed"' in exit_["reason"] and "CancelledError" in exit_["reason"]
        assert first.proc.returncode is None and daemons.starts == 3  # started again, as a Deployment would
        assert "unplanned exit" in await daemons.describe()
    finally:
        await daemons.stop()
        proxy.stop()


async def test_supervise_restarts_an_exit_without_being_asked(tmp_path: Path) -> None:
    proxy = TcpProxy(0).start()
    only = StandIn("tether-0", 1, 1001)
    daemons = StandInDaemons(args=[], replicas=[only], log_dir=tmp_path, webhook_proxy=proxy)
    daemons.scripts, daemons.restarted = [_writes(LOST)], asyncio.Event()
    supervising: asyncio.Task[None] | None = None
    try:
        await daemons.start_all()
        supervising = asyncio.create_task(daemons.supervise(every=0.05))
        await asyncio.wait_for(daemons.restarted.wait(), 30)  # the supervisor started it again
        assert daemons.unplanned_exits == [{"replica": "tether-0", "code": 1, "reason": LOST_LEADERSHIP}]
        await daemons.stop()  # the run ends: its processes stopped are not exits to restart
        with pytest.raises(TimeoutError):
            await daemons.leader(within=0.3)  # (looks at the replicas again, as the supervisor does)
        assert len(daemons.unplanned_exits) == 1 and daemons.starts == 2
    finally:
        if supervising is not None:
            supervising.cancel()
            await asyncio.gather(supervising, return_exceptions=True)
        await daemons.stop()
        proxy.stop()


def test_exit_reason(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    log.write_text("Traceback (most recent call last):\n  File \"x\"\nasyncio.exceptions.CancelledError\n\n")
    assert exit_reason(log) == "asyncio.exceptions.CancelledError"
    log.write_text(f"{LOST}\n{{\"event\": \"tether stopped\"}}\n")
    assert exit_reason(log) == LOST_LEADERSHIP
    assert exit_reason(tmp_path / "absent.log").startswith("its log is unreadable")
    assert exit_reason(None) == "no log"


def test_only_a_lost_lease_or_no_broker_at_start_is_an_exit_by_design() -> None:
    from tether.adapters.testing.chaos import LOST_LEADERSHIP
    from tether.adapters.testing.chaos_run import NO_LOG_AT_START, _by_design

    assert _by_design({"code": 1, "reason": LOST_LEADERSHIP})
    assert _by_design({"code": 2, "reason": NO_LOG_AT_START + "kafka://127.0.0.1:1/x: nothing answers"})
    assert not _by_design({"code": 1, "reason": NO_LOG_AT_START + "kafka://127.0.0.1:1/x"})  # (not tether run's)
    assert not _by_design({"code": 1, "reason": '{"event": "component failed"}'})
