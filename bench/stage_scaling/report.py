"""The stage-scaling report: every figure of one run and how it is written down."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness import MB, Stamp, median, median_and_range, met
from bench.stage_scaling.ceiling import Ceiling
from bench.stage_scaling.machine import QUIET_CORES

CPU_COUNTS = (1, 2)
HEAVY_S = 0.3  # `process()` alone at least this long: the stage has real work on this batch


def _load(values: Sequence[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


@dataclass(frozen=True)
class Report:
    """Every figure of one run, and how it is written down."""

    stamp: Stamp
    max_wait_s: float
    sizes: dict[str, float]
    runs: list[dict[str, Any]]
    ceilings: list[dict[str, Any]]  # `ceiling.Ceiling.as_json()` of each measurement

    def values(self, cpus: int, stage: str, key: str) -> list[float]:
        """`key` of `stage` in every run with `cpus` CPUs, in run order."""
        return [
            float(s[key])
            for run in self.runs
            if run["cpus"] == cpus
            for s in run["stages"]
            if s["stage"] == stage
        ]

    def med(self, cpus: int, stage: str, key: str) -> float:
        return median(self.values(cpus, stage, key))

    def alone(self, stage: str, key: str) -> float:
        return median([s[key] for run in self.runs for s in run["alone"] if s["stage"] == stage])

    def totals(self, cpus: int) -> list[float]:
        return [sum(s["seconds"] for s in r["stages"]) for r in self.runs if r["cpus"] == cpus]

    def pair(self, stage: str, key: str, digits: int = 2) -> str:
        """Median `key` of `stage` at 1 CPU / at 2 CPUs."""
        return " / ".join(f"{self.med(c, stage, key):.{digits}f}" for c in CPU_COUNTS)

    def speedup(self, stage: str, key: str) -> float:
        return self.med(1, stage, key) / self.med(2, stage, key)

    def best_speedup(self, stage: str) -> float:
        """Fastest run at 1 CPU ÷ fastest at 2 CPUs: other tenants only ever add time."""
        return min(self.values(1, stage, "seconds")) / min(self.values(2, stage, "seconds"))

    def cores(self, cpus: int, stage: str, key: str) -> float:
        """Median over runs of CPU seconds `key` per wall second of the stage."""
        cpu, wall = self.values(cpus, stage, key), self.values(cpus, stage, "seconds")
        return median([c / w for c, w in zip(cpu, wall, strict=True)])

    def fixed_s(self, cpus: int, stage: str) -> float:
        """Plan and commit phases: the parts of a stage run that Ray does not parallelise."""
        return self.med(cpus, stage, "plan_s") + self.med(cpus, stage, "commit_s")

    def render(self) -> str:
        from fm_assets.execution import pipeline

        names = pipeline.STAGE_NAMES
        first = {s["stage"]: s for s in self.runs[0]["stages"]}
        raw = first[names[0]]
        repeats = len(self.runs) // len(CPU_COUNTS)
        sizes = self.sizes
        lines = [
            "# Curation stages: scaling from 1 to 2 Ray CPUs",
            "",
            f"{self.stamp.header()} Rerun it with that command from the repository root.",
            "",
            "## Machine, data, method",
            "",
            f"{self.stamp.machine_line()} Over 1/5/15 min: {_load(self.stamp.load_start)} at "
            f"the start, {_load(self.stamp.load_end)} at the end. Other tenants held part of the "
            "two cores throughout, so even a perfectly parallel stage could not reach the ideal "
            "2.0×.",
            "",
            f"Data: one landing batch of {sizes['replicas']:.0f} unique replicas "
            "(`bench.end_to_end.corpus`) of every HTML page of the shared `warc/*.warc.gz` "
            "files and the `extraction/article-extraction-benchmark` pages: "
            f"{sizes['files']:.0f} WARCs, {sizes['compressed_bytes'] / MB:.2f} MB landed (gzip), "
            f"{sizes['html_bytes'] / MB:.2f} MB of HTML, {raw['docs_in']} records, "
            f"{raw['docs_kept']} kept by the raw stage (exact duplicates quarantined; the "
            "near-dup stage removes the replicas' copies). "
            "Tokenizer GPT-NeoX-20B, default policy, no classifier, empty contamination "
            "registry.",
            "",
            f"Method: {repeats} repeat(s) of each configuration, alternating 1, 2, 1, 2, …; "
            "each in its own subprocess (Ray starts once per process) running a local Ray with "
            "`FM_RAY_NUM_CPUS` = 1 or 2 over a fresh FM_HOME under `/tmp/fm_bench_scaling_*`, "
            "so every `run_stage` did real work. Ray start-up and a warm-up pass of the whole "
            "pipeline over the 4 WARCs in another FM_HOME (Ray's worker processes start, import "
            "trafilatura, load lid.176 and the tokenizer) come before the clock; both are "
            "listed per run at the end. Each figure is the median of the repeats (min–max in "
            "brackets). **`process()` alone**: in each 1-CPU subprocess, after Ray shut down, "
            "every stage's `process` called once on its whole input table read back from "
            "Iceberg, in that process pinned to one core (after a warm call on 4 rows); median "
            "over the repeats.",
            "",
            "## Per stage",
            "",
            "Speed-up = median seconds at 1 CPU ÷ median seconds at 2 CPUs (ideal 2.0); "
            "best-run speed-up = fastest 1-CPU run ÷ fastest 2-CPU run (other tenants only ever "
            "add time, so the fastest runs are the least disturbed). docs/s = docs in ÷ "
            "median seconds. Overhead = `run_stage` at 1 CPU − `process()` "
            "alone: what a stage run costs beyond the stage's own work (lookups, planning, Ray "
            "scheduling, the workers' Iceberg reads and data-file writes, the duplicate "
            "decisions across slices and batches, the Iceberg commits).",
            "",
            "| stage | docs in | docs kept | 1 CPU s | 2 CPUs s | speed-up | best-run speed-up "
            "| docs/s 1 CPU | docs/s 2 CPUs | `process()` alone, 1 core s | overhead s |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for name in names:
            one, two = self.values(1, name, "seconds"), self.values(2, name, "seconds")
            docs, alone = first[name]["docs_in"], self.alone(name, "process_s")
            lines.append(
                f"| {name} | {docs:,} | {first[name]['docs_kept']:,} | {median_and_range(one)} "
                f"| {median_and_range(two)} | {median(one) / median(two):.2f}× "
                f"| {self.best_speedup(name):.2f}× | {docs / median(one):,.0f} "
                f"| {docs / median(two):,.0f} | {alone:.2f} | {median(one) - alone:.2f} |"
            )
        one, two = self.totals(1), self.totals(2)
        alone = sum(self.alone(name, "process_s") for name in names)
        docs = raw["docs_in"]
        lines += [
            f"| **all {len(names)} stages** | {docs:,} | {first[names[-1]]['docs_kept']:,} "
            f"| {median_and_range(one)} | {median_and_range(two)} "
            f"| {median(one) / median(two):.2f}× "
            f"| {min(one) / min(two):.2f}× | {docs / median(one):,.1f} "
            f"| {docs / median(two):,.1f} | {alone:.2f} "
            f"| {median(one) - alone:.2f} |",
            "",
            f"Goal: the whole pipeline ≥ 1.7× from 1 to 2 Ray CPUs on ≥ 2,000 documents: "
            f"{met(median(one) / median(two) >= 1.7 and docs >= 2000)} "
            f"({median(one) / median(two):.2f}× on {docs:,} documents).",
            "",
            *self._ceiling_lines(median(one) / median(two)),
            *self._phase_section(),
            *self._reading_section(),
            *self._runs_section(),
        ]
        return "\n".join(lines) + "\n"

    def _phase_section(self) -> list[str]:
        from fm_assets.execution import pipeline

        lines = [
            "## Where each stage's time goes",
            "",
            "Pairs are medians at 1 CPU / 2 CPUs. Each `run_stage` call is split at its own "
            "progress messages: **plan** = stage build, `stage_runs` lookups, planning the "
            "input's slices; **Ray** = every Ray task up to the last that writes the stage's data "
            "files (and the near-dup stage's index) "
            "(workers read their own input and, for the raw and near-dup stages, decide "
            "duplicates across slices and batches); **commit** = the Iceberg commits "
            "(quarantine, side tables, output partition) and the `stage_runs` row, on the "
            "driver. **Bound** = the speed-up if only the Ray phase halved (1-CPU seconds ÷ "
            "(plan + commit + Ray ÷ 2)): Amdahl's limit given the serial plan and commit.",
            "",
            "| stage | slices | plan s | Ray s | commit s | Ray speed-up | bound | speed-up |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for name in pipeline.STAGE_NAMES:
            one = self.med(1, name, "seconds")
            bound = one / (self.fixed_s(1, name) + self.med(1, name, "ray_s") / 2)
            lines.append(
                f"| {name} | {self.pair(name, 'slices', 0)} | {self.pair(name, 'plan_s')} "
                f"| {self.pair(name, 'ray_s')} | {self.pair(name, 'commit_s')} "
                f"| {self.speedup(name, 'ray_s'):.2f}× | {bound:.2f}× "
                f"| {self.speedup(name, 'seconds'):.2f}× |"
            )
        lines += [
            "",
            "## CPU: what the stages used and what the machine's other tenants took",
            "",
            "**CPU s** = CPU seconds of the configuration's process tree (driver, Ray daemons, "
            "Ray workers) during the stage, next to `process()` alone's thread CPU seconds. "
            "**Cores busy** = CPU s ÷ wall s: at most 1.0 with 1 CPU (plus a little for Ray's "
            "daemons), up to 2.0 with 2 CPUs. **Others' cores** = CPU the rest of the machine "
            "used meanwhile (all cores busy + steal, from `/proc/stat`, minus this tree), ÷ wall "
            "s: at 1.0 the 2-CPU configuration had about one core left to run on.",
            "",
            "| stage | CPU s | `process()` alone CPU s | cores busy | others' cores |",
            "|---|--:|--:|--:|--:|",
        ]
        for name in pipeline.STAGE_NAMES:
            busy = " / ".join(f"{self.cores(c, name, 'cpu_s'):.2f}" for c in CPU_COUNTS)
            others = " / ".join(f"{self.cores(c, name, 'others_cpu_s'):.2f}" for c in CPU_COUNTS)
            lines.append(
                f"| {name} | {self.pair(name, 'cpu_s')} "
                f"| {self.alone(name, 'process_cpu_s'):.2f} | {busy} | {others} |"
            )
        return [*lines, ""]

    def _ceiling_lines(self, pipeline_speedup: float) -> list[str]:
        """The machine's own two-process ceiling next to the pipeline's speed-up."""
        if not self.ceilings:
            return []
        found = [Ceiling(**c).speedup for c in self.ceilings]
        first = self.ceilings[0]
        return [
            "The machine's own ceiling, measured after each pair of runs "
            "(`bench/stage_scaling/ceiling.py`): the extract stage's extractor "
            f"(`trafilatura_text`) over the {first['pages']} article-benchmark pages, no Ray "
            f"and no Iceberg, took {median([c['alone_s'] for c in self.ceilings]):.2f} s in "
            f"one process and {median([c['together_s'] for c in self.ceilings]):.2f} s in two "
            f"processes at once: two processes did **{median(found):.2f}×** the work per "
            "second of one (ideal 2.0; "
            f"{', '.join(f'{v:.2f}×' for v in found)} in run order). Against it the whole "
            f"pipeline's speed-up is **{pipeline_speedup / median(found):.2f}** of what this "
            "machine gives two processes of its heaviest work.",
            "",
        ]

    def _reading_section(self) -> list[str]:
        from fm_assets.execution import pipeline

        names = pipeline.STAGE_NAMES
        raw = names[0]
        slices = self.med(1, raw, "slices")
        fixed = [self.fixed_s(2, name) for name in names]
        heavy = [n for n in names if self.alone(n, "process_s") >= HEAVY_S]
        light = [n for n in names if n not in heavy]
        others = {
            cpus: median(
                [
                    sum(s["others_cpu_s"] for s in r["stages"])
                    / sum(s["seconds"] for s in r["stages"])
                    for r in self.runs
                    if r["cpus"] == cpus
                ]
            )
            for cpus in CPU_COUNTS
        }

        def speedups(stages: Sequence[str], key: str) -> str:
            return ", ".join(
                f"`{n}` {self.med(1, n, key) / self.med(2, n, key):.2f}×" for n in stages
            )

        return [
            "## Reading the figures",
            "",
            f"- **Fixed cost per stage run.** Plan + commit take {median(fixed):.2f} s per stage "
            f"(median over the {len(names)} stages at 2 CPUs; {sum(fixed):.1f} s for the whole "
            f"pipeline, {sum(fixed) / median(self.totals(2)):.0%} of its 2-CPU time) whatever "
            "the CPU count: lookups, planning and three or four Iceberg commits on the driver. "
            "A stage whose own work is smaller than that cannot speed up much.",
            f"- **Stages with real work** (`process()` alone ≥ {HEAVY_S:.1f} s): whole-stage "
            f"speed-up {speedups(heavy, 'seconds')}; their Ray phase alone "
            f"{speedups(heavy, 'ray_s')}.",
            f"- **Light stages** (`process()` alone < {HEAVY_S:.1f} s on this batch): "
            f"{speedups(light, 'seconds')}. Their time is the fixed cost above plus Ray task "
            "overhead; this batch is too small to show how their own work scales.",
            f"- **`{raw}`** reads the landed files in {slices:.0f} slices at 1 CPU, cut by "
            "bytes, and decides exact duplicates in hash buckets on Ray: its Ray phase "
            f"({self.med(1, raw, 'ray_s'):.2f} s at 1 CPU against "
            f"{self.alone(raw, 'process_s'):.2f} s of parsing in `process()` alone) holds "
            "scanning, deciding and reading again; it gains "
            f"{self.speedup(raw, 'ray_s'):.2f}× at 2 CPUs.",
            f"- **Contention.** Other tenants used a median {others[1]:.2f} cores during the "
            f"1-CPU runs' stages and {others[2]:.2f} during the 2-CPU runs' (2 cores in all). "
            "Where that is well above 0, the 2-CPU figures measure the machine's load as much "
            "as the stages: trust the best-run speed-up, the Ray-phase speed-up of the heavy "
            "stages and the bound more than the median wall-clock ratio.",
            "",
        ]

    def _runs_section(self) -> list[str]:
        lines = [
            "## Runs, in order",
            "",
            f"Before each run the driver waited (at most {self.max_wait_s:.0f} s) for the rest "
            f"of the machine to use under {QUIET_CORES} cores over 3 s. Others' cores: the "
            "rest of the machine's CPU seconds ÷ wall seconds, in the last window before the "
            "run and during its timed stages. Ray start-up and the warm-up pipeline are not in "
            "any figure above.",
            "",
            "| # | Ray CPUs | all stages s | waited s | others' cores at start / during "
            "| load (1 min) before / after | Ray start-up s | warm-up pipeline s |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for n, run in enumerate(self.runs, 1):
            total = sum(s["seconds"] for s in run["stages"])
            others = sum(s["others_cpu_s"] for s in run["stages"]) / total
            lines.append(
                f"| {n} | {run['cpus']} | {total:.2f} | {run['waited_s']:.0f} "
                f"| {run['others_at_start']:.2f} / {others:.2f} "
                f"| {run['load_start'][0]:.2f} / {run['load_end'][0]:.2f} "
                f"| {run['ray_start_s']:.1f} | {run['warm_up_s']:.1f} |"
            )
        return [*lines, ""]
