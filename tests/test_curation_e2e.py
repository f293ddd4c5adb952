"""The curation stages in the pipeline: two landing batches of real text through Ray and Iceberg.

Batch 1: article bodies from the shared extraction benchmark, PII planted in one of them, and bad
inputs (empty, one word, a huge line, binary junk, mixed scripts, German). Batch 2: near-copies of
batch-1 articles (a few words changed) and fresh articles. A dataset policy names allowed
languages, overrides a threshold and uses a quality classifier trained and registered with
`fm classifier train --default-recipe`.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from tests.articles import long_articles, near_copy
from tests.paths import NEOX_TOKENIZER, REPO, SHARED_DATA

pytestmark = pytest.mark.slow

PII_TEXT = (
    " Contact the editor at jane.doe@example.org or call +1 (415) 555-0134. The server at "
    "8.8.4.4 logged card 4111 1111 1111 1111, while 192.168.1.20 stayed internal."
)


@dataclass
class Curated:
    settings: Settings
    first: str
    second: str
    originals: dict[str, str]  # JSONL id -> text of batch 1
    copies: dict[str, str]  # batch-2 id -> batch-1 id it copies
    classifier: str


def _write_jsonl(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def curated(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Curated]:
    root = tmp_path_factory.mktemp("curation")
    home = root / "fm"
    env = {"FM_HOME": str(home), "FM_POLICY_FILE": str(root / "policies.toml")}
    import os

    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ.update({**env, "DAGSTER_HOME": str(home / "dagster")})
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    # The classifier, through the CLI as a user would run it.
    trained = subprocess.run(
        [
            sys.executable,
            "-m",
            "fm_assets.commands.cli",
            "classifier",
            "train",
            "--default-recipe",
            "--data-dir",
            str(SHARED_DATA),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=600,
    )
    assert trained.returncode == 0, trained.stderr
    classifier = trained.stdout.strip().splitlines()[-1]
    (root / "policies.toml").write_text(
        f"""
