"""MinHash LSH near-dedup: definitions, datasketch equivalence, index decisions, persisted rows."""

from __future__ import annotations

import csv
import json
import random
import time
from pathlib import Path

import datasketch
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from fm_assets.curation.minhash import shingles as shingling
from fm_assets.curation.minhash.index import NEARDUP_INDEX_SCHEMA, NearDupIndex
from fm_assets.curation.minhash.shingles import (
    normalize_words,
    shingle_hash,
    shingle_sets,
    word_hash,
)
from fm_assets.curation.minhash.signatures import (
    MinHashConfig,
    band_hashes,
    jaccard,
    permutations,
    signatures,
    sketch,
)
from tests.paths import ARTICLE_GROUND_TRUTH, SHARED_DATA

CLOUGH = SHARED_DATA / "neardup" / "clough-stevenson"
MASK32 = 0xFFFFFFFF


@pytest.fixture(scope="module")
def articles() -> list[str]:
    data = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    return [data[key]["articleBody"] for key in sorted(data)]


def edited(text: str, fraction: float, seed: int = 0) -> str:
    """`text` with `fraction` of its words replaced by fresh tokens."""
    rng = random.Random(seed)
    words = text.split()
    for i in rng.sample(range(len(words)), max(1, round(len(words) * fraction))):
        words[i] = f"edited{i}"
    return " ".join(words)


def reference_shingles(text: str, n: int = 5) -> set[int]:
    """The shingle set by the scalar definitions, one word and one shingle at a time."""
    hashes = [word_hash(w) for w in normalize_words(text)]
    if not hashes:
        return set()
    if len(hashes) < n:
        return {shingle_hash(hashes)}
    return {shingle_hash(hashes[i : i + n]) for i in range(len(hashes) - n + 1)}


# --- definitions ----------------------------------------------------------------------------


def test_code_point_map_matches_the_definition_for_every_code_point() -> None:
    table = shingling._code_point_map()
    expected = np.array(
        [ord(c) if (c := shingling._normalise_char(chr(p))) else 0 for p in range(0x110000)],
        dtype=np.uint32,
    )
    assert np.array_equal(table, expected)


def test_normalisation_lowercases_strips_punctuation_and_splits_on_whitespace() -> None:
    text = "Don't STOP—the U.S.\u00a0economy,\tnaïve café; ΟΔΟΣ İ x_y 3.14 🙂 a\u3000b"
    assert normalize_words(text) == [
        "dont", "stopthe", "us", "economy", "naïve", "café", "οδοσ", "i", "x_y", "314", "a", "b",
    ]  # fmt: skip


def test_vectorised_shingles_equal_the_scalar_definition(articles: list[str]) -> None:
    rng = random.Random(7)
    junk = [
        "".join(chr(rng.randrange(0, 0x3000)) for _ in range(400)),
        bytes(rng.randrange(256) for _ in range(2000)).decode("latin-1"),
        "a\ud800b c\udfff d e f g",  # lone surrogates, as surrogateescape decoding leaves them
        "\x00\x01 nul and control \x1f chars \x7f here",
    ]
    texts = [*articles[:40], "", "   ", "!!! ...", "one", "two words", "a b c d", "a b c d e"]
    texts += [*junk, "word " * 3, "The cat. The cat. The cat. The cat. The cat. The cat."]
    for text, got in zip(texts, shingle_sets(texts), strict=True):
        assert got.dtype == np.uint64
        assert np.all(got[1:] > got[:-1])  # sorted, unique
        assert set(got.tolist()) == reference_shingles(text), text[:60]


def test_texts_in_one_batch_do_not_share_shingles_across_their_boundary() -> None:
    together = shingle_sets(["a b c", "d e f g h", "", "i j"])
    alone = [shingle_sets([t])[0] for t in ["a b c", "d e f g h", "", "i j"]]
    for got, want in zip(together, alone, strict=True):
        assert np.array_equal(got, want)


