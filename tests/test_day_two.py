"""Day two on the production profile: a real Postgres (the Iceberg catalog and Dagster's storage,
each its own database), SeaweedFS S3 and the session's Ray, driven with `fm` commands.

`fm metrics serve` runs on loopback from the start and is scraped before and after a batch runs
through every stage: the records, stage runs, step durations and check evaluations appear, and
a queued run shows in the queue's depth. Then the rehearsal of docs/deploy.md's restore: both
databases are dumped (`fm backup create`), dropped, recreated empty and restored (`fm backup
restore`); `fm verify` passes and a loader reads the version sample for sample as before, while
the exporter reports the outage and recovers by itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.paths import NEOX_TOKENIZER, REPO
from tests.policies import opt_out_policy
from tests.services.fixtures import create_database, s3_credentials
from tests.services.postgres import PostgresServer
from tests.services.s3 import S3Server

pytestmark = pytest.mark.slow

DATABASES = {"catalog": "day2_catalog", "dagster": "day2_dagster"}
SEQ_LEN = 128


@dataclass
class Profile:
    env: dict[str, str] = field(repr=False)
    home: Path
    postgres: PostgresServer = field(repr=False)
    log: Path

    def fm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        fm = Path(sys.executable).with_name("fm")
        result = subprocess.run(
            [str(fm), *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=900
        )
        with self.log.open("a") as log:
            log.write(f"$ fm {' '.join(args)} -> {result.returncode}\n{result.stderr}\n")
        if check and result.returncode != 0:
            raise AssertionError(f"fm {' '.join(args)} failed:\n{result.stderr[-3000:]}")
        return result

    def python(self, script: str, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", script, *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    def admin(self, statement: str) -> None:
        """Run a statement in the maintenance database (not one of ours, which it may drop)."""
        import psycopg2

        pg = self.postgres
        connection = psycopg2.connect(
            host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname="fm"
        )
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()


@pytest.fixture(scope="module")
def profile(
    postgres: PostgresServer,
    s3_session: S3Server,
    ray_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Profile:
    root = tmp_path_factory.mktemp("day-two")
    for database in DATABASES.values():
        create_database(postgres, database)
    env = {
        **os.environ,
        **s3_credentials(),
        "FM_HOME": str(root / "fm"),
        "FM_OBJECT_STORE": f"s3://{s3_session.bucket}/day-two/platform",
        "FM_WAREHOUSE": f"s3://{s3_session.bucket}/day-two/warehouse",
        "FM_S3_ENDPOINT": s3_session.endpoint,
        "FM_CATALOG_URI": postgres.url(DATABASES["catalog"], driver="postgresql+psycopg2"),
        "FM_DAGSTER_PG_URL": postgres.url(DATABASES["dagster"]),
        "RAY_ADDRESS": ray_address,
        "FM_POLICY_FILE": str(opt_out_policy(root)),  # the subject is operations, not curation
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("DAGSTER_HOME", None)
    return Profile(env, root / "fm", postgres, root / "fm-commands.log")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


@pytest.fixture(scope="module")
def exporter(profile: Profile) -> Iterator[int]:
    """`fm metrics serve` on a free loopback port; stopped by its pid."""
    port = _free_port()
    fm = Path(sys.executable).with_name("fm")
    with (profile.home.parent / "fm-metrics.log").open("ab") as log:
        process = subprocess.Popen(
            [str(fm), "metrics", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=profile.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _scrape(port)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("fm metrics serve did not answer") from None
                time.sleep(1)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class Ran:
    batch_id: str
    version_key: str
    shard_set_key: str
    before: dict[str, float]
    after: dict[str, float]


def _notes(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "notes.jsonl"
    lines = [
        json.dumps({"id": f"n{i}", "text": f"Day {i}: the tide was high and {i} herons fed. " * 25})
        for i in range(12)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def ran(profile: Profile, exporter: int) -> Ran:
    before = _scrape(exporter)
    profile.fm("tokenizer", "register", str(NEOX_TOKENIZER), "--default")
    land = profile.fm(
        "land", str(_notes(profile.home.parent)), "--source", "notes", "--license", "CC0-1.0"
    )
    batch_id = land.stdout.strip().splitlines()[-1]
    profile.fm("run", "--batch", batch_id)
    version_key = profile.fm("version", "create", "notes").stdout.strip().splitlines()[-1]
    shards = profile.fm(
        "shards",
        "build",
        version_key,
        "--tokenizer",
        str(NEOX_TOKENIZER),
        "--seq-len",
        str(SEQ_LEN),
    )
    shard_set_key = shards.stdout.strip().splitlines()[-1]
    return Ran(batch_id, version_key, shard_set_key, before, _scrape(exporter))


def _stage(metric: str, stage: str, **labels: str) -> str:
    every = ",".join(f'{k}="{v}"' for k, v in sorted({"stage": stage, **labels}.items()))
    return f"{metric}{{{every}}}"


def test_a_stage_run_shows_in_the_metrics(ran: Ran) -> None:
    from fm_assets.execution import pipeline

    before, after = ran.before, ran.after
    assert before['fm_metrics_source_up{source="catalog"}'] == 1
    assert before['fm_metrics_source_up{source="dagster"}'] == 1
    for stage in pipeline.STAGE_NAMES:
        records_in = after[_stage("fm_stage_records_total", stage, outcome="in")]
        kept = after[_stage("fm_stage_records_total", stage, outcome="kept")]
        quarantined = after[_stage("fm_stage_records_total", stage, outcome="quarantined")]
        assert records_in == kept + quarantined > 0, stage
        assert before.get(_stage("fm_stage_records_total", stage, outcome="in"), 0) == 0
        assert after[_stage("fm_stage_runs_total", stage)] == 1
        # The run's Dagster step for the stage, timed.
        assert after[_stage("fm_stage_duration_seconds_count", stage)] == 1, stage
        assert after[_stage("fm_stage_duration_seconds_sum", stage)] > 0
    assert after[_stage("fm_stage_records_total", "raw_documents", outcome="in")] == 12
    passed = {k: v for k, v in after.items() if k.startswith("fm_check_evaluations_total")}
    assert any(v > 0 for k, v in passed.items() if 'result="passed"' in k)
    failing = [k for k, v in after.items() if k.startswith("fm_check_failing") and v]
    assert failing == []
    assert after['fm_dagster_runs{status="QUEUED"}'] == 0


# A run waiting in the queue, as the sensor leaves one while the coordinator's limits are taken
# (no daemon runs here to dequeue it).
QUEUE_SCRIPT = """
import sys
from dagster import DagsterRunStatus
from dagster._core.remote_origin import (
    InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin)