[datasets.articles]
allowed_languages = ["en"]
min_language_score = 0.5
quality_rule_sets = ["gopher_v1"]
[datasets.articles.quality_thresholds]
gopher_min_words = 40
[datasets.articles.classifier]
sha256 = "{classifier}"
min_score = 0.05
"""
    )
    articles = long_articles(24)
    first = [{"id": k, "text": t} for k, t in articles[:16]]
    first[0]["text"] += PII_TEXT
    bad = [
        {"id": "empty", "text": ""},
        {"id": "one-word", "text": "hello"},
        {"id": "huge-line", "text": "lorem ipsum dolor sit amet " * 200_000},
        {"id": "junk", "text": bytes(random.Random(3).randbytes(4000)).decode("latin-1")},
        {"id": "mixed", "text": "Das ist ein Satz. 这是一个句子。 Это предложение. " * 40},
        {"id": "german", "text": "Der schnelle braune Fuchs springt über den faulen Hund. " * 30},
    ]
    batch1, _ = operations.land(
        settings, [_write_jsonl(root / "one.jsonl", first + bad)], source="articles", license="MIT"
    )
    operations.run_batch(settings, batch1.batch_id, lambda message: None)
    copies = {f"copy-{k}": k for k, _ in articles[1:7]}
    second = [
        {"id": c, "text": near_copy(dict(articles)[k], i)}
        for i, (c, k) in enumerate(copies.items())
    ]
    second += [{"id": k, "text": t} for k, t in articles[16:24]]
    batch2, _ = operations.land(
        settings, [_write_jsonl(root / "two.jsonl", second)], source="articles", license="MIT"
    )
    operations.run_batch(settings, batch2.batch_id, lambda message: None)
    yield Curated(
        settings,
        batch1.batch_id,
        batch2.batch_id,
        {r["id"]: r["text"] for r in first + bad},
        copies,
        classifier,
    )
    for name, value in saved.items():  # later modules must not inherit this policy file
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _rows(c: Curated, table: str, batch: str) -> list[dict[str, object]]:
    return catalog.read_batch(c.settings, table, batch).to_pylist()


def _by_external_id(c: Curated, table: str, batch: str) -> dict[str, dict[str, object]]:
    return {str(r["external_id"]): r for r in _rows(c, table, batch)}


def test_every_stage_accounts_for_every_record(curated: Curated) -> None:
    for batch in (curated.first, curated.second):
        quarantine = _rows(curated, "quarantine", batch)
        previous = len(_rows(curated, "raw_documents", batch))
        for stage in pipeline.STAGE_NAMES[1:]:
            kept = len(_rows(curated, stage, batch))
            dropped = sum(1 for r in quarantine if r["stage"] == stage)
            assert kept + dropped == previous, (batch, stage)
            previous = kept
        assert all(r["rule"] and r["reason"] for r in quarantine)


def test_bad_inputs_end_kept_or_quarantined_with_a_reason(curated: Curated) -> None:
    # Record ids end in the record's line number in the landed JSONL file.
    ids = list(curated.originals)
    final = _by_external_id(curated, "tokenized_documents", curated.first)
    reasons = {
        ids[int(str(r["record_id"]).rsplit(":", 1)[1])]: (r["stage"], r["rule"])
        for r in _rows(curated, "quarantine", curated.first)
    }
    for name in ("empty", "one-word", "huge-line", "junk", "mixed", "german"):
        assert (name in final) != (name in reasons), name
    assert reasons["german"] == ("language_tagged_documents", "language_not_allowed")
    assert reasons["empty"][0] == "raw_documents"
    assert {reasons[n][0] for n in ("one-word", "huge-line", "junk", "mixed")} <= {
        "extracted_documents",  # junk: too much undecodable text
        "normalized_documents",
        "language_tagged_documents",
        "quality_filtered_documents",
    }


def test_language_and_scores_are_stored_per_document(curated: Curated) -> None:
    tagged = _by_external_id(curated, "language_tagged_documents", curated.first)
    assert {r["language"] for r in tagged.values()} == {"en"}
    assert all(0.5 <= float(r["language_score"]) <= 1.0 for r in tagged.values())
    scored = _rows(curated, "quality_scored_documents", curated.first)
    assert all(r["classifier_sha256"] == curated.classifier for r in scored)
    assert all(0.0 <= float(r["classifier_score"]) <= 1.0 for r in scored)
    assert all(int(r["gopher_v1__word_count"]) > 0 for r in scored)


def test_policy_threshold_change_reruns_only_the_decision(curated: Curated) -> None:
    from fm_assets.execution.runner import run_stage

    policy_file = curated.settings.policy_file
    assert policy_file is not None
    original = policy_file.read_text()
    kept_before = _rows(curated, "quality_filtered_documents", curated.first)
    quarantined_before = _quarantined_by(curated, "quality_filtered_documents")
    try:
        policy_file.write_text(
            original.replace("gopher_min_words = 40", "gopher_min_words = 100000")
        )
        scores = run_stage(curated.settings, "quality_scored_documents", curated.first)
        decision = run_stage(curated.settings, "quality_filtered_documents", curated.first)
        assert scores.skipped and not decision.skipped  # no rescoring
        assert decision.records_kept == 0 and decision.quarantine_rules == {
            "gopher_min_words": decision.records_in
        }
    finally:
        policy_file.write_text(original)
        run_stage(curated.settings, "quality_filtered_documents", curated.first)
    # Back to the first decision: the rerun replaced both partitions, leaving nothing behind.
    kept_after = _rows(curated, "quality_filtered_documents", curated.first)
    assert sorted(str(r["doc_id"]) for r in kept_after) == sorted(
        str(r["doc_id"]) for r in kept_before
    )
    assert _quarantined_by(curated, "quality_filtered_documents") == quarantined_before


def _quarantined_by(curated: Curated, stage: str) -> list[tuple[str, str]]:
    rows = _rows(curated, "quarantine", curated.first)
    return sorted((str(r["record_id"]), str(r["rule"])) for r in rows if r["stage"] == stage)


def test_near_copies_in_a_later_batch_point_at_the_kept_document(curated: Curated) -> None:
    raw = {r["record_id"]: r for r in _rows(curated, "raw_documents", curated.second)}
    first = {r["external_id"]: r["doc_id"] for r in _rows(curated, "raw_documents", curated.first)}
    dups = [
        r for r in _rows(curated, "quarantine", curated.second) if r["rule"] == "near_duplicate"
    ]
    found = {raw[r["record_id"]]["external_id"]: r["reason"] for r in dups}
    kept_first = _by_external_id(curated, "near_deduplicated_documents", curated.first)
    expected = {c for c, o in curated.copies.items() if o in kept_first}
    assert len(expected) >= 4 and set(found) == expected  # every copy, and nothing else
    fresh = _by_external_id(curated, "near_deduplicated_documents", curated.second)
    assert len(fresh) >= 4 and not set(fresh) & set(curated.copies)
    for copy in expected:
        original = curated.copies[copy]
        assert first[original] in found[copy] and curated.first in found[copy]
    index = catalog.read_table(curated.settings, "neardup_index", namespace="cloud").to_pylist()
    assert {r["batch_id"] for r in index} == {curated.first, curated.second}
    # Every kept document of both batches is indexed: its band hashes and its shingle set.
    kept = {
        str(r["doc_id"])
        for batch in (curated.first, curated.second)
        for r in _rows(curated, "near_deduplicated_documents", batch)
    }
    sets = Counter(str(r["doc_id"]) for r in index if r["band"] < 0)
    assert {str(r["doc_id"]) for r in index if r["band"] >= 0} == kept
    assert set(sets) == kept and set(sets.values()) == {1}


def test_pii_is_redacted_and_audited_without_the_values(curated: Curated) -> None:
    text = str(
        _by_external_id(curated, "pii_redacted_documents", curated.first)[long_articles(24)[0][0]][
            "text"
        ]
    )
    for value in ("jane.doe@example.org", "555-0134", "8.8.4.4", "4111 1111 1111 1111"):
        assert value not in text
    assert "<EMAIL>" in text and "<CREDIT_CARD>" in text and "192.168.1.20" in text
    audit = _rows(curated, "pii_redactions", curated.first)
    assert Counter(r["kind"] for r in audit) >= Counter(
        {"EMAIL": 1, "PHONE": 1, "IP_ADDRESS": 1, "CREDIT_CARD": 1}
    )
    original = curated.originals[long_articles(24)[0][0]]
    for r in audit:
        assert set(r) == {"batch_id", "doc_id", "kind", "start", "end", "rule_version"}
        assert 0 <= int(r["start"]) < int(r["end"]) <= len(original)


def test_classifier_is_registered_with_its_provenance(curated: Curated) -> None:
    from fm_assets.registries.classifiers import require_classifier

    info = require_classifier(curated.settings, curated.classifier)
    assert info.model_sha256 == curated.classifier and 0.8 <= info.holdout_accuracy <= 1.0
    assert info.report["positives_sha256"] and info.report["negatives_sha256"]
    instance = operations.dagster_instance(curated.settings)
    assert curated.classifier in instance.get_dynamic_partitions("quality_classifier")
