"""The production profile on real servers: Postgres (Iceberg catalog + Dagster storage),
SeaweedFS S3 (landing zone, warehouse, registries, shard sets, compute logs) and a two-node
Ray cluster joined by address, driven as an operator would: `fm` commands, `fm dev`'s sensor
and a backfill launched through the UI's GraphQL API.

Module order matters and is written down: the CLI path first (with the sensor stopped, so no
run races it), then the sensor must leave that batch alone, then two batches land at once
while a backfill covers all three; the last tests look at what is left behind.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fm_assets.execution import pipeline
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import bookkeeping, catalog
from tests.paths import NEOX_TOKENIZER
from tests.services.fixtures import Production, s3_credentials

pytestmark = pytest.mark.slow

SEQ_LEN = 512
SENSOR = "new_landing_batch_sensor"
BATCH_ASSETS = ["landing_batch", *pipeline.STAGE_NAMES]


@dataclass
class CliPath:
    """What the `fm` commands produced."""

    settings: Settings
    batch_id: str
    version_key: str
    shard_set_key: str
    commands: list[str] = field(default_factory=list)


def _sample(directory: Path, seed: int, *, jsonl_only: bool = False) -> list[Path]:
    from fm_assets.commands.demo import make_sample

    files = make_sample(directory, seed=seed)
    return [f for f in files if f.suffix == ".jsonl"] if jsonl_only else files


def _last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


@pytest.fixture(scope="module", autouse=True)
def _s3_credentials_in_this_process() -> Iterator[None]:
    """This process reads the catalog's files on S3 too (assertions, make_dataset)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in s3_credentials().items():
            env.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def cli_path(production: Production) -> CliPath:
    """The operator's path with `fm`: register a tokenizer, land, run, version, shards."""
    production.wait_for_code_location()
    production.stop_sensor()  # nothing may race `fm run` for this batch
    inputs = _sample(production.home.parent / "batch-a", seed=7)
    production.fm("tokenizer", "register", str(NEOX_TOKENIZER), "--default")
    batch_id = _last_line(
        production.fm("land", *map(str, inputs), "--source", "demo", "--license", "CC0-1.0").stdout
    )
    production.fm("run", "--batch", batch_id)
    version_key = _last_line(production.fm("version", "create", "web").stdout)
    shard_set_key = _last_line(
        production.fm(
            "shards", "build", version_key, "--tokenizer", str(NEOX_TOKENIZER),
            "--seq-len", str(SEQ_LEN),
        ).stdout
    )  # fmt: skip
    return CliPath(load_settings(production.env), batch_id, version_key, shard_set_key)


def test_catalog_tables_live_in_postgres_with_data_on_s3(
    production: Production, cli_path: CliPath
) -> None:
    rows = production.postgres.query(
        "fm_catalog",
        "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
        "WHERE table_namespace IN ('fm', 'fm_cloud')",
    )
    # Platform tables in the platform's namespace; documents in their data namespace's.
    located = {(ns, name): location for ns, name, location in rows}
    tables = {name: location for (ns, name), location in located.items() if ns == "fm"}
    for name in [*pipeline.STAGE_NAMES, "quarantine"]:
        assert ("fm_cloud", name) in located, f"{name} is not in the Postgres catalog"
    bookkeeping_tables = production.postgres.query(
        "fm_catalog",
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'fm_%'",
    )
    # stage runs and check results are SQL rows beside the catalog, in the same database
    assert {"fm_stage_runs", "fm_check_results"} <= {name for (name,) in bookkeeping_tables}
    assert {"dataset_versions", "shard_sets", "tokenizers"} <= set(tables)
    for (namespace, name), location in located.items():
        assert location.startswith(
            f"s3://{production.bucket}/{production.prefix}/warehouse/{namespace}/{name}/"
        ), location
    tokenized = catalog.read_batch(
        cli_path.settings, "tokenized_documents", cli_path.batch_id, columns=("doc_id",)
    )
    assert tokenized.num_rows > 100


def test_every_check_passed_and_runs_are_in_dagsters_postgres(
    production: Production, cli_path: CliPath
) -> None:
    checks = bookkeeping.check_results(cli_path.settings)
    assert checks and all(r["passed"] for r in checks), [r for r in checks if not r["passed"]]
    assert {r["asset"] for r in checks} >= {"landing_batch", "tokenized_documents", "shard_set"}
    runs = production.postgres.query("fm_dagster", "SELECT run_id, status FROM runs")
    failed = {run_id: production.run_errors(run_id) for run_id, s in runs if s != "SUCCESS"}
    assert len(runs) >= 3 and failed == {}, failed
    mine = {r["run_id"] for r in checks if r["run_id"]}
    assert mine <= {run_id for run_id, _ in runs}, "a run the checks name is not in Postgres"


