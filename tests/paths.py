"""Where the tests find the repository and the shared test data (read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

WARC_DIR = SHARED_DATA / "warc"
EDGE_DIR = WARC_DIR / "edge"  # damaged and unusual archives
WGET_WARC = WARC_DIR / "wget-sample-0000.warc.gz"
WGET_WARC_2 = WARC_DIR / "wget-sample-0001.warc.gz"

NEOX_TOKENIZER = SHARED_DATA / "tokenizers" / "gpt-neox-20b.json"
LLAMA_TOKENIZER = SHARED_DATA / "tokenizers" / "llama2-style-32k.json"

EVALSETS = SHARED_DATA / "evalsets"
ARTICLE_BENCHMARK = SHARED_DATA / "extraction" / "article-extraction-benchmark"
ARTICLE_GROUND_TRUTH = ARTICLE_BENCHMARK / "ground-truth.json"
