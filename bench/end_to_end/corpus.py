"""The benchmark's input: unique replicas of the shared WARCs and article pages, as WARC files.

Each replica holds every HTML response of the four shared WARCs and the 181 pages of the
article-extraction benchmark (written as one WARC), one `.warc.gz` per source. Replica r appends
`<!-- replica r -->` to each page and `?replica=r` to its URL: no two records are byte-identical
(our landing zone and raw stage collapse exact copies), while the extracted text of each page is
the same in every replica, so both pipelines must find the copies with MinHash.

Only HTML responses are written (decoded bodies, so no transfer or content encoding), each with
`WARC-Identified-Payload-Type: text/html` as Common Crawl writes it: both readers then see the same
documents and skip nothing the other reads.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.harness import ARTICLE_HTML_FILES, WARC_FILES

_DROPPED_HTTP_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Page:
    url: str
    http_headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class Corpus:
    files: list[Path]
    replicas: int
    documents: int  # HTML responses in all files
    bytes_gz: int  # size of the files (gzipped WARC)
    bytes_html: int  # decompressed HTML bodies


def _warc_pages(path: Path) -> Iterator[Page]:
    from warcio.archiveiterator import ArchiveIterator

    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            content_type = record.http_headers.get_header("Content-Type") or ""
            if content_type.split(";")[0].strip().lower() != "text/html":
                continue
            headers = [
                (name, value)
                for name, value in record.http_headers.headers
                if name.lower() not in _DROPPED_HTTP_HEADERS
            ]
            url = record.rec_headers.get_header("WARC-Target-URI")
            yield Page(url, headers, record.content_stream().read())


def _article_pages() -> Iterator[Page]:
    for path in ARTICLE_HTML_FILES:
        name = path.name.removesuffix(".html.gz")
        headers = [("Content-Type", "text/html; charset=utf-8")]
        yield Page(f"https://articles.example/{name}", headers, gzip.decompress(path.read_bytes()))


def sources() -> dict[str, list[Page]]:
    """Every source's HTML pages, read once."""
    found = {p.name.removesuffix(".warc.gz"): list(_warc_pages(p)) for p in WARC_FILES}
    found["articles"] = list(_article_pages())
    return found


def write_warc(path: Path, pages: list[Page], replica: int) -> int:
    """Write `pages` as replica `replica`; the bytes of HTML written."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    html_bytes = 0
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for page in pages:
            body = page.body + f"\n<!-- replica {replica} -->\n".encode()
            html_bytes += len(body)
            headers = [*page.http_headers, ("Content-Length", str(len(body)))]
            separator = "&" if "?" in page.url else "?"
            record = writer.create_warc_record(
                f"{page.url}{separator}replica={replica}",
                "response",
                payload=io.BytesIO(body),
                http_headers=StatusAndHeaders("200 OK", headers, protocol="HTTP/1.1"),
                warc_headers_dict={"WARC-Identified-Payload-Type": "text/html"},
            )
            writer.write_record(record)
    return html_bytes


def build(directory: Path, replicas: int) -> Corpus:
    """Write `replicas` unique replicas of every source into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pages = sources()
    files: list[Path] = []
    documents = html_bytes = 0
    for replica in range(replicas):
        for name, source_pages in pages.items():
            path = directory / f"replica-{replica:03d}-{name}.warc.gz"
            html_bytes += write_warc(path, source_pages, replica)
            documents += len(source_pages)
            files.append(path)
    return Corpus(files, replicas, documents, sum(p.stat().st_size for p in files), html_bytes)