def test_shard_set_on_s3_streams_through_make_dataset(
    production: Production, cli_path: CliPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fm_loader

    cache = production.home / "cache" / "fm_loader"
    dataset = fm_loader.make_dataset(
        cli_path.version_key, settings=cli_path.settings, cache_dir=cache, seq_len=SEQ_LEN
    )
    samples = list(dataset)
    assert len(samples) == dataset.manifest.num_samples > 0
    assert all(len(s["input_ids"]) == SEQ_LEN for s in samples)
    fs = production.s3.filesystem()
    dataset_name, number = cli_path.version_key.split("@v")
    selector = pafs.FileSelector(
        f"{production.bucket}/{production.prefix}/platform/shards/cloud/{dataset_name}/v{number}",
        recursive=True,
    )
    names = [i.base_name for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
    assert "fm_manifest.json" in names and any(n.endswith(".mds") for n in names)


RAY_CLIENT_SCRIPT = """
import sys
from fm_assets.curation.policy import load_policy
from fm_assets.execution import compute, pipeline
from fm_assets.settings import load_settings
from fm_assets.storage import catalog

settings, batch = load_settings(), sys.argv[1]
stage = pipeline.entry("normalized_documents").build(settings, load_policy(settings, "demo"))
rows = catalog.read_batch(settings, "extracted_documents", batch)
compute.ensure_ray(settings)
result = compute.process_on_ray(stage, compute.split_rows(rows, compute.ray_cpus()), print)
stored = catalog.read_batch(settings, "normalized_documents", batch, columns=("doc_id",))
assert result.kept.column("doc_id").to_pylist() == stored.column("doc_id").to_pylist()
print("nodes", sum(1 for n in __import__("ray").nodes() if n["Alive"]))
"""


def test_stages_also_run_through_ray_client(production: Production, cli_path: CliPath) -> None:
    """RAY_ADDRESS=ray://HOST:PORT, as the Helm values give run pods: the same code, the same
    rows as the stage committed when joined by GCS address."""
    import subprocess
    import sys
    import time

    env = {**production.env, **production.cluster.driver_env(client=True)}
    for attempt in range(4):
        result = subprocess.run(
            [sys.executable, "-c", RAY_CLIENT_SCRIPT, cli_path.batch_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        # Ray Client starts a server process per driver on the head; under heavy load its
        # start-up failed ("Starting Ray client server failed"), once twice in a row, and
        # worked when tried again: a fault of the test machine, not of the code under test.
        if "Starting Ray client server failed" not in result.stderr:
            break
        time.sleep(5 * (attempt + 1))
    servers = sorted(production.cluster.temp_dir.glob("session_*/logs/ray_client_server_*.err"))
    server_logs = "".join(f"\n--- {f.name}\n{f.read_text()[-1500:]}" for f in servers[-2:])
    assert result.returncode == 0, result.stderr[-3000:] + server_logs
    assert "nodes 2" in result.stdout


def test_the_sensor_leaves_a_batch_fm_run_processed_alone(
    production: Production, cli_path: CliPath
) -> None:
    production.set_sensor(running=True)
    # The sensor ticks every 15 s: two ticks must pass with no run for the processed batch.
    query = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
        ... on Sensor { sensorState { ticks(limit: 5) { status timestamp } } } } }"""
    started = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = production.graphql(query, {"s": production.sensor()[0]})
        ticks = state["sensorOrError"]["sensorState"]["ticks"]
        if sum(1 for t in ticks if t["timestamp"] > started) >= 2:
            break
        time.sleep(3)
    else:
        raise AssertionError("the sensor did not tick twice within 120 s")
    launched = [
        r
        for r in production.runs(dagster__partition=cli_path.batch_id)
        if any(t["key"] == "dagster/sensor_name" for t in r["tags"])
    ]
    assert launched == [], "the sensor launched a second run for a batch fm run processed"


BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(
    backfillParams: $params) { __typename ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message } } }"""
BACKFILL_STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
    ... on PartitionBackfill { status } } }"""


@pytest.fixture(scope="module")
def concurrent_batches(production: Production, cli_path: CliPath) -> list[str]:
    """Two batches landed at once (the sensor runs them) while a backfill covers all three."""
    production.set_sensor(running=True)
    inputs = [
        _sample(production.home.parent / f"batch-{seed}", seed=seed, jsonl_only=True)
        for seed in (11, 12)
    ]
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda files: production.fm(
                    "land", *map(str, files), "--source", "web", "--license", "CC-BY-4.0"
                ),
                inputs,
            )
        )
    new = [_last_line(r.stdout) for r in results]
    batches = [cli_path.batch_id, *new]
    # The sensor must have added the new partitions before the backfill can name them.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        query = """{ partitionSets: assetNodes(assetKeys: [{path: ["landing_batch"]}]) {
            partitionKeys } }"""
        keys = production.graphql(query)["partitionSets"][0]["partitionKeys"]
        if set(new) <= set(keys):
            break
        time.sleep(3)
    else:
        raise AssertionError(f"the sensor did not add partitions {new} within 120 s")
    params = {
        "assetSelection": [{"path": [name]} for name in BATCH_ASSETS],
        "partitionNames": batches,
        "fromFailure": False,
    }
    launched = production.graphql(BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline:
        status = production.graphql(BACKFILL_STATUS, {"id": launched["backfillId"]})
        runs = [r for b in batches for r in production.runs(dagster__partition=b)]
        finished = all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs)
        if status["partitionBackfillOrError"]["status"] != "REQUESTED" and finished:
            break
        time.sleep(5)
    else:
        raise AssertionError("the backfill and the sensor's runs did not finish in 25 min")
    return batches


def test_concurrent_batches_and_a_backfill_all_succeed(
    production: Production, concurrent_batches: list[str]
) -> None:
    for batch_id in concurrent_batches:
        runs = production.runs(dagster__partition=batch_id)
        assert runs and {r["status"] for r in runs} == {"SUCCESS"}, (batch_id, runs)
    for batch_id in concurrent_batches[1:]:
        tags = [
            {t["key"]: t["value"] for t in r["tags"]}
            for r in production.runs(dagster__partition=batch_id)
        ]
        assert any(t.get("dagster/sensor_name") == SENSOR for t in tags), batch_id
        assert any("dagster/backfill" in t for t in tags), batch_id


def test_no_batch_was_processed_twice_and_no_commit_was_lost(
    production: Production, concurrent_batches: list[str]
) -> None:
    settings = load_settings(production.env)
    runs = bookkeeping.stage_runs(settings)
    counts = Counter((r["batch_id"], r["stage"]) for r in runs)
    expected = {(b, s) for b in concurrent_batches for s in pipeline.STAGE_NAMES}
    assert expected <= set(counts), "a stage of a batch never committed"
    assert [k for k, n in counts.items() if n != 1] == [], "a stage ran twice for a batch"
    for row in runs:
        if row["batch_id"] not in concurrent_batches:
            continue
        kept = catalog.read_batch(settings, row["stage"], row["batch_id"], columns=("doc_id",))
        assert kept.num_rows == row["records_kept"], (row["stage"], row["batch_id"])
    checks = bookkeeping.check_results(settings)
    assert all(r["passed"] for r in checks), [r for r in checks if not r["passed"]]


def test_runs_compute_logs_are_on_s3(production: Production, concurrent_batches: list[str]) -> None:
    fs = production.s3.filesystem()
    logs = f"{production.bucket}/{production.prefix}/platform/dagster/compute-logs"
    selector = pafs.FileSelector(logs, recursive=True, allow_not_found=True)
    files = [i.path for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
    run_ids = {
        r["runId"] for b in concurrent_batches[1:] for r in production.runs(dagster__partition=b)
    }
    assert any(run_id in path for path in files for run_id in run_ids), files[:10]


def test_nothing_but_logs_and_caches_under_fm_home(production: Production) -> None:
    files = [p.relative_to(production.home) for p in production.home.rglob("*") if p.is_file()]
    assert files, "FM_HOME is empty: did the tests run?"
    stray = [str(p) for p in files if p.parts[0] not in ("cache", "logs")]
    assert stray == [], f"state written under FM_HOME in production: {stray}"


def _texts_in_bucket(production: Production) -> list[tuple[str, str]]:
    fs = production.s3.filesystem()
    selector = pafs.FileSelector(f"{production.bucket}/{production.prefix}", recursive=True)
    found = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        if info.path.endswith((".json", ".log", ".err", ".out", ".md")) or "/dagster/" in info.path:
            with fs.open_input_stream(info.path, compression=None) as f:
                found.append((info.path, f.read().decode("utf-8", errors="replace")))
    return found


def test_no_credential_appears_in_logs_metadata_ui_or_storage(production: Production) -> None:
    secrets = production.secrets()
    places: list[tuple[str, str]] = []
    for root in (production.home, production.home.parent, production.cluster.temp_dir):
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                places.append((str(path), path.read_bytes().decode("utf-8", errors="replace")))
    for table, column in (("event_logs", "event"), ("runs", "run_body"), ("kvs", "value")):
        rows = production.postgres.query("fm_dagster", f"SELECT {column} FROM {table}")
        places.append((f"dagster postgres {table}", "\n".join(str(r[0]) for r in rows)))
    places += _texts_in_bucket(production)
    instance = production.graphql("{ instance { info runLauncher { name } } }")
    places.append(("UI instance page", json.dumps(instance)))
    assets = production.graphql(
        """{ assetNodes { assetKey { path } assetMaterializations(limit: 50) {
        metadataEntries { label ... on TextMetadataEntry { text }
        ... on JsonMetadataEntry { jsonString } ... on PathMetadataEntry { path } } } } }"""
    )
    places.append(("UI asset metadata", json.dumps(assets)))
    leaks = [(where, s[:4] + "...") for where, text in places for s in secrets if s in text]
    assert leaks == [], f"credentials found in: {leaks}"
    assert len(places) > 50, "the search found too little to be meaningful"
