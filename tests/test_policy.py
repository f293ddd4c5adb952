"""Dataset policies: the default web policy for a source without one, the `none` opt-out, the
policy file's `[default]`, per-family overrides, and what a run records. Fast: no Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fm_assets.curation.policy import (
    DEFAULT_CLASSIFIER,
    NONE_POLICY,
    WEB_POLICY,
    DatasetPolicy,
    load_policy,
)
from fm_assets.curation.quality.families import CJK, ENGLISH, SPACED
from fm_assets.curation.quality.scores import score_text
from fm_assets.curation.quality.thresholds import check_rules
from fm_assets.settings import Settings, load_settings
from fm_assets.versions.policies import policy_changes
from tests.paths import REPO


def _settings(tmp_path: Path, text: str | None) -> Settings:
    env = {"FM_HOME": str(tmp_path / "fm")}
    if text is not None:
        (tmp_path / "policies.toml").write_text(text)
        env["FM_POLICY_FILE"] = str(tmp_path / "policies.toml")
    return load_settings(env)


def test_a_source_without_a_policy_gets_the_default_web_policy(tmp_path: Path) -> None:
    policy = load_policy(_settings(tmp_path, None), "crawl")
    assert policy == dataclasses.replace(WEB_POLICY, name="crawl")
    assert (policy.base, policy.allowed_languages, policy.min_language_score) == (
        "web",
        ("en",),
        0.65,
    )
    assert policy.quality_rule_sets == ("gopher_v1", "c4_v1", "fineweb_v1")
    assert (policy.classifier_sha256, policy.min_classifier_score) == (DEFAULT_CLASSIFIER, 0.03)
    rules = policy.rules()
    assert (
        rules[ENGLISH].gopher_min_words == 50 and rules[ENGLISH].fineweb_max_char_dup_ratio == 0.1
    )
    # A file without an entry for the source, nor a [default], changes nothing.
    other = load_policy(_settings(tmp_path, '[datasets.code]\nbase = "none"\n'), "crawl")
    assert other == policy


def test_none_decides_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path, '[datasets.notes]\nbase = "none"\n')
    policy = load_policy(settings, "notes")
    assert policy == dataclasses.replace(NONE_POLICY, name="notes")
    assert policy.allowed_languages == () and policy.classifier_sha256 is None
    junk = score_text("buy now " * 3)
    for family, thresholds in policy.rules().items():
        assert check_rules(junk, thresholds) == [], family


def test_the_files_default_covers_sources_without_an_entry(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        '[default]\nbase = "none"\n[datasets.web]\nallowed_languages = ["en", "de"]\n',
    )
    assert load_policy(settings, "anything").base == "none"
    web = load_policy(settings, "web")  # an entry starts from the web policy, not [default]
    assert (web.base, web.allowed_languages, web.classifier_sha256) == (
        "web",
        ("de", "en"),
        DEFAULT_CLASSIFIER,
    )


def test_overrides_for_all_and_for_one_family(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        """
[datasets.web]
[datasets.web.quality_thresholds]
gopher_min_words = 30
c4_min_kept_sentences = false
[datasets.web.family_thresholds.cjk]
script_min_units = 200
[datasets.web.classifier]
sha256 = "none"
""",
    )
    policy = load_policy(settings, "web")
    rules = policy.rules()
    assert rules[ENGLISH].gopher_min_words == rules[SPACED].gopher_min_words == 30
    assert rules[CJK].script_min_units == 200  # the family's own override wins
    assert rules[ENGLISH].c4_min_kept_sentences is None  # false: the rule is off ...
    assert rules[SPACED].script_min_kept_sentences is None  # ... and its stand-ins with it
    assert policy.classifier_sha256 is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[datasets.web]\nbase = "strict"\n', "base 'strict'"),
        ("[datasets.web.family_thresholds.latin]\ngopher_min_words = 3\n", "unknown language"),
        ("[datasets.web.quality_thresholds]\ngopher_min_words = true\n", "false to turn"),
        ("[datasets.web.quality_thresholds]\ngopher_min_words = -1\n", "finite and >= 0"),
        ("[datasets.web.quality_thresholds]\ngopher_min_words = 200000\n", "exceeds"),
        ("[datasets.web]\nlanguages = []\n", "unknown keys"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        load_policy(_settings(tmp_path, text), "web")
    assert "policies.toml" in str(error.value)


def test_a_recorded_policy_round_trips_and_changes_are_named() -> None:
    policy = dataclasses.replace(
        WEB_POLICY,
        name="web",
        classifier_sha256="ab" * 32,
        family_thresholds=(("cjk", (("script_min_units", 100.0),)),),
        quality_thresholds=(("gopher_min_words", 30), ("c4_min_kept_sentences", None)),
    )
    assert DatasetPolicy.from_json(policy.to_json()) == policy
    stricter = dataclasses.replace(policy, min_language_score=0.8, base="none", name="other")
    assert policy_changes(policy, stricter) == ["min_language_score"]  # labels are not changes
    assert policy_changes(policy, policy) == []
    with pytest.raises(ValueError, match="unknown fields"):
        DatasetPolicy.from_json('{"name": "web", "threshold": 1}')


@pytest.mark.parametrize(
    ("example", "source", "languages"),
    [
        ("policies.example.toml", "web", ("en",)),
        ("policies.multilingual.example.toml", "web-multilingual", ("de", "en", "fr", "ja", "zh")),
    ],
)
def test_the_shipped_examples_parse(example: str, source: str, languages: tuple[str, ...]) -> None:
    path = REPO / "deploy" / example
    settings = load_settings({"FM_HOME": "/nonexistent", "FM_POLICY_FILE": str(path)})
    policy = load_policy(settings, source)
    assert policy.allowed_languages == languages and policy.base == "web"
    assert policy.classifier_sha256 == DEFAULT_CLASSIFIER
