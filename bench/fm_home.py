"""A fresh FM_HOME for a benchmark run, landing files into it as one new batch, and where a
timed `run_stage` call spent its time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import NEOX_TOKENIZER
from fm_assets.execution import pipeline  # noqa: F401  (importing it declares the stage tables)
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.landing import land_files
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.tables import declared_tables, table_spec

# Every source decides nothing: the stage benchmarks measure each stage's throughput on the
# whole input, the same work on every commit (`bench.default_policy` measures the default
# web policy's decisions).
NO_CURATION = '[default]\nbase = "none"\n'


def fresh_home(home: Path, cpus: int) -> Settings:
    """Settings over a new FM_HOME with every table made and the NeoX tokenizer as default.

    Only FM_HOME, FM_RAY_NUM_CPUS and a policy file of its own (`NO_CURATION`) are read (not
    the caller's environment): a local Ray with exactly `cpus` CPUs, embedded storage. Table
    creation and tokenizer registration are a home's one-time costs, not a stage's, so they
    happen here, before any clock runs.
    """
    home.mkdir(parents=True, exist_ok=True)
    policy = home / "no-curation-policy.toml"
    policy.write_text(NO_CURATION)
    settings = load_settings(
        {"FM_HOME": str(home), "FM_RAY_NUM_CPUS": str(cpus), "FM_POLICY_FILE": str(policy)}
    )
    # Tables are declared by their owners; with the pipeline imported that is every table.
    # Benchmarks land into the default namespace, `cloud`.
    for table in declared_tables():
        namespace = "cloud" if table_spec(table).per_namespace else None
        catalog.load_table(settings, table, namespace=namespace)
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    return settings


def land(settings: Settings, paths: Sequence[Path], source: str) -> str:
    """Land `paths` as one new batch; its id. Fails if the batch existed already: a benchmark
    needs new work, and the same files always land as the same batch id."""
    manifest, created = land_files(
        open_object_store(settings), list(paths), source=source, license="NOASSERTION"
    )
    if not created:
        raise RuntimeError(f"batch {manifest.batch_id} existed already: nothing would be timed")
    return manifest.batch_id


@dataclass(frozen=True)
class StagePhases:
    """One `run_stage` call split at its progress messages."""

    plan_s: float  # stage build, stage_runs lookups, planning the input's slices
    ray_s: float  # every Ray task up to the last one writing the stage's data files
    commit_s: float  # the Iceberg commits and the stage_runs row, on the driver
    slices: int  # Ray tasks that wrote the stage's data files


def stage_phases(
    stage: str, started: float, ended: float, events: Sequence[tuple[float, str]]
) -> StagePhases:
    """Split a `run_stage` call of `stage` at its (time, message) progress events.

    The runner announces its plan ("... in N slices") and then reports its last Ray tasks, those
    writing the stage's files (and, for the near-dup stage, its index), as "<stage>: k/N done".
    """
    plan = next(((t, m) for t, m in events if m.endswith(" slices")), None)
    plan_at = plan[0] if plan else started
    written = [(t, m) for t, m in events if m.startswith(f"{stage}: ") and " done, " in m]
    ray_end = written[-1][0] if written else plan_at
    if plan:  # "... in N slices" / "..., N slices"
        slices = int(plan[1].rsplit(" ", 2)[1])
    else:
        slices = int(written[-1][1].split("/", 1)[1].split()[0]) if written else 0
    return StagePhases(plan_at - started, ray_end - plan_at, ended - ray_end, slices)
