"""extracted_documents: main text of HTML pages (trafilatura or resiliparse); text passes through.

The extractor is a dataset's choice (`extractor` in its policy): trafilatura (the default) scores
macro token F1 0.961 on the article-extraction benchmark, resiliparse 0.933 at 8.4x the pages/s
per CPU second in the stage (`bench/results/parsers.md`, commit e290758).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.policy import EXTRACTORS
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.stages.decoding import MAX_JUNK_FRACTION, decode_bytes, junk_fraction
from fm_assets.stages.timeout import CallTimeout, call_with_timeout
from fm_assets.storage import schemas


def trafilatura_text(html: str, url: str | None) -> str | None:
    """The stage's trafilatura call: main text, tables kept, comments dropped."""
    import trafilatura

    return trafilatura.extract(
        html,
        url=url,
        include_comments=False,
        include_tables=True,
        deduplicate=False,
        with_metadata=False,
    )


def resiliparse_text(html: str, url: str | None) -> str | None:
    """The stage's resiliparse call: main content, without image alt texts, list bullets or
    reader comments (the options that scored best on the benchmark, see the results table)."""
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(
        html, main_content=True, alt_texts=False, list_bullets=False, comments=False
    )


# The call of each extractor a policy may name, looked up per page (tests and the extraction
# benchmark replace one here).
EXTRACT_CALLS = {"trafilatura": trafilatura_text, "resiliparse": resiliparse_text}


@dataclass(frozen=True)
class ExtractStage(Stage):
    """Main text of HTML pages (the dataset's extractor, per-document timeout); text passes through.

    Decode raw bytes and extract the main text; quarantine what yields no text.
    """

    name: ClassVar[str] = "extracted_documents"
    version: ClassVar[str] = "2"  # 2: the extractor became part of the config
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS

    timeout_s: float = 10.0
    extractor: str = "trafilatura"  # one of EXTRACTORS

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"extractor must be one of {EXTRACTORS}, not {self.extractor!r}")

    def process(self, batch: pa.Table) -> StageResult:
        texts: list[str | None] = []
        keep: list[bool] = []
        rejects: list[tuple[int, str, str]] = []
        contents = batch.column("raw_content")
        kinds = batch.column("content_type").to_pylist()
        charsets = batch.column("charset").to_pylist()
        urls = batch.column("url").to_pylist()
        for i, (kind, charset, url) in enumerate(zip(kinds, charsets, urls, strict=True)):
            text, problem = self._extract_one(contents[i].as_py(), kind, charset, url)
            texts.append(text)
            keep.append(problem is None)
            if problem is not None:
                rejects.append((i, *problem))
        return split_kept(batch, keep, {"text": texts}, self.output_schema, rejects)

    def _extract_one(
        self, content: bytes, kind: str, charset: str | None, url: str | None
    ) -> tuple[str | None, tuple[str, str] | None]:
        decoded, how = decode_bytes(content, charset)
        if decoded is None:
            return None, ("undecodable", how)
        junk = junk_fraction(decoded)
        if junk > MAX_JUNK_FRACTION:
            return None, (
                "binary_content",
                f"{junk:.1%} of characters are control or replacement characters "
                f"(decoded as {how}); limit {MAX_JUNK_FRACTION:.0%}",
            )
        if kind != "html":
            return decoded, None
        extractor, extract = self.extractor, EXTRACT_CALLS[self.extractor]
        try:
            text = call_with_timeout(lambda: extract(decoded, url), self.timeout_s)
        except CallTimeout as exc:
            return None, ("extraction_timeout", f"{extractor} {exc} (timeout_s={self.timeout_s:g})")
        except Exception as exc:  # the extractors and lxml raise many types on hostile markup
            return None, ("extraction_error", f"{extractor} failed: {type(exc).__name__}: {exc}")
        if not text or not text.strip():
            return None, ("no_extractable_text", f"{extractor} found no main text in the page")
        return text, None
