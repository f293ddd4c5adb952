"""A synthetic source end to end: landed with its generator, curated like any source, stated on
the card and in lineage, and revoked by generator.

Two batches of real prose (the shared extraction benchmark's article bodies): a natural one
(source `web`) and a synthetic one (source `stories`) whose batch claims `acme/writer-1` while
some records name `acme/writer-2` themselves.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import dagster as dg
import pytest
from click.testing import CliRunner

from fm_assets.cards.build import build_card
from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.costs.report import QUANTITIES, cost_report
from fm_assets.defs.materialize import dagster_instance
from fm_assets.lineage_events.events import lineage_run_id
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import build_shard_set, read_shard_set_row
from fm_assets.storage.bookkeeping import stage_runs
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import create_version, require_version
from fm_assets.versions.reader import version_documents
from fm_loader.storage.cache_usage import record_stored
from tests.articles import long_articles
from tests.conftest import NEOX_TOKENIZER
from tests.openlineage_validation import validate_event
from tests.paths import REPO
from tests.policies import opt_out_policy
from tests.test_generators import FLAGS, WRITER
from tests.test_openlineage import LineageServer

pytestmark = pytest.mark.slow

WRITER_2 = {**WRITER, "model": "acme/writer-2", "revision": "r7", "seed": 99}


@dataclass
class Landed:
    settings: Settings
    natural: str
    synthetic: str
    shard_set_key: str
    synthetic_docs: dict[str, str]  # doc id -> generator model
    lineage: LineageServer  # the OpenLineage endpoint materializations report to


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def landed(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landed]:
    root = tmp_path_factory.mktemp("synthetic")
    home = root / "fm"
    names = (
        "FM_HOME",
        "DAGSTER_HOME",
        "FM_POLICY_FILE",
        "FM_OPENLINEAGE_URL",
        "FM_OPENLINEAGE_FILE",
    )
    saved = {k: os.environ.get(k) for k in names}
    # Every materialization's OpenLineage events: to a real endpoint on loopback, and a file.
    lineage = LineageServer().__enter__()
    os.environ["FM_OPENLINEAGE_URL"] = lineage.url
    os.environ["FM_OPENLINEAGE_FILE"] = str(root / "openlineage.jsonl")
    os.environ["FM_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(root))
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    articles = [body for _, body in long_articles(12)]
    natural, synthetic = root / "web.jsonl", root / "stories.jsonl"
    natural.write_text("".join(json.dumps({"text": b}) + "\n" for b in articles[:6]))
    lines = [
        {"text": b, **({"generator": WRITER_2} if i % 2 else {})}
        for i, b in enumerate(articles[6:])
    ]
    synthetic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    web = _cli("land", str(natural), "--source", "web", "--license", "MIT", "--team", "alpha")
    stories = _cli(
        "land", str(synthetic), "--source", "stories", "--license", "CC0-1.0", "--team", "beta",
        *FLAGS,
    )  # fmt: skip
    natural_id, synthetic_id = web.split()[-1], stories.split()[-1]
    for batch in (natural_id, synthetic_id):
        operations.run_batch(settings, batch, lambda message: None)
    version, _ = create_version(settings, "mix@v1", None, run_id=None)
    info = register_tokenizer(settings, NEOX_TOKENIZER)
    build = build_shard_set(settings, version.version_key, info, 512)
    docs = version_documents(
        settings, version, "tokenized_documents", ("doc_id", "generator_model")
    )
    generated = {
        r["doc_id"]: r["generator_model"] for r in docs.to_pylist() if r["generator_model"]
    }
    yield Landed(
        settings, natural_id, synthetic_id, build.manifest.shard_set_key, generated, lineage
    )
    lineage.__exit__(None, None, None)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_the_synthetic_batch_flows_through_every_stage(landed: Landed) -> None:
    """Its documents reach the version with their generators, per record where they say."""
    assert sorted(landed.synthetic_docs.values()) == ["acme/writer-1"] * 3 + ["acme/writer-2"] * 3
    version = require_version(landed.settings, "mix@v1")
    assert set(version.batches) == {landed.natural, landed.synthetic}
    docs = version_documents(
        landed.settings, version, "tokenized_documents", ("doc_id", "source", "generator")
    )
    for row in docs.to_pylist():
        if row["source"] == "web":
            assert row["generator"] is None
        else:
            record = json.loads(row["generator"])
            assert record["prompt_template_sha256"] == WRITER["prompt_template_sha256"]
            assert record["seed"] == (99 if record["model"] == "acme/writer-2" else 1234)


def test_the_card_states_the_share_per_generator_and_natural_source(landed: Landed) -> None:
    card = build_card(landed.settings, require_version(landed.settings, "mix@v1"))
    origin = {(r["kind"], r["name"]): r for r in card.summary["origin"]}  # type: ignore[union-attr]
    assert set(origin) == {
        ("natural source", "web"),
        ("generator", "acme/writer-1"),
        ("generator", "acme/writer-2"),
    }
    assert [origin[k]["documents"] for k in sorted(origin)] == [3, 3, 6]
    assert sum(r["tokens"] for r in origin.values()) == card.summary["tokens"]
    assert sum(r["document_share"] for r in origin.values()) == pytest.approx(1.0)
    assert origin[("generator", "acme/writer-2")]["sources"] == ["stories"]
    assert "## Origin: natural sources and generators" in card.markdown
    assert "| generator | `acme/writer-1` | 3 |" in card.markdown


def test_lineage_shows_the_generator(landed: Landed) -> None:
    segments = [
        segment
        for sample in range(4)
        for segment in _json_lines(_cli("lineage", "sample", landed.shard_set_key, str(sample)))
    ]
    synthetic = [s for s in segments if s["source"] == "stories"]
    assert synthetic and any(s["source"] == "web" for s in segments)
    for segment in segments:
        expected = landed.synthetic_docs.get(segment["doc_id"])
        assert segment["generator_model"] == expected
        assert (segment["generator"] or {}).get("model") == expected
    doc_id, model = next(iter(landed.synthetic_docs.items()))
    places = _json_lines(_cli("lineage", "doc", doc_id))
    assert places and all(p["generator_model"] == model for p in places)
    assert all(p["generator"]["prompt_template_id"] == "story-v3" for p in places)


def test_cost_per_team_adds_up_to_what_was_measured(
    landed: Landed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alpha landed the natural batch, beta the synthetic one; both share mix@v1's shard set
    (and a node's cached copy of it) by their tokens; every figure adds up."""
    settings = landed.settings
    row = read_shard_set_row(settings, landed.shard_set_key)
    assert row is not None
    directory = Path(str(row["uri"]).removeprefix("file://"))
    shard_bytes = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    cache = tmp_path / "node-cache"
    cache.mkdir()
    record_stored(cache, str(row["manifest_sha256"]), landed.shard_set_key, "s3://x", shard_bytes)
    now = dt.datetime.now(dt.UTC)
    report = cost_report(settings, [cache], now - dt.timedelta(days=1), now + dt.timedelta(hours=2))
    assert report.teams == ["alpha", "beta"]
    teams = report.team_totals()
    for name in QUANTITIES:
        assert sum(getattr(t, name) for t in teams.values()) == pytest.approx(report.totals[name])
    # The totals are what was measured: the landed files, the shard set's files, the cache.
    store = open_object_store(settings)
    manifests = [read_manifest(store, b) for b in (landed.natural, landed.synthetic)]
    assert report.totals["landing_bytes"] == sum(m.total_bytes for m in manifests)
    assert report.totals["shard_bytes"] == shard_bytes
    assert teams["alpha"].shard_bytes > 0 and teams["beta"].shard_bytes > 0
    assert report.totals["cache_byte_hours"] == pytest.approx(shard_bytes * 2, rel=1e-3)
    assert report.totals["table_bytes"] > 0 and teams["beta"].table_bytes > 0
    runs = [r for r in stage_runs(settings) if r["batch_id"] in (landed.natural, landed.synthetic)]
    assert runs and all(r["cpu_seconds"] and r["cpu_seconds"] > 0 for r in runs), [
        (r["stage"], r["cpu_seconds"]) for r in runs
    ]
    assert teams["beta"].cpu_seconds == pytest.approx(
        sum(r["cpu_seconds"] for r in runs if r["batch_id"] == landed.synthetic)
    )
    # `fm cost --team beta` prints beta's rows, priced from FM_PRICES_FILE.
    monkeypatch.setenv("FM_PRICES_FILE", str(REPO / "deploy" / "prices.example.toml"))
    out = _cli("cost", "--team", "beta", "--cache-dir", str(cache))
    assert "beta" in out and "alpha" not in out and "storage USD" in out
    assert " mix@v1 " in out and "TOTAL" in out
    # The daily asset: the month so far, its table and plot in the object store.
    from fm_assets.defs.costs import cost_report_asset
    from fm_assets.defs.resources import FmPlatform

    day = f"{now:%Y-%m-%d}"
    result = dg.materialize(
        [cost_report_asset],
        partition_key=day,
        resources={"fm": FmPlatform()},
        instance=dagster_instance(settings),
    )
    assert result.success
    svg = store.read_bytes(f"costs/{day}/cost_report.svg")
    ElementTree.fromstring(svg)  # well-formed
    assert b"beta" in svg and b"alpha" in svg
    saved = json.loads(store.read_bytes(f"costs/{day}/cost_report.json"))
    assert set(saved["teams"]) == {"alpha", "beta"} and saved["currency"] == "USD"


