"""Dataset cards over a small platform state written straight into a fresh catalog (no Ray)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from fm_assets.cards.build import DatasetCard, build_card, write_card, write_card_to_store
from fm_assets.curation.policy import load_policy
from fm_assets.execution import pipeline
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.landing import MANIFEST_FORMAT_VERSION, BatchManifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import DatasetVersion, create_version

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
STAGES = pipeline.STAGE_NAMES
NS = "cloud"  # the data namespace of every batch the tests write


SVG = "{http://www.w3.org/2000/svg}"


def _bar_tooltips(svg: bytes) -> list[str]:
    """The tooltip of every bar of a plot, top to bottom, left to right."""
    return [str(r.findtext(SVG + "title")) for r in ET.fromstring(svg).iter(SVG + "rect")][1:]


def _texts(svg: bytes) -> list[str]:
    return [str(t.text) for t in ET.fromstring(svg).iter(SVG + "text")]


def _fill(table: str, rows: Sequence[Mapping[str, object]]) -> pa.Table:
    """Rows of `table` with every column the test does not care about set to a plain value."""
    schema = catalog.table_schema(table)
    defaults: dict[str, object] = {}
    for field in schema:
        if pa.types.is_timestamp(field.type):
            defaults[field.name] = NOW
        elif field.nullable:
            defaults[field.name] = None
        elif pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            defaults[field.name] = ""
        elif pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            defaults[field.name] = b""
        elif pa.types.is_boolean(field.type):
            defaults[field.name] = False
        elif pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            defaults[field.name] = []
        else:
            defaults[field.name] = 0
    return pa.Table.from_pylist([defaults | dict(row) for row in rows], schema=schema)


def _stage_run(row: Mapping[str, object]) -> dict[str, object]:
    """A complete stage-run record from the fields a test cares about."""
    return {
        "code_version": "1",
        "config_hash": "",
        "stage_key": "",
        "input_snapshot_id": None,
        "output_snapshot_id": 0,
        "records_in": 0,
        "records_kept": 0,
        "records_quarantined": 0,
        "run_id": None,
        "committed_at": NOW,
        **row,
    }


def _land(settings: Settings, batch_id: str, source: str) -> None:
    """A landing manifest (no files) for a batch the test writes rows of: where the platform
    finds the batch's data namespace."""
    manifest = BatchManifest(
        format_version=MANIFEST_FORMAT_VERSION,
        batch_id=batch_id,
        source=source,
        license="CC0-1.0",
        namespace=NS,
        ingested_at=NOW.isoformat(),
        tool_version="test",
        files=(),
    )
    key = f"landing/batches/{batch_id}/manifest.json"
    open_object_store(settings).write_bytes_atomic(key, manifest.to_json().encode())


def _doc(doc_id: str, batch: str, source: str, **extra: object) -> dict[str, object]:
    row = {"doc_id": doc_id, "batch_id": batch, "record_id": doc_id, "source": source}
    return row | {"namespace": NS} | extra


@dataclass(frozen=True)
class Batch:
    batch_id: str
    source: str
    kept: list[tuple[int, list[str]]]  # (n, doc ids): the next n stages keep these documents
    quarantined: dict[str, list[str]]  # stage -> rules, one per quarantined record
    languages: dict[str, str]
    texts: dict[str, tuple[str, int]]  # final doc id -> (text, num_tokens)

    def rows(self, stage: str) -> list[dict[str, object]]:
        kept = [ids for n, ids in self.kept for _ in range(n)][STAGES.index(stage)]
        return [
            _doc(d, self.batch_id, self.source, language=self.languages.get(d, "en"))
            | (
                {"text": self.texts[d][0], "num_tokens": self.texts[d][1]}
                if d in self.texts
                else {}
            )
            for d in kept
        ]


