"""The default training data: the shared article-extraction benchmark's article bodies (hq)
against the rest of the same pages' visible text (lq), grouped by site.
"""

from __future__ import annotations

import gzip
import json
import re
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fm_assets.curation.classifier.training import TrainingDocument

BENCHMARK = Path("extraction") / "article-extraction-benchmark"
_SKIPPED_TAGS = frozenset(
    "script style noscript template svg head iframe object canvas math select".split()  # noqa: SIM905
)
# Elements that start a new line of visible text.
_BLOCK_TAGS = frozenset(
    """address article aside blockquote br button caption dd details dialog div dl dt fieldset
    figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr img label li main menu nav ol
    option p pre section summary table tbody td tfoot th thead tr ul""".split()  # noqa: SIM905
)
_WORD = re.compile(r"\w+")


def page_lines(html: bytes) -> list[str]:
    """The visible text of an HTML page, one line per block element (scripts, styles and the
    head dropped), whitespace collapsed, empty lines dropped."""
    import lxml.html

    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)
    root = lxml.html.document_fromstring(html, parser=parser)
    lines: list[str] = []
    current: list[str] = []

    def flush() -> None:
        line = " ".join(" ".join(current).split())
        if line:
            lines.append(line)
        current.clear()

    # An explicit stack, not recursion: some pages nest deeper than Python's recursion limit.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        element, closing = stack.pop()
        tag = element.tag.lower() if isinstance(element.tag, str) else None
        if closing:
            if tag in _BLOCK_TAGS:
                flush()
            if element.tail:
                current.append(element.tail)
            continue
        if tag is None or tag in _SKIPPED_TAGS:
            if element.tail:
                current.append(element.tail)
            continue
        if tag in _BLOCK_TAGS:
            flush()
        if element.text:
            current.append(element.text)
        stack.append((element, True))
        stack.extend((child, False) for child in reversed(element))
    flush()
    return lines


def boilerplate_lines(lines: Sequence[str], article: str) -> list[str]:
    """The lines that are not part of `article`, each once, in page order.

    A line of three or more words belongs to the article when at least half of its word
    trigrams occur in it; a shorter line when its words occur there contiguously.
    """
    words = _WORD.findall(article.lower())
    trigrams = set(zip(words, words[1:], words[2:], strict=False))
    joined = f" {' '.join(words)} "
    out: list[str] = []
    seen: set[str] = set()
    for line in lines:
        tokens = _WORD.findall(line.lower())
        if not tokens or line in seen:
            continue
        if len(tokens) < 3:
            in_article = f" {' '.join(tokens)} " in joined
        else:
            grams = list(zip(tokens, tokens[1:], tokens[2:], strict=False))
            in_article = sum(g in trigrams for g in grams) >= 0.5 * len(grams)
        if not in_article:
            seen.add(line)
            out.append(line)
    return out


def default_training_data(
    shared_data: Path,
) -> tuple[list[TrainingDocument], list[TrainingDocument], dict[str, str]]:
    """The default recipe's (positives, negatives, sources) from the shared benchmark.

    Positives: each page's ground-truth `articleBody`. Negatives: the page's boilerplate lines
    (`boilerplate_lines` of `page_lines`) joined into one document per page. Both are grouped by
    the page's host, so a site's article and its navigation are on the same side of the holdout
    split and no site's template is seen in training and scored in the holdout.
    """
    base = shared_data / BENCHMARK
    truth_file = base / "ground-truth.json"
    if not truth_file.is_file():
        raise ValueError(f"{truth_file} is missing: the default recipe reads the shared data")
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    positives: list[TrainingDocument] = []
    negatives: list[TrainingDocument] = []
    for page_id in sorted(truth):
        article = truth[page_id]["articleBody"]
        host = urllib.parse.urlsplit(truth[page_id]["url"]).hostname or page_id
        group = host.removeprefix("www.")
        positives.append(TrainingDocument(article, group))
        html = gzip.decompress((base / "html" / f"{page_id}.html.gz").read_bytes())
        boilerplate = boilerplate_lines(page_lines(html), article)
        if boilerplate:
            negatives.append(TrainingDocument("\n".join(boilerplate), group))
    sources = {
        "positives": f"{BENCHMARK}/ground-truth.json: articleBody of {len(positives)} pages",
        "negatives": (
            f"{BENCHMARK}/html/*.html.gz: block-level page text not in the articleBody, "
            f"{len(negatives)} pages"
        ),
        "holdout_groups": "page host (www. stripped)",
    }
    return positives, negatives, sources
