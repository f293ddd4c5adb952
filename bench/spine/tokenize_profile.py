"""Section 2, where the tokenize stage's time goes: its pieces run again one by one on the last
JSONL batch, its Ray phase replayed on the runner's own slices with each task timed, and the
split of `process` itself (the workers' process CPU seconds).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from bench.harness import MB, median, tree_timed
from bench.spine import ray_tasks
from bench.spine.stages import StageTiming
from bench.spine.tokenize_ab import TOKENIZE, TOKENIZE_INPUT, TokenizePair
from fm_assets.curation.policy import NONE_POLICY
from fm_assets.execution import pipeline
from fm_assets.execution.compute import ray_cpus, split_rows
from fm_assets.execution.runner import run_stage
from fm_assets.execution.slice_tasks import Outputs
from fm_assets.execution.table_ranges import range_slices
from fm_assets.settings import Settings
from fm_assets.stages.tokenize import TokenizeStage
from fm_assets.storage import catalog
from fm_assets.storage.data_files import plan_files, table_handle


def profile_tokenize(settings: Settings, batch_id: str, docs: int) -> dict[str, float]:
    """Where the tokenize stage's time and CPU go, each piece run on its own on one batch.

    The Ray phase is replayed on the whole batch with the runner's own slices, timing each task
    (read, `process`, write), so wall minus busy time is what Ray scheduling costs, and the
    busiest worker minus the average what uneven slices cost. The split of `process` runs on
    the first `docs` rows only: it tokenizes twice, and shares, not totals, are what it is for.
    """
    import ray

    ray_tasks.by_value()
    out: dict[str, float] = {}
    report, out["lookups_s"], out["lookups_cpu"] = tree_timed(
        lambda: run_stage(settings, TOKENIZE, batch_id)  # the up-to-date path: lookups only
    )
    if not report.skipped:
        raise RuntimeError("expected a second tokenize run of the same batch to be up to date")
    inputs, out["read_s"], out["read_cpu"] = tree_timed(
        lambda: catalog.read_batch(settings, TOKENIZE_INPUT, batch_id)
    )
    out["input_mb"] = inputs.nbytes / MB

    stage = pipeline.entry(TOKENIZE).build(settings, NONE_POLICY)
    if not isinstance(stage, TokenizeStage):
        raise TypeError(f"{TOKENIZE} builds {type(stage).__name__}, expected TokenizeStage")
    cpus = ray_cpus()
    out["cpus"] = cpus
    # The runner's own plan of the partition, each slice read, processed and written by a task;
    # the files it writes are never committed (a fresh write id), so the table is unchanged.
    namespace = catalog.batch_namespace(settings, batch_id)
    files = plan_files(
        settings, TOKENIZE_INPUT, catalog.where_equal("batch_id", batch_id), None, namespace
    )
    slices = range_slices(files, cpus, stage.slices_per_cpu)
    outputs = Outputs(
        batch_id=batch_id,
        stage=TOKENIZE,
        code_version=stage.version,
        write_id=uuid.uuid4(),
        output=table_handle(settings, TOKENIZE, namespace),
        quarantine=table_handle(settings, "quarantine", namespace),
    )
    source = table_handle(settings, TOKENIZE_INPUT, namespace)
    replay = ray.remote(num_cpus=1)(ray_tasks.timed_slice)

    def run_replay() -> list[tuple[int, float]]:
        return ray.get([replay.remote(stage, source, s, outputs, i) for i, s in enumerate(slices)])

    # Once untimed: plain tasks start their own worker processes, which import the platform and
    # load the tokenizer; the stage's warm workers did that long before its timed runs.
    run_replay()
    done, out["replay_s"], out["replay_cpu"] = tree_timed(run_replay)
    busy: dict[int, float] = {}
    for pid, seconds in done:
        busy[pid] = busy.get(pid, 0.0) + seconds
    out["replay_chunks"] = len(slices)
    out["replay_busy_mean_s"] = sum(busy.values()) / cpus
    out["replay_busy_max_s"] = max(busy.values())

    chunks = split_rows(inputs.slice(0, docs), cpus)
    remote = ray.remote(num_cpus=1)(ray_tasks.profile_chunk)
    per_chunk = ray.get([remote.remote(stage, chunk) for chunk in chunks])
    out["split_chunks"] = len(chunks)
    out["split_docs"] = min(docs, inputs.num_rows)
    for key in ("encode_s", "ids_s", "process_s"):
        out[f"split_{key}"] = sum(c[key] for c in per_chunk)

    kept = catalog.read_batch(settings, TOKENIZE, batch_id)
    out["output_mb"] = kept.nbytes / MB
    # The same rows over the same partition: a real commit that changes no data.
    _, out["commit_s"], out["commit_cpu"] = tree_timed(
        lambda: catalog.replace_rows(
            settings,
            TOKENIZE,
            kept,
            catalog.where_equal("batch_id", batch_id),
            namespace=catalog.batch_namespace(settings, batch_id),
        )
    )
    return out


def profile_lines(
    prof: dict[str, float],
    timings: Sequence[StageTiming],
    pairs: Sequence[TokenizePair],
    idle_cores: float,
) -> list[str]:
    """Section 2's breakdown of the A runs (`timings`, the tokenize stage of each JSONL batch)."""
    stage_s = median([t.seconds for t in timings])
    stage_cpu = median([p.stage_cpu_s for p in pairs])
    limit_cpu = median([p.library_cpu_s for p in pairs])
    phases = [
        ("lookups + planning (call → “… slices”)", [t.phases.plan_s for t in timings]),
        ("Ray tasks: read, process, write (→ last “done”)", [t.phases.ray_s for t in timings]),
        ("Iceberg commits + `stage_runs` row (→ return)", [t.phases.commit_s for t in timings]),
    ]
    alone = [
        ("up-to-date `run_stage` (manifest, stage_runs ×2, default tokenizer)", "lookups"),
        (f"`catalog.read_batch` of the `{TOKENIZE_INPUT}` partition", "read"),
        (
            f"Ray phase replayed: the runner's {int(prof['replay_chunks'])} slices "
            "(read, `process`, write), `ray.get`",
            "replay",
        ),
        ("`catalog.replace_rows` of the tokenized partition (same rows)", "commit"),
    ]
    pieces_cpu = sum(prof[f"{key}_cpu"] for _, key in alone)
    split = prof["split_process_s"]
    lines = [
        "Where the stage's time goes, in three views of the last JSONL batch. **Phases**: the A "
        "runs' own progress messages (median wall seconds, share of the stage). **Pieces**: "
        "each part of A run again on its own, with wall and process-tree CPU seconds; their CPU "
        "adds up to what A spends, to compare with B's. **Inside `process`**: process CPU "
        "seconds in the workers (the library's threads included) on the first "
        f"{int(prof['split_docs']):,} documents ({int(prof['split_chunks'])} chunks).",
        "",
        "| view | piece | wall s | CPU s | share |",
        "|---|---|--:|--:|--:|",
    ]
    for name, values in phases:
        value = median(values)
        lines.append(f"| phase | {name} | {value:.2f} | | {value / stage_s:.0%} |")
    lines.append(
        f"| phase | **whole stage (A, median)** | {stage_s:.2f} | {stage_cpu:.2f} | 100% |"
    )
    for name, key in alone:
        wall, cpu = prof[f"{key}_s"], prof[f"{key}_cpu"]
        lines.append(
            f"| pieces | {name} | {wall:.2f} | {cpu:.2f} | {cpu / pieces_cpu:.0%} of CPU |"
        )
    wall = prof["replay_s"]
    gaps = [
        (
            "replay wall − busiest worker's busy time: scheduling, shipping",
            wall - prof["replay_busy_max_s"],
        ),
        (
            "busiest worker − average worker: uneven slices",
            prof["replay_busy_max_s"] - prof["replay_busy_mean_s"],
        ),
    ]
    for name, value in gaps:
        lines.append(f"| pieces | {name} | {value:.2f} | | {value / wall:.0%} of replay |")
    lines.append(
        f"| pieces | **sum of the pieces** | | {pieces_cpu:.2f} | B (limit): {limit_cpu:.2f} |"
    )
    inside = [
        ("`encode_batch_fast`", prof["split_encode_s"]),
        ("`Encoding.ids` → Python lists", prof["split_ids_s"]),
        ("the rest: numpy, Arrow lists, `split_kept`", max(0.0, split - prof["split_encode_s"])),
        ("**all of `TokenizeStage.process`**", split),
    ]
    for name, value in inside:
        lines.append(f"| inside `process` | {name} | | {value:.2f} | {value / split:.0%} |")
    lines += [
        "",
        f"Partition sizes in Arrow: input {prof['input_mb']:.1f} MB, output "
        f"{prof['output_mb']:.1f} MB (token ids and provenance; the text stays in the input). "
        f"Idle, this process and Ray's daemons use {idle_cores:.2f} of a core "
        "(measured after Ray started); that is in both A's and B's CPU seconds.",
        "",
    ]
    return lines
