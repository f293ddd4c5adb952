"""One local Ray per FM_HOME, kept alive between commands: starting Ray costs 10-30 s, connecting
to a running one about 3 s.

The first command that needs Ray starts a head node on loopback (`ray start --head --block` in its
own process group) and records its address and pid in `$FM_HOME/ray/head.json`; later commands
connect to it. Beside the head runs its watchdog (`execution/ray_watchdog.py`), which stops it
after `FM_RAY_IDLE_STOP_S` with no driver connected, or as soon as its FM_HOME is deleted.
`fm ray stop` (or `stop_local_ray`) stops both by their own pids.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fm_assets.settings import Settings

START_TIMEOUT_S = 120.0
# Processes started by this process, so stopping one can reap it (a zombie still answers kill 0).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class HeadState:
    """What `head.json` records of a local head: where it answers, its `ray start` process (the
    leader of its process group and session) and its watchdog's pid."""

    address: str
    pid: int
    watchdog_pid: int | None = None


def state_dir(home: Path) -> Path:
    return home / "ray"


def temp_dir(home: Path) -> Path:
    """Where the head of FM_HOME `home` keeps its sessions (sockets, logs): short, for Ray's
    socket paths, and its own, see `_launch`."""
    return Path(f"/tmp/fm-ray-{hashlib.sha256(str(home).encode()).hexdigest()[:12]}")


def head_state(home: Path) -> HeadState | None:
    """The head recorded for FM_HOME `home`, or None."""
    try:
        state = json.loads((state_dir(home) / "head.json").read_text())
    except (OSError, ValueError):
        return None
    watchdog = state.get("watchdog_pid")
    return HeadState(str(state["address"]), int(state["pid"]), int(watchdog) if watchdog else None)


def _write_state(home: Path, state: HeadState) -> None:
    path = state_dir(home) / "head.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"address": state.address, "pid": state.pid, "watchdog_pid": state.watchdog_pid})
    )
    tmp.replace(path)


@contextlib.contextmanager
def launch_lock(home: Path, *, create: bool = True) -> Iterator[None]:
    """One launch (or watchdog stop) at a time per FM_HOME: two commands starting at once must
    not start two heads (the second would overwrite the first's state, which would then run
    untracked), and a watchdog must not stop a head a command has just found. `create=False`
    (the watchdog) never creates a deleted FM_HOME again: OSError instead."""
    directory = state_dir(home)
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    with (directory / "launch.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def connecting(home: Path) -> Iterator[None]:
    """Held (shared) while a command connects to the local head: a driver shows in the head's
    GCS only once connected, seconds later, and the watchdog never stops a head while this is
    held (it takes it exclusively to stop one, so a command connects before or after, to a new
    head)."""
    directory = state_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "connecting.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def mark_activity(home: Path) -> None:
    """Tell the watchdog a command is about to use the head: it counts as use, so the head is
    not stopped while the command connects (a driver shows in the GCS only once connected)."""
    (state_dir(home) / "activity").touch()


def answers(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has exited: it only waits to be
    reaped by its parent, yet still answers `kill 0`)."""
    started = _STARTED.get(pid)
    if started is not None and started.poll() is not None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)
    return fields is None or fields[0] != "Z"


def serves(state: HeadState) -> bool:
    """Whether the head's own GCS is the one answering at its address. The port was free when
    the head was launched, but another program (another Ray on the machine) may take it first:
    the head then fails, and a connection to its address would reach that program."""
    if not answers(state.address):
        return False
    flag = f"--gcs_server_port={state.address.rpartition(':')[2]}".encode()
    for pid in session_processes(state.pid):
        with contextlib.suppress(OSError):
            if flag in (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0"):
                return True
    return False


def running_local_ray(settings: Settings) -> str | None:
    """The address of this FM_HOME's running local Ray, or None."""
    state = head_state(settings.home)
    if state is not None and process_alive(state.pid) and serves(state):
        return state.address
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
    with launch_lock(settings.home):
        mark_activity(settings.home)
        if running_local_ray(settings) is None and _starting(settings) is None:
            _launch(settings)
        else:
            _ensure_watchdog(settings)


def _launch(settings: Settings) -> None:
    log_dir = state_dir(settings.home)
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
        f"--temp-dir={temp_dir(settings.home)}",
        # Local Ray runs workers at niceness 15, behind the driver; on a shared laptop that
        # costs the stages CPU for nothing.
        '--system-config={"worker_niceness": 0}',
    ]
    if settings.ray_num_cpus:
        command.append(f"--num-cpus={settings.ray_num_cpus}")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
        # Which FM_HOME a head serves, for whoever lists processes (its temp dir is a digest).
        "FM_RAY_HOME": str(settings.home),
        # On SIGTERM a head first drains its node for up to 30 s, for Ray Serve replicas to
        # move; a local head serves none, and `fm ray stop` or its watchdog would wait it out.
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    }
    with (log_dir / "head.log").open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _STARTED[process.pid] = process
    _write_state(settings.home, HeadState(address, process.pid))
    _ensure_watchdog(settings)


