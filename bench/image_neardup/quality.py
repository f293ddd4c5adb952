"""Near-dup quality: the dedup stage's decisions on distinct images followed by planted copies.

The whole corpus is decoded once by `DecodeStage().process` (pixel sha256 and pHash per row).
Then, for each max distance, `ImageDedupStage(max_distance=t).process` decides one batch per
transform (every distinct image first, then that transform's copies) and one batch holding every
copy; `decide` on the same rows names the kept image each verdict points to. A copy is caught
when it is quarantined against an image of its own family (its distinct image or, in the
all-copies batch, another copy of it); a distinct image quarantined is a false drop.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from bench.image_neardup.corpus import Corpus, Item
from bench.image_pairs import raw_pairs
from fm_assets.curation.images.hashing import hamming
from fm_assets.curation.images.near_dup import ImageIndex
from fm_assets.stages.image_text.decode import DecodeStage
from fm_assets.stages.image_text.dedup import ImageDedupStage

DISTANCES = (4, 6, 8, 10)
DEFAULT_DISTANCE = 8  # the default image-text policy's near_dup_max_distance
ALL = "all copies in one batch"


@dataclass(frozen=True)
class Outcome:
    """One batch's decisions: per copy caught / wrong / missed, and the distinct images dropped
    (with the image each was dropped against)."""

    planted: int
    caught: int
    wrong: list[tuple[str, str]]  # (copy, the other family's image it was matched to)
    missed: list[str]
    dropped: list[tuple[str, str, int]]  # (distinct image, kept image, distance)

    @property
    def recall(self) -> float:
        return self.caught / self.planted if self.planted else 1.0


@dataclass(frozen=True)
class Quality:
    outcomes: dict[tuple[int, str], Outcome]  # (max distance, transform or ALL) -> outcome
    distances: dict[str, list[tuple[str, int]]]  # transform -> (copy, bits to its original)
    closest: list[tuple[int, str, str]]  # distinct pairs, nearest first
    phashes: dict[str, int]  # name -> pHash, every image of the corpus
    decoded: pa.Table  # the decoded corpus: for the pHash timing


def decode(corpus: Corpus) -> tuple[pa.Table, dict[str, Item]]:
    """`decoded_pairs` rows of every image, and the item of each doc_id."""
    items = [*corpus.distinct, *corpus.planted]
    raw = raw_pairs([(i.name, i.data, i.extension) for i in items])
    result = DecodeStage().process(raw)
    if result.quarantined.num_rows:
        raise RuntimeError(f"decode quarantined corpus images: {result.quarantined.to_pylist()}")
    by_doc = dict(zip(raw.column("doc_id").to_pylist(), items, strict=True))
    return result.kept, by_doc


def decide(table: pa.Table, by_doc: dict[str, Item], rows: Sequence[int], t: int) -> Outcome:
    batch = table.take(pa.array(rows, pa.int64()))
    stage = ImageDedupStage(max_distance=t)
    result = stage.process(batch)
    verdicts = stage.decide(batch, ImageIndex(t))
    if set(result.quarantined.column("doc_id").to_pylist()) != set(verdicts):
        raise RuntimeError("the stage's quarantine and its decisions disagree")
    caught = 0
    wrong: list[tuple[str, str]] = []
    missed: list[str] = []
    dropped: list[tuple[str, str, int]] = []
    planted = 0
    for doc_id in batch.column("doc_id").to_pylist():
        item = by_doc[doc_id]
        verdict = verdicts.get(doc_id)
        other = by_doc[verdict.original.doc_id] if verdict else None
        if not item.planted:
            if verdict and other:
                dropped.append((item.name, other.name, verdict.distance))
            continue
        planted += 1
        if other is None:
            missed.append(item.name)
        elif other.family == item.family:
            caught += 1
        else:
            wrong.append((item.name, other.name))
    return Outcome(planted, caught, wrong, missed, dropped)


def measure(corpus: Corpus, distances: Sequence[int] = DISTANCES) -> Quality:
    table, by_doc = decode(corpus)
    row_of = {by_doc[d].name: i for i, d in enumerate(table.column("doc_id").to_pylist())}
    distinct_rows = [row_of[i.name] for i in corpus.distinct]
    batches = {kind: [row_of[i.name] for i in corpus.of_kind(kind)] for kind in corpus.transforms}
    batches[ALL] = [row_of[i.name] for i in corpus.planted]
    outcomes = {
        (t, kind): decide(table, by_doc, [*distinct_rows, *rows], t)
        for t in distances
        for kind, rows in batches.items()
    }
    phashes = {
        by_doc[d].name: h
        for d, h in zip(
            table.column("doc_id").to_pylist(), table.column("phash").to_pylist(), strict=True
        )
    }
    copy_distances = {
        kind: sorted(
            ((i.name, hamming(phashes[i.name], phashes[i.family])) for i in corpus.of_kind(kind)),
            key=lambda pair: pair[1],
        )
        for kind in corpus.transforms
    }
    closest = sorted(
        (hamming(phashes[a.name], phashes[b.name]), a.name, b.name)
        for a, b in itertools.combinations(corpus.distinct, 2)
    )
    return Quality(outcomes, copy_distances, closest, phashes, table)
