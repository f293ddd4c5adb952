"""Parsers benchmark: fastwarc vs warcio on the shared archives, resiliparse vs trafilatura on
the article-extraction benchmark.

One run, every figure from that run, written to `bench/results/parsers.md`:

1. WARC: our reader (`FileRecordReader`) with warcio and with fastwarc, next to each library's
   own fastest public loop (warcio `ArchiveIterator` + `content_stream().read()`; fastwarc
   `ArchiveIterator(parse_http=True, auto_decode="all")` + `reader.read()`) over the same
   in-memory bytes of every shared WARC/WET/ARC (edge cases included). Whether both readers
   give the same items is checked on every file of the run.
2. Extraction: token precision, recall and F1 against `articleBody` (macro, as
   `bench.extraction` computes its headline) of `ExtractStage.process` with each
   extractor and of the raw library calls; pages/s side by side.

Both sections interleave their contestants in rotating order, repeat, and report medians of CPU
seconds (the machine is shared; wall seconds are shown too) and ratios within the same repeat.

    python -m bench.parsers                 # full run (~1-2 min on 2 cores)
    python -m bench.parsers --quick         # one repeat, not three
    python -m bench.parsers --repeats 5 --output /tmp/parsers.md

The data is read in place from `../shared/data` (`warc/`, `extraction/`). Nothing is asserted.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.extraction.pages import Page, load_pages, raw_documents_table, stage_texts
from bench.extraction.scores import scores, token_overlap
from bench.harness import (
    RESULTS,
    WARC_DIR,
    RunStart,
    Stamp,
    log,
    median,
    parser,
    rerun_command,
    rotation,
    write_report,
)
from fm_assets.formats import FileRecordReader, ParsedRecord
from fm_assets.stages.extract import ExtractStage, resiliparse_text, trafilatura_text

CHUNK_PAGES = 20
DOCUMENT_TYPES = ("response", "resource", "conversion")
LIBRARIES = ("fastwarc", "warcio", "resiliparse", "trafilatura", "lxml", "pyarrow")


@dataclass
class Clock:
    """CPU and wall seconds per contestant, one entry per repeat."""

    cpu: dict[str, list[float]]
    wall: dict[str, list[float]]

    @classmethod
    def new(cls) -> Clock:
        return cls({}, {})

    def time(self, name: str, work: Callable[[], object], repeat: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        for store, took in (
            (self.cpu, time.process_time() - cpu),
            (self.wall, time.perf_counter() - wall),
        ):
            runs = store.setdefault(name, [])
            if len(runs) <= repeat:
                runs.append(0.0)
            runs[repeat] += took

    def median(self, name: str, wall: bool = False) -> float:
        return median((self.wall if wall else self.cpu)[name])

    def ratio(self, slower: str, faster: str) -> float:
        """Median over repeats of slower's CPU s / faster's CPU s: faster's speed-up."""
        pairs = zip(self.cpu[slower], self.cpu[faster], strict=True)
        return median([a / b for a, b in pairs])


# ------------------------------------------------------------------------------------- WARC


def our_reader(parser: str) -> Callable[[str, bytes], int]:
    def read(name: str, data: bytes) -> int:
        return len(list(FileRecordReader(name, io.BytesIO(data), warc_parser=parser)))

    return read


def warcio_alone(name: str, data: bytes) -> int:
    from warcio.archiveiterator import ArchiveIterator

    documents = 0
    with contextlib.suppress(Exception):  # a damaged file ends the loop, as in any caller's
        for record in ArchiveIterator(io.BytesIO(data), arc2warc=True):
            if record.rec_type in DOCUMENT_TYPES:
                record.content_stream().read()
                documents += 1
    return documents


def fastwarc_alone(name: str, data: bytes) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    wanted = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion
    documents = 0
    with contextlib.suppress(Exception):  # fastwarc cannot read ARC: 0 documents there
        for record in ArchiveIterator(
            io.BytesIO(data), record_types=wanted, parse_http=True, auto_decode="all"
        ):
            record.reader.read()
            documents += 1
    return documents


WARC_CONTESTANTS = {
    "A our reader, warcio": our_reader("warcio"),
    "B our reader, fastwarc (default)": our_reader("fastwarc"),
    "C warcio alone": warcio_alone,
    "D fastwarc alone": fastwarc_alone,
}