def _write(
    settings: Settings,
    batches: list[Batch],
    pii: list[tuple[str, str, str]],
    policies: Mapping[str, str] | None = None,
) -> None:
    """Every table's rows for `batches`, one commit per table, quarantine and PII first as the
    runner commits them; `pii` holds (batch, doc id, kind), `policies` the policy JSON each
    batch's runs record (none: not recorded)."""
    policies = policies or {}
    for b in batches:
        _land(settings, b.batch_id, b.source)
    where = catalog.where_in("batch_id", [b.batch_id for b in batches])
    quarantine = [
        {"batch_id": b.batch_id, "stage": stage, "record_id": f"{stage}-{i}", "rule": rule}
        for b in batches
        for stage, rules in b.quarantined.items()
        for i, rule in enumerate(rules)
    ]
    catalog.replace_rows(
        settings, "quarantine", _fill("quarantine", quarantine), where, namespace=NS
    )
    redactions = [{"batch_id": b, "doc_id": d, "kind": k} for b, d, k in pii]
    catalog.replace_rows(
        settings, "pii_redactions", _fill("pii_redactions", redactions), where, namespace=NS
    )
    for stage in STAGES:
        rows = [row for b in batches for row in b.rows(stage)]
        catalog.replace_rows(settings, stage, _fill(stage, rows), where, namespace=NS)
    runs = [
        {
            "batch_id": b.batch_id,
            "stage": s,
            "code_version": "1",
            "stage_key": s,
            "policy_json": policies.get(b.batch_id),
            "records_kept": len(b.rows(s)),
            "records_quarantined": len(b.quarantined.get(s, [])),
            "records_in": len(b.rows(s)) + len(b.quarantined.get(s, [])),
        }
        for b in batches
        for s in STAGES
    ]
    for run in runs:
        bookkeeping.record_stage_run(settings, _stage_run(run))


D = [f"d{i}" for i in range(1, 7)]
E = [f"e{i}" for i in range(1, 5)]
BATCHES = [
    # 9 records: 3 dropped at raw, then one each at extraction, language and quality.
    Batch(
        "b1",
        "news",
        kept=[(1, D), (2, D[:5]), (2, D[:4]), (5, D[:3])],
        quarantined={
            "raw_documents": ["exact_duplicate", "exact_duplicate", "record_too_large"],
            "extracted_documents": ["extraction_empty"],
            "language_tagged_documents": ["language_not_allowed"],
            "quality_filtered_documents": ["gopher_min_words"],
        },
        languages={"d1": "en", "d2": "de", "d3": "en"},
        texts={"d1": ("héllo wörld", 10), "d2": ("hallo", 20), "d3": ("x" * 40, 30)},
    ),
    # 4 records and a near-duplicate.
    Batch(
        "b2",
        "forum",
        kept=[(6, E), (4, E[:3])],
        quarantined={"near_deduplicated_documents": ["near_duplicate"]},
        languages={"e1": "en", "e2": "fr", "e3": "en"},
        texts={"e1": ("a" * 7, 5), "e2": ("bonjour", 7), "e3": ("z" * 300, 100)},
    ),
    # Outside the version: none of its rows may show up on the card.
    Batch(
        "b3",
        "other",
        kept=[(10, ["x1"])],
        quarantined={"raw_documents": ["exact_duplicate"] * 5},
        languages={},
        texts={"x1": ("other", 1000)},
    ),
]
PII = [
    ("b1", "d1", "EMAIL"),
    ("b1", "d1", "EMAIL"),
    ("b1", "d2", "PHONE"),
    ("b1", "d5", "EMAIL"),  # d5 was dropped before the PII stage: must not count
    ("b2", "e1", "EMAIL"),
    ("b3", "x1", "CREDIT_CARD"),
]


NEWS_POLICY = """
[datasets.news]
allowed_languages = ["de", "en"]
[datasets.news.quality_thresholds]
gopher_min_words = 40
[datasets.news.family_thresholds.cjk]
script_min_units = 120
[datasets.news.classifier]
sha256 = "none"
"""


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, DatasetVersion]:
    """Two batches cut into web@v1, then b1 rerun with other quarantine and PII rows."""
    home = tmp_path_factory.mktemp("fm-home")
    policy_file = home / "policies.toml"
    policy_file.write_text(NEWS_POLICY)
    settings = load_settings({"FM_HOME": str(home), "FM_POLICY_FILE": str(policy_file)})
    # b1 ran under its source's policy; b2's runs predate recorded policies.
    _write(settings, BATCHES, PII, {"b1": load_policy(settings, "news").to_json()})
    version, created = create_version(settings, "web@v1", ["b1", "b2"], run_id=None)
    assert created
    # After the cut: the card must keep describing the version as it was cut.
    b1 = catalog.where_equal("batch_id", "b1")
    late = _fill("quarantine", [{"batch_id": "b1", "stage": "raw_documents", "rule": "late"}])
    catalog.replace_rows(settings, "quarantine", late, b1, namespace=NS)
    late_pii = _fill("pii_redactions", [{"batch_id": "b1", "doc_id": "d1", "kind": "IP_ADDRESS"}])
    catalog.replace_rows(settings, "pii_redactions", late_pii, b1, namespace=NS)
    return settings, version


@pytest.fixture(scope="module")
def card(state: tuple[Settings, DatasetVersion]) -> DatasetCard:
    return build_card(*state)


