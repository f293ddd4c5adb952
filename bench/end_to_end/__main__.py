"""End to end against DataTrove, the field's reference for this job.

The same unique WARC replicas (`corpus.py`) go through DataTrove's FineWeb-style pipeline
(trafilatura -> LID -> Gopher/C4/FineWeb filters -> MinHash -> tokenize), installed from PyPI
into a side venv by this benchmark, and through the platform as a user drives it (`fm
tokenizer register`, `fm land`, `fm run` on a fresh FM_HOME, then `fm version create` and `fm
shards build`), interleaved, with the same thresholds and the same CPU count.

    python -m bench.end_to_end              # 10 replicas (2,350 documents), 3 rounds
    python -m bench.end_to_end --quick      # 2 replicas, 1 round
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bench.end_to_end import corpus as corpus_module
from bench.end_to_end.datatrove_side import DatatroveRun, run_datatrove
from bench.end_to_end.fm_side import FmRun, run_fm
from bench.end_to_end.report import render
from bench.end_to_end.side_venv import ensure_datatrove, versions
from bench.harness import RESULTS, RunStart, interleave, log, parser, rerun_command, write_report
from fm_assets.curation.langid import model_path

# The thresholds both pipelines are given (DataTrove's FineWeb recipe where the two agree).
LIMITS: dict[str, float] = {
    "min_language_score": 0.65,
    "gopher_min_words": 50,
    "c4_min_kept_sentences": 3,
    "fineweb_max_char_dup_ratio": 0.1,
    "shingle_words": 5,
    "bands": 14,
    "rows_per_band": 8,
    "extract_timeout_s": 10,
}
LIBRARIES = ("ray", "pyarrow", "pyiceberg", "trafilatura", "tokenizers", "dagster")


def main() -> None:
    cli = parser(
        "bench.end_to_end",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "end_to_end.md",
        "2 replicas, 1 round",
    )
    cli.add_argument("--replicas", type=int, default=None, help="unique replicas (default 10)")
    cli.add_argument("--repeats", type=int, default=None, help="interleaved rounds (default 3)")
    cli.add_argument("--cpus", type=int, default=2, help="CPUs each pipeline is given")
    args = cli.parse_args()
    replicas = args.replicas or (2 if args.quick else 10)
    repeats = args.repeats or (1 if args.quick else 3)
    start = RunStart.now(rerun_command(cli))
    ensure_datatrove()
    work = Path(tempfile.mkdtemp(prefix="fm-bench-e2e-"))
    try:
        log(f"writing {replicas} unique replicas of the shared pages")
        corpus = corpus_module.build(work / "corpus", replicas)
        log(f"{len(corpus.files)} WARCs, {corpus.documents} documents, {corpus.bytes_gz:,} bytes")
        rounds = {"n": 0}

        def ours() -> FmRun:
            rounds["n"] += 1
            log(f"fm: round {rounds['n']}")
            run = run_fm(corpus.files, work / f"fm-{rounds['n']}" / "home", args.cpus, LIMITS)
            log(f"fm: {run.headline_s:.1f} s to tokenized documents")
            shutil.rmtree(work / f"fm-{rounds['n']}", ignore_errors=True)
            return run

        def theirs() -> DatatroveRun:
            rounds["n"] += 1
            log(f"datatrove: round {rounds['n']}")
            out = work / f"datatrove-{rounds['n']}"
            run = run_datatrove(work / "corpus", out, args.cpus, model_path(), LIMITS)
            log(f"datatrove: {run.seconds:.1f} s")
            shutil.rmtree(out, ignore_errors=True)
            return run

        results = interleave({"fm": ours, "datatrove": theirs}, repeats)
        stamp = start.finish(LIBRARIES)
        text = render(
            corpus,
            results["fm"],  # type: ignore[arg-type]
            results["datatrove"],  # type: ignore[arg-type]
            stamp,
            LIMITS,
            args.cpus,
            versions(),
            os.cpu_count() or 1,
        )
        write_report(args.output, text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