def test_config_hashes_and_s_curve() -> None:
    config = MinHashConfig()
    assert config.num_perm == 112
    assert config.config_hash() == MinHashConfig().config_hash()
    assert config.config_hash() != MinHashConfig(threshold=0.7).config_hash()
    # The threshold decides, it does not change index rows.
    assert config.index_config == MinHashConfig(threshold=0.7).index_config
    assert config.index_config != MinHashConfig(seed=2).index_config
    curve = [round(config.candidate_probability(s), 4) for s in (0.5, 0.7, 0.8, 0.9)]
    assert curve == [0.0533, 0.5645, 0.9235, 0.9996]  # the table in the module docstring
    with pytest.raises(ValueError, match="threshold"):
        MinHashConfig(threshold=0.0)
    with pytest.raises(ValueError, match="bands"):
        MinHashConfig(bands=0)


# --- datasketch equivalence -----------------------------------------------------------------


def test_signatures_equal_datasketch_minhash(articles: list[str]) -> None:
    texts = [*articles[:25], "tiny", ""]
    shingles = shingle_sets(texts)
    ours = signatures(shingles, MinHashConfig())
    for row, values in zip(ours, shingles, strict=True):
        # Plain datasketch: default scheme (affine32), seed 1, our shingle hashes as input.
        theirs = datasketch.MinHash(num_perm=112, seed=1, hashfunc=lambda h: h & MASK32)
        for value in values.tolist():
            theirs.update(value)
        assert np.array_equal(row, theirs.hashvalues)
    # Another seed and shape, passing our permutations explicitly.
    config = MinHashConfig(bands=4, rows=5, seed=12345)
    ours = signatures(shingles, config)
    perms = permutations(config.num_perm, config.seed)
    for row, values in zip(ours, shingles, strict=True):
        theirs = datasketch.MinHash(
            num_perm=config.num_perm,
            scheme="affine32",
            permutations=perms,
            hashfunc=lambda h: h & MASK32,
        )
        theirs.update_batch(values.tolist())
        assert np.array_equal(row, theirs.hashvalues)


def test_band_collisions_equal_datasketch_lsh_candidates(articles: list[str]) -> None:
    texts = []
    for i, text in enumerate(articles[:30]):
        texts += [text, edited(text, 0.01 * (i % 8), seed=i)]
    config = MinHashConfig()
    shingles = shingle_sets(texts)
    sigs = signatures(shingles, config)
    bands = band_hashes(sigs, config)
    lsh = datasketch.MinHashLSH(num_perm=112, params=(14, 8))
    sketches = []
    for i, sig in enumerate(sigs):
        sketches.append(datasketch.MinHash(num_perm=112, hashvalues=sig, scheme="affine32"))
        lsh.insert(i, sketches[-1])
    for i in range(len(texts)):
        ours = {j for j in range(len(texts)) if np.any(bands[i] == bands[j])}
        assert ours == set(lsh.query(sketches[i]))


# --- decisions ------------------------------------------------------------------------------


def test_edited_copy_is_a_duplicate_and_independent_texts_are_not(articles: list[str]) -> None:
    original = max(articles, key=len)
    copy = edited(original, 0.01)
    (a, b) = shingle_sets([original, copy])
    assert 0.85 < jaccard(a, b) < 0.95
    index = NearDupIndex()
    independent = [t for t in articles if t != original][:60]
    ids = ["orig", *[f"other{i}" for i in range(len(independent))], "copy"]
    decisions = index.find_duplicates(ids, [original, *independent, copy])
    assert decisions[-1].duplicate_of == "orig"
    assert decisions[-1].jaccard == pytest.approx(jaccard(a, b))
    assert not any(d.is_duplicate for d in decisions[:-1])
    assert len(index) == len(decisions) - 1


def test_within_batch_first_is_kept_and_later_copies_point_to_it(articles: list[str]) -> None:
    base = articles[3]
    texts = [articles[4], base, edited(base, 0.01, 1), articles[5], edited(base, 0.01, 2)]
    decisions = NearDupIndex().find_duplicates(["x", "first", "second", "y", "third"], texts)
    assert [d.duplicate_of for d in decisions] == [None, None, "first", None, "first"]
    assert all(d.jaccard >= 0.8 for d in decisions if d.is_duplicate)