def test_card_figures(state: tuple[Settings, DatasetVersion], card: DatasetCard) -> None:
    settings, version = state
    s = card.summary
    assert (s["documents"], s["tokens"]) == (6, 172)
    assert s["by_source"] == {
        "forum": {"documents": 3, "tokens": 112},
        "news": {"documents": 3, "tokens": 60},
    }
    assert s["by_language"] == {
        "de": {"documents": 1, "tokens": 20},
        "en": {"documents": 4, "tokens": 145},
        "fr": {"documents": 1, "tokens": 7},
    }
    flow = {w["stage"]: (w["records_in"], w["quarantined"], w["kept"]) for w in s["waterfall"]}  # type: ignore[attr-defined, index]
    assert [w["stage"] for w in s["waterfall"]] == list(STAGES)  # type: ignore[attr-defined, index]
    assert flow == {
        "raw_documents": (13, {"exact_duplicate": 2, "record_too_large": 1}, 10),
        "extracted_documents": (10, {"extraction_empty": 1}, 9),
        "normalized_documents": (9, {}, 9),
        "language_tagged_documents": (9, {"language_not_allowed": 1}, 8),
        "quality_scored_documents": (8, {}, 8),
        "quality_filtered_documents": (8, {"gopher_min_words": 1}, 7),
        "near_deduplicated_documents": (7, {"near_duplicate": 1}, 6),
        "pii_redacted_documents": (6, {}, 6),
        "decontaminated_documents": (6, {}, 6),
        "tokenized_documents": (6, {}, 6),
    }
    assert all(w["unaccounted"] == 0 for w in s["waterfall"])  # type: ignore[attr-defined, index]
    dedup = s["dedup"]
    assert dedup["exact"]["duplicates"] == 2 and dedup["exact"]["ratio"] == 2 / 13  # type: ignore[index]
    assert dedup["near"]["duplicates"] == 1 and dedup["near"]["ratio"] == 1 / 7  # type: ignore[index]
    assert s["pii"] == {
        "EMAIL": {"redactions": 3, "documents": 2},
        "PHONE": {"redactions": 1, "documents": 1},
    }
    lengths = s["lengths"]
    assert lengths["tokens"] == {  # type: ignore[index]
        "min": 5, "p50": 15.0, "p90": 65.0, "p99": 96.5, "max": 100, "mean": 28.667,
    }  # fmt: skip
    assert (lengths["characters"]["min"], lengths["characters"]["max"]) == (5, 300)  # type: ignore[index]
    json.dumps(s)  # the summary goes into asset metadata as is

    md = card.markdown
    for name, data in card.plots.items():
        assert f"]({name})" in md
        assert ET.fromstring(data).tag == SVG + "svg"
    assert sorted(card.plots) == [
        "characters_per_document.svg",
        "tokens_per_document.svg",
        "waterfall.svg",
    ]
    # Each bar of the waterfall names its rule and count; the histogram's bars hold every
    # final document, by tooltip, and the percentiles are in the legend.
    waterfall = _bar_tooltips(card.plots["waterfall.svg"])
    assert waterfall[0] == "records in: 13" and waterfall[-1] == "documents kept: 6"
    assert "raw: exact_duplicate: -2" in waterfall and "raw: record_too_large: -1" in waterfall
    tokens = _bar_tooltips(card.plots["tokens_per_document.svg"])
    assert sum(int(t.split()[0].replace(",", "")) for t in tokens) == 6
    legend = _texts(card.plots["tokens_per_document.svg"])
    percentiles = [t for t in legend if t.startswith("p")]
    assert percentiles[:2] == ["p50 15", "p90 65"] and percentiles[2] in ("p99 96", "p99 97")
    assert "| raw_documents | 13 | 3 | 10 | exact_duplicate 2, record_too_large 1 |" in md
    assert "| exact | raw_documents | 2 | 13 | 15.38% |" in md
    assert "| EMAIL | 3 | 2 |" in md
    assert "Not checked for this card." in md
    assert "other" not in md and "CREDIT_CARD" not in md and "late" not in md

    # The policy each batch was curated under, and what each rule dropped from each batch.
    policies = s["policies"]
    assert policies["b2"] == {"source": "", "policy": None}  # type: ignore[index]
    news = policies["b1"]["policy"]  # type: ignore[index]
    assert (news["name"], news["base"], news["allowed_languages"]) == ("news", "web", ["de", "en"])
    assert news["classifier_sha256"] is None
    assert s["drops_by_batch"]["b2"] == [  # type: ignore[index]
        {"stage": "near_deduplicated_documents", "rule": "near_duplicate", "records": 1}
    ]
    assert "### Policy 1: batches `b1` (news)" in md
    assert "| Languages | de, en (lid.176 score >= 0.65) |" in md
    assert "| Quality classifier | none |" in md
    # Every threshold, per language family: the override for all, the one for CJK only.
    assert "| gopher_min_words | `gopher_v1__word_count` | >= 40 | >= 40 | off |" in md
    assert "| gopher_stop_words | `gopher_v1__stop_word_count` | >= 2 | off | off |" in md
    assert "| script_min_units | `script_v1__unit_count` | off | off | >= 120 |" in md
    assert "### Policy 2: batches `b2` (source not recorded)" in md and "Not recorded" in md
    assert "| `b1` | quality_filtered_documents | gopher_min_words | 1 |" in md
    assert "| `b1` | raw_documents | exact_duplicate | 2 |" in md

    again = build_card(settings, version, contamination={"mmlu": {"items": 2}, "gsm8k": "clean"})
    assert again.markdown.split("## Contamination")[0] == md.split("## Contamination")[0]
    assert '| gsm8k | clean |\n| mmlu | {"items": 2} |' in again.markdown
    assert again.summary["contamination"] == {"gsm8k": "clean", "mmlu": {"items": 2}}


