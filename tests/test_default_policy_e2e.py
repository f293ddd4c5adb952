"""The default web policy end to end, with no policy file: real articles kept, planted junk
quarantined by the rules meant for it, the card stating the policy, `fm explain` showing why;
a changed policy is a new version; the multilingual example keeps German, French, Japanese and
Chinese prose.

Articles: the English pages of the extraction benchmark's held-out sites (sites the default
classifier never saw in training), landed as HTML. Junk, planted beside them: the held-out sites'
German, Portuguese and Russian articles (non-English prose), a line of spam repeated, a page of
navigation links, near-empty pages. One FM_HOME for both batches: the default classifier is
trained once, on first need.
"""

from __future__ import annotations

import gzip
import json
import os
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.curation.classifier.training import in_holdout
from fm_assets.registries.classifiers import default_classifier
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import stage_runs
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import require_version
from tests.paths import ARTICLE_BENCHMARK, ARTICLE_GROUND_TRUTH, NEOX_TOKENIZER, REPO, WARC_DIR

pytestmark = pytest.mark.slow

NON_ENGLISH = {"57b4dafd18cf", "ba07d1e64775", "23aaecd14171", "3252222e61fe", "c4a3637c6696"}
# Its extracted text holds the newsletter's items three times over (Gopher's repetition rule
# is right to drop it); every other English article of the held-out sites is kept.
REPEATED_ARTICLE = "fde930b01859"
SPAM = "\n".join(["Click here to get the best deals on cheap watches and bags today!"] * 30)
NAVIGATION = [
    "Home", "About us", "Products", "Services", "Pricing", "Blog", "Careers", "Press",
    "Contact us", "Sign in", "Create an account", "Help center", "Shipping and returns",
    "Terms of Use", "Privacy Policy", "Cookie settings", "Accessibility", "Sitemap",
    "Follow us on Twitter", "Like us on Facebook", "Subscribe to the newsletter",
    "Back to the top", "Store locator", "Gift cards", "Order status", "Size guide",
]  # fmt: skip
FRENCH = """Le phare de la pointe du Grouin veille sur l'entrée de la baie depuis plus d'un \
siècle. Construit en granit gris extrait des carrières voisines, il mesure vingt-deux mètres et sa \
lumière porte à près de vingt milles par temps clair.
Pendant des décennies, une famille de gardiens s'est relayée dans la petite maison blottie au \
pied de la tour. Chaque soir, il fallait monter les cent douze marches, nettoyer la lentille et \
vérifier la réserve de pétrole. Les registres conservés à la mairie racontent les tempêtes de \
l'hiver 1910, quand la mer a arraché une partie du mur d'enceinte.
L'électrification, achevée en 1954, a transformé ce travail quotidien. Le dernier gardien a \
quitté les lieux en 1987, et l'automatisme a pris le relais. Aujourd'hui, une association de \
bénévoles ouvre le phare aux visiteurs pendant l'été et organise des conférences sur l'histoire \
de la navigation dans la région.
Les habitants du village restent attachés à ce bâtiment. Pour beaucoup d'entre eux, la lumière \
qui balaie l'horizon chaque nuit fait partie du paysage autant que les falaises et les îlots. \
« Tant que le phare tourne, la baie est en sécurité », répète volontiers l'ancien maire."""


@dataclass
class Curated:
    settings: Settings
    batch_id: str
    version_key: str
    card: str
    names: dict[str, str]  # doc_id -> the name the test gave the input
    log: list[str]

    def outcome(self) -> dict[str, tuple[str, str]]:
        """name -> ("kept", "") or (stage, rule) for every input of the batch."""
        final = catalog.read_batch(self.settings, "tokenized_documents", self.batch_id)
        outcome = {self.names[d]: ("kept", "") for d in final.column("doc_id").to_pylist()}
        for row in catalog.read_batch(self.settings, "quarantine", self.batch_id).to_pylist():
            outcome[self.names[row["doc_id"]]] = (row["stage"], row["rule"])
        return outcome


