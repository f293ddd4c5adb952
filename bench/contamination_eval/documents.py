"""The clean documents: real shared texts that hold no eval item, and host the planted ones."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bench.harness import ARTICLE_TRUTH, CLOUGH_STEVENSON, PRESIDIO, WARC_FILES


@dataclass(frozen=True)
class Document:
    """A real, clean document: where it comes from and its text."""

    source: str
    name: str
    text: str


def warc_documents() -> list[Document]:
    """Main text of every HTML response in the shared WARC files (warcio + trafilatura)."""
    import trafilatura
    from warcio.archiveiterator import ArchiveIterator

    from fm_assets.stages.decoding import decode_bytes

    docs = []
    for path in WARC_FILES:
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                if "html" not in (record.http_headers.get_header("Content-Type") or ""):
                    continue
                url = record.rec_headers.get_header("WARC-Target-URI") or ""
                html, _ = decode_bytes(record.content_stream().read(), None)
                text = trafilatura.extract(html or "", url=url, include_tables=True)
                if text and text.strip():
                    docs.append(Document(f"warc/{path.name}", url, text))
    return docs


def article_documents() -> list[Document]:
    """`articleBody` of the 181 pages of the article-extraction benchmark."""
    truth = json.loads(ARTICLE_TRUTH.read_text(encoding="utf-8"))
    return [Document("articles", key, row["articleBody"]) for key, row in sorted(truth.items())]


def other_documents() -> list[Document]:
    """Clough-Stevenson answers and sources, and Presidio's synthetic sentences."""
    docs = [
        Document("clough-stevenson", p.name, p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted(CLOUGH_STEVENSON.glob("*.txt"))
    ]
    presidio = json.loads(PRESIDIO.read_text("utf-8"))
    docs += [Document("presidio", str(i), row["full_text"]) for i, row in enumerate(presidio)]
    return docs


def clean_documents() -> list[Document]:
    """Every clean shared document."""
    return warc_documents() + article_documents() + other_documents()
