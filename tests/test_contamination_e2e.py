"""The contamination registry, the mandatory decontamination stage and the shard-set gate.

GSM8K is registered before a batch lands; a HumanEval item planted in the same batch gets through
(HumanEval is not registered yet), then HumanEval is registered: the sensor re-scans the version,
flags it in its metadata and card, and the gate refuses a new shard set of it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest

from fm_assets.commands import operations
from fm_assets.defs.materialize import materialize
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from tests.paths import ARTICLE_GROUND_TRUTH, EVALSETS, NEOX_TOKENIZER
from tests.policies import opt_out_policy


def _gsm8k(n: int) -> list[dict[str, str]]:
    lines = (EVALSETS / "gsm8k-test.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[:n]]


def _humaneval(n: int) -> list[dict[str, str]]:
    with gzip.open(EVALSETS / "humaneval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f.read().splitlines()[:n]]


def _articles(n: int) -> list[str]:
    truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    return [v["articleBody"] for _, v in sorted(truth.items())][:n]


@dataclass
class Decontaminated:
    settings: Settings
    batch_id: str
    version_key: str
    records: list[dict[str, str]]


@pytest.fixture(scope="module")
def decontaminated(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Decontaminated]:
    root = tmp_path_factory.mktemp("decontam")
    home = root / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ.update({"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")})
    # The subject is decontamination: the articles (one of them Korean) must all reach it.
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(root))
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    operations.register_benchmark(
        settings, "gsm8k", EVALSETS / "gsm8k-test.jsonl", ["question", "answer"], print
    )
    articles = _articles(12)
    gsm = _gsm8k(3)
    human = _humaneval(1)[0]
    renumbered = gsm[2]["question"].replace("16", "23").replace("3", "5")
    records = [{"id": f"clean-{i}", "text": t} for i, t in enumerate(articles[:8])]
    records += [
        {
            "id": "gsm-verbatim",
            "text": articles[8] + "\n\n" + gsm[0]["question"] + " " + gsm[0]["answer"],
        },
        {
            "id": "gsm-spacing",
            "text": (gsm[1]["question"] + "\n" + gsm[1]["answer"])
            .replace(" ", "  ")
            .replace(",", " ,")
            .replace(".", " .")
            + "\n"
            + articles[9],
        },
        {"id": "gsm-renumbered", "text": articles[10] + " " + renumbered + " " + gsm[2]["answer"]},
        {
            "id": "humaneval",
            "text": articles[11] + "\n" + human["prompt"] + human["canonical_solution"],
        },
    ]
    path = root / "batch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    batch, _ = operations.land(settings, [path], source="web", license="MIT")
    operations.run_batch(settings, batch.batch_id, lambda message: None)
    version_key = operations.create_version(settings, "web", [], lambda message: None)
    yield Decontaminated(settings, batch.batch_id, version_key, records)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _ids(c: Decontaminated, rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    names = [r["id"] for r in c.records]
    return {names[int(str(r["record_id"]).rsplit(":", 1)[1])]: r for r in rows}


pytestmark = pytest.mark.slow


def test_registry_holds_the_benchmark_in_iceberg(decontaminated: Decontaminated) -> None:
    rows = catalog.read_table(decontaminated.settings, "contamination_benchmarks").to_pylist()
    assert [(r["benchmark"], r["item_count"]) for r in rows] == [("gsm8k", 1319)]
    items = catalog.read_table(decontaminated.settings, "contamination_items")
    assert items.num_rows == 1319 and set(items.column("benchmark").to_pylist()) == {"gsm8k"}
    instance = operations.dagster_instance(decontaminated.settings)
    assert instance.get_dynamic_partitions("benchmark") == ["gsm8k"]


def test_planted_items_are_dropped_naming_benchmark_and_item(
    decontaminated: Decontaminated,
) -> None:
    c = decontaminated
    quarantine = catalog.read_batch(c.settings, "quarantine", c.batch_id).to_pylist()
    dropped = _ids(c, [r for r in quarantine if r["stage"] == "decontaminated_documents"])
    assert set(dropped) == {"gsm-verbatim", "gsm-spacing", "gsm-renumbered"}
    for name, item in (("gsm-verbatim", 0), ("gsm-spacing", 1), ("gsm-renumbered", 2)):
        assert dropped[name]["rule"] == "contaminated"
        assert f"gsm8k item {item} " in str(dropped[name]["reason"])
    matches = catalog.read_batch(c.settings, "contamination_matches", c.batch_id).to_pylist()
    assert {(m["benchmark"], m["item_id"], m["action"]) for m in matches} == {
        ("gsm8k", 0, "dropped"),
        ("gsm8k", 1, "dropped"),
        ("gsm8k", 2, "dropped"),
    }
    kept = catalog.read_batch(c.settings, "tokenized_documents", c.batch_id).num_rows
    assert kept == 9  # 8 clean articles + the HumanEval one, not registered yet


def test_a_new_benchmark_rescans_versions_and_the_gate_refuses_a_shard_set(
    decontaminated: Decontaminated,
) -> None:
    import dagster as dg

    from fm_assets.definitions import defs

    c = decontaminated
    assert operations.build_shards(c.settings, c.version_key, str(NEOX_TOKENIZER), 512, print)
    operations.register_benchmark(
        c.settings,
        "humaneval",
        EVALSETS / "humaneval.jsonl.gz",
        ["prompt", "canonical_solution"],
        print,
    )
    instance = operations.dagster_instance(c.settings)
    sensor = defs.resolve_sensor_def("contamination_registry_sensor")
    with dg.build_sensor_context(instance=instance, definitions=defs) as context:
        requests = list(sensor(context))
    assert [r.partition_key for r in requests] == [c.version_key]
    materialize(c.settings, ["contamination_scan"], c.version_key, print)
    flags = catalog.read_table(c.settings, "contamination_flags", namespace="cloud").to_pylist()
    assert {(f["version_key"], f["benchmark"], f["item_id"]) for f in flags} == {
        (c.version_key, "humaneval", 0)
    }
    observation = (
        instance.fetch_observations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("dataset_version"), asset_partitions=[c.version_key]
            ),
            limit=1,
        )
        .records[0]
        .asset_observation
    )
    assert observation.metadata["contaminated"].value is True
    from fm_assets.storage.objectstore import open_object_store

    card = open_object_store(c.settings).read_bytes(f"cards/{c.version_key}/dataset_card.md")
    assert b"humaneval" in card
    # The gate: a new shard set of the flagged version fails its blocking check.
    with pytest.raises(operations.ChecksFailed, match="no_contaminated_samples"):
        operations.build_shards(c.settings, c.version_key, str(NEOX_TOKENIZER), 1024, print)


def test_redact_mode_keeps_the_document_without_the_item(decontaminated: Decontaminated) -> None:
    from fm_assets.contamination.store import registry_ref
    from fm_assets.stages.decontaminate import DecontaminateStage
    from fm_assets.storage import schemas

    c = decontaminated
    gsm = _gsm8k(1)[0]
    text = "An article about ships and harbours. " * 20 + gsm["question"] + " The end."
    row = {f.name: "x" for f in schemas.TEXT_DOCUMENTS}
    row.update({"text": text, "url": None, "lang_hint": None, "external_id": None})
    batch = pa.Table.from_pylist([row], schema=schemas.TEXT_DOCUMENTS)
    stage = DecontaminateStage(
        registry=registry_ref(c.settings), mode="redact", settings=c.settings
    )
    result = stage.process(batch)
    assert result.kept.num_rows == 1 and result.quarantined.num_rows == 0
    cleaned = result.kept.column("text")[0].as_py()
    assert gsm["question"][:40] not in cleaned and cleaned.startswith("An article about ships")
    assert result.side["contamination_matches"].column("action").to_pylist() == ["redacted"]