def compare_readers(files: dict[str, bytes]) -> tuple[list[bool], list[str], int]:
    """Per file whether both readers give the same items; the files fastwarc handed to warcio
    (and from which record); the archive records counted by warcio."""
    same, handed = [], []
    records = 0
    for name, data in files.items():
        reference = FileRecordReader(name, io.BytesIO(data), warc_parser="warcio")
        fast = FileRecordReader(name, io.BytesIO(data))
        expected, got = list(reference), list(fast)
        same.append(
            expected == got and reference.stats.skipped_by_type == fast.stats.skipped_by_type
        )
        records += len(expected) + reference.skipped_non_documents
        if fast.stats.warcio_from_record is not None:
            handed.append(f"`{name}` (record #{fast.stats.warcio_from_record})")
    return same, handed, records


def bench_warc(repeats: int) -> list[str]:
    files = {p.name: p.read_bytes() for p in sorted(WARC_DIR.rglob("*")) if p.is_file()}
    arcs = [name for name in files if name.endswith((".arc", ".arc.gz"))]
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):  # warcio warns
        same, handed, records = compare_readers(files)
        documents = {
            n: sum(read(f, d) for f, d in files.items()) for n, read in WARC_CONTESTANTS.items()
        }
        parsed = sum(
            isinstance(item, ParsedRecord)
            for name, data in files.items()
            for item in FileRecordReader(name, io.BytesIO(data))
        )
        clock = Clock.new()
        names = list(WARC_CONTESTANTS)
        for repeat in range(repeats):
            for step in range(10):  # ten passes over every file per repeat, order rotating
                for name in rotation(names, repeat + step):
                    read = WARC_CONTESTANTS[name]
                    clock.time(name, lambda r=read: [r(f, d) for f, d in files.items()], repeat)
    megabytes = sum(map(len, files.values())) / 1e6
    b, d = names[1], names[3]
    # Items: documents and unreadable records (A, B); payloads read (C, D).
    lines = [
        f"{len(files)} files (every file under `warc/`, `edge/` included): {megabytes:.2f} MB as "
        f"stored, {records} archive records, {parsed} documents by our reader. "
        f"**Same items from both readers: {sum(same)}/{len(files)} files** (content, type, URL, "
        f"charset, rule and reason of every item, and the skipped non-documents). fastwarc read "
        f"{len(files) - len(handed) - len(arcs)} files to the end; warcio read on in "
        f"{', '.join(handed) or 'no file'}, and read the ARC "
        f"{', '.join(f'`{a}`' for a in arcs) or '(none)'} alone.",
        "",
        "| contestant | items/pass | CPU ms/pass | wall ms/pass | MB/s (CPU) | records/s (CPU) |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name in names:
        cpu, wall = clock.median(name) / 10, clock.median(name, wall=True) / 10
        lines.append(
            f"| {name} | {documents[name]} | {cpu * 1e3:.1f} | {wall * 1e3:.1f} | "
            f"{megabytes / cpu:.1f} | {records / cpu:,.0f} |"
        )
    lines += [
        "",
        "| ratio (CPU, median of the per-repeat ratios) | speed-up |",
        "|---|--:|",
        f"| our reader: fastwarc over warcio (A / B) | **{clock.ratio(*names[:2]):.2f}×** |",
        f"| the libraries alone: fastwarc over warcio (C / D) | {clock.ratio(*names[2:]):.2f}× |",
        f"| our reader with fastwarc, vs fastwarc alone (D / B) | {clock.ratio(d, b):.2f}× |",
    ]
    return lines


# ------------------------------------------------------------------------------- Extraction


def raw_loop(
    extract: Callable[[str, str | None], str | None],
) -> Callable[[Sequence[Page]], dict[str, str | None]]:
    def run(pages: Sequence[Page]) -> dict[str, str | None]:
        return {page.page_id: extract(page.html, page.url) for page in pages}

    return run


def resiliparse_library_default(html: str, url: str | None) -> str | None:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=True)


