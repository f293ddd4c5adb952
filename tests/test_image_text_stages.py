"""The image-text stages' decisions on tables they are handed: caption and geometry rules, the
near-duplicate index against brute force, the dedup stage's order, and the policy file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fm_assets.curation.image_text_policy import load_image_text_policy
from fm_assets.curation.images.captions import boilerplate
from fm_assets.curation.images.hashing import hamming
from fm_assets.curation.images.near_dup import ImageIndex, Kept, piece_bounds, pieces
from fm_assets.settings import load_settings
from fm_assets.stages.image_text.dedup import ImageDedupStage
from fm_assets.stages.image_text.filter import PairFilterStage
from tests.image_data import pairs_table


@pytest.mark.parametrize(
    ("caption", "why"),
    [
        ("image", "placeholder"),
        ("  Photo. ", "placeholder"),
        ("IMG_4032.JPG", "file name"),
        ("my holiday picture 2.jpeg", "file name"),
        ("DSC01234", "frame name"),
        ("Screenshot_20200101", "frame name"),
        ("20190704_123456", "frame name"),
        ("A dog running on the beach at sunset", None),
        ("The image of a storm over the sea", None),
    ],
)
def test_boilerplate_alt_text(caption: str, why: str | None) -> None:
    found = boilerplate(caption)
    assert (found is None) == (why is None) and (why is None or why in str(found))


def test_each_rule_names_what_was_wrong() -> None:
    stage = PairFilterStage()
    batch = pairs_table(
        [
            {},
            {"original_width": 150, "original_height": 400},
            {"original_width": 1600, "original_height": 400},
            {"text": "Hi"},
            {"text": "Sunset beach"},
            {"text": "x " * 1500},
            {"text": "IMG_0001.jpg"},
            {"text": "Ein rotes Backsteinhaus mit einer grünen Tür in einer ruhigen Straße"},
        ]
    )
    result = stage.process(batch)
    assert result.kept.num_rows == 1
    assert result.kept.column("language").to_pylist() == ["en"]
    rules = dict(
        zip(
            result.quarantined.column("record_id").to_pylist(),
            result.quarantined.column("rule").to_pylist(),
            strict=True,
        )
    )
    assert rules == {
        "file:1": "image_too_small",
        "file:2": "extreme_aspect_ratio",
        "file:3": "caption_too_short",
        "file:4": "caption_too_few_words",
        "file:5": "caption_too_long",
        "file:6": "boilerplate_caption",
        "file:7": "language_not_allowed",
    }
    reasons = result.quarantined.column("reason").to_pylist()
    assert "150x400" in reasons[0] and "min_side 201" in reasons[0]
    assert "de" in reasons[-1]


def test_with_every_rule_off_nothing_is_decided_but_the_language_is_tagged() -> None:
    stage = PairFilterStage(
        min_side=1,
        max_aspect_ratio=1e9,
        min_caption_chars=0,
        min_caption_words=0,
        caption_languages=(),
        drop_boilerplate_captions=False,
    )
    result = stage.process(pairs_table([{"text": "IMG_0001.jpg", "original_width": 10}]))
    assert result.kept.num_rows == 1 and result.kept.column("language")[0].as_py()


def test_pieces_cover_the_64_bits_and_find_every_hash_within_the_distance() -> None:
    for chunks in (1, 5, 9, 17):
        bounds = piece_bounds(chunks)
        assert sum(width for _, width in bounds) == 64 and bounds[-1][0] == 0
    rng = random.Random(7)
    max_distance = 8
    index = ImageIndex(max_distance)
    stored = [rng.getrandbits(64) - (1 << 63) for _ in range(400)]
    # Half as other batches' kept images (loaded), half as this batch's (added as kept).
    index.load(
        [f"{n:064x}" for n in range(200)], [Kept(f"d{n}", "b", stored[n]) for n in range(200)]
    )
    for n in range(200, 400):
        index.add(f"{n:064x}", Kept(f"d{n}", "b", stored[n]))
    for n in range(300):
        base = stored[rng.randrange(len(stored))]
        flipped = base
        for bit in rng.sample(range(64), rng.randrange(0, 13)):
            flipped ^= 1 << bit
        query = ((flipped + (1 << 63)) % (1 << 64)) - (1 << 63)
        truth = min(hamming(query, s) for s in stored)
        found = index.find("no-such-pixels", query)
        if truth <= max_distance:
            assert found is not None and found.distance == truth, n
        else:
            assert found is None, n
    assert pieces(-1, 4) == [0xFFFF] * 4


def test_dedup_keeps_the_first_and_names_it_exact_before_near() -> None:
    batch = pairs_table(
        [
            {"pixel_hash": "a" * 64, "phash": 0b1111},
            {"pixel_hash": "a" * 64, "phash": 0b1111},  # the same pixels
            {"pixel_hash": "b" * 64, "phash": 0b1110},  # 1 bit from row 0
            {"pixel_hash": "c" * 64, "phash": 0b1111 ^ (0xFF << 20)},  # 8 bits: near
            {"pixel_hash": "d" * 64, "phash": 0b1111 ^ (0x1FF << 20)},  # 9 bits: kept
        ]
    )
    result = ImageDedupStage(max_distance=8).process(batch)
    assert result.kept.column("record_id").to_pylist() == ["file:0", "file:4"]
    rules = result.quarantined.column("rule").to_pylist()
    assert rules == ["exact_duplicate_image", "near_duplicate_image", "near_duplicate_image"]
    assert "within 8 bits" in result.quarantined.column("reason")[2].as_py()


def test_an_image_text_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(
        """
[image_text.default]
base = "none"
[image_text.datasets.laion]
min_side = 256
caption_languages = ["en", "de"]
near_dup_max_distance = 6
[image_text.datasets.laion.resize]
max_side = 384
format = "webp"
"""
    )
    settings = load_settings({"FM_HOME": str(tmp_path / "home"), "FM_POLICY_FILE": str(path)})
    laion = load_image_text_policy(settings, "laion")
    assert (laion.min_side, laion.caption_languages, laion.near_dup_max_distance) == (
        256,
        ("de", "en"),
        6,
    )
    assert (laion.resize.max_side, laion.resize.format, laion.resize.quality) == (384, "webp", 90)
    other = load_image_text_policy(settings, "other")
    assert other.base == "none" and other.caption_languages == () and other.min_side == 1
    path.write_text("[image_text.datasets.x]\nmin_sides = 3\n")
    with pytest.raises(ValueError, match=r"unknown keys \['min_sides'\]"):
        load_image_text_policy(settings, "x")
    path.write_text("[image_text.datasets.x]\nnear_dup_max_distance = 40\n")
    with pytest.raises(ValueError, match=r"near_dup_max_distance must be 0\.\.16"):
        load_image_text_policy(settings, "x")
