"""One local Ray per FM_HOME: a command begins starting it, the next ones connect to it,
`fm ray stop` stops it by its own process group, and it stops itself once idle or homeless."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands.cli import main
from fm_assets.execution import local_ray
from fm_assets.settings import load_settings

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_launched_head_is_waited_for_reused_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "fm"
    monkeypatch.setenv("FM_HOME", str(home))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = load_settings({"FM_HOME": str(home), "FM_RAY_NUM_CPUS": "1"})
    try:
        local_ray.launch_local_ray(settings)  # returns at once: Ray starts in the background
        state = json.loads((home / "ray" / "head.json").read_text())
        local_ray.launch_local_ray(settings)  # already starting: no second head
        assert json.loads((home / "ray" / "head.json").read_text()) == state
        address = local_ray.start_local_ray(settings)  # waits for the one being started
        assert address == state["address"]
        assert local_ray.running_local_ray(settings) == address
        assert local_ray.start_local_ray(settings) == address  # a later command connects
    finally:
        result = CliRunner().invoke(main, ["ray", "stop"])
    assert result.exit_code == 0, result.output
    assert "stopped this FM_HOME's local Ray" in result.output
    assert not _alive(int(state["pid"]))
    assert local_ray.running_local_ray(settings) is None
    again = CliRunner().invoke(main, ["ray", "stop"])
    assert "no local Ray runs for this FM_HOME" in again.output


def _heads_of(home: Path) -> list[int]:
    """Pids of `ray start --head` processes started for `home` (by its temp dir).

    A process forked by a head carries the head's command line until it execs (Ray's CLI forks
    helpers while it starts): one whose parent is a head is that head's, not a second one.
    """
    marker = f"--temp-dir=/tmp/fm-ray-{hashlib.sha256(str(home).encode()).hexdigest()[:12]}"
    found: dict[int, int] = {}  # pid -> parent pid
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if b"--head" in argv and marker.encode() in argv:
            found[int(entry.name)] = parent
    return [pid for pid, parent in found.items() if parent not in found]


def test_two_commands_starting_at_once_start_one_head(tmp_path: Path) -> None:
    home = tmp_path / "fm"
    code = (
        "from fm_assets.execution.local_ray import launch_local_ray\n"
        "from fm_assets.settings import load_settings\n"
        f"launch_local_ray(load_settings({{'FM_HOME': {str(home)!r}, 'FM_RAY_NUM_CPUS': '1'}}))\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    both = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in both] == [0, 0]
    settings = load_settings({"FM_HOME": str(home), "FM_RAY_NUM_CPUS": "1"})
    try:
        local_ray.start_local_ray(settings)
        assert len(_heads_of(home)) == 1
    finally:
        local_ray.stop_local_ray(settings)


# A driver of this FM_HOME's local Ray, as an `fm` command connects: it stays connected until
# its stdin closes.
DRIVER = """
import sys
from fm_assets.execution.compute import ensure_ray
from fm_assets.settings import load_settings
ensure_ray(load_settings())
print("connected", flush=True)
sys.stdin.read()
"""


def _wait_until(what: str, condition: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.5)


def _watchdog_view(home: Path) -> dict[str, object]:
    try:
        return dict(json.loads((home / "ray" / "watchdog.json").read_text()))
    except (OSError, ValueError):
        return {}


def _session_gone(pid: int) -> bool:
    return not local_ray.session_processes(pid)


def test_an_idle_head_stops_itself_and_status_shows_what_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "fm"
    idle_stop_s = 8
    env = {
        "FM_HOME": str(home),
        "FM_RAY_NUM_CPUS": "1",
        "FM_RAY_IDLE_STOP_S": str(idle_stop_s),
        "RAY_AUTH_MODE": "disabled",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = load_settings()
    driver = None
    try:
        address = local_ray.start_local_ray(settings)
        head = local_ray.head_state(home)
        assert head is not None and head.watchdog_pid is not None
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        assert driver.stdout is not None and driver.stdout.readline().strip() == "connected"
        _wait_until(
            "the watchdog sees the driver",
            lambda: _watchdog_view(home).get("drivers") == [driver.pid],  # type: ignore[union-attr]
        )
        # Longer than the idle period: a connected driver keeps the head.
        time.sleep(idle_stop_s + 4)
        assert local_ray.running_local_ray(settings) == address

        shown = CliRunner().invoke(main, ["ray", "status"])
        assert shown.exit_code == 0, shown.output
        assert f"local Ray of FM_HOME {home}: running" in shown.output
        assert f"address   {address}" in shown.output
        assert f"head pid  {head.pid} (ray start --head), up " in shown.output
        assert f"drivers   1 connected (pid {driver.pid})" in shown.output
        assert f"watchdog pid {head.watchdog_pid}" in shown.output
        memory = next(line for line in shown.output.splitlines() if "memory" in line)
        gigabytes = float(memory.split()[1])
        assert 0.05 < gigabytes < 4, memory  # a head, its daemons and a worker: not nothing

        driver.stdin.close()  # type: ignore[union-attr]  # the driver disconnects and exits
        assert driver.wait(timeout=60) == 0
        _wait_until("the idle head stops itself", lambda: _session_gone(head.pid))
        _wait_until("its watchdog exits", lambda: _session_gone(head.watchdog_pid))  # type: ignore[arg-type]
        assert local_ray.running_local_ray(settings) is None
        after = CliRunner().invoke(main, ["ray", "status"])
        assert f"no local Ray runs for FM_HOME {home}" in after.output
        assert f"(pid {head.pid}) stopped itself" in after.output
        assert "no driver connected for" in after.output
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        local_ray.stop_local_ray(settings)


def test_a_head_whose_home_is_deleted_stops(tmp_path: Path) -> None:
    home = tmp_path / "fm"
    # Never idle: only the deleted home can stop it.
    settings = load_settings(
        {"FM_HOME": str(home), "FM_RAY_NUM_CPUS": "1", "FM_RAY_IDLE_STOP_S": "0"}
    )
    local_ray.start_local_ray(settings)
    head = local_ray.head_state(home)
    assert head is not None and head.watchdog_pid is not None
    try:
        shutil.rmtree(home)
        _wait_until("the head of a deleted FM_HOME stops", lambda: _session_gone(head.pid))
        _wait_until("its watchdog exits", lambda: _session_gone(head.watchdog_pid))  # type: ignore[arg-type]
        assert not home.exists()  # nothing recreated it
        assert not local_ray.temp_dir(home).exists()  # nor left its sessions' logs behind
    finally:
        for pid in (head.watchdog_pid, head.pid):  # by their own pids, whatever happened
            local_ray.kill_group(pid, timeout=10)