def _held_out_pages() -> dict[str, tuple[str, bytes]]:
    """Page id prefix -> (page id, HTML) of every benchmark page whose site the classifier
    never saw."""
    truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    pages = {}
    for page_id, entry in sorted(truth.items()):
        host = (urllib.parse.urlsplit(entry["url"]).hostname or page_id).removeprefix("www.")
        if in_holdout(host, 0.2):
            html = gzip.decompress((ARTICLE_BENCHMARK / "html" / f"{page_id}.html.gz").read_bytes())
            pages[page_id[:12]] = (page_id, html)
    return pages


def _names(settings: Settings, batch_id: str) -> dict[str, str]:
    raw = catalog.read_batch(settings, "raw_documents", batch_id).to_pylist()
    bad = catalog.read_batch(settings, "quarantine", batch_id).to_pylist()
    return {
        r["doc_id"]: r.get("external_id") or r.get("url") or Path(r["source_file"]).stem
        for r in [*bad, *raw]
        if r["doc_id"]
    }


def _card(settings: Settings, version_key: str) -> str:
    store = open_object_store(settings)
    return store.read_bytes(f"cards/{version_key}/dataset_card.md").decode()


@pytest.fixture(scope="module")
def home(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("default-policy")
    names = ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update({"FM_HOME": str(root / "fm"), "DAGSTER_HOME": str(root / "fm" / "dagster")})
    os.environ.pop("FM_POLICY_FILE", None)  # no policy file: the default web policy
    register_tokenizer(load_settings(), NEOX_TOKENIZER, make_default=True)
    yield root
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="module")
def crawl(home: Path) -> Curated:
    settings = load_settings()
    assert settings.policy_file is None
    inputs = home / "crawl"
    inputs.mkdir()
    files = []
    truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    non_english = []
    for prefix, (page_id, html) in _held_out_pages().items():
        if prefix in NON_ENGLISH:
            # As text, not the page: the multilingual batch lands the German pages themselves,
            # which exact dedup would otherwise quarantine as this batch's records.
            non_english.append({"id": prefix, "text": truth[page_id]["articleBody"]})
            continue
        (inputs / f"{prefix}.html").write_bytes(html)
        files.append(inputs / f"{prefix}.html")
    navigation = "".join(f"<li><a href='/{i}'>{n}</a></li>" for i, n in enumerate(NAVIGATION))
    junk = [
        {"id": "spam", "text": SPAM},
        {"id": "navigation", "html": f"<html><body><nav><ul>{navigation}</ul></nav></body></html>"},
        {"id": "near-empty", "text": "Under construction. Check back soon!"},
        {"id": "not-found", "html": "<html><body><h1>404</h1><p>Page not found</p></body></html>"},
    ]
    records = [*junk, *non_english]
    (inputs / "junk.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    files.append(inputs / "junk.jsonl")
    batch, _ = operations.land(settings, files, source="crawl", license="MIT")
    log: list[str] = []
    operations.run_batch(settings, batch.batch_id, log.append)  # raises on a failed check
    version_key = operations.create_version(settings, "crawl", [batch.batch_id], log.append)
    return Curated(
        settings,
        batch.batch_id,
        version_key,
        _card(settings, version_key),
        _names(settings, batch.batch_id),
        log,
    )


def test_articles_are_kept_and_junk_is_quarantined_by_its_rule(crawl: Curated) -> None:
    outcome = crawl.outcome()
    articles = {name for name in outcome if len(name) == 12} - NON_ENGLISH
    assert len(articles) == 23
    assert {a: outcome[a] for a in articles if outcome[a][0] != "kept"} == {
        REPEATED_ARTICLE: ("quality_filtered_documents", "gopher_dup_line_fraction")
    }
    for name in NON_ENGLISH:
        assert outcome[name] == ("language_tagged_documents", "language_not_allowed"), name
    quality = "quality_filtered_documents"
    assert outcome["spam"] == (quality, "gopher_dup_line_fraction")
    assert outcome["navigation"] == (quality, "c4_min_sentences")
    assert outcome["near-empty"] == (quality, "gopher_min_words")
    assert outcome["not-found"] == (quality, "gopher_min_words")
    # The classifier was trained on first need, and registered as the default.
    assert any("training it once with the default recipe" in line for line in crawl.log)
    reasons = {
        r["rule"]: r["reason"]
        for r in catalog.read_batch(crawl.settings, "quarantine", crawl.batch_id).to_pylist()
    }
    assert reasons["gopher_min_words"].startswith("word_count ")
    assert reasons["gopher_min_words"].endswith(", kept when >= 50 (english rules)")


def test_the_card_states_the_policy_and_what_each_rule_dropped(crawl: Curated) -> None:
    card, batch = crawl.card, crawl.batch_id
    classifier = default_classifier(crawl.settings).model_sha256
    assert f"### Policy 1: batches `{batch}` (crawl)" in card
    assert "| Source (policy entry) | `crawl`, starting from `web` |" in card
    assert "| Languages | en (lid.176 score >= 0.65) |" in card
    assert "| Quality rule sets | gopher_v1, c4_v1, fineweb_v1 |" in card
    assert f"| Quality classifier | `{classifier}`, keeps P(hq) >= 0.03 |" in card
    assert "| gopher_min_words | `gopher_v1__word_count` | >= 50 | >= 50 | off |" in card
    assert "| script_min_units | `script_v1__unit_count` | off | off | >= 75 |" in card
    assert (
        "| fineweb_char_dup_ratio | `fineweb_v1__char_dup_ratio` | < 0.1 | < 0.1 | < 0.1 |" in card
    )
    assert f"| `{batch}` | language_tagged_documents | language_not_allowed | 5 |" in card
    assert f"| `{batch}` | quality_filtered_documents | gopher_dup_line_fraction | 2 |" in card
    assert f"| `{batch}` | quality_filtered_documents | gopher_min_words | 2 |" in card


def test_explain_shows_every_decision_with_its_scores_and_thresholds(crawl: Curated) -> None:
    by_name = {name: doc for doc, name in crawl.names.items()}
    result = CliRunner().invoke(main, ["explain", by_name["spam"]])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"batch {crawl.batch_id}" in out and "policy: `crawl` (from web)" in out
    assert "language_tagged_documents     kept  en at" in out
    assert "QUARANTINED gopher_dup_line_fraction: dup_line_fraction 0.9667" in out
    assert "FAIL gopher_dup_line_fraction" in out and "kept when <= 0.3" in out
    assert "pass gopher_stop_words" in out and "stop_word_count 3, kept when >= 2" in out
    assert "tokenized_documents" not in out  # no later stage saw it

    kept = CliRunner().invoke(main, ["explain", by_name["14cc2a0ca59c"]]).stdout
    assert "tokenized_documents           kept" in kept and "FAIL" not in kept
    assert "pass quality_classifier" in kept and "kept when >= 0.03" in kept
    assert CliRunner().invoke(main, ["explain", "0" * 64]).exit_code == 1


def test_a_changed_policy_is_new_runs_a_new_content_key_and_a_new_version(
    crawl: Curated, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = home / "stricter.toml"
    policy.write_text("[datasets.crawl.classifier]\nmin_score = 0.9\n")
    monkeypatch.setenv("FM_POLICY_FILE", str(policy))
    settings = load_settings()
    # The batch was curated under the old policy: cutting a version now is refused.
    refused = CliRunner().invoke(main, ["version", "create", "crawl"])
    assert refused.exit_code == 1
    assert f"batches {crawl.batch_id} (crawl: min_classifier_score)" in refused.output
    messages: list[str] = []
    operations.run_batch(settings, crawl.batch_id, messages.append)
    # Nothing is rescored: only the decision and the stages after it ran again.
    runs = Counter(r["stage"] for r in stage_runs(settings) if r["batch_id"] == crawl.batch_id)
    assert runs["quality_scored_documents"] == 1 and runs["language_tagged_documents"] == 1
    assert runs["quality_filtered_documents"] == runs["tokenized_documents"] == 2
    key = operations.create_version(settings, "crawl", [crawl.batch_id], messages.append)
    assert key == "crawl@v2"
    old, new = require_version(settings, crawl.version_key), require_version(settings, key)
    assert new.content_hash != old.content_hash and new.num_documents < old.num_documents
    assert "keeps P(hq) >= 0.9 |" in _card(settings, key)
    assert "keeps P(hq) >= 0.03 |" in _card(settings, crawl.version_key)  # v1 as it was cut


@pytest.fixture(scope="module")
def multilingual(home: Path, crawl: Curated) -> Curated:
    """The shipped multilingual example on German, French, Japanese and Chinese pages and the
    junk around them: the shared WARCs' Common Crawl sample (Chinese, German, Russian, Dutch,
    English pages) and its Japanese shop pages, the benchmark's German and Japanese articles,
    and a French page written for this test (no French prose is in the shared data)."""
    with pytest.MonkeyPatch.context() as patch:
        policy = REPO / "deploy" / "policies.multilingual.example.toml"
        patch.setenv("FM_POLICY_FILE", str(policy))
        settings = load_settings()
        inputs = home / "multilingual"
        inputs.mkdir()
        truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
        files = [WARC_DIR / "cc-main-2020-34-sample.warc.gz"]
        files.append(WARC_DIR / "edge" / "clueweb09-warc018-eucjp.warc.gz")
        for page_id in sorted(truth):
            if page_id.startswith(("57b4dafd18cf", "ba07d1e64775", "85439e26c41c", "f105de6e63ca")):
                html = gzip.decompress(
                    (ARTICLE_BENCHMARK / "html" / f"{page_id}.html.gz").read_bytes()
                )
                (inputs / f"{page_id[:12]}.html").write_bytes(html)
                files.append(inputs / f"{page_id[:12]}.html")
        paragraphs = "".join(f"<p>{p}</p>" for p in FRENCH.split("\n"))
        (inputs / "phare.html").write_text(
            "<html><head><meta charset='utf-8'><title>Le phare</title></head><body>"
            f"<nav><a href='/'>Accueil</a></nav><article><h1>Le phare</h1>{paragraphs}"
            "</article><footer>Mentions légales</footer></body></html>"
        )
        files.append(inputs / "phare.html")
        batch, _ = operations.land(settings, files, source="web-multilingual", license="MIT")
        log: list[str] = []
        operations.run_batch(settings, batch.batch_id, log.append)
        key = operations.create_version(settings, "multilingual", [batch.batch_id], log.append)
        return Curated(
            settings,
            batch.batch_id,
            key,
            _card(settings, key),
            _names(settings, batch.batch_id),
            log,
        )


def test_the_multilingual_example_keeps_prose_in_five_languages(multilingual: Curated) -> None:
    outcome = multilingual.outcome()
    kept = {name for name, (stage, _) in outcome.items() if stage == "kept"}
    assert kept == {
        "57b4dafd18cf",  # German articles
        "ba07d1e64775",
        "85439e26c41c",  # Japanese articles
        "f105de6e63ca",
        "phare",  # French
        "http://0513mt.com/index.php/art/detail/id/8884.html",  # Chinese: a story
    }
    dropped = {name: rule for name, (stage, rule) in outcome.items() if stage != "kept"}
    # Russian and Dutch are not among the example's languages.
    assert dropped["http://01spb.ru/company/"] == "language_not_allowed"
    assert dropped["http://0900-hovenier.nl/gelderland/oosterbeek/"] == "language_not_allowed"
    # The Chinese listings, footers and spam, the Japanese shop's navigation (28 pages, one
    # text) and the German score tables: each judged by its own family's rules, and dropped by
    # a quality rule; no CJK page by a rule that counts words.
    scored = catalog.read_batch(
        multilingual.settings, "quality_scored_documents", multilingual.batch_id
    ).to_pylist()
    language = {multilingual.names[r["doc_id"]]: r["language"] for r in scored}
    junk = {name: lang for name, lang in language.items() if name not in kept}
    cjk = {name for name, lang in junk.items() if lang in ("zh", "ja")}
    german = {name for name, lang in junk.items() if lang == "de"}
    assert len(cjk) >= 35 and len(german) == 2
    for name in cjk | german:
        assert outcome[name][0] == "quality_filtered_documents", name
    word_rules = {"gopher_min_words", "gopher_min_mean_word_length", "gopher_stop_words"}
    assert not {dropped[name] for name in cjk} & word_rules
    assert "script_min_sentences" in {dropped[name] for name in cjk}  # the CJK sentence rule
    assert "| Languages | de, en, fr, ja, zh (lid.176 score >= 0.65) |" in multilingual.card