def bench_extraction(repeats: int) -> list[str]:
    pages = load_pages()
    table = raw_documents_table(pages)
    quality = {
        "stage, trafilatura (default)": stage_texts(ExtractStage(), table)[0],
        "stage, resiliparse": stage_texts(ExtractStage(extractor="resiliparse"), table)[0],
        "raw `trafilatura_text`": raw_loop(trafilatura_text)(pages),
        "raw `resiliparse_text` (stage options)": raw_loop(resiliparse_text)(pages),
        "raw `extract_plain_text(main_content=True)` (library defaults)": raw_loop(
            resiliparse_library_default
        )(pages),
    }
    lines = [
        f"{len(pages)} pages, {sum(len(p.raw) for p in pages) / 1e6:.1f} MB of HTML. Macro: P and "
        "R averaged over pages, F1 their harmonic mean (the headline of `bench.extraction`, "
        "`bench/extraction/scores.py`); micro: tokens summed first. The resiliparse options "
        "(no alt texts, list bullets or comments) were chosen on this same benchmark: an "
        "in-sample choice.",
        "",
        "| extractor | macro P | macro R | macro F1 | micro F1 | empty |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, texts in quality.items():
        s = scores([token_overlap(p.truth, texts.get(p.page_id)) for p in pages])
        empty = sum(not texts.get(p.page_id) for p in pages)
        lines.append(
            f"| {name} | {s.macro_precision:.4f} | {s.macro_recall:.4f} | **{s.macro_f1:.4f}** | "
            f"{s.micro_f1:.4f} | {empty} |"
        )
    chunks = [range(i, min(i + CHUNK_PAGES, len(pages))) for i in range(0, len(pages), CHUNK_PAGES)]
    runs: dict[str, Callable[[range], object]] = {
        "stage, trafilatura": lambda c: ExtractStage().process(table.slice(c.start, len(c))),
        "raw trafilatura": lambda c: raw_loop(trafilatura_text)(pages[c.start : c.stop]),
        "stage, resiliparse": lambda c: ExtractStage(extractor="resiliparse").process(
            table.slice(c.start, len(c))
        ),
        "raw resiliparse": lambda c: raw_loop(resiliparse_text)(pages[c.start : c.stop]),
    }
    clock = Clock.new()
    names = list(runs)
    for repeat in range(repeats):
        for index, chunk in enumerate(chunks):
            for name in rotation(names, repeat + index):
                clock.time(name, lambda n=name, c=chunk: runs[n](c), repeat)
    lines += [
        "",
        f"Speed: repeats {repeats}; each walks the pages in chunks of {CHUNK_PAGES}, the four "
        "contestants back to back on each chunk in rotating order. The stage rows include "
        "everything `process` does (decoding, junk check, timeout, Arrow tables).",
        "",
        "| contestant | CPU s/pass | wall s/pass | pages/s (CPU) |",
        "|---|--:|--:|--:|",
    ]
    for name in names:
        cpu = clock.median(name)
        lines.append(
            f"| {name} | {cpu:.2f} | {clock.median(name, wall=True):.2f} | {len(pages) / cpu:.1f} |"
        )
    lines += [
        "",
        "| ratio (CPU, median of the per-repeat ratios) | speed-up |",
        "|---|--:|",
        f"| stage: resiliparse over trafilatura | **{clock.ratio(names[0], names[2]):.1f}×** |",
        f"| raw calls: resiliparse over trafilatura | {clock.ratio(names[1], names[3]):.1f}× |",
        f"| stage overhead, trafilatura (raw / stage) | {clock.ratio(names[1], names[0]):.2f}× |",
        f"| stage overhead, resiliparse (raw / stage) | {clock.ratio(names[3], names[2]):.2f}× |",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.parsers",
        __doc__.split("\n\n")[0].replace("\n", " "),
        RESULTS / "parsers.md",
        "one repeat, not three",
    )
    cli.add_argument("--repeats", type=int, help="repeats (default 3, quick 1; WARC twice that)")
    args = cli.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    run_start = RunStart.now(rerun_command(cli, argv))
    log("WARC readers")
    warc = bench_warc(repeats * 2)
    log("extractors")
    extraction = bench_extraction(repeats)
    write_report(args.output, report(run_start.finish(LIBRARIES), warc, extraction))


def report(stamp: Stamp, warc: list[str], extraction: list[str]) -> str:
    return "\n".join(
        [
            "# Parsers: fastwarc vs warcio, resiliparse vs trafilatura",
            "",
            f"{stamp.header()} {stamp.machine_line()} Every figure below comes from this run. "
            "The machine is shared with other tenants: read the ratios, measured side by side.",
            "",
            "## 1. WARC parsing",
            "",
            *warc,
            "",
            "## 2. HTML extraction",
            "",
            *extraction,
        ]
    )


if __name__ == "__main__":
    main()
