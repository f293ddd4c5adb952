"""DataTrove's FineWeb-style pipeline over a folder of WARCs, run by the side venv's python
(`bench/end_to_end/side_venv.py`), never imported by the platform's environment.

    python datatrove_pipeline.py --input DIR --work DIR --workers N --tokenizer FILE --lid FILE

Steps, each a `LocalPipelineExecutor` waiting on the one before, as DataTrove's own FineWeb
example lays them out: (1) WarcReader -> Trafilatura -> LanguageFilter -> Gopher repetition ->
Gopher quality -> C4 quality -> FineWeb quality -> JsonlWriter; (2-5) MinHash signatures,
buckets, clusters, filter; (6) DocumentTokenizer. Prints one JSON object: seconds per step and
documents and tokens at each point.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
    LanguageFilter,
)
from datatrove.pipeline.readers import JsonlReader, WarcReader
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.writers import JsonlWriter


def _count_jsonl(folder: Path) -> int:
    return sum(sum(1 for _ in gzip.open(p, "rt")) for p in folder.rglob("*.jsonl.gz"))


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--input", type=Path, required=True)
    cli.add_argument("--work", type=Path, required=True)
    cli.add_argument("--workers", type=int, required=True)
    cli.add_argument("--tokenizer", required=True)
    cli.add_argument("--lid", required=True, help="fastText lid.176 model file")
    cli.add_argument("--thresholds", required=True, help="JSON: the shared thresholds")
    args = cli.parse_args()
    limits = json.loads(args.thresholds)
    work: Path = args.work
    files = sorted(args.input.glob("*.warc.gz"))
    tasks = len(files)  # one task per WARC file, as FineWeb ran it
    workers = args.workers

    language = LanguageFilter(languages=["en"], language_threshold=limits["min_language_score"])
    # The model DataTrove would download (lid.176.bin) is out of reach here: the same model
    # family's file the platform loads, copied into DataTrove's asset cache by its own code.
    language.model.MODEL_URL = args.lid
    language.model.MODEL_SUBFOLDER = "ft176-ftz"
    minhash = MinhashConfig(
        n_grams=limits["shingle_words"],
        num_buckets=limits["bands"],
        hashes_per_bucket=limits["rows_per_band"],
    )
    filtered, signatures = work / "filtered", work / "signatures"
    buckets, clusters, deduped = work / "buckets", work / "clusters", work / "deduped"
    steps = {
        "read, extract, LID, quality filters": LocalPipelineExecutor(
            pipeline=[
                WarcReader(str(args.input), glob_pattern="*.warc.gz"),
                Trafilatura(favour_precision=True, timeout=limits["extract_timeout_s"]),
                language,
                GopherRepetitionFilter(),
                GopherQualityFilter(min_doc_words=limits["gopher_min_words"], min_stop_words=2),
                C4QualityFilter(
                    filter_no_terminal_punct=False,
                    min_num_sentences=limits["c4_min_kept_sentences"],
                    min_words_per_line=-1,
                    max_word_length=-1,
                    filter_javascript=False,
                    filter_policy=False,
                ),
                FineWebQualityFilter(char_duplicates_ratio=limits["fineweb_max_char_dup_ratio"]),
                JsonlWriter(str(filtered)),
            ],
            tasks=tasks,
            workers=workers,
            logging_dir=str(work / "logs" / "filter"),
        ),
        "MinHash signatures": LocalPipelineExecutor(
            pipeline=[JsonlReader(str(filtered)), MinhashDedupSignature(str(signatures), minhash)],
            tasks=tasks,
            workers=workers,
            logging_dir=str(work / "logs" / "signatures"),
        ),
        "MinHash buckets": LocalPipelineExecutor(
            pipeline=[MinhashDedupBuckets(str(signatures), str(buckets), config=minhash)],
            tasks=minhash.num_buckets,
            workers=workers,
            logging_dir=str(work / "logs" / "buckets"),
        ),
        "MinHash clusters": LocalPipelineExecutor(
            pipeline=[MinhashDedupCluster(str(buckets), str(clusters), config=minhash)],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs" / "clusters"),
        ),
        "MinHash filter": LocalPipelineExecutor(
            pipeline=[
                JsonlReader(str(filtered)),
                MinhashDedupFilter(str(clusters)),
                JsonlWriter(str(deduped)),
            ],
            tasks=tasks,
            workers=workers,
            logging_dir=str(work / "logs" / "filter_minhash"),
        ),
        "tokenize": LocalPipelineExecutor(
            pipeline=[
                JsonlReader(str(deduped)),
                DocumentTokenizer(
                    str(work / "tokens"),
                    tokenizer_name_or_path=args.tokenizer,
                    eos_token="<|endoftext|>",
                    local_working_dir=str(work / "tokens-scratch"),
                ),
            ],
            tasks=tasks,
            workers=workers,
            logging_dir=str(work / "logs" / "tokenize"),
        ),
    }
    seconds = {}
    for name, executor in steps.items():
        started = time.perf_counter()
        executor.run()
        seconds[name] = time.perf_counter() - started
    # uint16 token ids (token_size 2, the default), one EOS per document included.
    tokens = sum(p.stat().st_size for p in (work / "tokens").rglob("*.ds")) // 2
    print(
        json.dumps(
            {
                "seconds": seconds,
                "documents_after_filters": _count_jsonl(filtered),
                "documents_after_minhash": _count_jsonl(deduped),
                "tokens": tokens,
            }
        )
    )


if __name__ == "__main__":
    main()
