"""The near-dup lookup benchmark measures the reads that find a batch's planted copies: on a
small index built its way, each batch's lookup confirms the five copies it planted (sharing
1 to 14 band hashes with indexed documents) and finds the indexed document it carries, and
says what it read."""

from __future__ import annotations

import os
from pathlib import Path

from bench.near_dedup_lookup import BATCH_DOCS, SHARED_BANDS, build_index, look_up
from fm_assets.settings import Settings


def test_each_batch_finds_its_planted_copies_and_its_indexed_document(
    fm_settings: Settings,
) -> None:
    home = Path(os.environ["FM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    built = build_index(home, 15_000)
    assert built.documents == 1_000 and built.band_files == built.set_files == 1
    for name in ("a", "b"):
        found = look_up(home, name)
        confirmed, preexisting, partners = found.found  # partners: the sets fetched
        # The copies are the batch's first five documents, each paired with its partner at a
        # Jaccard near 0.9 (5% of its shingles changed); random documents pair with nothing.
        assert sorted({pos for pos, _, _ in confirmed}) == list(range(len(SHARED_BANDS)))
        assert all(0.8 < jaccard < 1.0 for _, _, jaccard in confirmed)
        assert preexisting == [BATCH_DOCS - 1]  # the last one carries an indexed id
        assert len(partners) == len(SHARED_BANDS)
        assert found.bytes_read > 0 and found.row_groups >= len(SHARED_BANDS)