def _ensure_watchdog(settings: Settings) -> None:
    """Start the recorded head's watchdog unless it runs (a head started by an older platform
    has none; a watchdog may have been killed)."""
    state = head_state(settings.home)
    if state is None or not process_alive(state.pid):
        return
    if state.watchdog_pid is not None and process_alive(state.watchdog_pid):
        return
    command = [
        sys.executable,
        "-m",
        "fm_assets.execution.ray_watchdog",
        f"--home={settings.home}",
        f"--pid={state.pid}",
        f"--address={state.address}",
        f"--idle-stop-s={settings.ray_idle_stop_s}",
    ]
    # The same platform code as this process's, wherever the command runs from.
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
    }
    with (state_dir(settings.home) / "watchdog.log").open("ab") as log:
        watchdog = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _STARTED[watchdog.pid] = watchdog
    _write_state(settings.home, HeadState(state.address, state.pid, watchdog.pid))


def _starting(settings: Settings) -> tuple[str, int] | None:
    """(address, pid) of a head launched for this FM_HOME whose process is alive, else None."""
    state = head_state(settings.home)
    if state is None or not process_alive(state.pid):
        return None
    return state.address, state.pid


def start_local_ray(settings: Settings) -> str:
    """This FM_HOME's local Ray head's address: the running one, or one started (or being
    started) and waited for. A head that fails to start (its port taken meanwhile) is started
    again on another port, twice."""
    log = state_dir(settings.home) / "head.log"
    for _ in range(3):
        launch_local_ray(settings)
        state = head_state(settings.home)
        if state is None:
            break
        deadline = time.monotonic() + START_TIMEOUT_S
        while process_alive(state.pid) and not serves(state):
            if time.monotonic() > deadline:
                kill_group(state.pid)
                raise RuntimeError(
                    f"the local Ray did not start within {START_TIMEOUT_S:.0f} s (see {log}); "
                    "set RAY_ADDRESS to use a running Ray cluster instead"
                )
            time.sleep(0.2)
        if process_alive(state.pid):
            return state.address
        stop_local_ray(settings)  # its watchdog, and the state: the next launch starts anew
    raise RuntimeError(
        f"the local Ray did not start (see {log}); set RAY_ADDRESS to use a running Ray "
        "cluster instead"
    )


def stop_local_ray(settings: Settings, timeout: float = 30.0) -> bool:
    """Stop this FM_HOME's local Ray and its watchdog; True when a head was running."""
    state = head_state(settings.home)
    if state is None:
        return False
    if state.watchdog_pid is not None and process_alive(state.watchdog_pid):
        # First, or it would see the state gone and stop the head too, recording why wrongly.
        kill_group(state.watchdog_pid, timeout)
    (state_dir(settings.home) / "head.json").unlink(missing_ok=True)
    if not process_alive(state.pid):
        return False
    kill_group(state.pid, timeout)
    return True


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_processes(leader: int) -> list[int]:
    """The live (not zombie) processes of the session `leader` started: a head started in a
    session of its own, its daemons, and its workers (each in a process group of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[3] == str(leader) and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _left_after(pid: int, timeout: float) -> list[int]:
    """Wait up to `timeout` for the session led by `pid` to end; the processes still in it."""
    deadline = time.monotonic() + timeout
    while True:
        left = session_processes(pid)
        # Reap a leader we started once it exits (after listing: one that exits meanwhile is
        # listed and looked at again), or its zombie would count as alive to `kill 0`.
        ours = _STARTED.get(pid)
        if ours is not None and ours.poll() is not None:
            del _STARTED[pid]
            ours = None
        if (not left and ours is None) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def kill_group(pid: int, timeout: float = 30.0) -> None:
    """Stop the session led by `pid`: SIGTERM to the leader (`ray start --block` stops what it
    started within seconds; a SIGTERM to every process of the group at once leaves its daemons
    waiting on each other for half a minute), then SIGKILL to whatever of the session is left
    (workers run in process groups of their own)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    left = _left_after(pid, timeout)
    for member in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    if left:
        _left_after(pid, 10.0)
