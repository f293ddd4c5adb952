"""A soak's FM_HOME and the environment its sensor, runs and daemon all read."""

from __future__ import annotations

import os
from pathlib import Path

from bench.fm_home import fresh_home
from bench.soak.launch import run_environment
from fm_assets.commands import operations
from fm_assets.settings import Settings

SOURCE = "soak"


def home_environment(home: Path, cpus: int) -> dict[str, str]:
    """The settings `bench.fm_home.fresh_home` makes the home with, as environment variables:
    a local Ray of `cpus` CPUs, the no-curation policy (every document goes through every stage,
    so every table and index grows by the whole batch), Dagster's home under it."""
    return {
        "FM_HOME": str(home),
        "FM_RAY_NUM_CPUS": str(cpus),
        "FM_POLICY_FILE": str(home / "no-curation-policy.toml"),
        "DAGSTER_HOME": str(home / "dagster"),
        "RAY_AUTH_MODE": "disabled",
    }


def open_home(home: Path, cpus: int) -> tuple[Settings, dict[str, str]]:
    """A fresh home (tables made, tokenizer registered) and the environment of its processes;
    this process's environment points at it too, because the sensor reads its settings there."""
    env = home_environment(home, cpus)
    for name in [k for k in os.environ if k.startswith("FM_")]:
        del os.environ[name]
    os.environ.update(env)
    settings = fresh_home(home, cpus)
    return settings, run_environment(env)


def land_batch(settings: Settings, path: Path) -> str:
    """Land one file as a new batch with the operation `fm land` runs; its id."""
    manifest, created = operations.land(settings, [path], source=SOURCE, license="NOASSERTION")
    if not created:
        raise RuntimeError(f"batch {manifest.batch_id} existed already: its documents are not new")
    return manifest.batch_id