def test_a_duplicate_is_not_indexed_so_nothing_dedups_against_it() -> None:
    w, x, y = ([f"{p}{i}" for i in range(1000)] for p in "wxy")
    a = " ".join(w)
    b = " ".join(w[:900] + x[:100])  # J(a, b) = 0.82
    c = " ".join(w[:800] + x[:100] + y[:100])  # J(b, c) = 0.81, J(a, c) = 0.67
    (sa, sb, sc) = shingle_sets([a, b, c])
    assert jaccard(sa, sb) >= 0.8 > jaccard(sa, sc) and jaccard(sb, sc) >= 0.8
    decisions = NearDupIndex().find_duplicates(["a", "b", "c"], [a, b, c])
    assert [d.duplicate_of for d in decisions] == [None, "a", None]


def test_cross_batch_rows_from_parquet_detect_the_copy(articles: list[str], tmp_path: Path) -> None:
    first = NearDupIndex()
    batch1 = articles[:50]
    ids1 = [f"doc-{i:03d}" for i in range(50)]
    assert not any(d.is_duplicate for d in first.find_duplicates(ids1, batch1))
    rows = first.new_index_rows()
    assert rows.schema == NEARDUP_INDEX_SCHEMA
    assert rows.num_rows == 50 * 14
    carries = rows.column("shingle_hashes").is_valid().to_numpy(zero_copy_only=False)
    assert np.array_equal(carries, rows.column("band").to_numpy() == 0)
    pq.write_table(rows, tmp_path / "index.parquet")

    second = NearDupIndex.from_rows(pq.read_table(tmp_path / "index.parquet"))
    batch2 = [articles[60], edited(articles[17], 0.01), articles[61]]
    decisions = second.find_duplicates(["new-a", "new-b", "new-c"], batch2)
    assert [d.duplicate_of for d in decisions] == [None, "doc-017", None]
    appended = second.new_index_rows()
    assert sorted(set(appended.column("doc_id").to_pylist())) == ["new-a", "new-c"]

    # The persistent table after two appends: several chunks, several files.
    third = NearDupIndex.from_rows(pa.concat_tables([rows, appended]))
    assert len(third) == 52
    decisions = third.find_duplicates(["c1", "c2"], [edited(articles[61], 0.01), articles[5]])
    assert [d.duplicate_of for d in decisions] == ["new-c", "doc-005"]


def test_one_index_over_many_batches_finds_copies_of_every_batch(articles: list[str]) -> None:
    index = NearDupIndex()
    for start in range(0, 100, 5):
        ids = [f"doc-{i}" for i in range(start, start + 5)]
        assert not any(
            d.is_duplicate for d in index.find_duplicates(ids, articles[start : start + 5])
        )
    copies = [edited(articles[i], 0.01, seed=i) for i in range(0, 100, 7)]
    decisions = index.find_duplicates([f"copy-{i}" for i in range(0, 100, 7)], copies)
    assert [d.duplicate_of for d in decisions] == [f"doc-{i}" for i in range(0, 100, 7)]


def test_rows_without_shingles_use_the_lookup_once_per_batch(articles: list[str]) -> None:
    first = NearDupIndex()
    first.find_duplicates([f"d{i}" for i in range(20)], articles[:20])
    rows = first.new_index_rows()
    stored = {
        doc_id: np.array(values, dtype=np.int64)
        for doc_id, values in zip(
            rows.column("doc_id").to_pylist(),
            rows.column("shingle_hashes").to_pylist(),
            strict=True,
        )
        if values is not None
    }
    calls: list[list[str]] = []

    def shingles_of(doc_ids: list[str]) -> list[np.ndarray]:
        calls.append(list(doc_ids))
        return [stored[d] for d in doc_ids]

    bands_only = rows.select(["doc_id", "band", "band_hash"])
    second = NearDupIndex.from_rows(bands_only, shingles_of=shingles_of)
    batch = [edited(articles[2], 0.01), edited(articles[9], 0.01), articles[40]]
    decisions = second.find_duplicates(["e2", "e9", "new"], batch)
    assert [d.duplicate_of for d in decisions] == ["d2", "d9", None]
    assert calls == [["d2", "d9"]]
    with pytest.raises(ValueError, match="shingles_of"):
        NearDupIndex.from_rows(bands_only).find_duplicates(["again"], [batch[0]])


