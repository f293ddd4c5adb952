"""Hand labels for the HTML pages of the shared WARCs: a held-out set for the quality classifier
and the default web policy.

None of these sites is in the article-extraction benchmark the default classifier is trained
on. Each label judges the main text trafilatura extracts from the page (what the quality stages
see), written from reading that text before any classifier score on these pages was computed:

- `keep`: prose a pretraining corpus wants (articles, blog posts, biographies and about pages
  written in sentences), whatever its language;
- `drop`: navigation, listings, tables, link farms, spam, error pages, placeholders;
- `unsure`: a mix neither label fits; listed in the results, left out of the figures.

Labels are by URL; a page captured twice (allenai.org, the 28 shop pages of one Japanese site
that extract to one identical text) counts once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

KEEP: Final = "keep"
DROP: Final = "drop"
UNSURE: Final = "unsure"

# url -> (label, why)
PAGE_LABELS: Final[dict[str, tuple[str, str]]] = {
    # cc-main-2020-34-sample.warc.gz
    "http://003338.cn/l41/481397.html": (DROP, "keyword-stuffed news snippets, mojibake"),
    "http://01spb.ru/company/": (KEEP, "company description in sentences (Russian)"),
    "http://035.psb556.com/24/i/u_1090813/article.html": (DROP, "navigation, gambling links"),
    "http://037426.cn/": (UNSURE, "company blurb in broken English inside table markup"),
    "http://041696.com/15477/list_6_4.html": (DROP, "lottery post listing"),
    "http://044545.com/topic/20200207/015849.html": (DROP, "gambling spam"),
    "http://0513mt.com/index.php/art/detail/id/8884.html": (
        KEEP,
        "narrative prose (adult fiction, Chinese): content safety is not a quality rule",
    ),
    "http://05925.net/index.php/vod/type/id/53.html": (DROP, "legal disclaimer footer only"),
    "http://06.live-radsport.ch/fahrerstatistik_801/Anthony_Ravard.html": (
        DROP,
        "database error and an empty statistics table",
    ),
    "http://06.live-radsport.ch/tippspiel/stats_140_petzi.html": (DROP, "navigation, scores"),
    "http://0615235.com/02mjqjo%7Bibotij2.btq?odmbtt=106&tdmbtt=121": (
        DROP,
        "product listing and contact details",
    ),
    "http://0755krk.com/76104/list_4_1.html": (DROP, "post listing"),
    "http://0760.jxtdw.com/area/sanxiang/": (DROP, "job table"),
    "http://077678u.info/erxiaoshujinguang/list_6_2.html": (DROP, "gambling link list"),
    "http://0900-hovenier.nl/gelderland/oosterbeek/": (KEEP, "service description (Dutch)"),
    "http://096355.com/video/11073.html?11073-0-2": (DROP, "adult video navigation"),
    # cc-main-2024-22-whirlwind.warc.gz
    "https://an.wikipedia.org/wiki/Escopete": (UNSURE, "stub article, half infobox tables"),
    # wget-sample-0000.warc.gz
    "https://www.semanticscholar.org/research/research-team": (DROP, "list of names"),
    "https://www.cs.washington.edu/people/faculty/weld": (KEEP, "biography"),
    "https://soldaini.net/": (KEEP, "biography"),
    "https://soldaini.net/facts/": (KEEP, "facts in sentences, bulleted"),
    "https://soldaini.net/lineage/": (DROP, "table"),
    "https://kyleclo.com/": (KEEP, "biography and news items in sentences"),
    "https://kyleclo.com/research/": (KEEP, "research summary"),
    "https://joe.cat/": (KEEP, "paper summaries in paragraphs"),
    "https://maria-antoniak.github.io/": (KEEP, "biography"),
    "https://maria-antoniak.github.io/2023/07/04/notes-on-mastodon.html": (KEEP, "blog post"),
    "https://maria-antoniak.github.io/2023/04/11/paperpile-to-zotero.html": (KEEP, "guide"),
    "https://maria-antoniak.github.io/2022/07/27/topic-modeling-for-the-people.html": (
        KEEP,
        "blog post",
    ),
    "https://maria-antoniak.github.io/2020/03/25/pip.html": (KEEP, "guide"),
    "https://maria-antoniak.github.io/2018/11/19/data-science-crash-course.html": (
        KEEP,
        "blog post",
    ),
    "https://talaugust.github.io/": (KEEP, "biography"),
    "https://www.jonathanbragg.com/": (KEEP, "biography"),
    "https://tomhoper.github.io/": (KEEP, "biography"),
    "https://tomhoper.github.io/research/": (KEEP, "research summary"),
    "https://www.cs.cmu.edu/~anaik/": (KEEP, "biography"),
    "https://dwadden.github.io/": (DROP, "publication list"),
    "https://homes.cs.washington.edu/~axz/": (UNSURE, "short biography, then news and titles"),
    "https://amyxzhang.wordpress.com/": (KEEP, "blog post"),
    # wget-sample-0001.warc.gz
    "https://creativecommons.org/": (KEEP, "mission statement, short"),
    "https://creativecommons.org/mission/": (KEEP, "mission page"),
    "https://creativecommons.org/2024/03/28/cc-joins-civil-society-letter-urging-u-s-to-"
    "support-openness-and-transparency-in-ai/": (KEEP, "news post"),
    "https://creativecommons.org/2024/04/23/cc-at-wipo-slow-progress-on-copyright-exceptions-"
    "for-cultural-heritage-institutions/": (KEEP, "news post"),
    "https://allenai.org/": (DROP, "home page teaser blocks"),
    "https://prior.allenai.org/": (KEEP, "team description, short"),
    "https://www.semanticscholar.org/about": (KEEP, "about page"),
    "https://allenai.org/reviz": (KEEP, "team description"),
    "https://commoncrawl.org/": (DROP, "home page facts, one line each"),
    "https://commoncrawl.org/ccbot": (KEEP, "about page"),
    "https://commoncrawl.org/blog/march-april-2024-newsletter": (KEEP, "newsletter post"),
    "https://commoncrawl.org/blog/host-and-domain-level-web-graphs-september-october-november-"
    "december-2023-and-february-march-2024": (KEEP, "release post"),
    "https://commoncrawl.org/faq": (KEEP, "questions and answers in sentences"),
    # edge/: damaged and unusual archives that still hold pages
    "http://commoncrawl.org/": (DROP, "2010s home page: donation appeal"),
    "http://www.houstonpress.com/music/a-humble-chance-the-rapper-leads-a-spiritual-awakening-"
    "at-revention-8866723": (KEEP, "concert review"),
    "http://example.com/": (DROP, "placeholder page"),
    "http://www.uraharajuku.st/": (DROP, "shop navigation (28 captures, one text)"),
}


def label_of(url: str) -> tuple[str, str] | None:
    """The label of a page by URL; the Japanese shop's 28 product URLs share one label."""
    if url.startswith("http://www.uraharajuku.st/"):
        return PAGE_LABELS["http://www.uraharajuku.st/"]
    return PAGE_LABELS.get(url)


