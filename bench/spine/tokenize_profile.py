"""Section 2, where the tokenize stage's time goes: its pieces run again one by one on the last
JSONL batch, its Ray phase replayed with `process` timed inside each task, and the split of
`process` itself (thread CPU seconds in the workers).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.harness import MB, median, tree_timed
from bench.spine import ray_tasks
from bench.spine.stages import StageTiming
from bench.spine.tokenize_ab import TOKENIZE, TOKENIZE_INPUT, TokenizePair
from fm_assets.curation.policy import NONE_POLICY
from fm_assets.execution import pipeline
from fm_assets.execution.compute import ray_cpus, split_rows
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings
from fm_assets.stages.tokenize import TokenizeStage
from fm_assets.storage import catalog


def profile_tokenize(settings: Settings, batch_id: str, docs: int) -> dict[str, float]:
    """Where the tokenize stage's time and CPU go, each piece run on its own on one batch.

    The Ray phase is replayed on the whole batch with the runner's chunking, timing `process`
    inside each task, so wall minus busy time is what Ray scheduling, shipping chunks and
    results, and uneven chunks cost. The split of `process` runs on the first `docs` rows only:
    it tokenizes twice, and shares, not totals, are what it is for.
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
    chunks = split_rows(inputs, cpus)
    replay = ray.remote(num_cpus=1)(ray_tasks.timed_process)
    done, out["replay_s"], out["replay_cpu"] = tree_timed(
        lambda: ray.get([replay.remote(stage, chunk) for chunk in chunks])
    )
    busy: dict[int, float] = {}
    for _, pid, seconds in done:
        busy[pid] = busy.get(pid, 0.0) + seconds
    out["replay_chunks"] = len(chunks)
    out["replay_busy_mean_s"] = sum(busy.values()) / cpus
    out["replay_busy_max_s"] = max(busy.values())
    out["output_mb"] = sum(result.kept.nbytes for result, _, _ in done) / MB
    del done

    chunks = split_rows(inputs.slice(0, docs), cpus)
    remote = ray.remote(num_cpus=1)(ray_tasks.profile_chunk)
    per_chunk = ray.get([remote.remote(stage, chunk) for chunk in chunks])
    out["split_chunks"] = len(chunks)
    out["split_docs"] = min(docs, inputs.num_rows)
    for key in ("encode_s", "ids_s", "process_s"):
        out[f"split_{key}"] = sum(c[key] for c in per_chunk)

    kept = catalog.read_batch(settings, TOKENIZE, batch_id)
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
    raw_cpu = median([p.raw_cpu_s for p in pairs])
    phases = [
        ("lookups + planning (call → “… slices”)", [t.phases.plan_s for t in timings]),
        ("Ray tasks: read, process, write (→ last “done”)", [t.phases.ray_s for t in timings]),
        ("Iceberg commits + `stage_runs` row (→ return)", [t.phases.commit_s for t in timings]),
    ]
    alone = [
        ("up-to-date `run_stage` (manifest, stage_runs ×2, default tokenizer)", "lookups"),
        (f"`catalog.read_batch` of the `{TOKENIZE_INPUT}` partition", "read"),
        (f"Ray phase replayed: {int(prof['replay_chunks'])} `process` tasks, `ray.get`", "replay"),
        ("`catalog.replace_rows` of the tokenized partition (same rows)", "commit"),
    ]
    pieces_cpu = sum(prof[f"{key}_cpu"] for _, key in alone)
    split = prof["split_process_s"]
    lines = [
        "Where the stage's time goes, in three views of the last JSONL batch. **Phases**: the A "
        "runs' own progress messages (median wall seconds, share of the stage). **Pieces**: "
        "each part of A run again on its own, with wall and process-tree CPU seconds; their CPU "
        "adds up to what A spends, to compare with B's. **Inside `process`**: thread CPU "
        "seconds in the workers on the first "
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
            "replay wall − busiest worker's `process` time: scheduling, shipping",
            wall - prof["replay_busy_max_s"],
        ),
        (
            "busiest worker − average worker: uneven chunks",
            prof["replay_busy_max_s"] - prof["replay_busy_mean_s"],
        ),
    ]
    for name, value in gaps:
        lines.append(f"| pieces | {name} | {value:.2f} | | {value / wall:.0%} of replay |")
    lines.append(f"| pieces | **sum of the pieces** | | {pieces_cpu:.2f} | B: {raw_cpu:.2f} |")
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
        f"{prof['output_mb']:.1f} MB (the text column is carried into `tokenized_documents`). "
        f"Idle, this process and Ray's daemons use {idle_cores:.2f} of a core "
        "(measured after Ray started); that is in both A's and B's CPU seconds.",
        "",
    ]
    return lines
