"""`fm demo` (what `make demo` runs): the main job on embedded defaults with its own sample."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands.cli import main
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from tests.policies import opted_out

pytestmark = pytest.mark.slow


def test_demo_runs_the_whole_platform_on_its_own_sample(
    ray_session: None, fm_settings: Settings
) -> None:
    result = CliRunner().invoke(main, ["demo", "--seq-len", "256"])
    assert result.exit_code == 0, result.output
    shard_set_key = result.stdout.strip().splitlines()[-1]
    assert shard_set_key.startswith("demo@v1/") and shard_set_key.endswith("-s256")
    # The sample is generated under FM_HOME, never taken from third-party data.
    sample = sorted(p.name for p in (fm_settings.home / "sample").iterdir())
    assert sample == ["sample-articles.jsonl", "sample-crawl.warc.gz", "sample-page.html"]
    rules = set(
        catalog.read_table(fm_settings, "quarantine", namespace="cloud").column("rule").to_pylist()
    )
    assert {"exact_duplicate", "invalid_json", "missing_text_field"} <= rules
    assert "read back" in result.stderr
    # No FM_POLICY_FILE: the default web policy, its classifier trained on first need.
    assert "training it once with the default recipe" in result.stderr
    assert "curated under the web policy" in result.stderr
    assert {"gopher_dup_5gram", "gopher_min_words"} <= rules  # the grammar repeats phrases
    card = next((fm_settings.home / "objects" / "cards").glob("demo@v1/dataset_card.md"))
    text = card.read_text()
    assert "| Languages | en (lid.176 score >= 0.65) |" in text
    assert "| gopher_dup_5gram | `gopher_v1__dup_5gram_char_fraction` | <= 0.15 |" in text


def test_demo_accepts_the_users_files(
    ray_session: None, fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files repeat one sentence each; the subject is the user's own input, not curation.
    opted_out(fm_settings, tmp_path, monkeypatch)
    page = tmp_path / "mine.html"
    page.write_text(
        "<html><body><article><h1>Field notes</h1>"
        + "".join(
            f"<p>Observation {i}: the heron returned to the marsh at dawn.</p>" for i in range(40)
        )
        + "</article></body></html>"
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("Plain text notes about tides and the moon.\n" * 50)
    result = CliRunner().invoke(
        main,
        [
            "demo",
            str(page),
            str(notes),
            "--seq-len",
            "128",
            "--source",
            "field",
            "--license",
            "MIT",
        ],
    )
    assert result.exit_code == 0, result.output
    docs = catalog.read_table(fm_settings, "tokenized_documents", namespace="cloud").to_pylist()
    assert {d["source_file"] for d in docs} == {"mine.html", "notes.txt"}
    assert {(d["source"], d["license"]) for d in docs} == {("field", "MIT")}
