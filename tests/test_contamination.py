"""fm_assets.contamination: normalisation, eval-set reading, registry rows, matcher and redaction.

The targets of `python -m bench.contamination_eval` are asserted here on a seeded sample, with
its own inputs and scoring: eval items from ../shared/data/evalsets planted in the shared clean
documents (read in place), and every clean shared document, which must not match. The matcher is
also checked against the plain Python reference of `bench.contamination` (same rules, sets of
word tuples).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.contamination import PythonSetMatcher
from bench.contamination_eval import documents
from bench.contamination_eval.planting import (
    HOST_MIN_CHARS,
    VARIANTS,
    Planted,
    build_registries,
    load_eval_sets,
    plant,
    planted_documents,
)
from bench.contamination_eval.scoring import FP_LIMIT, score_planted
from fm_assets.contamination.eval_items import EvalItem, EvalSet, read_eval_set
from fm_assets.contamination.matcher import (
    DEFAULT_THRESHOLD,
    ContaminationMatcher,
    redact,
)
from fm_assets.contamination.normalize import (
    NgramHasher,
    batch_word_hashes,
    exact_hash,
    ngram_hashes,
    normalize_text,
    word_hashes,
    word_spans,
    words,
)
from fm_assets.contamination.registry import (
    CONTAMINATION_RULES_VERSION,
    ITEMS_SCHEMA,
    NGRAM_SIZE,
    REGISTRY_SCHEMA,
    BenchmarkRegistry,
    build_registry,
    from_stored,
)


def _eval_set(items: list[tuple[str, ...] | tuple[tuple[str, ...], ...]]) -> EvalSet:
    """A tiny in-memory eval set; each item is its field values."""
    rows = []
    for i, values in enumerate(items):
        rows.append(EvalItem(i, tuple(v if isinstance(v, tuple) else (v,) for v in values)))
    return EvalSet(path="<memory>", fields=("q", "a"), sha256="0" * 64, items=tuple(rows))


# --- normalisation ----------------------------------------------------------------------------


def test_normalisation_folds_case_width_accents_punctuation_and_numbers() -> None:
    text = "Janet’s ducks lay 16 eggs; ＣＡＦÉ cafe\u0301 café Straße ﬁne — x_y 1,000.5 ٣"
    assert words(text) == [
        "janet", "s", "ducks", "lay", "0", "eggs", "cafe", "cafe", "cafe",
        "strasse", "fine", "x", "y", "0", "0", "0", "0",
    ]  # fmt: skip
    assert normalize_text("  Hello,\n\tWORLD!! ") == "hello world"
    # Re-numbered variants are the same words; digits stay when asked.
    assert words("She sells 16 eggs for $2") == words("She sells 1600032 eggs for $7")
    assert words("in 2017", mask_numbers=False) == ["in", "2017"]


def test_word_spans_point_at_the_original_characters() -> None:
    text = "Ｗhat’s ½ of ﬁve?\nCafé 😀 naïve 2nd"
    spans = word_spans(text)
    assert len(spans) == len(words(text)) == len(word_hashes(text))
    pieces = [text[a:b] for a, b in spans]
    assert pieces == ["Ｗhat", "s", "½", "½", "of", "ﬁve", "Café", "naïve", "2nd"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.text(max_size=60))
def test_words_spans_and_hashes_agree(text: str) -> None:
    ws = words(text)
    hashes = word_hashes(text)
    assert len(word_spans(text)) == len(ws) == len(hashes)
    assert len(word_hashes(text, mask_numbers=False)) == len(ws)
    # A word's hash does not depend on where it stands.
    assert [int(h) for h in hashes] == [int(word_hashes(w)[0]) for w in ws]
    for (start, end), word in zip(word_spans(text), ws, strict=True):
        assert word in words(text[start:end]) or not text[start:end].isprintable()


def test_hashes_are_fixed_across_processes_and_machines() -> None:
    # Golden values (no salted hash() anywhere): if they change, every stored registry is
    # stale; bump CONTAMINATION_RULES_VERSION.
    assert int(word_hashes("eggs")[0]) == 0x27EBF90273F5D287
    pairs = ngram_hashes(word_hashes("one two three four"), 2)
    assert int(pairs[0]) == 0xB95AF65194EBCF07
    assert exact_hash("Janet’s ducks lay 16 eggs per day.") == 0xC2E41605FF8A53E3
    assert pairs.tolist() == ngram_hashes(word_hashes("ONE two, three; four"), 2).tolist()
    assert exact_hash("one two three four") == exact_hash("One.  Two three four!")


def test_ngram_hasher_matches_direct_hashing_and_batches() -> None:
    text = "the quick brown fox jumps over the lazy dog " * 3
    hashes = word_hashes(text)
    hasher = NgramHasher(hashes)
    fives = hasher.all(5)
    assert len(fives) == len(hashes) - 4
    assert fives[0] == fives[9]  # the same five words, nine words apart
    for start in (0, 7, 13):
        assert fives[start] == ngram_hashes(hashes[start : start + 5], 5)[0]
    assert hasher.at(np.array([0]), len(hashes))[0] == np.uint64(exact_hash(text))
    texts = ["a b c", "", "d 12 345 e", "ｆ"]
    joined, counts = batch_word_hashes(texts)
    assert counts.tolist() == [3, 0, 4, 1]
    assert joined.tolist() == np.concatenate([word_hashes(t) for t in texts]).tolist()


# --- eval items -------------------------------------------------------------------------------

ROWS = [
    {"question": "What is two plus two?", "answer": ["4", "four"], "meta": {"text": "x"}},
    {"question": "", "answer": [], "meta": {"text": None}},
    {"question": "Name a colour.", "answer": "red", "meta": {"text": "y"}},
]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    if path.name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    elif path.name.endswith(".jsonl.gz"):
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    else:
        table = pa.Table.from_pylist(
            [{**r, "answer": r["answer"] if isinstance(r["answer"], list) else [r["answer"]]}
             for r in rows]
        )  # fmt: skip
        if path.name.endswith(".parquet"):
            pq.write_table(table, path)
        elif path.name.startswith("stream"):
            with ipc.new_stream(path, table.schema) as writer:
                writer.write_table(table)
        else:
            with ipc.new_file(path, table.schema) as writer:
                writer.write_table(table)
    return path


@pytest.mark.parametrize(
    "name", ["set.jsonl", "set.jsonl.gz", "file.arrow", "stream.arrow", "set.parquet"]
)
def test_read_eval_set_in_every_format(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name, ROWS)
    eval_set = read_eval_set(path, ["question", "answer"])
    assert eval_set.count == 3
    assert eval_set.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert eval_set.items[0].text == "What is two plus two?\n4\nfour"
    assert eval_set.items[2].values == (("Name a colour.",), ("red",))
    assert eval_set.empty_item_ids == (1,)  # reported, not dropped
    nested = read_eval_set(path, ["meta.text"])
    assert [i.values for i in nested.items] == [(("x",),), ((),), (("y",),)]


def test_read_eval_set_says_which_file_and_field_is_wrong(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "set.jsonl", ROWS)
    with pytest.raises(ValueError, match=r"set\.jsonl.*'answers'.*question, answer, meta"):
        read_eval_set(jsonl, ["question", "answers"])
    with pytest.raises(
        ValueError, match=r"field 'meta' of item 0 is a record; name its text field: meta\.text"
    ):
        read_eval_set(jsonl, ["meta"])
    arrow = _write(tmp_path / "stream.arrow", ROWS)
    with pytest.raises(ValueError, match=r"stream\.arrow: no field 'meta\.txt'; 'meta' holds"):
        read_eval_set(arrow, ["meta.txt"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        read_eval_set(bad, ["question"])
    with pytest.raises(ValueError, match="unknown eval-set format"):
        read_eval_set(tmp_path / "set.csv", ["question"])


def test_read_the_shared_eval_sets() -> None:
    sets = load_eval_sets()
    assert {n: s.count for n, s in sets.items()} == {
        "gsm8k": 1319,
        "humaneval": 164,
        "nq_open": 3610,
    }
    assert all(not s.empty_item_ids for s in sets.values())
    assert sets["nq_open"].items[0].values[1] == ("14 December 1972 UTC", "December 1972")


# --- registry ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eval_sets() -> dict[str, EvalSet]:
    return load_eval_sets()


@pytest.fixture(scope="module")
def registries(eval_sets: dict[str, EvalSet]) -> list[BenchmarkRegistry]:
    return build_registries(eval_sets, NGRAM_SIZE)


@pytest.fixture(scope="module")
def matcher(registries: list[BenchmarkRegistry]) -> ContaminationMatcher:
    return ContaminationMatcher.from_registries(registries)


def test_registry_rows(registries: list[BenchmarkRegistry], eval_sets: dict[str, EvalSet]) -> None:
    by_name = {r.benchmark: r for r in registries}
    for registry in registries:
        assert registry.items.schema.equals(ITEMS_SCHEMA)
        assert registry.ngrams.schema.equals(REGISTRY_SCHEMA)
        assert registry.item_count == eval_sets[registry.benchmark].count
        assert set(registry.items.column("rules_version").to_pylist()) == {
            CONTAMINATION_RULES_VERSION
        }
    gsm = by_name["gsm8k"]
    first = gsm.items.slice(0, 1).to_pylist()[0]
    item = eval_sets["gsm8k"].items[0]
    assert first["word_count"] == len(words(item.text))
    assert from_stored(gsm.items.column("exact_hash"))[0] == np.uint64(exact_hash(item.text))
    assert first["file_sha256"] == eval_sets["gsm8k"].sha256
    rows = gsm.ngrams.filter(pa.compute.equal(gsm.ngrams.column("item_id"), 0))
    assert rows.num_rows == first["ngram_count"] > 0
    assert set(rows.column("role").to_pylist()) == {"ngram"}
    # NQ-open: half its items have no 13-gram; the short-item rule covers all but the few
    # whose answers are all under 2 characters ("---", "S"): those are reported unmatchable.
    nq = by_name["nq_open"]
    ngram_counts = nq.items.column("ngram_count").to_pylist()
    anchor_words = nq.items.column("anchor_words").to_pylist()
    assert sum(c == 0 for c in ngram_counts) > 1500
    no_rule = [
        i for i, (c, a) in enumerate(zip(ngram_counts, anchor_words, strict=True)) if not c | a
    ]
    assert no_rule == list(nq.unmatchable_item_ids) and len(no_rule) < 40
    for i in no_rule:
        answers = eval_sets["nq_open"].items[i].values[1]
        assert all(len(normalize_text(a, mask_numbers=False)) < 2 for a in answers)


def test_registry_leaves_out_numbers_and_templates() -> None:
    template = "For which of these two scenarios does the main character do something wrong ?"
    pets = ["cat", "dog", "hen", "cow", "pig", "owl", "eel", "bee", "ant", "elk", "yak", "emu"]
    items = [(f"{template} Scenario: I fed the {pet} its dinner late again.", "No") for pet in pets]
    items.append(("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26", "27"))
    registry = build_registry("toy", _eval_set(items))
    counts = registry.items.column("ngram_count").to_pylist()
    # Only the n-grams that reach into each item's own scenario remain.
    assert 0 < counts[0] < len(words(items[0][0])) - NGRAM_SIZE + 1
    assert registry.template_ngrams > 0
    assert counts[12] == 0 and registry.unmatchable_item_ids == (12,)


def test_registry_tables_round_trip_through_iceberg(
    tmp_path: Path, registries: list[BenchmarkRegistry], eval_sets: dict[str, EvalSet]
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh"
    )
    catalog.create_namespace("contamination")
    items = pa.concat_tables([r.items for r in registries])
    ngrams = pa.concat_tables([r.ngrams for r in registries])
    for name, table in (("items", items), ("ngrams", ngrams)):
        catalog.create_table(f"contamination.{name}", schema=table.schema).append(table)
    back_items = catalog.load_table("contamination.items").scan().to_arrow()
    back_ngrams = catalog.load_table("contamination.ngrams").scan().to_arrow()
    assert back_ngrams.num_rows == ngrams.num_rows
    text = f"Intro.\n{eval_sets['gsm8k'].items[5].text}\nOutro."
    from_iceberg = ContaminationMatcher(back_items, back_ngrams).match([text])
    assert [(m.benchmark, m.item_id) for m in from_iceberg[0]] == [("gsm8k", 5)]


# --- matcher ----------------------------------------------------------------------------------

HOST = (
    "The council met on Tuesday to discuss the new library. Residents asked about opening "
    "hours, parking and the cost of the building, which ran over budget last spring.\n"
)


def test_match_and_redact_a_planted_item(
    matcher: ContaminationMatcher, eval_sets: dict[str, EvalSet]
) -> None:
    item = eval_sets["gsm8k"].items[42]
    doc = HOST + item.text + "\n" + HOST
    (found,) = matcher.match([doc])
    assert [(m.benchmark, m.item_id, m.rule) for m in found] == [("gsm8k", 42, "ngram")]
    match = found[0]
    assert match.fraction == 1.0
    assert doc[match.span[0] : match.span[1]].split() == item.text.split()
    assert redact(doc, found).split() == (HOST + HOST).split()
    assert redact(doc, found, "[eval item removed]").count("[eval item removed]") == 1
    assert matcher.match([redact(doc, found)]) == [[]]


def test_short_items_need_question_and_answer(matcher: ContaminationMatcher) -> None:
    question = "when was the last time anyone was on the moon"  # NQ-open dev item 0
    hits = matcher.match(
        [
            f"{HOST}Q: {question.capitalize()}?\nA: In December 1972, Apollo 17.\n{HOST}",
            f"{HOST}Q: {question.capitalize()}?\nA: We do not know.\n{HOST}",
            f"December 1972, they said. {HOST}Q: {question}?\nA: no one knows. {HOST}",
            f"{HOST}Q: {question}?\nA: 14 December 1973 UTC\n",  # digits count in answers
            "Moon landings: the last time anyone was on the moon was in December 1972.",
        ]
    )
    assert [[(m.benchmark, m.item_id, m.rule) for m in h] for h in hits] == [
        [("nq_open", 0, "short")],
        [],
        [],
        [],
        [],
    ]
    (short,) = hits[0]
    assert short.fraction == 1.0
    doc = f"{HOST}Q: {question.capitalize()}?\nA: In December 1972, Apollo 17.\n{HOST}"
    assert doc[short.span[0] : short.span[1]] == (question.capitalize() + "?\nA: In December 1972")


def test_exact_rule_and_no_match_across_documents(
    matcher: ContaminationMatcher, eval_sets: dict[str, EvalSet]
) -> None:
    item = eval_sets["nq_open"].items[3]
    (exact,) = matcher.match([item.text.upper()])[0]
    assert (exact.benchmark, exact.item_id, exact.rule) == ("nq_open", 3, "exact")
    # No n-gram window runs from one document of a batch into the next: 26 of a 27-word item's
    # words end one document and the 27th starts the next (14 of its 15 n-grams < 0.95).
    item = " ".join(f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(27))
    toy = ContaminationMatcher.from_registries(
        [build_registry("toy", _eval_set([(item,)]))], threshold=0.95
    )
    head, tail = item.rsplit(" ", 1)
    assert toy.match([HOST + head, tail + " " + HOST]) == [[], []]
    assert [m.item_id for m in toy.match([HOST + item])[0]] == [0]


def test_batch_size_does_not_change_results(
    registries: list[BenchmarkRegistry], eval_sets: dict[str, EvalSet]
) -> None:
    rng = random.Random(1)
    docs = [HOST * rng.randint(1, 3) for _ in range(40)]
    for i in range(0, 40, 3):
        item = rng.choice(eval_sets[rng.choice(sorted(eval_sets))].items)
        docs[i] = plant(docs[i], item.text, rng)[0]
    big = ContaminationMatcher.from_registries(registries, batch_size=512).match(docs)
    small = ContaminationMatcher.from_registries(registries, batch_size=3).match(docs)
    assert big == small
    assert sum(bool(m) for m in big) == 14


def test_matcher_rejects_stale_or_broken_registries(registries: list[BenchmarkRegistry]) -> None:
    items = pa.concat_tables([r.items for r in registries])
    ngrams = pa.concat_tables([r.ngrams for r in registries])
    stale = items.set_column(
        items.schema.get_field_index("rules_version"),
        pa.field("rules_version", pa.string(), nullable=False),
        pa.array(["0"] * items.num_rows, pa.string()),
    )
    with pytest.raises(ValueError, match=r"rules.*rebuild the registry"):
        ContaminationMatcher(stale, ngrams)
    with pytest.raises(ValueError, match="n-gram rows; rebuild"):
        ContaminationMatcher(items, ngrams.slice(1))
    with pytest.raises(ValueError, match="registered twice"):
        ContaminationMatcher.from_registries([registries[0], registries[0]])
    with pytest.raises(ValueError, match="threshold"):
        ContaminationMatcher(items, ngrams, threshold=0.0)


# --- targets on real documents ----------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_documents() -> list[object]:
    return list(documents.clean_documents())


@pytest.fixture(scope="module")
def planted(
    eval_sets: dict[str, EvalSet], clean_documents: list[documents.Document]
) -> list[Planted]:
    hosts = [d for d in clean_documents if len(d.text) >= HOST_MIN_CHARS]
    return planted_documents(eval_sets, hosts, per_benchmark=100)


def test_targets_on_planted_and_clean_documents(
    matcher: ContaminationMatcher,
    planted: list[Planted],
    clean_documents: list[documents.Document],
) -> None:
    assert matcher.threshold == DEFAULT_THRESHOLD
    tallies = score_planted(planted, matcher.match([p.text for p in planted]))
    for variant in VARIANTS:
        for benchmark in variant.benchmarks:
            tally = tallies[(benchmark, variant.name)]
            if variant.target is not None:
                assert tally.recall >= variant.target, (benchmark, variant.name, tally)
            if not variant.expected:  # negatives: the short rule must not fire
                assert not (tally.by_rule or {}).get("short"), (benchmark, variant.name)
    assert tallies[("nq_open", "qa_labelled")].recall >= 0.95
    results = matcher.match([d.text for d in clean_documents])
    flagged = [d for d, m in zip(clean_documents, results, strict=True) if m]
    assert len(clean_documents) > 1500
    assert len(flagged) <= FP_LIMIT * len(clean_documents), [d.name for d in flagged]


def test_matcher_agrees_with_the_plain_python_reference(
    eval_sets: dict[str, EvalSet],
    matcher: ContaminationMatcher,
    planted: list[Planted],
    clean_documents: list[documents.Document],
) -> None:
    reference = PythonSetMatcher(eval_sets, n=NGRAM_SIZE, threshold=DEFAULT_THRESHOLD)
    texts = [p.text for p in planted[::4]] + [d.text for d in clean_documents[:300]]
    ours = [{(m.benchmark, m.item_id, m.rule) for m in ms} for ms in matcher.match(texts)]
    assert ours == reference.match(texts)
    assert sum(bool(s) for s in ours) > 150
