"""The benchmark's pages with their hand-made `articleBody`, and the stage's input table."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from bench.harness import ARTICLE_BENCHMARK
from fm_assets.formats.sniff import charset_from_meta
from fm_assets.stages.extract import ExtractStage
from fm_assets.storage import schemas


@dataclass(frozen=True)
class Page:
    page_id: str
    url: str
    raw: bytes  # the page's bytes, as a crawl would land them
    html: str  # the same, decoded as UTF-8 (the benchmark's encoding), for the raw loops
    truth: str  # the benchmark's articleBody


def load_pages(directory: Path = ARTICLE_BENCHMARK) -> list[Page]:
    """Every page of the benchmark with its ground truth, in ground-truth order."""
    truth = json.loads((directory / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for page_id, item in truth.items():
        raw = gzip.decompress((directory / "html" / f"{page_id}.html.gz").read_bytes())
        pages.append(Page(page_id, item["url"], raw, raw.decode("utf-8"), item["articleBody"]))
    return pages


def raw_documents_table(pages: Sequence[Page]) -> pa.Table:
    """The pages as RAW_DOCUMENTS rows, filled as landing a file of these pages would fill them.

    There is no HTTP header, so the charset is the one the page's `<meta>` declares, if any.
    """
    rows = []
    for index, page in enumerate(pages):
        sha = hashlib.sha256(page.raw).hexdigest()
        rows.append(
            {
                "doc_id": sha,
                "raw_sha256": sha,
                "batch_id": "article-extraction-benchmark",
                "record_id": f"{sha[:16]}:{index}",
                "source_file": f"{page.page_id}.html.gz",
                "source": "article-extraction-benchmark",
                "license": "MIT",
                "namespace": "default",
                "url": page.url,
                "lang_hint": None,
                "external_id": page.page_id,
                "content_type": "html",
                "charset": charset_from_meta(page.raw),
                "raw_size": len(page.raw),
                "raw_content": page.raw,
            }
        )
    return pa.Table.from_pylist(rows, schema=schemas.RAW_DOCUMENTS)


def stage_texts(stage: ExtractStage, table: pa.Table) -> tuple[dict[str, str], dict[str, str]]:
    """Run `process` once: (text by page id for kept rows, quarantine rule by page id)."""
    result = stage.process(table)
    kept = dict(
        zip(
            result.kept.column("external_id").to_pylist(),
            result.kept.column("text").to_pylist(),
            strict=True,
        )
    )
    page_of_record = dict(
        zip(
            table.column("record_id").to_pylist(),
            table.column("external_id").to_pylist(),
            strict=True,
        )
    )
    rules = {
        page_of_record[record]: rule
        for record, rule in zip(
            result.quarantined.column("record_id").to_pylist(),
            result.quarantined.column("rule").to_pylist(),
            strict=True,
        )
    }
    return kept, rules
