"""One local Ray per FM_HOME: a command begins starting it, the next ones connect to it, and
`fm ray stop` stops it by its own process group."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
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
