"""Generator provenance at landing and in the raw stage: flags, manifests, JSONL records, policy."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from fm_assets.commands.cli import main
from fm_assets.curation.generators import load_generator_policy, refuse_generators
from fm_assets.execution.planning import landed_parts
from fm_assets.settings import Settings
from fm_assets.stages.raw import RawStage
from fm_assets.storage.generators import Generator
from fm_assets.storage.landing import BatchManifest, land_files, read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.teams import UNASSIGNED, batch_team

TEMPLATE_SHA = hashlib.sha256(b"Write a short story about {topic}.").hexdigest()
WRITER = {
    "model": "acme/writer-1",
    "revision": "2024-05-01",
    "prompt_template_id": "story-v3",
    "prompt_template_sha256": TEMPLATE_SHA,
    "sampling_params": {"temperature": 0.7, "top_p": 0.95},
    "seed": 1234,
}
FLAGS = [
    "--generator-model",
    "acme/writer-1",
    "--generator-revision",
    "2024-05-01",
    "--prompt-template-id",
    "story-v3",
    "--prompt-template-sha256",
    TEMPLATE_SHA,
    "--sampling-params",
    '{"top_p": 0.95, "temperature": 0.7}',
    "--seed",
    "1234",
]


def _land(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["land", *args])
    return result.exit_code, result.output


def test_a_generator_lacking_fields_is_refused_naming_them() -> None:
    partial = {k: v for k, v in WRITER.items() if k not in ("seed", "prompt_template_sha256")}
    with pytest.raises(ValueError, match="lacks prompt_template_sha256, seed"):
        Generator.from_mapping(partial, "the batch")
    with pytest.raises(ValueError, match="seed must be an integer"):
        Generator.from_mapping({**WRITER, "seed": "1"}, "the batch")
    # Equal generators have one canonical form, whatever the key order of their parameters.
    reordered = {**WRITER, "sampling_params": {"top_p": 0.95, "temperature": 0.7}}
    assert Generator.from_mapping(reordered, "x").to_json() == (
        Generator.from_mapping(WRITER, "x").to_json()
    )


def test_fm_land_refuses_a_partial_generator_naming_the_missing_flags(
    fm_settings: Settings, tmp_path: Path
) -> None:
    doc = tmp_path / "synthetic.jsonl"
    doc.write_text(json.dumps({"text": "a generated story"}) + "\n")
    common = [str(doc), "--source", "stories", "--license", "CC0-1.0"]
    code, output = _land(*common, "--generator-model", "acme/writer-1", "--seed", "3")
    assert code == 1
    assert "missing --generator-revision, --prompt-template-id, --prompt-template-sha256, " in (
        output
    )
    assert "--sampling-params" in output
    assert not open_object_store(fm_settings).list_dir("landing/batches"), "nothing landed"


def test_fm_land_records_the_generator_and_the_team(
    fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_object_store(fm_settings)
    doc = tmp_path / "synthetic.jsonl"
    doc.write_text(json.dumps({"text": "a generated story"}) + "\n")
    code, output = _land(str(doc), "--source", "stories", "--license", "CC0-1.0", *FLAGS)
    assert code == 0, output
    batch_id = output.strip().splitlines()[-1]
    manifest = read_manifest(store, batch_id)
    assert manifest.generator == Generator.from_mapping(WRITER, "x")
    raw = json.loads(store.read_bytes(f"landing/batches/{batch_id}/manifest.json"))
    assert raw["format_version"] == 3 and raw["generator"]["sampling_params"]["top_p"] == 0.95
    assert batch_team(store, batch_id) == UNASSIGNED  # FM_TEAM unset

    # The same generator from a file; the team from FM_TEAM, or --team.
    spec = tmp_path / "generator.json"
    spec.write_text(json.dumps(WRITER))
    other = tmp_path / "more.jsonl"
    other.write_text(json.dumps({"text": "another story"}) + "\n")
    monkeypatch.setenv("FM_TEAM", "pretraining")
    code, output = _land(
        str(other), "--source", "stories", "--license", "CC0-1.0", "--generator", str(spec)
    )
    assert code == 0, output
    second = output.strip().splitlines()[-1]
    assert read_manifest(store, second).generator == manifest.generator
    assert batch_team(store, second) == "pretraining"
    # A batch's team and generator are recorded once.
    code, output = _land(
        str(other),
        "--source",
        "stories",
        "--license",
        "CC0-1.0",
        "--generator",
        str(spec),
        "--team",
        "other",
    )
    assert code == 1 and "belongs to team 'pretraining'" in output
    code, output = _land(str(other), "--source", "stories", "--license", "CC0-1.0")
    assert code == 1 and "generator=acme/writer-1" in output


def test_a_refused_generator_cannot_land(
    fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[generators]\nrefused = ["acme/writer-1"]\n')
    monkeypatch.setenv("FM_POLICY_FILE", str(policy))
    doc = tmp_path / "synthetic.jsonl"
    doc.write_text(json.dumps({"text": "a generated story"}) + "\n")
    code, output = _land(str(doc), "--source", "stories", "--license", "CC0-1.0", *FLAGS)
    assert code == 1 and "claims generator 'acme/writer-1'" in output
    # Per record, refused models are caught when a version is cut.
    settings = dataclasses.replace(fm_settings, policy_file=policy)
    docs = pa.table({"generator_model": ["acme/writer-1", None, "acme/writer-1", "acme/ok"]})
    with pytest.raises(ValueError, match=r"2 documents of 'acme/writer-1'.*fm revoke --generator"):
        refuse_generators(settings, "web@v1", docs)
    refuse_generators(settings, "web@v1", docs.slice(1, 1))
    policy.write_text('[generators]\nrefuse = ["typo"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_generator_policy(settings)


def test_manifests_without_a_generator_keep_their_format(
    fm_settings: Settings, tmp_path: Path
) -> None:
    store = open_object_store(fm_settings)
    doc = tmp_path / "doc.txt"
    doc.write_text("natural text")
    manifest, _ = land_files(store, [doc], source="web", license="MIT")
    text = store.read_bytes(f"landing/batches/{manifest.batch_id}/manifest.json").decode()
    assert json.loads(text)["format_version"] == 1
    assert "generator" not in text and "modality" not in text
    with_generator = dataclasses.replace(manifest, generator=Generator.from_mapping(WRITER, "x"))
    parsed = BatchManifest.from_json(with_generator.to_json())
    assert parsed.format_version == 3
    assert dataclasses.replace(parsed, format_version=1) == with_generator
    # A format 3 manifest must carry a whole generator; format 1 and 2 carry none.
    broken = json.loads(with_generator.to_json())
    del broken["generator"]["seed"]
    with pytest.raises(ValueError, match="lacks seed"):
        BatchManifest.from_json(json.dumps(broken))
    old = json.loads(text)
    old["generator"] = WRITER
    with pytest.raises(ValueError, match="format 1 has no field 'generator'"):
        BatchManifest.from_json(json.dumps(old))


def test_the_raw_stage_records_each_documents_generator(
    fm_settings: Settings, tmp_path: Path
) -> None:
    """The batch's generator by default, a record's own when it has one; a record whose
    generator lacks fields is quarantined naming them."""
    other = {**WRITER, "model": "acme/writer-2", "seed": 9}
    lines = [
        {"text": "from the batch's generator"},
        {"text": "from its own generator", "generator": other},
        {"text": "a broken claim", "generator": {"model": "acme/writer-3"}},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = open_object_store(fm_settings)
    manifest, _ = land_files(
        store,
        [path],
        source="stories",
        license="CC0-1.0",
        generator=Generator.from_mapping(WRITER, "x"),
    )
    result = RawStage().read(landed_parts(fm_settings, manifest, {}), {})
    kept = {r["external_id"] or r["raw_content"].decode(): r for r in result.kept.to_pylist()}
    rows = sorted(result.kept.to_pylist(), key=lambda r: r["record_line"])
    assert [r["generator_model"] for r in rows] == ["acme/writer-1", "acme/writer-2"]
    assert json.loads(rows[1]["generator"])["seed"] == 9
    assert len(kept) == 2
    (bad,) = result.quarantined.to_pylist()
    assert bad["rule"] == "invalid_generator"
    assert "lacks revision, prompt_template_id" in bad["reason"]
