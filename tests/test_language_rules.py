"""Language-aware quality rules: script-aware scores, the family a language's documents are judged
by, and real German, Japanese and Chinese prose judged by its family's rules rather than the
English ones. Fast: no Ray."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from fm_assets.curation.quality.families import (
    CJK,
    ENGLISH,
    SPACED,
    family_thresholds,
    language_family,
    rules_by_family,
)
from fm_assets.curation.quality.scores import score_text, score_texts
from fm_assets.curation.quality.script import count_units
from fm_assets.curation.quality.thresholds import QualityThresholds, decide, decide_batch
from fm_assets.stages.decoding import decode_bytes
from fm_assets.stages.extract import trafilatura_text
from fm_assets.stages.normalize import normalize_text
from tests.paths import ARTICLE_GROUND_TRUTH, WARC_DIR

# Article bodies of the extraction benchmark, by page id prefix.
GERMAN = ("57b4dafd18cf", "ba07d1e64775")
JAPANESE = ("85439e26c41c", "f105de6e63ca")
# The one Chinese page of cc-main-2020-34-sample that is prose (a story), and two that are not.
CHINESE_PROSE = "http://0513mt.com/index.php/art/detail/id/8884.html"
CHINESE_LISTING = "http://0755krk.com/76104/list_4_1.html"
CHINESE_FOOTER = "http://05925.net/index.php/vod/type/id/53.html"


def script(name: str) -> str:
    return f"script_v1__{name}"


def test_units_count_cjk_characters_and_other_words() -> None:
    assert count_units("one two three") == 3
    assert count_units("我们去了。") == 5  # four ideographs and the full stop
    assert count_units("Kindle書籍を読む") == 6  # "Kindle" and five characters
    assert count_units("") == 0


@pytest.mark.parametrize(
    ("line", "sentences"),
    [
        ("他来了。我们走了！你呢？", 3),  # CJK marks end sentences with no space after them
        ("It works. Yes it does.", 2),
        ("« Il est parti ce matin. »", 1),  # closed by a French quote
        ("Die Sitzung endete um acht Uhr.", 1),
        ("Version 3.14 of the tool is out now", 0),  # no sentence end at the line's end
        ("Short line.", 0),  # under five units
    ],
)
def test_sentences_are_counted_in_any_script(line: str, sentences: int) -> None:
    assert score_text(line)[script("kept_sentence_count")] == sentences


def test_lines_about_javascript_or_policies_hold_no_sentences() -> None:
    text = "Please enable JavaScript to view this page.\nRead our privacy policy before you go."
    assert score_text(text)[script("kept_sentence_count")] == 0


@pytest.mark.parametrize(
    ("language", "family"),
    [("en", ENGLISH), ("de", SPACED), ("fr", SPACED), ("ko", SPACED), ("zh", CJK), ("ja", CJK)],
)
def test_the_family_follows_the_detected_language(language: str, family: str) -> None:
    assert language_family(language) == family


def test_families_derive_their_bounds_from_the_published_ones() -> None:
    base = QualityThresholds()
    assert family_thresholds(base, ENGLISH) == base
    spaced = family_thresholds(base, SPACED)
    assert spaced.gopher_min_stop_words is None and spaced.c4_min_kept_sentences is None
    assert spaced.script_min_kept_sentences == 3 and spaced.gopher_min_words == 50
    cjk = family_thresholds(base, CJK)
    assert (cjk.script_min_units, cjk.script_max_units) == (75, 150_000)  # 1.5 chars per word
    assert cjk.script_max_list_ratio == 0.2 and cjk.script_min_kept_sentences == 3
    assert cjk.gopher_min_words is None and cjk.gopher_min_mean_word_length is None
    assert cjk.fineweb_max_short_line_fraction == 0.67  # character-level rules stay as they are


def test_a_rule_turned_off_is_off_in_every_family() -> None:
    base = QualityThresholds(
        rule_sets=frozenset({"gopher_v1", "fineweb_v1"}), gopher_min_words=None
    )
    rules = rules_by_family(base)
    assert rules[SPACED].script_min_kept_sentences is None  # C4 is not chosen
    assert rules[CJK].script_min_kept_sentences is None and rules[CJK].script_min_units is None
    assert rules[CJK].script_max_list_ratio == 0.2
    with pytest.raises(ValueError, match="unknown language families"):
        rules_by_family(base, {"latin": {"gopher_min_words": 10}})
    overridden = rules_by_family(QualityThresholds(), {CJK: {"script_min_units": 200}})
    assert overridden[CJK].script_min_units == 200 and overridden[ENGLISH].script_min_units is None


def _articles(prefixes: tuple[str, ...]) -> list[str]:
    truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    return [v["articleBody"] for k, v in sorted(truth.items()) if k.startswith(prefixes)]


@pytest.fixture(scope="module")
def chinese_pages() -> dict[str, str]:
    """The extracted, normalised text of three Chinese pages of the Common Crawl sample."""
    from warcio.archiveiterator import ArchiveIterator

    wanted = {CHINESE_PROSE, CHINESE_LISTING, CHINESE_FOOTER}
    pages = {}
    with (WARC_DIR / "cc-main-2020-34-sample.warc.gz").open("rb") as stream:
        for record in ArchiveIterator(stream):
            url = record.rec_headers.get_header("WARC-Target-URI")
            if record.rec_type == "response" and url in wanted:
                kind = record.http_headers.get_header("Content-Type") or ""
                charset = kind.split("charset=")[1].split(";")[0] if "charset=" in kind else None
                html, _ = decode_bytes(record.content_stream().read(), charset)
                pages[url] = normalize_text(trafilatura_text(html or "", url) or "")
    assert set(pages) == wanted
    return pages


def test_german_and_japanese_articles_pass_their_familys_rules() -> None:
    rules = rules_by_family(QualityThresholds())
    german, japanese = _articles(GERMAN), _articles(JAPANESE)
    assert len(german) == len(japanese) == 2
    assert decide_batch(score_texts(german), rules[SPACED]) == [None, None]
    assert decide_batch(score_texts(japanese), rules[CJK]) == [None, None]
    # Judged as English, one German article would go for lack of English stop words (the
    # other quotes a few English phrases) and both Japanese ones as too few "words".
    assert decide_batch(score_texts(german), rules[ENGLISH]) == [None, "gopher_stop_words"]
    assert decide_batch(score_texts(japanese), rules[ENGLISH]) == ["gopher_min_words"] * 2


def test_chinese_prose_is_kept_and_its_boilerplate_dropped(chinese_pages: dict[str, str]) -> None:
    rules = rules_by_family(QualityThresholds())
    prose = score_text(chinese_pages[CHINESE_PROSE])
    assert decide(prose, rules[CJK]) is None
    assert prose["gopher_v1__word_count"] < 50 < prose[script("unit_count")]
    assert decide(prose, rules[ENGLISH]) == "gopher_min_words"  # why CJK needs its own rules
    assert decide(score_text(chinese_pages[CHINESE_LISTING]), rules[CJK]) == "gopher_bullet_lines"
    assert decide(score_text(chinese_pages[CHINESE_FOOTER]), rules[CJK]) == "script_min_sentences"


def test_decide_by_family_judges_each_row_by_its_language() -> None:
    from fm_assets.curation.quality.families import decide_by_family

    german = _articles(GERMAN)[1]
    texts = [german, german, "Too short to be a page."]
    scores = pa.table(score_texts(texts))
    decided = decide_by_family(scores, ["de", "en", "fr"], rules_by_family(QualityThresholds()))
    assert decided == [
        (SPACED, None),
        (ENGLISH, "gopher_stop_words"),
        (SPACED, "gopher_min_words"),
    ]
    with pytest.raises(ValueError, match="2 languages for 3 rows"):
        decide_by_family(scores, ["de", "en"], rules_by_family(QualityThresholds()))


@pytest.mark.timeout(60)
def test_a_long_run_of_full_stops_is_scored_in_one_pass() -> None:
    # Sentence ends are matched from the first mark of a run only: a million dots not followed
    # by a space once took time quadratic in the run (C4's sentence count too).
    line = "one two three four five " + "." * 1_000_000 + "x."
    scores = score_text(line)
    assert scores["c4_v1__kept_sentence_count"] == scores[script("kept_sentence_count")] == 1
