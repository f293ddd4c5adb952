"""Language ID and heuristic quality scores: documents per second on real text, one run.

Texts: the 181 article bodies of the article-extraction benchmark (ground truth) and the main
text of every HTML page in the shared WARCs (decoded and extracted as the platform does;
extraction is not timed). Every figure below comes from one run written to
`bench/results/langid_quality.md`:

1. `identify_languages` (first 2,000 characters, the default) and, side by side, on whole
   texts (`max_chars` past the longest text): what the prefix saves.
2. `score_texts` (all three rule sets) and `decide_batch` over the stored scores.
3. `score_text` on three 5 MB shapes (one word, one line, 2.5 M one-word lines).

The corpus is timed as one batch repeated `--repeats` times so a run lasts a few seconds.
The machine is shared: wall and CPU seconds are both reported, and the load average at start
and end; a CPU/wall ratio well below 1 means other tenants took the core.

    python -m bench.langid_quality
    python -m bench.langid_quality --quick --output /tmp/langid_quality.md   # one corpus copy
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Sequence

from bench.harness import (
    ARTICLE_TRUTH,
    RESULTS,
    WARC_FILES,
    RunStart,
    parser,
    rerun_command,
    timed,
    write_report,
)
from fm_assets.curation.langid import DEFAULT_MAX_CHARS, LanguagePolicy, identify_languages
from fm_assets.curation.quality.scores import RULES_VERSION, score_text, score_texts
from fm_assets.curation.quality.thresholds import QualityThresholds, decide_batch
from fm_assets.stages.decoding import decode_bytes


def article_texts() -> list[str]:
    articles = json.loads(ARTICLE_TRUTH.read_text(encoding="utf-8"))
    return [article["articleBody"] for article in articles.values()]


def warc_texts() -> list[str]:
    """Main text of every HTML response or resource in the shared WARCs, when there is any."""
    import trafilatura
    from warcio.archiveiterator import ArchiveIterator

    texts = []
    for path in WARC_FILES:
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type not in ("response", "resource"):
                    continue
                headers = record.http_headers
                content_type = (headers.get_header("Content-Type") if headers else None) or ""
                if "html" not in content_type and record.rec_type == "response":
                    continue
                charset = re.search(r"charset=([\w-]+)", content_type)
                html, _ = decode_bytes(record.content_stream().read(), charset and charset.group(1))
                text = html and trafilatura.extract(html, include_comments=False)
                if text:
                    texts.append(text)
    return texts


def rate_row(name: str, docs: int, chars: int, wall: float, cpu: float) -> str:
    return (
        f"| {name} | {docs:,} | {chars / 1e6:.1f} | {wall:.2f} | {cpu:.2f} | "
        f"{docs / wall:,.0f} | {docs / cpu:,.0f} | {chars / 1e6 / wall:.2f} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.langid_quality",
        __doc__.splitlines()[0],
        RESULTS / "langid_quality.md",
        "the corpus once per timed call, not five times",
    )
    cli.add_argument("--repeats", type=int, help="corpus repeats per timed call (default 5)")
    args = cli.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    run_start = RunStart.now(rerun_command(cli, argv))

    articles, pages = article_texts(), warc_texts()
    corpus = articles + pages
    batch = corpus * repeats
    docs, chars = len(batch), sum(map(len, batch))
    longest = max(map(len, corpus))

    identify_languages(["warm-up: load the model"])
    languages, lid_wall, lid_cpu = timed(lambda: identify_languages(batch))
    _, full_wall, full_cpu = timed(lambda: identify_languages(batch, max_chars=longest + 1))
    scores, score_wall, score_cpu = timed(lambda: score_texts(batch))
    decisions, decide_wall, decide_cpu = timed(lambda: decide_batch(scores))

    huge = {
        "one 5 MB word": "x" * 5_000_000,
        "one 5 MB line (850 k words)": "lorem " * 850_000,
        "2.5 M one-word lines": "a\n" * 2_500_000,
    }
    huge_times = {
        name: timed(lambda text=text: score_text(text))[1:] for name, text in huge.items()
    }
    stamp = run_start.finish(("fasttext", "numpy", "pyarrow"))

    one_run = len(corpus)
    lang_counts = collections.Counter(lang for lang, _ in languages[:one_run])
    english = LanguagePolicy(allowed=frozenset({"en"}), min_score=0.65)
    lang_reasons = collections.Counter(english.decide(*pair) for pair in languages[:one_run])
    article_decisions = collections.Counter(decisions[: len(articles)])
    page_decisions = collections.Counter(decisions[len(articles) : one_run])
    gopher_only = decide_batch(
        {name: values[: len(articles)] for name, values in scores.items()},
        QualityThresholds(rule_sets=frozenset({"gopher_v1"})),
    )

    lines = [
        "# Language ID and heuristic quality scores",
        "",
        f"{stamp.header()} {stamp.machine_line()} The machine is shared, so wall time varies; "
        "CPU seconds are this process's own.",
        "",
        f"Corpus: {len(articles)} article bodies (article-extraction benchmark ground truth) and "
        f"{len(pages)} extracted WARC pages ({len(WARC_FILES)} shared WARCs), "
        f"{sum(map(len, corpus)) / 1e6:.2f} M characters, mean "
        f"{sum(map(len, corpus)) / len(corpus):,.0f} characters per document; "
        f"each call below processes it {repeats} times as one batch, in one process "
        "(one core).",
        "",
        "| call | docs | M chars | wall s | CPU s | docs/s (wall) | docs/s (CPU) | MB/s (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        rate_row(
            f"`identify_languages` (first {DEFAULT_MAX_CHARS:,} chars)",
            docs,
            chars,
            lid_wall,
            lid_cpu,
        ),
        rate_row("`identify_languages` (whole texts)", docs, chars, full_wall, full_cpu),
        rate_row(
            f"`score_texts` ({RULES_VERSION}, 3 rule sets)", docs, chars, score_wall, score_cpu
        ),
        rate_row("`decide_batch` (default thresholds)", docs, chars, decide_wall, decide_cpu),
        "",
        "MB/s counts characters (≈ bytes for the mostly ASCII articles). The prefix bounds the",
        "language-ID cost per document; whole texts are read only in the second row.",
        "",
        "`score_text` on one 5 MB document (scores read the first 1,000,000 characters and",
        "n-gram statistics the first 100,000 words; the word count covers the whole text):",
        "",
        "| document | wall s | CPU s |",
        "|---|---:|---:|",
        *(f"| {name} | {wall:.2f} | {cpu:.2f} |" for name, (wall, cpu) in huge_times.items()),
        "",
        "## What the corpus gets (one copy)",
        "",
        "Languages: "
        + ", ".join(f"{lang} {count}" for lang, count in lang_counts.most_common())
        + ". An English policy at min_score 0.65: "
        + ", ".join(f"{reason or 'kept'} {count}" for reason, count in lang_reasons.most_common())
        + ".",
        "",
        "Quality decisions with the default thresholds (all three rule sets), first failing rule:",
        "",
        "- articles: "
        + ", ".join(f"{r or 'kept'} {n}" for r, n in article_decisions.most_common()),
        "- WARC pages: " + ", ".join(f"{r or 'kept'} {n}" for r, n in page_decisions.most_common()),
        "- articles, Gopher rules only: "
        + ", ".join(
            f"{r or 'kept'} {n}" for r, n in collections.Counter(gopher_only).most_common()
        ),
        "",
        "The Gopher stop-word rule is English-only: the non-English articles fail it, as they",
        "should under a default English recipe; choose rule sets per dataset language.",
        "",
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