def test_revoking_a_generator_removes_everything_it_produced(landed: Landed) -> None:
    out = _cli("revoke", "--generator", "acme/writer-2", "--reason", "model terms changed")
    assert "version mix@v1 -> mix@v2 (3 documents" in out
    replacement = require_version(landed.settings, "mix@v2")
    docs = version_documents(
        landed.settings, replacement, "tokenized_documents", ("doc_id", "generator_model")
    )
    models = [r["generator_model"] for r in docs.to_pylist()]
    assert "acme/writer-2" not in models and models.count("acme/writer-1") == 3
    assert models.count(None) == 6
    revocations = _json_lines(_cli("lineage", "revocations"))
    assert [(r["criterion"], r["value"]) for r in revocations] == [("generator", "acme/writer-2")]
    card = build_card(landed.settings, replacement)
    assert {r["name"] for r in card.summary["origin"]} == {"web", "acme/writer-1"}  # type: ignore[union-attr]
    # A later version leaves the revoked generator's documents out too.
    later, _ = create_version(landed.settings, "again@v1", None, run_id=None)
    assert later.num_documents == 9


def test_every_materialization_sent_a_valid_openlineage_event(landed: Landed) -> None:
    """Stages per batch, landing, versions and shard sets (the revocation's replacements), the
    revocation and the cost report: each materialization's COMPLETE event reached the endpoint
    and the file, valid, with its datasets."""
    received = [event for path, event in landed.lineage.received if path == "/api/v1/lineage"]
    log = Path(os.environ["FM_OPENLINEAGE_FILE"]).read_text().splitlines()
    assert [json.loads(line) for line in log] == received
    for event in received:
        validate_event(event)
    complete = {e["run"]["runId"]: e for e in received if e["eventType"] == "COMPLETE"}
    started = {e["run"]["runId"] for e in received if e["eventType"] == "START"}
    instance = dagster_instance(landed.settings)
    materialized = []
    for key in instance.get_asset_keys():
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=500)
        for record in records.records:
            partition = record.asset_materialization.partition  # type: ignore[union-attr]
            materialized.append((record.run_id, key.to_user_string(), partition))
    assets = {asset for _, asset, _ in materialized}
    assert {"raw_documents", "tokenized_documents", "landing_batch", "dataset_version"} <= assets
    assert {"shard_set", "revocation", "cost_report"} <= assets, sorted(assets)
    for run_id, asset, partition in materialized:
        event_id = lineage_run_id(run_id, asset, partition)
        assert event_id in complete and event_id in started, (asset, partition)
        assert complete[event_id]["job"]["name"] == asset
    # A stage's event: its input and output Iceberg tables at their snapshots, rows, checks.
    raw = next(e for e in complete.values() if e["job"]["name"] == "tokenized_documents")
    (source,) = raw["inputs"]
    assert source["name"].endswith(".pii_redacted_documents") or source["name"].endswith(
        ".decontaminated_documents"
    )
    output = raw["outputs"][0]
    assert output["facets"]["version"]["datasetVersion"].isdigit()
    assert output["outputFacets"]["outputStatistics"]["rowCount"] > 0
    checks = {a["assertion"] for a in output["facets"]["dataQualityAssertions"]["assertions"]}
    assert "token_counts_consistent" in checks
    assert raw["run"]["facets"]["fm_code"]["codeVersion"]
    shard = next(e for e in complete.values() if e["job"]["name"] == "shard_set")
    assert shard["inputs"][0]["name"].startswith("dataset_version/mix@v")
    assert shard["outputs"][0]["namespace"] == "file"
    assert shard["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] > 0
    revoked = next(e for e in complete.values() if e["job"]["name"] == "revocation")
    assert [d["name"] for d in revoked["inputs"]] == ["dataset_version/mix@v1"]
    assert "dataset_version/mix@v2" in [d["name"] for d in revoked["outputs"]]
    cost = next(e for e in complete.values() if e["job"]["name"] == "cost_report")
    assert "/costs/" in cost["outputs"][0]["name"]
