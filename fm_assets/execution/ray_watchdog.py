"""Stops a local Ray head nobody uses: one watchdog process runs beside each head that
`local_ray` starts, and stops the head's processes when

- no driver has been connected to it for `FM_RAY_IDLE_STOP_S` (read when the head started);
- its FM_HOME is gone (a deleted temporary home), or its state file no longer names it (no
  command could find it, connect to it or stop it);

and exits when the head does. Idle is what Ray's own idle termination of a KubeRay cluster
counts: no live driver in the head's GCS job table (Ray's internal drivers, and detached actors
such as the warm workers, do not count); a driver that came and went between two looks, and a
command about to connect or connecting (`local_ray.mark_activity`, `local_ray.connecting`)
count as use. A GCS that does not answer counts as in use, as in Ray: only a head seen idle is
stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from fm_assets.execution.local_ray import (
    START_TIMEOUT_S,
    HeadState,
    head_state,
    kill_group,
    launch_lock,
    process_alive,
    serves,
    temp_dir,
)

# Ray's own drivers (the dashboard's) run in namespaces with this prefix.
_RAY_INTERNAL_NAMESPACE = "_ray_internal"


@dataclass
class _Watch:
    home: Path
    pid: int  # the head's `ray start` process, leader of its process group
    address: str
    idle_stop_s: float
    gcs: object | None = None  # ray._raylet.GcsClient, made once the GCS answers
    active_at: float = 0.0  # wall-clock time of the last use seen
    job_ended_at: float = 0.0  # latest end time of a finished driver, as the GCS records it
    answered: bool = False
    drivers: tuple[int, ...] | None = None  # at the last look; None: not known

    @property
    def state_dir(self) -> Path:
        return self.home / "ray"


def _poll_s(idle_stop_s: float) -> float:
    """How often to look: within a second for a deleted home, a tenth of the idle period (at
    most every 10 s) for drivers."""
    return min(1.0, max(0.2, idle_stop_s / 10)) if idle_stop_s > 0 else 1.0


def _live_drivers(watch: _Watch) -> tuple[int, ...] | None:
    """Pids of the drivers connected to the head, or None when its GCS does not answer."""
    if not serves(HeadState(watch.address, watch.pid)):  # only its own GCS: never another Ray's
        return None
    try:
        if watch.gcs is None:
            from ray._raylet import GcsClient  # type: ignore[attr-defined]  # ~60 MB: once it answers

            watch.gcs = GcsClient(address=watch.address)
        jobs = watch.gcs.get_all_job_info(  # type: ignore[attr-defined]
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True, timeout=10
        )
    except Exception:  # any failure to ask is "unknown", never "idle"
        return None
    live = []
    for job in jobs.values():
        if job.config.ray_namespace.startswith(_RAY_INTERNAL_NAMESPACE):
            continue
        if job.is_dead:
            watch.job_ended_at = max(watch.job_ended_at, job.end_time / 1000)
        else:
            live.append(int(job.driver_pid))
    return tuple(sorted(live))


def _activity_at(watch: _Watch) -> float:
    with contextlib.suppress(OSError):
        return (watch.state_dir / "activity").stat().st_mtime
    return 0.0


def _idle_since(watch: _Watch, now: float) -> float | None:
    """When the head last saw use (None: in use now)."""
    drivers = _live_drivers(watch)
    if drivers is None:
        if watch.answered:  # it answered before: a GCS that stopped answering is "in use"
            watch.active_at = now
        return None
    if not watch.answered:
        watch.answered, watch.active_at = True, now  # idle counts from when it first answers
    watch.drivers = drivers
    if drivers:
        watch.active_at = now
        return None
    return max(watch.active_at, watch.job_ended_at, _activity_at(watch))


def _write_status(watch: _Watch, idle_since: float | None) -> None:
    """What `fm ray status` shows: the drivers seen and since when the head is idle."""
    status = {
        "pid": os.getpid(),
        "head_pid": watch.pid,
        "idle_stop_s": watch.idle_stop_s,
        "drivers": None if watch.drivers is None else list(watch.drivers),
        "idle_since": idle_since,
    }
    path = watch.state_dir / "watchdog.json"
    with contextlib.suppress(OSError):  # the home may be going away: the next look says so
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(path)


def _ours(watch: _Watch) -> bool:
    state = head_state(watch.home)
    return state is not None and state.pid == watch.pid


def _stop(watch: _Watch, reason: str) -> None:
    """Stop the head's processes; record why (when its home still exists)."""
    print(f"{time.strftime('%H:%M:%S')} stopping the local Ray (pid {watch.pid}): {reason}")
    if watch.home.is_dir():
        with contextlib.suppress(OSError):
            (watch.state_dir / "last_stop.json").write_text(
                json.dumps({"pid": watch.pid, "reason": reason, "at": time.time()})
            )
    kill_group(watch.pid)


