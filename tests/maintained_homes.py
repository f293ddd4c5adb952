"""Small FM_HOMEs with some history, for the catalog-maintenance tests, and what they read.

`build_home` registers two small eval sets, lands a few JSONL batches the test writes, runs
every stage of each on Ray (as a Dagster run of the batch calls them), cuts versions over them
and reruns a stage of the last batch under another tokenizer and back: tables with pinned
snapshots, superseded ones and replaced partitions. `readings` checksums everything a reader
sees: every version's rows of every document table and of the other tables it reads, and every
table as it stands.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fm_assets.commands import operations
from fm_assets.contamination.store import register_benchmark
from fm_assets.execution import pipeline
from fm_assets.execution.runner import run_stage
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.maintenance.tables import existing_tables, load
from fm_assets.versions.dataset_version import create_version
from fm_assets.versions.reader import version_documents, version_rows
from fm_assets.versions.revocation import all_versions
from tests.paths import LLAMA_TOKENIZER, NEOX_TOKENIZER, REPO
from tests.policies import opt_out_policy

WORDS = ("tide", "heron", "glacier", "lichen", "comet", "bridge", "orchard", "river", "canyon")
# Tables a version reads besides its document tables (`versions.reader.version_rows`).
VERSION_SIDE_TABLES = ("quarantine", "document_index", "neardup_index", "pii_redactions")


@dataclass(frozen=True)
class Home:
    settings: Settings
    env: dict[str, str]  # the environment that reaches it (for subprocesses)
    batches: tuple[str, ...]
    versions: tuple[str, ...]


def home_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env |= {"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    env["FM_POLICY_FILE"] = str(opt_out_policy(home.parent / f"{home.name}-policy"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env`'s FM_* settings in os.environ for the block (stages read some themselves)."""
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ.update({k: env[k] for k in saved})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _notes(path: Path, batch: int, documents: int) -> Path:
    rng = random.Random(batch)
    lines = []
    for k in range(documents):
        text = " ".join(rng.choice(WORDS) for _ in range(300))
        lines.append(json.dumps({"id": f"{batch}-{k}", "text": f"Note {batch}.{k}: {text}"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _quiz(path: Path) -> Path:
    items = [{"q": f"What is {a} plus {b}?", "a": str(a + b)} for a, b in ((2, 3), (7, 11))]
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def land_and_run(settings: Settings, directory: Path, batch: int, documents: int = 12) -> str:
    """Land a batch of `documents` notes and run every stage of it; return its id."""
    notes = _notes(directory / f"notes-{batch}.jsonl", batch, documents)
    manifest, _ = operations.land(settings, [notes], source="notes", license="CC0-1.0")
    for stage in pipeline.STAGE_NAMES:
        run_stage(settings, stage, manifest.batch_id)
    return manifest.batch_id


def build_home(home: Path) -> Home:
    """Three batches, `web@v1` over the first, `web@v2` over the first two, and the last
    stage of the third run twice more (another default tokenizer, then the first again)."""
    env = home_env(home)
    with environment(env):
        settings = load_settings(env)
        register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
        for name in ("quiz-a", "quiz-b"):  # the decontamination stage matches against them
            register_benchmark(settings, name, _quiz(home.parent / f"{name}.jsonl"), ["q", "a"])
        batches = [land_and_run(settings, home.parent, i) for i in range(2)]
        create_version(settings, "web@v1", batches[:1], run_id=None)
        create_version(settings, "web@v2", batches, run_id=None)
        batches.append(land_and_run(settings, home.parent, 2))
        for tokenizer in (LLAMA_TOKENIZER, NEOX_TOKENIZER):
            register_tokenizer(settings, tokenizer, make_default=True)
            run_stage(settings, pipeline.STAGE_NAMES[-1], batches[-1])
    return Home(settings, env, tuple(batches), ("web@v1", "web@v2"))


def _digest(rows: list[dict[str, object]]) -> str:
    lines = sorted(json.dumps(r, sort_keys=True, default=repr) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def readings(settings: Settings) -> dict[str, str]:
    """A checksum of everything a reader sees: each version's rows of each document table and
    of the other tables it reads, and each table's rows as it stands."""
    seen = {}
    for version in all_versions(settings):
        for table in version.pipeline.names:
            rows = version_documents(settings, version, table).to_pylist()
            seen[f"{version.version_key} {table}"] = _digest(rows)
        for table in VERSION_SIDE_TABLES:
            rows = version_rows(settings, version, table).to_pylist()
            seen[f"{version.version_key} {table}"] = _digest(rows)
    for ref in existing_tables(settings):
        table = load(settings, ref)
        if table.current_snapshot() is not None:
            seen[f"current {ref.identifier}"] = _digest(table.scan().to_arrow().to_pylist())
    return seen


def table_paths(settings: Settings) -> dict[str, set[str]]:
    """Every file under each table's location, by table identifier."""
    found = {}
    for ref in existing_tables(settings):
        location = load(settings, ref).location().removeprefix("file://")
        found[ref.identifier] = {str(p) for p in Path(location).rglob("*") if p.is_file()}
    return found


def current_data_files(settings: Settings, name: str, namespace: str) -> set[str]:
    table = catalog.load_table(settings, name, namespace=namespace)
    return {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}