from dagster._core.test_utils import create_run_for_test
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from fm_assets.defs.materialize import dagster_instance
from fm_assets.settings import load_settings

instance = dagster_instance(load_settings())
if sys.argv[1] == "add":
    target = LoadableTargetOrigin(module_name="fm_assets.definitions")
    repository = RemoteRepositoryOrigin(InProcessCodeLocationOrigin(target), "__repository__")
    origin = RemoteJobOrigin(repository, "landing_batch_job")
    run = create_run_for_test(instance, job_name="landing_batch_job",
                              status=DagsterRunStatus.QUEUED, remote_job_origin=origin)
    print(run.run_id)
else:
    instance.delete_run(sys.argv[2])
"""


def test_a_queued_run_shows_in_the_queues_depth(profile: Profile, exporter: int, ran: Ran) -> None:
    run_id = profile.python(QUEUE_SCRIPT, "add").strip()
    try:
        queued = _scrape(exporter)
        assert queued['fm_dagster_runs{status="QUEUED"}'] == 1
        assert queued["fm_dagster_oldest_queued_run_age_seconds{}"] >= 0
    finally:
        profile.python(QUEUE_SCRIPT, "delete", run_id)
    assert _scrape(exporter)['fm_dagster_runs{status="QUEUED"}'] == 0


def test_every_metric_the_alert_rules_name_is_served(ran: Ran) -> None:
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] if g["name"] == "fm-platform" for r in g["rules"]]
    named = {m for e in exprs for m in re.findall(r"\bfm_[a-z_]+", e)}
    served = {key.split("{")[0] for key in ran.after}
    assert named and named <= served, named - served


LOADER_SCRIPT = """
import sys
import fm_loader
from fm_assets.settings import load_settings

dataset = fm_loader.make_dataset(sys.argv[1], settings=load_settings(), cache_dir=sys.argv[2],
                                 seq_len=int(sys.argv[3]))
samples = list(dataset)
print(dataset.manifest.num_samples, sum(int(s["input_ids"].sum()) for s in samples))
"""


def test_both_databases_restore_from_a_backup_and_the_version_verifies(
    profile: Profile, exporter: int, ran: Ran
) -> None:
    read = [ran.version_key, str(profile.home / "cache" / "loader-a"), str(SEQ_LEN)]
    read_before = profile.python(LOADER_SCRIPT, *read)
    runs_before = profile.postgres.query(DATABASES["dagster"], "SELECT count(*) FROM runs")
    backup = profile.home.parent / "backup"
    profile.fm("backup", "create", str(backup))
    manifest = json.loads((backup / "manifest.json").read_text())
    assert set(manifest["databases"]) == set(DATABASES)
    assert profile.postgres.password not in (backup / "manifest.json").read_text()

    # The disaster: both databases gone (connections of the exporter and all).
    for database in DATABASES.values():
        profile.admin(f"DROP DATABASE {database} WITH (FORCE)")
    assert profile.fm("verify", ran.version_key, check=False).returncode != 0
    down = _scrape(exporter)
    assert down['fm_metrics_source_up{source="catalog"}'] == 0

    for database in DATABASES.values():
        profile.admin(f"CREATE DATABASE {database} OWNER {profile.postgres.user}")
    restored = profile.fm("backup", "restore", str(backup))
    assert "every table's metadata file is in the object store" in restored.stderr
    profile.fm("verify", ran.version_key)
    read = [ran.version_key, str(profile.home / "cache" / "loader-b"), str(SEQ_LEN)]
    assert profile.python(LOADER_SCRIPT, *read) == read_before
    runs_after = profile.postgres.query(DATABASES["dagster"], "SELECT count(*) FROM runs")
    assert runs_after == runs_before
    # A second restore would overwrite what is there: refused unless asked for.
    again = profile.fm("backup", "restore", str(backup), check=False)
    assert again.returncode == 1 and "is not empty" in again.stderr
    # The exporter recovers by itself.
    up = _scrape(exporter)
    assert up['fm_metrics_source_up{source="catalog"}'] == 1
    key = _stage("fm_stage_records_total", "raw_documents", outcome="in")
    assert up[key] == ran.after[key]
