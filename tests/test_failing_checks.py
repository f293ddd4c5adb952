"""The data checks are real: tampered data fails them, and a failed blocking check stops the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pyiceberg.expressions import EqualTo

from fm_assets.checks import documents
from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import default_batches
from tests.paths import NEOX_TOKENIZER
from tests.policies import opted_out

pytestmark = pytest.mark.slow


@pytest.fixture
def fm_settings(fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The notes repeat one sentence; the subject is the checks, not curation."""
    return opted_out(fm_settings, tmp_path, monkeypatch)


def _land_notes(settings: Settings, directory: Path, words: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(3):
        path = directory / f"note-{i}.txt"
        path.write_text(f"Note {i} about {words}. " * 20)
        paths.append(path)
    batch, _ = operations.land(settings, paths, source="notes", license="CC0-1.0")
    return batch.batch_id


def _processed_notes(settings: Settings, directory: Path, words: str) -> str:
    """A small batch landed and run through every stage with the real tokenizer."""
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batch = _land_notes(settings, directory, words)
    operations.run_batch(settings, batch, lambda message: None)
    return batch


def test_tampered_landing_file_fails_the_run_and_is_left_out_of_versions(
    ray_session: None, fm_settings: Settings, tmp_path: Path
) -> None:
    register_tokenizer(fm_settings, NEOX_TOKENIZER, make_default=True)
    good = _land_notes(fm_settings, tmp_path / "good", "rivers")
    bad = _land_notes(fm_settings, tmp_path / "bad", "forests")
    operations.run_batch(fm_settings, good, lambda message: None)

    # Someone overwrites a landed file behind the platform's back.
    store = open_object_store(fm_settings)
    manifest = operations.land(
        fm_settings, sorted((tmp_path / "bad").iterdir()), source="notes", license="CC0-1.0"
    )[0]
    Path(store.path(manifest.files[0].key)).write_text("something else entirely")

    result = CliRunner().invoke(main, ["run", "--batch", bad])
    assert result.exit_code == 1
    assert "files_match_manifest" in result.output
    # The blocking check stopped the run before any stage wrote the batch.
    assert catalog.read_batch(fm_settings, "raw_documents", bad).num_rows == 0
    assert default_batches(fm_settings) == [good]
    status = CliRunner().invoke(main, ["status"])
    assert "failing checks: 1" in status.output and bad in status.output


def test_accounting_check_catches_lost_records(
    ray_session: None, fm_settings: Settings, tmp_path: Path
) -> None:
    batch = _processed_notes(fm_settings, tmp_path / "notes", "lakes")
    outcome = documents.records_accounted_for(fm_settings, "normalized_documents", batch)
    assert outcome.passed, outcome.description

    # Drop one normalized row without a quarantine row: a record silently lost.
    table = catalog.read_batch(fm_settings, "normalized_documents", batch)
    catalog.replace_rows(
        fm_settings,
        "normalized_documents",
        table.slice(1),
        EqualTo("batch_id", batch),
        namespace="cloud",
    )
    outcome = documents.records_accounted_for(fm_settings, "normalized_documents", batch)
    assert not outcome.passed
    assert "1 lost" in outcome.description


def test_expectations_catch_an_empty_text(
    ray_session: None, fm_settings: Settings, tmp_path: Path
) -> None:
    batch = _processed_notes(fm_settings, tmp_path / "notes", "hills")
    table = catalog.read_batch(fm_settings, "extracted_documents", batch)
    texts = table.column("text").to_pylist()
    texts[0] = ""
    broken = table.set_column(table.schema.get_field_index("text"), "text", [texts])
    catalog.replace_rows(
        fm_settings, "extracted_documents", broken, EqualTo("batch_id", batch), namespace="cloud"
    )
    outcome = documents.document_expectations(fm_settings, "extracted_documents", batch)
    assert not outcome.passed
    assert "text" in outcome.description
