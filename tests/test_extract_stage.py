"""The extract stage: the dataset's extractor, and a timeout that holds on any thread."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from fm_assets.curation.policy import load_policy
from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from fm_assets.stages import extract
from fm_assets.stages.extract import ExtractStage
from fm_assets.stages.timeout import CallTimeout, call_with_timeout
from fm_assets.storage import schemas

ARTICLE = " ".join(["The river carries silt from the mountains to the delta."] * 20)
PAGE = (
    "<html><head><title>Rivers</title></head><body><nav>Home | About | Contact</nav>"
    f"<article><h1>Rivers</h1><p>{ARTICLE}</p><p>{ARTICLE}</p></article>"
    "<footer>Copyright 2024</footer></body></html>"
).encode()


def raw_table(*pages: bytes) -> pa.Table:
    rows = []
    for index, page in enumerate(pages):
        sha = hashlib.sha256(page).hexdigest()
        rows.append(
            {
                "doc_id": sha,
                "raw_sha256": sha,
                "batch_id": "b",
                "record_id": f"{sha[:16]}:{index}",
                "source_file": "pages.warc",
                "source": "web",
                "license": "CC-BY-4.0",
                "namespace": "cloud",
                "url": f"http://x/{index}",
                "lang_hint": None,
                "external_id": None,
                "content_type": "html",
                "charset": "utf-8",
                "raw_size": len(page),
                "raw_content": page,
            }
        )
    return pa.Table.from_pylist(rows, schema=schemas.RAW_DOCUMENTS)


def policy_settings(fm_settings: Settings, tmp_path: Path, text: str) -> Settings:
    policy = tmp_path / "policies.toml"
    policy.write_text(text)
    return dataclasses.replace(fm_settings, policy_file=policy)


def test_a_dataset_policy_picks_the_extractor(fm_settings: Settings, tmp_path: Path) -> None:
    settings = policy_settings(
        fm_settings, tmp_path, '[datasets.fast]\nextractor = "resiliparse"\n'
    )
    build = pipeline.entry("extracted_documents").build

    fast = build(settings, load_policy(settings, "fast"))
    default = build(settings, load_policy(settings, "other"))

    assert isinstance(fast, ExtractStage) and fast.extractor == "resiliparse"
    assert isinstance(default, ExtractStage) and default.extractor == "trafilatura"
    # The extractor is content: switching it gives a new content key, so extraction reruns.
    assert fast.config_hash() != default.config_hash()


def test_an_unknown_extractor_is_refused_naming_the_choices(
    fm_settings: Settings, tmp_path: Path
) -> None:
    settings = policy_settings(fm_settings, tmp_path, '[datasets.web]\nextractor = "readability"\n')

    with pytest.raises(ValueError, match=r"'readability'.*trafilatura.*resiliparse"):
        load_policy(settings, "web")
    with pytest.raises(ValueError, match="extractor must be one of"):
        ExtractStage(extractor="readability")


@pytest.mark.parametrize("extractor", ["trafilatura", "resiliparse"])
def test_both_extractors_keep_the_article_and_drop_the_navigation(extractor: str) -> None:
    result = ExtractStage(extractor=extractor).process(raw_table(PAGE))

    [text] = result.kept.column("text").to_pylist()
    assert "The river carries silt" in text
    assert "Home | About" not in text


def _spin() -> str:
    while True:  # a pathological page: the extractor never returns
        pass


def _in_thread(fn: object) -> object:
    """Run fn() on a worker thread (as a thread pool would) and return what it returned."""
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_capture(fn)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the budget was not enforced off the main thread"
    return outcome[0]


def _capture(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as exc:
        return exc


@pytest.mark.timeout(120)
def test_a_timeout_off_the_main_thread_is_enforced() -> None:
    outcome = _in_thread(lambda: call_with_timeout(_spin, 0.2))

    assert isinstance(outcome, CallTimeout)
    assert "exceeded 0.2 s" in str(outcome)


@pytest.mark.timeout(120)
def test_calls_that_finish_in_time_are_never_interrupted_later() -> None:
    def many() -> int:
        calls = 0
        for _ in range(200):
            # Budgets close to the call's own duration: the watchdog may fire as the call
            # returns. Its exception must surface from call_with_timeout or not at all.
            with contextlib.suppress(CallTimeout):
                calls += call_with_timeout(lambda: time.sleep(0.001) or 1, 0.002)
            time.sleep(0.002)  # where an exception delivered late would surface
        return calls

    outcome = _in_thread(many)

    assert isinstance(outcome, int), outcome


@pytest.mark.timeout(120)
def test_a_stalled_page_off_the_main_thread_is_quarantined_as_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(extract.EXTRACT_CALLS, "trafilatura", lambda html, url: _spin())
    stage = ExtractStage(timeout_s=0.2)

    result = _in_thread(lambda: stage.process(raw_table(PAGE)))

    assert not isinstance(result, Exception), result
    [row] = result.quarantined.to_pylist()  # type: ignore[attr-defined]
    assert row["rule"] == "extraction_timeout"
    assert "trafilatura exceeded 0.2 s" in row["reason"]