def test_card_files(
    state: tuple[Settings, DatasetVersion], card: DatasetCard, tmp_path: Path
) -> None:
    settings, _ = state
    paths = write_card(card, tmp_path / "card")
    assert [p.name for p in paths][-1] == "dataset_card.md"
    assert sorted(p.name for p in (tmp_path / "card").iterdir()) == sorted(
        ["dataset_card.md", *card.plots]
    )
    assert (tmp_path / "card" / "dataset_card.md").read_text() == card.markdown
    store = open_object_store(settings)
    uris = write_card_to_store(card, store, "cards/web@v1/")
    assert uris[-1] == store.uri("cards/web@v1/dataset_card.md")
    assert store.read_bytes("cards/web@v1/waterfall.svg") == card.plots["waterfall.svg"]


def test_card_of_version_whose_documents_were_all_dropped(fm_settings: Settings) -> None:
    """One batch, everything quarantined by quality: later stage tables never had a row."""
    batch = Batch(
        "b1",
        "news",
        kept=[(5, ["d1", "d2"]), (5, [])],
        quarantined={"quality_filtered_documents": ["gopher_min_words"] * 2},
        languages={},
        texts={},
    )
    _write(fm_settings, [batch], [])
    # Such a version is refused, naming what dropped its documents ...
    with pytest.raises(
        ValueError, match=r"quality_filtered_documents 2 -> 0 \(2 gopher_min_words\)"
    ):
        create_version(fm_settings, "web@v1", ["b1"], run_id=None)
    # ... and a card still describes one (cut before empty versions were refused).
    version = DatasetVersion(
        version_key="web@v1",
        dataset="web",
        version=1,
        batches=("b1",),
        snapshot_ids={
            NS: {t: catalog.current_snapshot_id(fm_settings, t, namespace=NS) or 0 for t in STAGES}
        },
        code_versions={},
        tokenizer_hash="",
        num_documents=0,
        num_tokens=0,
        content_hash="",
    )
    card = build_card(fm_settings, version)
    s = card.summary
    assert (s["documents"], s["tokens"], s["by_source"], s["pii"]) == (0, 0, {}, {})
    assert s["waterfall"][5] == {  # type: ignore[index]
        "stage": "quality_filtered_documents",
        "records_in": 2,
        "quarantined": {"gopher_min_words": 2},
        "kept": 0,
        "unaccounted": 0,
    }
    assert s["dedup"]["near"]["ratio"] == 0.0  # type: ignore[index]
    assert s["lengths"] == {"tokens": None, "characters": None}
    assert "No PII was redacted" in card.markdown
    assert _texts(card.plots["tokens_per_document.svg"]).count("no documents") == 1
    assert _bar_tooltips(card.plots["tokens_per_document.svg"]) == []
    assert _bar_tooltips(card.plots["waterfall.svg"])[-1] == "documents kept: 0"


@pytest.mark.parametrize(
    ("low", "high", "integer", "expected"),
    [
        (0, 13, True, [0, 5, 10, 15]),
        (5, 100, False, [0, 20, 40, 60, 80, 100]),
        (0, 3, True, [0, 1, 2, 3]),
        (7, 7, False, None),  # one value: still an axis around it
    ],
)
def test_axis_ticks_cover_the_data_in_round_steps(
    low: float, high: float, integer: bool, expected: list[float] | None
) -> None:
    from fm_assets.cards.svg import nice_ticks

    ticks = nice_ticks(low, high, 6, integer=integer)
    if expected is not None:
        assert ticks == expected
    assert ticks[0] <= low and ticks[-1] >= high and len(ticks) <= 7
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