@dataclass(frozen=True)
class Page:
    """One labelled page as the extract stage sees it: decoded, main text extracted."""

    url: str
    text: str
    label: str
    why: str


def labelled_pages() -> list[Page]:
    """Every HTML page of the shared WARCs (the damaged ones in edge/ included) read by the
    platform's own reader, decoded and extracted as the extract stage does (trafilatura), with
    its label; a text seen twice (captures of one page, the shop's 28 pages) counts once."""
    from bench.harness import WARC_DIR
    from fm_assets.formats.reader import FileRecordReader
    from fm_assets.formats.records import ParsedRecord
    from fm_assets.stages.decoding import decode_bytes
    from fm_assets.stages.extract import trafilatura_text
    from fm_assets.stages.normalize import normalize_text

    files = [*sorted(WARC_DIR.glob("*.warc.gz")), *sorted((WARC_DIR / "edge").iterdir())]
    pages: dict[str, Page] = {}
    for path in files:
        with path.open("rb") as stream:
            items = list(FileRecordReader(path.name, stream))
        for item in items:
            if not isinstance(item, ParsedRecord) or item.content_type != "html" or not item.url:
                continue
            decoded, _ = decode_bytes(item.content, item.charset)
            text = normalize_text(trafilatura_text(decoded or "", item.url) or "")
            labelled = label_of(item.url)
            if text and labelled is not None and text not in pages:
                pages[text] = Page(item.url, text, *labelled)
    return list(pages.values())
