"""One local Ray per FM_HOME: a command begins starting it, the next ones connect to it, and
`fm ray stop` stops it by its own process group."""

from __future__ import annotations

import json
import os
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
