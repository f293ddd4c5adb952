"""`fm dev`: the Dagster UI and daemon (`dagster dev -w workspace.yaml`) on this FM_HOME or on
the production instance, stopped promptly and completely.

`dagster dev` ignores SIGTERM for a long while, and its webserver, daemon and code servers
outlive a SIGINT to it alone. So `fm dev` runs it in a process group of its own and, on SIGTERM,
SIGINT or SIGHUP, interrupts the whole group, waits `GRACE_S`, then kills whatever is left: the
group and every process that descended from it, each by its own pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import click

from fm_assets.execution.local_ray import process_alive
from fm_assets.settings import load_settings

GRACE_S = 8.0
_WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command name may hold spaces and parentheses: parse after its closing ')'.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int) -> set[int]:
    """Every living process below `pid` (children, grandchildren, ...)."""
    tree, found, todo = _children_by_parent(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def stop_process_tree(process: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> None:
    """Interrupt `process`'s group, wait up to `grace_s`, then SIGKILL it and its descendants."""
    family = descendants(process.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        family |= descendants(process.pid)
        if process.poll() is not None and not any(process_alive(p) for p in family):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in family | descendants(process.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def dev(args: tuple[str, ...]) -> None:
    """Start the Dagster UI and daemon on this FM_HOME (`dagster dev -w workspace.yaml`)."""
    from dagster import DagsterInstance

    from fm_assets.defs.instance import ensure_dagster_home, ensure_pool_limits
    from fm_assets.storage.services import check_services

    settings = load_settings()
    check_services(settings)
    ensure_dagster_home(settings)
    ensure_pool_limits(DagsterInstance.get())
    dagster = Path(sys.executable).with_name("dagster")  # the one beside this interpreter
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    process = subprocess.Popen(
        [str(dagster), "dev", "-w", str(_WORKSPACE), *args], start_new_session=True
    )
    try:
        code = process.wait()
    except _Stop:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        stop_process_tree(process)
        code = 0
    sys.exit(code)
