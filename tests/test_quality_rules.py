"""Heuristic quality scores and decisions: exact values on constructed texts, real articles,
hostile inputs, and thresholds that change decisions without rescoring."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re

import pyarrow as pa
import pytest

from fm_assets.curation.quality.c4 import C4
from fm_assets.curation.quality.fineweb import FINEWEB
from fm_assets.curation.quality.gopher import GOPHER, MAX_NGRAM_WORDS
from fm_assets.curation.quality.scores import (
    RULE_SETS,
    RULES_VERSION,
    SCORE_COLUMNS,
    score_text,
    score_texts,
)
from fm_assets.curation.quality.text import MAX_SCORED_CHARS
from fm_assets.curation.quality.thresholds import (
    QUALITY_REASON_CODES,
    QUALITY_RULES,
    QualityThresholds,
    decide,
    decide_batch,
)
from tests.paths import ARTICLE_GROUND_TRUTH

# An opinion column from nytimes.com, 5,595 characters of ordinary English prose.
NYT_ARTICLE = "04a6711caa7c687592777718866e781e976e0fe684faebe8b3cedcef8cd0ea34"

GOPHER_ONLY = QualityThresholds(rule_sets=frozenset({GOPHER}))


@pytest.fixture(scope="module")
def articles() -> dict[str, dict[str, str]]:
    articles: dict[str, dict[str, str]] = json.loads(
        ARTICLE_GROUND_TRUTH.read_text(encoding="utf-8")
    )
    return articles


@pytest.fixture(scope="module")
def article_scores(articles: dict[str, dict[str, str]]) -> dict[str, list[float | int]]:
    return score_texts([article["articleBody"] for article in articles.values()])


def g(name: str) -> str:
    return f"{GOPHER}__{name}"


def c4(name: str) -> str:
    return f"{C4}__{name}"


def fw(name: str) -> str:
    return f"{FINEWEB}__{name}"


def rows(columns: dict[str, list[float | int]]) -> list[dict[str, float | int]]:
    count = len(next(iter(columns.values())))
    return [{name: values[i] for name, values in columns.items()} for i in range(count)]


# --- The contract: columns, codes, versions ---------------------------------------------------


def test_columns_are_arrow_and_iceberg_safe_names_that_carry_their_rule_set() -> None:
    assert RULES_VERSION == "quality_rules_v2"
    for name, dtype in SCORE_COLUMNS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        rule_set, _, score = name.partition("__")
        assert rule_set in RULE_SETS and score, name
        assert dtype in (pa.int64(), pa.float64())
    scores = score_texts(["One text.", "Another text, a little longer."])
    assert list(scores) == list(SCORE_COLUMNS)
    table = pa.table(scores, schema=pa.schema(list(SCORE_COLUMNS.items())))
    assert table.num_rows == 2


def test_reason_codes_are_stable_and_every_rule_is_wired() -> None:
    assert QUALITY_REASON_CODES == (
        "gopher_min_words",
        "gopher_max_words",
        "script_min_units",
        "script_max_units",
        "gopher_min_mean_word_length",
        "gopher_max_mean_word_length",
        "gopher_hash_to_word_ratio",
        "script_hash_to_unit_ratio",
        "gopher_ellipsis_to_word_ratio",
        "script_ellipsis_to_unit_ratio",
        "gopher_bullet_lines",
        "gopher_ellipsis_lines",
        "gopher_alpha_words",
        "gopher_stop_words",
        "gopher_dup_line_fraction",
        "gopher_dup_paragraph_fraction",
        "gopher_dup_line_char_fraction",
        "gopher_dup_paragraph_char_fraction",
        "gopher_top_2gram",
        "gopher_top_3gram",
        "gopher_top_4gram",
        "gopher_dup_5gram",
        "gopher_dup_6gram",
        "gopher_dup_7gram",
        "gopher_dup_8gram",
        "gopher_dup_9gram",
        "gopher_dup_10gram",
        "c4_lorem_ipsum",
        "c4_curly_bracket",
        "c4_min_sentences",
        "script_min_sentences",
        "c4_terminal_punct_lines",
        "c4_min_words_per_line",
        "c4_javascript_lines",
        "c4_policy_lines",
        "fineweb_line_punct_ratio",
        "fineweb_short_lines",
        "fineweb_char_dup_ratio",
        "fineweb_list_ratio",
        "script_list_ratio",
    )
    threshold_fields = {f.name for f in dataclasses.fields(QualityThresholds)} - {"rule_sets"}
    assert {rule.threshold for rule in QUALITY_RULES} == threshold_fields
    assert all(rule.column in SCORE_COLUMNS for rule in QUALITY_RULES)
    assert all(rule.op in (">=", "<=", ">", "<") for rule in QUALITY_RULES)


def test_published_default_thresholds() -> None:
    t = QualityThresholds()
    assert (t.gopher_min_words, t.gopher_max_words) == (50, 100_000)
    assert (t.gopher_min_mean_word_length, t.gopher_max_mean_word_length) == (3, 10)
    assert t.gopher_max_hash_to_word_ratio == t.gopher_max_ellipsis_to_word_ratio == 0.1
    assert (t.gopher_max_bullet_line_fraction, t.gopher_max_ellipsis_line_fraction) == (0.9, 0.3)
    assert (t.gopher_min_alpha_word_fraction, t.gopher_min_stop_words) == (0.8, 2)
    assert t.gopher_max_dup_line_fraction == t.gopher_max_dup_paragraph_fraction == 0.3
    assert t.gopher_max_dup_line_char_fraction == t.gopher_max_dup_paragraph_char_fraction == 0.2
    tops = [getattr(t, f"gopher_max_top_{n}gram_char_fraction") for n in (2, 3, 4)]
    dups = [getattr(t, f"gopher_max_dup_{n}gram_char_fraction") for n in range(5, 11)]
    assert tops == [0.20, 0.18, 0.16]
    assert dups == [0.15, 0.14, 0.13, 0.12, 0.11, 0.10]
    assert (t.c4_max_lorem_ipsum, t.c4_max_curly_brackets, t.c4_min_kept_sentences) == (0, 0, 3)
    assert (t.fineweb_min_line_punct_ratio, t.fineweb_max_short_line_fraction) == (0.12, 0.67)
    assert (t.fineweb_max_char_dup_ratio, t.fineweb_max_list_ratio) == (0.1, 0.3)


# --- Exact values on constructed texts --------------------------------------------------------


def test_ngram_repetition_values() -> None:
    # Ten one-character words; "a b c d e" twice.
    s = score_text("a b c d e a b c d e")
    assert s[g("top_2gram_char_fraction")] == 0.4  # "a b" (earliest of four 2-count 2-grams)
    assert s[g("top_3gram_char_fraction")] == 0.6  # "a b c" at 0 and 5
    assert s[g("top_4gram_char_fraction")] == 0.8
    assert s[g("dup_5gram_char_fraction")] == 0.5  # the second "a b c d e" only
    assert all(s[g(f"dup_{n}gram_char_fraction")] == 0.0 for n in range(6, 11))


def test_overlapping_ngrams_count_each_character_once() -> None:
    s = score_text("a a a a a a")  # six words
    assert s[g("top_2gram_char_fraction")] == 1.0  # five overlapping "a a", all six words
    assert s[g("dup_5gram_char_fraction")] == 5 / 6  # the 5-gram at 1 repeats the one at 0
    assert s[g("dup_6gram_char_fraction")] == 0.0


def test_top_ngram_ties_go_to_the_longer_ngram() -> None:
    # "aa b" and "c d" both occur twice; "aa b" has more characters (3 against 2).
    s = score_text("aa b aa b c d c d")
    assert s[g("top_2gram_char_fraction")] == 6 / 10
    # Nothing repeats: the top n-gram fraction is 0, not the share of a one-off n-gram.
    assert score_text("one two three four")[g("top_2gram_char_fraction")] == 0.0


def test_duplicate_lines_and_paragraphs() -> None:
    text = "alpha beta\nalpha beta\ngamma\n\nalpha beta\ngamma\n\n  \n\nalpha beta\ngamma"
    s = score_text(text)
    # Lines: alpha beta x4, gamma x3 -> 5 duplicates of 7 lines; chars 3*10 + 2*5 of 55.
    assert s[g("dup_line_fraction")] == 5 / 7
    assert s[g("dup_line_char_fraction")] == 40 / 55
    assert s[fw("char_dup_ratio")] == 40 / 55
    # Paragraphs: "alpha beta\nalpha beta\ngamma", then "alpha beta\ngamma" twice.
    assert s[g("dup_paragraph_fraction")] == 1 / 3
    assert s[g("dup_paragraph_char_fraction")] == 16 / (27 + 16 + 16)


def test_gopher_word_statistics() -> None:
    text = "#one two... three…\n• four 55 %%\n- six\nthe THE and"
    s = score_text(text)
    # Words: #one two... three… • four 55 %% - six the THE and
    assert s[g("word_count")] == 12
    assert s[g("mean_word_length")] == sum(map(len, text.split())) / 12
    assert s[g("hash_to_word_ratio")] == 1 / 12
    assert s[g("ellipsis_to_word_ratio")] == 2 / 12
    assert s[g("bullet_line_fraction")] == 2 / 4
    assert s[g("ellipsis_line_fraction")] == 1 / 4
    assert s[g("alpha_word_fraction")] == 8 / 12  # not •, 55, %%, -
    assert s[g("stop_word_count")] == 2  # "the" (twice, any case) and "and"


def test_c4_scores() -> None:
    text = "\n".join(
        [
            "This is the first kept line. It has two sentences!",
            "Please enable JavaScript to view this page properly.",
            "Read our Privacy Policy before you continue here.",
            "Short line.",
            'He said "we shall see."',
            "lorem ipsum dolor sit amet {x}",
        ]
    )
    s = score_text(text)
    assert s[c4("terminal_punct_line_fraction")] == 5 / 6
    assert s[c4("min_words_per_line")] == 2
    assert s[c4("javascript_line_count")] == 1
    assert s[c4("policy_line_count")] == 1
    assert s[c4("lorem_ipsum_count")] == 1
    assert s[c4("curly_bracket_count")] == 2
    # Kept: the first line (2 sentences) and the quote (5 words, ends in a quote: 1 sentence).
    assert s[c4("kept_sentence_count")] == 3


def test_fineweb_scores() -> None:
    lines = [
        "A line that ends in a full stop.",  # 8 words, 32 characters
        "Menu",
        "Home",
        "这是一个句子。",  # ends in an ideographic full stop
        "",
        "Another long line that has no ending at all",  # 9 words, 43 characters
    ]
    s = score_text("\n".join(lines))
    assert s[fw("line_punct_ratio")] == 2 / 5
    assert s[fw("short_line_fraction")] == 3 / 5
    assert s[fw("list_ratio")] == 5 / 20  # 5 newlines, 8 + 1 + 1 + 1 + 9 words


# --- Real text --------------------------------------------------------------------------------


def test_a_real_article_passes_every_default_rule(articles: dict[str, dict[str, str]]) -> None:
    s = score_text(articles[NYT_ARTICLE]["articleBody"])
    assert s[g("word_count")] > 800 and s[g("stop_word_count")] == 8
    assert decide(s) is None


def test_most_benchmark_articles_pass_gopher(
    article_scores: dict[str, list[float | int]],
) -> None:
    # 181 articles, 161 of them English; Gopher's rules are English rules (stop words).
    decisions = decide_batch(article_scores, GOPHER_ONLY)
    assert decisions.count(None) >= 150
    assert decisions.count("gopher_stop_words") >= 10  # the Portuguese, Russian, Korean, ...


def test_navigation_boilerplate_fails_on_repeated_lines() -> None:
    menu = [
        "Home",
        "About the company",
        "Products and services",
        "News",
        "Careers",
        "Contact us",
        "Terms and conditions",
        "Privacy policy",
        "Sign in to your account",
        "Follow us on social media",
    ]
    # The same menu in the header, the sidebar and the footer of one page.
    page = "\n".join(menu * 3)
    s = score_text(page)
    assert s[g("word_count")] >= 50
    assert s[g("dup_line_fraction")] == 20 / 30
    assert decide(s) == "gopher_dup_line_fraction"
    assert decide(s, dataclasses.replace(QualityThresholds(), rule_sets=frozenset({C4}))) == (
        "c4_min_sentences"
    )
    assert decide(s, dataclasses.replace(QualityThresholds(), rule_sets=frozenset({FINEWEB}))) == (
        "fineweb_line_punct_ratio"
    )


# --- Hostile input never raises ---------------------------------------------------------------


def hostile_texts() -> dict[str, str]:
    rng = random.Random(0)
    return {
        "empty": "",
        "whitespace": " \n\n\t \r\n ",
        "one word": "word",
        "binary latin-1": rng.randbytes(20_000).decode("latin-1"),
        "binary utf-8 replace": rng.randbytes(20_000).decode("utf-8", errors="replace"),
        "lone surrogates": "text \ud800 with \udfff surrogates",
        "nul and controls": "a\x00b\x01c\x1b[31m red \x7f\x85 end",
        "mixed scripts": "English 中文句子。 Русский текст, العربية؟ हिन्दी। 😀 ∑∫ 123",
        "only punctuation": "... ### {{ }} --- ***\n• • •\n…",
        "crlf": "Line one.\r\nLine two.\r\n\r\nLine three.",
    }


@pytest.mark.parametrize("name", list(hostile_texts()))
def test_hostile_input_gets_finite_scores_and_a_decision(name: str) -> None:
    s = score_text(hostile_texts()[name])
    assert list(s) == list(SCORE_COLUMNS)
    for column, value in s.items():
        expected = int if SCORE_COLUMNS[column] == pa.int64() else float
        assert type(value) is expected, column
        assert math.isfinite(value) and value >= 0, column
        if column.endswith("fraction") or column.endswith("char_dup_ratio"):
            assert value <= 1.0, column
    decide(s)


def test_empty_and_one_word_texts() -> None:
    empty = score_text("")
    assert all(value == 0 for value in empty.values())
    assert decide(empty) == "gopher_min_words"
    one = score_text("word")
    assert one[g("word_count")] == 1 and one[c4("min_words_per_line")] == 1
    assert decide(one) == "gopher_min_words"


@pytest.mark.parametrize(
    "text",
    [
        "x" * 5_000_000,  # one 5 MB word
        "lorem " * 850_000,  # one 5 MB line of 850,000 words
        "a\n" * 2_500_000,  # 2.5 million one-word lines
    ],
    ids=["one-word", "one-line", "many-lines"],
)
@pytest.mark.timeout(120)  # a hang guard, not a timing assertion (bench/ measures speed)
def test_5mb_documents_are_scored(text: str) -> None:
    s = score_text(text)
    assert s[g("word_count")] == len(text.split())  # counted over the whole text
    assert decide(s) in ("gopher_min_words", "gopher_max_words")


def test_long_texts_are_scored_on_a_prefix() -> None:
    sentence = "The quick brown fox jumps over the lazy dog near the river bank today. "
    text = sentence * (MAX_SCORED_CHARS // len(sentence) + 1000)
    s = score_text(text)
    prefix = score_text(text[:MAX_SCORED_CHARS])
    assert s[g("word_count")] == len(text.split()) > prefix[g("word_count")]
    assert {k: v for k, v in s.items() if k != g("word_count")} == {
        k: v for k, v in prefix.items() if k != g("word_count")
    }
    assert prefix[g("word_count")] > MAX_NGRAM_WORDS


# --- Deciding from stored scores --------------------------------------------------------------


def test_thresholds_change_decisions_without_rescoring(
    article_scores: dict[str, list[float | int]],
) -> None:
    default = decide_batch(article_scores)
    assert default.count(None) >= 140
    stricter = decide_batch(
        article_scores, dataclasses.replace(QualityThresholds(), gopher_min_words=1_000)
    )
    assert stricter.count("gopher_min_words") > default.count("gopher_min_words")
    assert stricter.count(None) < default.count(None)
    # Turning a rule off only ever keeps more.
    looser = decide_batch(
        article_scores, dataclasses.replace(QualityThresholds(), gopher_min_stop_words=None)
    )
    assert looser.count("gopher_stop_words") == 0
    assert looser.count(None) > default.count(None)
    assert decide_batch(article_scores, QualityThresholds(rule_sets=frozenset())) == [None] * len(
        default
    )


def test_decide_batch_matches_decide_row_by_row_and_reads_arrow(
    article_scores: dict[str, list[float | int]],
) -> None:
    for thresholds in (QualityThresholds(), GOPHER_ONLY):
        expected = [decide(row, thresholds) for row in rows(article_scores)]
        assert decide_batch(article_scores, thresholds) == expected
        table = pa.table(article_scores, schema=pa.schema(list(SCORE_COLUMNS.items())))
        assert decide_batch(table, thresholds) == expected


def test_missing_values_fail_and_missing_columns_say_how_to_fix() -> None:
    s = score_text("Some text. " * 100)
    assert decide({**s, g("word_count"): None}) == "gopher_min_words"
    assert decide({**s, g("mean_word_length"): math.nan}) == "gopher_min_mean_word_length"
    columns = {name: [value, value] for name, value in s.items()}
    columns[g("word_count")] = [None, 500]
    assert decide_batch(columns, GOPHER_ONLY)[0] == "gopher_min_words"
    del columns[g("word_count")]
    with pytest.raises(ValueError, match="score_texts"):
        decide_batch(columns)
    with pytest.raises(ValueError, match="score_texts"):
        decide({})


def test_invalid_thresholds_are_rejected() -> None:
    with pytest.raises(ValueError, match="rule_sets"):
        QualityThresholds(rule_sets=frozenset({"gopher_v2"}))
    with pytest.raises(ValueError, match="finite and >= 0"):
        QualityThresholds(gopher_min_words=-1)
    with pytest.raises(ValueError, match="exceeds"):
        QualityThresholds(gopher_min_words=200_000)
    with pytest.raises(ValueError, match="number or None"):
        QualityThresholds(gopher_min_words="50")  # type: ignore[arg-type]


def test_alpha_word_fraction_matches_its_per_word_definition() -> None:
    # The score scans the text once; the definition is per word: a word holds a letter.
    letter = re.compile(r"[^\W\d_]")
    alphabet = "aB1_.#中²é\u0301😀-\x00 \n\t\xa0\x1c\x85\u2028\u3000"
    rng = random.Random(1)
    for _ in range(2_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        words = text.split()
        with_letter = sum(1 for word in words if letter.search(word))
        expected = with_letter / len(words) if words else 0.0
        assert score_text(text)[g("alpha_word_fraction")] == expected, repr(text)
