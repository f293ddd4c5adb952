"""`fm ray status`: what this FM_HOME's local Ray runs and what it costs, read from outside the
head (its state files, its watchdog's last look, /proc), without connecting to it: a status
query is no driver and does not keep the head from idling."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from fm_assets.execution.local_ray import (
    head_state,
    process_alive,
    serves,
    session_processes,
    state_dir,
)
from fm_assets.settings import Settings


@dataclass(frozen=True)
class LocalRayStatus:
    """A running local head: where, since when, what it holds, who uses it."""

    home: Path
    address: str
    answering: bool  # False: still starting (or wedged)
    pid: int
    uptime_s: float | None
    memory_bytes: int  # proportional set size of every process of the head's session
    processes: int
    watchdog_pid: int | None  # None: no watchdog runs, the head does not stop by itself
    idle_stop_s: float | None
    drivers: tuple[int, ...] | None  # pids connected at the watchdog's last look
    idle_s: float | None  # None: in use, or not known


def _started_at(pid: int) -> float | None:
    """Wall-clock start time of process `pid` (from /proc; None if unknown)."""
    try:
        ticks = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def process_memory(pid: int) -> int:
    """Bytes of memory process `pid` holds: its proportional set size (pages shared with
    others, such as Ray's object store, counted by share), else its resident set size."""
    proc = Path("/proc") / str(pid)
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (proc / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((proc / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def local_ray_status(settings: Settings) -> LocalRayStatus | None:
    """This FM_HOME's running local head, or None."""
    state = head_state(settings.home)
    if state is None or not process_alive(state.pid):
        return None
    members = session_processes(state.pid)
    watchdog: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        watchdog = json.loads((state_dir(settings.home) / "watchdog.json").read_text())
    watchdog_alive = state.watchdog_pid is not None and process_alive(state.watchdog_pid)
    if not watchdog_alive or watchdog.get("head_pid") != state.pid:
        watchdog = {}
    started = _started_at(state.pid)
    idle_since = watchdog.get("idle_since")
    drivers = watchdog.get("drivers")
    return LocalRayStatus(
        home=settings.home,
        address=state.address,
        answering=serves(state),
        pid=state.pid,
        uptime_s=None if started is None else max(0.0, time.time() - started),
        memory_bytes=sum(process_memory(pid) for pid in members),
        processes=len(members),
        watchdog_pid=state.watchdog_pid if watchdog_alive else None,
        idle_stop_s=float(watchdog["idle_stop_s"]) if "idle_stop_s" in watchdog else None,  # type: ignore[arg-type]
        drivers=tuple(int(p) for p in drivers) if isinstance(drivers, list) else None,
        idle_s=None if not isinstance(idle_since, int | float) else time.time() - idle_since,
    )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60:02d}m" if hours else f"{rest // 60}m {rest % 60:02d}s"


def _last_stop(settings: Settings) -> str | None:
    try:
        stop = json.loads((state_dir(settings.home) / "last_stop.json").read_text())
        at = dt.datetime.fromtimestamp(float(stop["at"])).strftime("%Y-%m-%d %H:%M:%S")
        return f"the last one (pid {stop['pid']}) stopped itself at {at}: {stop['reason']}"
    except (OSError, ValueError, KeyError):
        return None


def render_ray_status(settings: Settings) -> str:
    """What `fm ray status` prints."""
    lines = []
    if settings.ray_address:
        lines.append(f"RAY_ADDRESS is set: commands use the Ray at {settings.ray_address}")
    status = local_ray_status(settings)
    if status is None:
        lines.append(f"no local Ray runs for FM_HOME {settings.home}")
        last = _last_stop(settings)
        if last:
            lines.append(f"  {last}")
        return "\n".join(lines)
    lines += [
        f"local Ray of FM_HOME {status.home}: {'running' if status.answering else 'starting'}",
        f"  address   {status.address}",
        f"  head pid  {status.pid} (ray start --head)"
        + (f", up {_duration(status.uptime_s)}" if status.uptime_s is not None else ""),
        f"  memory    {status.memory_bytes / 1e9:.2f} GB in {status.processes} processes "
        "(its daemons and workers)",
    ]
    if status.watchdog_pid is None:
        lines.append("  watchdog  not running: it stops only with `fm ray stop`")
        return "\n".join(lines)
    if status.drivers:
        pids = ", ".join(str(p) for p in status.drivers)
        lines.append(f"  drivers   {len(status.drivers)} connected (pid {pids})")
    elif status.drivers is not None:
        lines.append("  drivers   none connected")
    if status.idle_s is not None:
        lines.append(f"  idle      {_duration(status.idle_s)}")
    if status.idle_stop_s:
        lines.append(
            f"  stops     after {_duration(status.idle_stop_s)} with no driver "
            f"(FM_RAY_IDLE_STOP_S), or when FM_HOME is deleted; watchdog pid {status.watchdog_pid}"
        )
    else:
        lines.append(
            f"  stops     when FM_HOME is deleted (FM_RAY_IDLE_STOP_S=0: never when idle); "
            f"watchdog pid {status.watchdog_pid}"
        )
    return "\n".join(lines)
