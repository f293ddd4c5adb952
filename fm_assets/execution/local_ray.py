"""One local Ray per FM_HOME, kept alive between commands: starting Ray costs 10-30 s, connecting
to a running one about 3 s.

The first command that needs Ray starts a head node on loopback (`ray start --head --block` in its
own process group) and records its address and pid in `$FM_HOME/ray/head.json`; later commands
connect to it. `fm ray stop` (or `stop_local_ray`) stops it by its own process group.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fm_assets.settings import Settings

_START_TIMEOUT_S = 120.0
# Heads started by this process, so stopping one can reap it (a zombie still answers kill 0).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _state_file(settings: Settings) -> Path:
    return settings.home / "ray" / "head.json"


def _answers(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has exited: it only waits to be
    reaped by its parent, yet still answers `kill 0`)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        if (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def running_local_ray(settings: Settings) -> str | None:
    """The address of this FM_HOME's running local Ray, or None."""
    path = _state_file(settings)
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if process_alive(int(state["pid"])) and _answers(str(state["address"])):
        return str(state["address"])
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch_local_ray(settings: Settings) -> None:
    """Begin starting this FM_HOME's local Ray in the background, unless one runs or is starting.

    A command that will need Ray calls this first, so Ray's start-up overlaps its own (imports,
    Dagster); `start_local_ray` then waits for it.
    """
    log_dir = settings.home / "ray"
    log_dir.mkdir(parents=True, exist_ok=True)
    # Two commands starting at once on one FM_HOME must not start two heads (the second would
    # overwrite the first's state, which would then run untracked): one launches at a time.
    with (log_dir / "launch.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if running_local_ray(settings) is None and _starting(settings) is None:
            _launch(settings, log_dir)


def _launch(settings: Settings, log_dir: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"
    ray = Path(sys.executable).with_name("ray")
    command = [
        str(ray),
        "start",
        "--head",
        "--block",
        f"--port={address.rpartition(':')[2]}",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        # Its own temp dir: `ray start` marks the cluster in its temp dir as the machine's current
        # one, which a plain `ray.init()` of any other program would then join.
        f"--temp-dir=/tmp/fm-ray-{hashlib.sha256(str(settings.home).encode()).hexdigest()[:12]}",
        # Local Ray runs workers at niceness 15, behind the driver; on a shared laptop that
        # costs the stages CPU for nothing.
        '--system-config={"worker_niceness": 0}',
    ]
    if settings.ray_num_cpus:
        command.append(f"--num-cpus={settings.ray_num_cpus}")
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    with (log_dir / "head.log").open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _STARTED[process.pid] = process
    _state_file(settings).write_text(json.dumps({"address": address, "pid": process.pid}))


def _starting(settings: Settings) -> tuple[str, int] | None:
    """(address, pid) of a head launched for this FM_HOME whose process is alive, else None."""
    path = _state_file(settings)
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    pid = int(state["pid"])
    if pid in _STARTED and _STARTED[pid].poll() is not None:
        return None
    return (str(state["address"]), pid) if process_alive(pid) else None


def start_local_ray(settings: Settings) -> str:
    """This FM_HOME's local Ray head's address: the running one, or one started (or being
    started) and waited for."""
    running = running_local_ray(settings)
    if running is not None:
        return running
    launch_local_ray(settings)
    starting = _starting(settings)
    if starting is None:
        raise RuntimeError(
            f"the local Ray did not start (see {settings.home / 'ray' / 'head.log'})"
        )
    address, pid = starting
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not _answers(address):
        if _starting(settings) is None or time.monotonic() > deadline:
            _kill_group(pid)
            raise RuntimeError(
                f"the local Ray did not start (see {settings.home / 'ray' / 'head.log'}); "
                "set RAY_ADDRESS to use a running Ray cluster instead"
            )
        time.sleep(0.2)
    return address


def stop_local_ray(settings: Settings, timeout: float = 30.0) -> bool:
    """Stop this FM_HOME's local Ray; True when one was running."""
    path = _state_file(settings)
    if not path.is_file():
        return False
    pid = int(json.loads(path.read_text())["pid"])
    path.unlink()
    if not process_alive(pid):
        return False
    _kill_group(pid, timeout)
    return True


def _kill_group(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the process group (`ray start --block` stops what it started), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pid in _STARTED and _STARTED[pid].poll() is not None:
                del _STARTED[pid]
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
