"""Serving image-text pair sets: samples carry the stored image, caption tokens, doc id and
aspect bucket; batches share one bucket and can be decoded in the loader's workers; the
contract of text holds batch by batch: exactly once across ranks, elastic resume, mixtures.

The pair sets are written by the platform's own writer (`fm_assets.shards.pairs`) from real
photos cut to several shapes, with made-up caption tokens."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fm_assets.curation.images.aspect import ASPECT_BUCKETS, aspect_bucket
from fm_assets.shards.pairs import Pair, write_pair_set
from fm_loader import Epochs, make_dataset, make_loader
from fm_loader.format.pair_set import PAIR_MANIFEST_FORMAT_VERSION, pair_schema_fingerprint
from fm_loader.samples.image_text import bucket_shape
from fm_loader.serving.batches import bucket_runs
from tests.image_data import PHOTOS, encode, photo
from tests.shard_sets import build, sha

SHAPES = ((1.0, 1.0), (1.0, 0.5625), (0.75, 1.0))  # square, 16:9, 3:4 crops (width, height)
TOKENIZER = "a" * 64


def _pairs(count: int) -> list[Pair]:
    pairs = []
    rng = np.random.default_rng(0)
    for i in range(count):
        image = photo(PHOTOS[i % len(PHOTOS)]).convert("RGB")
        fw, fh = SHAPES[i % len(SHAPES)]
        side = min(image.width, image.height)
        crop = image.crop((0, 0, int(side * fw), int(side * fh))).resize(
            (int(160 * fw), int(160 * fh))
        )
        tokens = rng.integers(1, 1000, size=rng.integers(3, 20)).astype(np.int32)
        bucket = aspect_bucket(crop.width, crop.height).index
        pairs.append(
            Pair(
                sha(f"pair-{i}"), tokens, encode(crop, quality=85), crop.width, crop.height, bucket
            )
        )
    pairs.sort(key=lambda p: (p.bucket, p.doc_id))
    return pairs


def write(directory: Path, count: int, version: str = "pairs@v1") -> list[Pair]:
    pairs = _pairs(count)
    fields: dict[str, object] = {
        "format_version": PAIR_MANIFEST_FORMAT_VERSION,
        "shard_set_key": f"{version}/aaaaaaaaaaaa-s16",
        "source_version": version,
        "version_content_hash": sha(version),
        "tokenizer_hash": TOKENIZER,
        "vocab_size": 1000,
        "token_dtype": "uint16",
        "pad_token_id": 0,
        "seq_len": 16,
        "schema_fingerprint": pair_schema_fingerprint("uint16"),
        "pipeline_version": "test",
        "created_at": "2026-12-06T00:00:00+00:00",
        "image_format": "jpeg",
        "max_side": 160,
    }
    write_pair_set(pairs, directory, fields, "uint16", size_limit=64 << 10)
    return pairs


@pytest.fixture(scope="module")
def pair_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Pair]]:
    directory = tmp_path_factory.mktemp("pairs") / "set"
    return directory, write(directory, 45)


def _ids(batches: list[dict]) -> list[str]:
    return [d for b in batches for d in b["doc_id"]]


def test_samples_carry_the_stored_image_caption_tokens_doc_id_and_bucket(
    pair_set: tuple[Path, list[Pair]],
) -> None:
    directory, pairs = pair_set
    by_id = {p.doc_id: p for p in pairs}
    dataset = make_dataset(str(directory), rank=0, world_size=1, batch_size=4)
    samples = list(dataset)
    assert sorted(s["doc_id"] for s in samples) == sorted(by_id)
    for sample in samples[:10]:
        pair = by_id[sample["doc_id"]]
        assert sample["image"] == pair.image  # the bytes as stored
        assert sample["input_ids"].tolist() == pair.tokens[:16].tolist()
        assert sample["bucket"] == pair.bucket and sample["kind"] == "image_text"
        assert Image.open(io.BytesIO(sample["image"])).size == (pair.width, pair.height)


def test_every_batch_shares_one_bucket_and_decodes_to_its_shape(
    pair_set: tuple[Path, list[Pair]],
) -> None:
    directory, pairs = pair_set
    dataset = make_dataset(str(directory), rank=0, world_size=1, batch_size=4, image_size=64)
    batches = list(make_loader(dataset))
    assert sorted(_ids(batches)) == sorted(p.doc_id for p in pairs)
    buckets = Counter(p.bucket for p in pairs)
    # Each bucket's samples fill whole batches but one: the bucket's last, shorter batch.
    assert len(batches) == sum(-(-n // 4) for n in buckets.values())
    for batch in batches:
        assert bucket_runs(batch["bucket"].numpy()) == 1
        ratio = ASPECT_BUCKETS[int(batch["bucket"][0])].ratio
        width, height = bucket_shape(ratio, 64)
        n = len(batch["doc_id"])
        assert batch["pixel_values"].shape == (n, 3, height, width)
        assert (
            batch["pixel_values"].dtype == torch.uint8 and batch["pixel_values"].float().std() > 5
        )
        assert batch["input_ids"].shape == (n, 16) and batch["attention_mask"].sum() == (
            batch["num_tokens"].sum()
        )
        assert [len(b) for b in batch["image"]] == batch["image_sizes"].tolist()


def test_workers_serve_the_same_batches(pair_set: tuple[Path, list[Pair]]) -> None:
    directory, _ = pair_set
    alone = make_loader(
        make_dataset(str(directory), rank=0, world_size=1, batch_size=4, image_size=32)
    )
    pooled = make_loader(
        make_dataset(str(directory), rank=0, world_size=1, batch_size=4, image_size=32),
        num_workers=2,
    )
    a, b = list(alone), list(pooled)
    assert [x["doc_id"] for x in a] == [x["doc_id"] for x in b]
    assert all(torch.equal(x["pixel_values"], y["pixel_values"]) for x, y in zip(a, b, strict=True))
    assert [x["image"] for x in a] == [x["image"] for x in b]


def test_exactly_once_across_ranks_and_across_a_change_of_world_size(
    pair_set: tuple[Path, list[Pair]],
) -> None:
    directory, pairs = pair_set
    everything = sorted(p.doc_id for p in pairs)
    two = [make_dataset(str(directory), rank=r, world_size=2, batch_size=4) for r in range(2)]
    assert sorted(_ids([b for d in two for b in make_loader(d)])) == everything
    # Two ranks take three batches each, checkpoint; three ranks finish the epoch.
    loaders = [make_loader(d) for d in two]
    seen = []
    for loader in loaders:
        for _, batch in zip(range(3), loader, strict=False):
            seen += batch["doc_id"]
    states = [loader.state_dict() for loader in loaders]
    assert states[0] == states[1]  # ranks advance in lockstep: one global position
    rest = []
    for rank in range(3):
        resumed = make_dataset(str(directory), rank=rank, world_size=3, batch_size=4)
        resumed.load_state_dict(states[0])
        rest += _ids(list(make_loader(resumed)))
    assert sorted(seen + rest) == everything


def test_a_state_of_another_batch_size_is_refused(pair_set: tuple[Path, list[Pair]]) -> None:
    directory, _ = pair_set
    loader = make_loader(make_dataset(str(directory), rank=0, world_size=1, batch_size=4))
    next(iter(loader))
    state = loader.state_dict()
    other = make_dataset(str(directory), rank=0, world_size=1, batch_size=8)
    with pytest.raises(ValueError, match="batch_size: checkpoint has 4, this loader 8"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="pass batch_size= to make_dataset"):
        make_dataset(str(directory), rank=0, world_size=1)


def test_a_mixture_of_pairs_and_text_serves_whole_batches_of_each_kind(
    pair_set: tuple[Path, list[Pair]], tmp_path: Path
) -> None:
    directory, pairs = pair_set
    docs = {sha(f"doc-{i}"): np.arange(1, 30 + i, dtype=np.int32) for i in range(60)}
    text = build(tmp_path / "text", docs, 16, tokenizer_hash=TOKENIZER)
    sources = [str(directory), str(tmp_path / "text")]
    # Each source once: every pair and every packed text sample exactly once, in whole batches.
    once = make_dataset(dict.fromkeys(sources, Epochs(1)), rank=0, world_size=1, batch_size=4)
    batches = list(make_loader(once))
    image_batches = [b for b in batches if b["kind"] == "image_text"]
    text_batches = [b for b in batches if b["kind"] == "tokens"]
    assert sorted(_ids(image_batches)) == sorted(p.doc_id for p in pairs)
    served = sorted(i for b in text_batches for i in b["sample_index"].tolist())
    assert served == list(range(text.num_samples))
    assert all(b["input_ids"].shape == (len(b["sample_index"]), 16) for b in text_batches)
    # Weights 1:1 are kept per step to within one batch: every prefix of the stream is even.
    even = make_dataset(dict.fromkeys(sources, 0.5), rank=0, world_size=1, batch_size=4)
    kinds = [b["kind"] for b in make_loader(even)]
    assert np.abs(np.cumsum([1 if k == "image_text" else -1 for k in kinds])).max() <= 1
