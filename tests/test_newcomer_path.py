"""What a new user sees when something is missing or wrong: one line naming the fix, at once,
never a Dagster stack trace on the terminal; the full trace in a log file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.registries.tokenizers import default_tokenizer, register_tokenizer
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_stage_run
from tests.paths import NEOX_TOKENIZER
from tests.policies import opted_out

ENGLISH = "The river flows past the old mill and the village. " * 12


def _land(settings: Settings, directory: Path, text: str, source: str = "notes") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "doc.txt"
    path.write_text(text)
    batch, _ = operations.land(settings, [path], source=source, license="CC0-1.0")
    return batch.batch_id


def test_run_without_a_tokenizer_fails_in_one_line_before_any_stage(
    fm_settings: Settings, tmp_path: Path
) -> None:
    batch = _land(fm_settings, tmp_path / "in", ENGLISH)
    fm = Path(sys.executable).with_name("fm")
    result = subprocess.run(
        [str(fm), "run", "--batch", batch],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "tokenized_documents cannot run" in lines[0]
    assert "fm tokenizer register" in lines[0]
    assert "Traceback" not in result.stderr
    # Nothing ran: no stage committed anything for the batch.
    assert latest_stage_run(fm_settings, batch, "raw_documents") is None


def test_a_policy_file_that_does_not_parse_is_named(fm_settings: Settings, tmp_path: Path) -> None:
    register_tokenizer(fm_settings, NEOX_TOKENIZER, make_default=True)
    batch = _land(fm_settings, tmp_path / "in", ENGLISH)
    policy = tmp_path / "policies.toml"
    policy.write_text("[datasets.notes\nallowed_languages = [")
    result = CliRunner().invoke(
        main, ["run", "--batch", batch], env={"FM_POLICY_FILE": str(policy)}
    )
    assert result.exit_code == 1
    assert f"cannot read FM_POLICY_FILE {policy}" in result.output
    assert latest_stage_run(fm_settings, batch, "raw_documents") is None


@pytest.mark.slow
def test_a_version_that_would_be_empty_is_refused_naming_what_dropped_it(
    ray_session: None, fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_tokenizer(fm_settings, NEOX_TOKENIZER, make_default=True)
    policy = tmp_path / "policies.toml"
    policy.write_text('[datasets.notes]\nbase = "none"\nallowed_languages = ["de"]\n')
    monkeypatch.setenv("FM_POLICY_FILE", str(policy))
    settings = Settings(**{**fm_settings.__dict__, "policy_file": policy})
    batch = _land(settings, tmp_path / "in", ENGLISH)
    operations.run_batch(settings, batch, lambda message: None)

    result = CliRunner().invoke(main, ["version", "create", "notes"])
    assert result.exit_code == 1
    assert "notes@v1 would hold no documents" in result.output
    assert "language_tagged_documents 1 -> 0 (1 language_not_allowed)" in result.output
    assert catalog.read_table(settings, "dataset_versions").num_rows == 0


@pytest.mark.slow
def test_a_stage_failure_is_one_line_and_its_trace_goes_to_a_log(
    ray_session: None, fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The note repeats one sentence; it must reach the tokenize stage, whose failure this is.
    fm_settings = opted_out(fm_settings, tmp_path, monkeypatch)
    # A tokenizer no Ray worker has loaded yet (workers keep verified tokenizers by hash).
    unique = tmp_path / "tokenizer.json"
    unique.write_text(json.dumps(json.loads(NEOX_TOKENIZER.read_text()), indent=1))
    register_tokenizer(fm_settings, unique, make_default=True)
    # The registered copy is modified behind the platform's back: the tokenize stage refuses it.
    copy = Path(default_tokenizer(fm_settings).uri.removeprefix("file://"))
    copy.write_text(copy.read_text().replace('"<|endoftext|>"', '"<|end|>"', 1))
    batch = _land(fm_settings, tmp_path / "in", ENGLISH)

    result = CliRunner().invoke(main, ["run", "--batch", batch])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "FAILED" in line or "failed" in line]
    assert len(lines) == 1, result.output
    assert f"tokenized_documents failed for {batch}" in lines[0]
    assert "the registry copy was modified" in lines[0]
    assert "Traceback" not in result.output
    trace = Path(lines[0].rsplit("full trace in ", 1)[1].strip()).read_text()
    assert "registry copy was modified" in trace
    assert "fm_assets/stages/tokenize.py" in trace  # the frames of the worker that raised
