"""The model-scorer stage with real loaders over tiny models the tests create on disk: an
open_clip CLIP in its hub layout, an MLP head over its embedding, a timm classifier. The weights
are random (none can be downloaded here), so the tests check what the code does with a model,
never what a trained model would score."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from PIL import Image

from fm_assets.curation.image_text_policy import ScorerSpec, parse_image_text_policy
from fm_assets.curation.images.scorers import model_digest, score_pairs
from fm_assets.stages.image_text.score import ScoreStage
from tests.image_data import CAPTIONS, encode, pairs_table, photo
from tests.image_models import tiny_classifier, tiny_clip, tiny_head

NAMES = ("astronaut", "coffee", "rocket", "moon")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "clip": tiny_clip(root / "clip"),
        "aesthetic": tiny_head(root / "aesthetic", output="identity"),
        "nsfw": tiny_head(root / "nsfw", output="softmax"),
        "watermark": tiny_classifier(root / "watermark"),
    }


def _specs(models: dict[str, Path], **bounds: tuple[float | None, float | None]) -> tuple:
    base = (
        ScorerSpec("clip", "clip_similarity", str(models["clip"]), batch_size=3),
        ScorerSpec("aesthetic", "clip_head", str(models["aesthetic"]), clip="clip"),
        ScorerSpec("nsfw", "clip_head", str(models["nsfw"]), clip="clip", label=1),
        ScorerSpec("watermark", "timm_classifier", str(models["watermark"]), label=1),
    )
    return tuple(
        dataclasses.replace(s, min=bounds[s.name][0], max=bounds[s.name][1])
        if s.name in bounds
        else s
        for s in base
    )


def _batch(names: tuple[str, ...]) -> pa.Table:
    rows = []
    for name in names:
        image = photo(name).convert("RGB")
        rows.append(
            {
                "text": CAPTIONS[name],
                "image": encode(image, quality=90),
                "width": image.width,
                "height": image.height,
                "original_width": image.width,
                "original_height": image.height,
            }
        )
    return pairs_table(rows)


def test_every_scorer_scores_every_pair_in_batches(models: dict[str, Path]) -> None:
    specs = _specs(models)
    images = [photo(n).convert("RGB") for n in NAMES]
    scores = score_pairs(
        specs, [model_digest(s.path) for s in specs], images, [CAPTIONS[n] for n in NAMES]
    )
    assert [sorted(s) for s in scores] == [["aesthetic", "clip", "nsfw", "watermark"]] * len(NAMES)
    clip = np.array([s["clip"] for s in scores])
    assert np.all((clip >= -1) & (clip <= 1)) and len(set(clip.round(6))) == len(NAMES)
    assert all(0 <= s["nsfw"] <= 1 and 0 <= s["watermark"] <= 1 for s in scores)


def test_the_clip_score_is_the_cosine_of_the_models_own_embeddings(models: dict[str, Path]) -> None:
    import open_clip

    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{models['clip']}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{models['clip']}")
    image = photo("rocket").convert("RGB")
    with torch.no_grad():
        a = torch.nn.functional.normalize(model.encode_image(preprocess(image)[None]), dim=-1)
        b = torch.nn.functional.normalize(
            model.encode_text(tokenizer([CAPTIONS["rocket"]])), dim=-1
        )
    expected = float((a * b).sum())
    spec = _specs(models)[0]
    (scores,) = score_pairs([spec], [model_digest(spec.path)], [image], [CAPTIONS["rocket"]])
    assert scores["clip"] == pytest.approx(expected, abs=1e-5)


def test_the_stage_stores_scores_and_applies_thresholds(models: dict[str, Path]) -> None:
    specs = _specs(models)
    batch = _batch(NAMES)
    unfiltered = ScoreStage(specs, tuple(model_digest(s.path) for s in specs))
    scored = unfiltered.process(batch).kept
    clip = [dict(m)["clip"] for m in scored.column("scores").to_pylist()]
    # Keep the two best-scoring pairs by clip score: the threshold sits between them and the rest.
    cut = float(np.sort(clip)[1] + np.sort(clip)[2]) / 2
    strict = ScoreStage(
        _specs(models, clip=(cut, None)), tuple(model_digest(s.path) for s in specs)
    )
    result = strict.process(batch)
    assert result.kept.num_rows == 2 and result.quarantined.num_rows == 2
    assert set(result.quarantined.column("rule").to_pylist()) == {"clip_score_out_of_range"}
    assert all(
        "below the policy's minimum" in r for r in result.quarantined.column("reason").to_pylist()
    )
    # Every kept pair carries every score; the image columns pass through unchanged.
    kept = result.kept.to_pylist()
    assert all(
        sorted(dict(r["scores"])) == ["aesthetic", "clip", "nsfw", "watermark"] for r in kept
    )
    assert all(Image.open(io.BytesIO(r["image"])).size == (r["width"], r["height"]) for r in kept)


def test_new_weights_are_a_new_content_key(models: dict[str, Path], tmp_path: Path) -> None:
    other = tiny_clip(tmp_path / "clip", seed=7)
    same = tiny_clip(tmp_path / "again", seed=0)
    assert model_digest(str(other)) != model_digest(str(models["clip"]))
    assert model_digest(str(same)) == model_digest(str(models["clip"]))
    a = ScoreStage(_specs(models)[:1], (model_digest(str(models["clip"])),))
    b = ScoreStage(_specs(models)[:1], (model_digest(str(other)),))
    assert a.config_hash() != b.config_hash()


def test_a_policy_names_its_scorers_and_missing_models_fail_loudly(tmp_path: Path) -> None:
    policy = parse_image_text_policy(
        "laion",
        {
            "scorers": [
                {"name": "clip", "kind": "clip_similarity", "path": str(tmp_path), "min": 0.28},
                {
                    "name": "nsfw",
                    "kind": "clip_head",
                    "path": str(tmp_path),
                    "clip": "clip",
                    "max": 0.5,
                },
            ]
        },
        "policy.toml",
    )
    assert [s.name for s in policy.scorers] == ["clip", "nsfw"]
    with pytest.raises(ValueError, match="must name the clip_similarity scorer"):
        parse_image_text_policy(
            "x", {"scorers": [{"name": "a", "kind": "clip_head", "path": "p"}]}, "policy.toml"
        )
    with pytest.raises(ValueError, match="kind 'nope'"):
        parse_image_text_policy(
            "x", {"scorers": [{"name": "a", "kind": "nope", "path": "p"}]}, "policy.toml"
        )
    with pytest.raises(ValueError, match="models are never downloaded"):
        model_digest(str(tmp_path / "absent"))


def test_without_scorers_pairs_pass_through_unscored() -> None:
    result = ScoreStage().process(_batch(NAMES[:2]))
    assert result.kept.num_rows == 2 and result.quarantined.num_rows == 0
    assert result.kept.column("scores").to_pylist() == [None, None]