def test_rows_in_the_persisted_layout_load_with_their_shingle_set_rows(
    articles: list[str],
) -> None:
    # The persisted index holds band rows with null shingles and one row per document, under
    # a negative band, with its shingle set: such rows load without a `shingles_of`.
    index = NearDupIndex()
    index.find_duplicates([f"d{i}" for i in range(10)], articles[:10])
    rows = index.new_index_rows()
    carries = pc.is_valid(rows.column("shingle_hashes"))
    sets = rows.filter(carries)
    sets = sets.set_column(1, "band", pa.array([-3] * sets.num_rows, pa.int32()))
    band_rows = rows.set_column(
        rows.schema.get_field_index("shingle_hashes"),
        "shingle_hashes",
        pa.nulls(rows.num_rows, pa.list_(pa.int64())),
    )
    loaded = NearDupIndex.from_rows(
        pa.concat_tables([t.cast(NEARDUP_INDEX_SCHEMA) for t in (sets, band_rows)])
    )
    assert len(loaded) == 10
    decisions = loaded.find_duplicates(["copy", "new"], [edited(articles[6], 0.01), articles[40]])
    assert [d.duplicate_of for d in decisions] == ["d6", None]
    with pytest.raises(ValueError, match="lack their shingle_hashes"):
        NearDupIndex.from_rows(sets.drop_columns(["shingle_hashes"]))


def test_rows_round_trip_through_an_iceberg_table(articles: list[str], tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "neardup", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}"
    )
    catalog.create_namespace("curation")
    table = catalog.create_table("curation.neardup_index", schema=NEARDUP_INDEX_SCHEMA)
    index = NearDupIndex()
    index.find_duplicates([f"d{i}" for i in range(10)], articles[:10])
    table.append(index.new_index_rows())
    loaded = NearDupIndex.from_rows(table.scan().to_arrow())
    decisions = loaded.find_duplicates(["copy"], [edited(articles[6], 0.01)])
    assert decisions[0].duplicate_of == "d6"


def test_a_retried_batch_is_kept_again_without_new_rows(articles: list[str]) -> None:
    index = NearDupIndex()
    ids = ["a", "b", "c"]
    texts = [articles[0], edited(articles[0], 0.01), articles[1]]
    first = index.find_duplicates(ids, texts)
    again = index.find_duplicates(ids, texts)
    assert [d.duplicate_of for d in first] == [None, "a", None]
    assert [d.duplicate_of for d in again] == [None, "a", None]
    assert index.new_index_rows().num_rows == 2 * 14


def test_clough_stevenson_targets() -> None:
    with (CLOUGH / "file_information.csv").open(newline="") as f:
        labels = [row for row in csv.DictReader(f) if row["Category"] != "orig"]

    def read(name: str) -> str:
        data = (CLOUGH / name).read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("cp1252", errors="replace")

    source_ids = [f"orig_task{t}.txt" for t in "abcde"]
    sources = NearDupIndex()
    sources.find_duplicates(source_ids, [read(s) for s in source_ids])
    rows = sources.new_index_rows()
    source_sets = dict(zip("abcde", shingle_sets([read(s) for s in source_ids]), strict=True))
    cut_above = cut_found = non_flagged = 0
    for label in labels:
        text = read(label["File"])
        decision = NearDupIndex.from_rows(rows).find_duplicates([label["File"]], [text])[0]
        j = jaccard(shingle_sets([text])[0], source_sets[label["Task"]])
        if label["Category"] == "cut" and j >= 0.8:
            cut_above += 1
            cut_found += decision.duplicate_of == f"orig_task{label['Task']}.txt"
        non_flagged += label["Category"] == "non" and decision.is_duplicate
    assert cut_above >= 1
    assert cut_found == cut_above
    assert non_flagged == 0


# --- bad inputs -----------------------------------------------------------------------------


def test_empty_texts_are_never_duplicates_and_never_indexed() -> None:
    index = NearDupIndex()
    decisions = index.find_duplicates(["e1", "p1", "e2", "p2"], ["", "?!", "", " .,; "])
    assert all(d.duplicate_of is None and d.num_shingles == 0 for d in decisions)
    assert len(index) == 0
    assert index.new_index_rows().num_rows == 0
    assert index.new_index_rows().schema == NEARDUP_INDEX_SCHEMA


