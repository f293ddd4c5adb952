"""Curation policies for tests: an explicit opt-out for tests whose subject is not curation.

Every source without a policy gets the default web policy (English, Gopher/C4/FineWeb, the
default quality classifier), which drops the repetitive text many tests write on purpose. A
test about something else (landing, checks, shards, provenance, the loader) names the `none`
policy for every source instead of weakening its assertions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fm_assets.settings import Settings

OPT_OUT = (
    "# Tests whose subject is not curation: decide nothing for any source.\n"
    '[default]\nbase = "none"\n'
)


def opt_out_policy(directory: Path) -> Path:
    """Write a policy file under which no source is filtered; returns its path (FM_POLICY_FILE)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "no-curation-policy.toml"
    path.write_text(OPT_OUT)
    return path


def opted_out(settings: Settings, directory: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`settings` and the environment (for the CLI and subprocesses) under `opt_out_policy`."""
    path = opt_out_policy(directory)
    monkeypatch.setenv("FM_POLICY_FILE", str(path))
    return dataclasses.replace(settings, policy_file=path)