def _stop_if_still_idle(watch: _Watch) -> bool:
    """Under the launch lock, so that no command finds the head between this look and the stop:
    stop it if it is still ours and still idle. True when it was stopped."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(launch_lock(watch.home, create=False))
            connecting = held.enter_context((watch.state_dir / "connecting.lock").open("a"))
        except OSError:  # the home went away meanwhile: the next look stops the head for that
            return False
        try:  # held through the stop: a command connects before it, or after, to a new head
            fcntl.flock(connecting, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a command is connecting: that is use
            watch.active_at = time.time()
            return False
        since = max(watch.active_at, watch.job_ended_at, _activity_at(watch))
        idle_s = time.time() - since
        if not _ours(watch) or idle_s < watch.idle_stop_s:
            return False
        (watch.state_dir / "head.json").unlink(missing_ok=True)
        _stop(watch, f"no driver connected for {idle_s:.0f} s (FM_RAY_IDLE_STOP_S)")
        return True
    return False


def watch_head(watch: _Watch) -> str:
    """Watch until the head exits or is stopped; why it ended."""
    started = time.time()
    _write_status(watch, None)
    seen_state = False
    next_look = 0.0
    while True:
        if not process_alive(watch.pid):
            return "the head exited"
        if not watch.home.is_dir():
            _stop(watch, f"its FM_HOME {watch.home} was deleted")
            # Its sessions' logs and sockets too: no command of that home will read them.
            shutil.rmtree(temp_dir(watch.home), ignore_errors=True)
            return "FM_HOME deleted"
        if _ours(watch):
            seen_state = True
        elif seen_state or time.time() - started > START_TIMEOUT_S:
            # `fm ray stop` removes the state before stopping the head: the head is on its way.
            _stop(watch, "its FM_HOME no longer records it (no command can reach or stop it)")
            return "untracked"
        now = time.time()
        if watch.idle_stop_s > 0 and now >= next_look:
            next_look = now + min(10.0, max(0.2, watch.idle_stop_s / 10))
            idle_since = _idle_since(watch, now)
            _write_status(watch, idle_since)
            if not watch.answered and now - started > 2 * START_TIMEOUT_S:
                _stop(watch, f"its GCS did not answer within {2 * START_TIMEOUT_S:.0f} s")
                return "never answered"
            if (
                idle_since is not None
                and now - idle_since >= watch.idle_stop_s
                and _stop_if_still_idle(watch)
            ):
                return "idle"
        time.sleep(_poll_s(watch.idle_stop_s))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--idle-stop-s", type=float, required=True)
    args = parser.parse_args(argv)
    watch = _Watch(args.home, args.pid, args.address, args.idle_stop_s, active_at=time.time())
    ended = watch_head(watch)
    print(f"{time.strftime('%H:%M:%S')} watchdog of pid {args.pid} done: {ended}", flush=True)


if __name__ == "__main__":
    main()