def test_short_texts_are_one_shingle_of_all_their_words() -> None:
    index = NearDupIndex()
    decisions = index.find_duplicates(
        ["a", "b", "c", "d"], ["The cat sat.", "the CAT, sat!", "the dog sat", "cat"]
    )
    assert [d.duplicate_of for d in decisions] == [None, "a", None, None]
    assert [d.num_shingles for d in decisions] == [1, 1, 1, 1]


def test_a_5_mb_single_line_document_is_fast(articles: list[str]) -> None:
    text = " ".join(articles).replace("\n", " ")
    text = (text * (5_000_000 // len(text) + 1))[:5_000_000]
    start = time.perf_counter()
    decisions = NearDupIndex().find_duplicates(["big", "big2"], [text, text[:4_900_000]])
    elapsed = time.perf_counter() - start
    assert decisions[1].duplicate_of == "big"
    assert elapsed < 20  # ~1-2 s on a quiet 2-core machine; generous for a shared one


def test_a_single_5_mb_token_and_junk_do_not_break_anything() -> None:
    rng = random.Random(3)
    junk = [
        "x" * 5_000_000,
        "".join(chr(rng.randrange(0x20, 0x2FFFF)) for _ in range(20_000)),
        "\ud83d\ude00 \udcff " * 1000,
        "\x00" * 1000,
    ]
    sketched = sketch(junk, MinHashConfig())
    assert [s.size for s in sketched.shingles[:1]] == [1]
    assert sketched.shingles[3].size == 0
    decisions = NearDupIndex().find_duplicates(["j0", "j1", "j2", "j3"], junk)
    assert [d.duplicate_of for d in decisions] == [None, None, None, None]


def test_bad_calls_fail_with_a_reason(articles: list[str]) -> None:
    index = NearDupIndex()
    with pytest.raises(ValueError, match="2 doc_ids but 1 texts"):
        index.find_duplicates(["a", "b"], ["text"])
    with pytest.raises(ValueError, match="repeat within the batch"):
        index.find_duplicates(["a", "a"], ["one", "two"])
    with pytest.raises(TypeError, match="texts must be str"):
        index.find_duplicates(["a"], [None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="doc_ids must be str"):
        index.find_duplicates([1], ["text"])  # type: ignore[list-item]
    index.find_duplicates(["a"], [articles[0]])
    rows = index.new_index_rows()
    with pytest.raises(ValueError, match="rebuild the near-dup index"):
        NearDupIndex.from_rows(rows, MinHashConfig(seed=2))
    with pytest.raises(ValueError, match="lack columns"):
        NearDupIndex.from_rows(rows.drop_columns(["band_hash"]))
    bad_band = rows.set_column(1, "band", pa.array([99] * rows.num_rows, pa.int32()))
    with pytest.raises(ValueError, match="bands outside"):
        NearDupIndex.from_rows(bad_band)


def test_bands_and_buckets_go_one_group_per_cpu_on_a_small_batch_and_apart_on_a_big_one() -> None:
    from fm_assets.execution.planning import task_groups

    # A small batch: one task per CPU, every part once, in order.
    assert task_groups(14, 2, 20, 2_000_000) == [list(range(7)), list(range(7, 14))]
    assert task_groups(16, 3, 20, 50_000) == [
        [0, 1, 2, 3, 4, 5],
        [6, 7, 8, 9, 10],
        [11, 12, 13, 14, 15],
    ]
    # More CPUs than parts: one part a task.
    assert task_groups(14, 64, 20, 2_000_000) == [[b] for b in range(14)]
    # A big batch: groups shrink so no task takes much more than its share of rows.
    for rows in (150_000, 1_000_000, 5_000_000):
        groups = task_groups(14, 2, rows, 2_000_000)
        assert sorted(b for g in groups for b in g) == list(range(14))
        assert max(len(g) for g in groups) * rows <= 2 * 2_000_000 or len(groups) == 14
    assert task_groups(14, 2, 10_000_000, 2_000_000) == [[b] for b in range(14)]
    assert task_groups(0, 2, 20, 1) == []
