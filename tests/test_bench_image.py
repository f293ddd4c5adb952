"""The image benchmarks' bookkeeping: what they count as a caught, misplaced or missed planted
copy and as a dropped distinct image, and the peer's hash read back as our int64."""

from __future__ import annotations

import imagehash

from bench.image_decode.peer_process import phash_from_hex
from bench.image_neardup.corpus import Corpus, Item, quadrants
from bench.image_neardup.quality import decide, decode
from fm_assets.curation.images.hashing import phash
from tests.image_data import encode, near_duplicates, photo


def test_quality_counts_caught_misplaced_and_missed_copies() -> None:
    coffee = photo("coffee").reduce(2)
    astronaut = photo("astronaut").reduce(2)
    rocket = photo("rocket").reduce(2)
    copy = near_duplicates(coffee)["resized"]
    corpus = Corpus(
        distinct=[
            Item("coffee", "coffee", "photo", encode(coffee, quality=90), "jpg"),
            Item("astronaut", "astronaut", "photo", encode(astronaut, quality=90), "jpg"),
        ],
        planted=[
            Item("coffee~resized", "coffee", "resized", encode(copy, "PNG"), "png"),
            # a copy of coffee filed under astronaut: matched, but to another image
            Item("misfiled", "astronaut", "resized", encode(copy, quality=80), "jpg"),
            # filed under coffee but another photo: nothing to match
            Item("unrelated", "coffee", "resized", encode(rocket, quality=90), "jpg"),
        ],
        transforms=("resized",),
    )
    table, by_doc = decode(corpus)
    outcome = decide(table, by_doc, list(range(table.num_rows)), 8)
    assert (outcome.planted, outcome.caught) == (3, 1)
    assert outcome.wrong == [("misfiled", "coffee")]
    assert outcome.missed == ["unrelated"]
    assert outcome.dropped == []


def test_a_distinct_image_repeating_an_earlier_one_is_a_drop() -> None:
    coffee = photo("coffee").reduce(2)
    corpus = Corpus(
        distinct=[
            Item("coffee", "coffee", "photo", encode(coffee, quality=90), "jpg"),
            Item("again", "again", "photo", encode(coffee, quality=70), "jpg"),
        ],
        planted=[],
        transforms=(),
    )
    table, by_doc = decode(corpus)
    outcome = decide(table, by_doc, [0, 1], 8)
    assert [(name, against) for name, against, _ in outcome.dropped] == [("again", "coffee")]


def test_quadrants_tile_the_image() -> None:
    image = photo("chelsea")  # 451 x 300: odd width
    tiles = quadrants(image)
    assert len(tiles) == 4
    assert sum(t.width for t in tiles[:2]) == image.width
    assert sum(t.height for t in tiles[::2]) == image.height


def test_the_peers_hex_hash_reads_back_as_our_int64() -> None:
    for name in ("astronaut", "moon", "rocket"):
        image = photo(name).convert("RGB")
        assert phash_from_hex(str(imagehash.phash(image))) == phash(image)
