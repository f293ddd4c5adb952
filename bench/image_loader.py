"""Serving decoded image-text batches: fm_loader with 2 workers vs in-process, and vs
webdataset's own loader on the same images, doing the same work.

    python -m bench.image_loader            # 1,024 pairs, 5 interleaved rounds
    python -m bench.image_loader --quick    # 256 pairs, 2 rounds

The same pairs (square JPEGs of ~1 MP from scikit-image's photos, captions of 8-24 tokens) are
written twice: as a pair set by the platform's writer (`fm_assets.shards.pairs`), and as a
WebDataset tars (`KEY.jpg` + `KEY.ids.npy`, img2dataset's layout with the caption's tokens). Both
sides decode every image with Pillow, fit it to 224 x 224 (`decode_fitted`: JPEG draft decode,
center crop, bilinear resize), pad the captions to 32 tokens and stack batches of 32:

- fm `make_loader(make_dataset(dir, batch_size=32, image_size=224), num_workers=W)`, W = 0, 2;
- webdataset, as its documentation shows it: `wds.WebDataset(tar).decode()` (npy) mapped to the
  same fit, `.batched(32)` in the dataset, `wds.WebLoader(..., batch_size=None, num_workers=2)`.

All-in: from opening the set to the last batch, worker start-up and our first-use sha256 of
every shard counted; every file in the page cache (one untimed pass first). samples/s per path,
median and min–max over interleaved rounds, the first path rotated each round.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench.harness import (
    RESULTS,
    RunStart,
    Stamp,
    interleave,
    log,
    median,
    median_and_range,
    met,
    parser,
    rerun_command,
    write_report,
)

BATCH, SIDE, TOKENS = 32, 224, 32
WDS_SHARDS = 8  # img2dataset writes many tar shards; webdataset splits them among workers
LIBRARIES = ("torch", "pillow", "webdataset", "numpy")


def make_pairs(count: int, seed: int = 0) -> list[tuple[str, bytes, np.ndarray]]:
    """(doc id, square ~1 MP JPEG, caption tokens) for `count` pairs from the shipped photos."""
    import hashlib

    from PIL import Image

    from tests.image_data import PHOTOS, encode, photo

    rng = np.random.default_rng(seed)
    bases = []
    for name in PHOTOS:
        image = photo(name).convert("RGB")
        side = min(image.size)
        bases.append(image.crop((0, 0, side, side)).resize((1024, 1024), Image.Resampling.BICUBIC))
    pairs = []
    for i in range(count):
        image = bases[i % len(bases)].rotate(int(rng.integers(0, 4)) * 90)
        data = encode(image, quality=int(rng.integers(80, 95)))
        tokens = rng.integers(1, 50_000, size=int(rng.integers(8, 25))).astype(np.int32)
        pairs.append((hashlib.sha256(f"pair-{i}".encode()).hexdigest(), data, tokens))
    return pairs


def write_pair_set_dir(pairs: list[tuple[str, bytes, np.ndarray]], directory: Path) -> Path:
    from fm_assets.shards.pairs import Pair, write_pair_set
    from fm_loader.format.pair_set import PAIR_MANIFEST_FORMAT_VERSION, pair_schema_fingerprint

    rows = [Pair(d, t, data, 1024, 1024, 4) for d, data, t in pairs]  # bucket 4: 1:1
    fields: dict[str, object] = {
        "format_version": PAIR_MANIFEST_FORMAT_VERSION,
        "shard_set_key": "bench@v1/aaaaaaaaaaaa-s32",
        "source_version": "bench@v1",
        "version_content_hash": "0" * 64,
        "tokenizer_hash": "a" * 64,
        "vocab_size": 50_000,
        "token_dtype": "uint16",
        "pad_token_id": 0,
        "seq_len": TOKENS,
        "schema_fingerprint": pair_schema_fingerprint("uint16"),
        "pipeline_version": "bench",
        "created_at": "2026-01-01T00:00:00+00:00",
        "image_format": "jpeg",
        "max_side": 1024,
    }
    write_pair_set(rows, directory, fields, "uint16", size_limit=64 << 20)
    return directory


def write_webdataset_tars(
    pairs: list[tuple[str, bytes, np.ndarray]], directory: Path, shards: int = WDS_SHARDS
) -> list[str]:
    """The pairs as `shards` WebDataset tars (a worker reads whole shards: at least one each)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in range(shards):
        path = directory / f"pairs-{shard:05d}.tar"
        with tarfile.open(path, "w") as archive:
            for doc_id, data, tokens in pairs[shard::shards]:
                buffer = io.BytesIO()
                np.save(buffer, tokens)
                for extension, payload in (("jpg", data), ("ids.npy", buffer.getvalue())):
                    info = tarfile.TarInfo(f"{doc_id}.{extension}")
                    info.size = len(payload)
                    archive.addfile(info, io.BytesIO(payload))
        paths.append(str(path))
    return paths


Epoch = tuple[int, float, float]  # samples, all-in seconds, seconds after the first batch


def fm_epoch(directory: Path, workers: int) -> Epoch:
    """One all-in epoch through fm_loader, and its time after the first batch."""
    from fm_loader import make_dataset, make_loader

    started = time.perf_counter()
    dataset = make_dataset(str(directory), rank=0, world_size=1, batch_size=BATCH, image_size=SIDE)
    samples, first = 0, 0.0
    for batch in make_loader(dataset, num_workers=workers):
        samples += batch["pixel_values"].shape[0]
        first = first or time.perf_counter()
    ended = time.perf_counter()
    dataset.close()
    return samples, ended - started, ended - first


def _wds_sample(sample: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
    from fm_loader.samples.image_text import decode_fitted

    pixels = torch.from_numpy(decode_fitted(sample["jpg"], SIDE, SIDE))  # type: ignore[arg-type]
    tokens = np.asarray(sample["ids.npy"])
    ids = torch.zeros(TOKENS, dtype=torch.int64)
    ids[: min(len(tokens), TOKENS)] = torch.from_numpy(tokens[:TOKENS].astype(np.int64))
    return pixels, ids


def webdataset_epoch(tars: list[str], workers: int) -> Epoch:
    """One all-in epoch through webdataset's WebLoader, and its time after the first batch."""
    import webdataset as wds

    started = time.perf_counter()
    # The image bytes stay undecoded ("jpg" is not decoded: handler for npy only), then the
    # same fit as ours; batching inside the workers, as webdataset recommends.
    dataset = (
        wds.WebDataset(tars, shardshuffle=False)
        .decode(wds.handle_extension("npy", lambda data: np.load(io.BytesIO(data))))
        .map(_wds_sample)
        .batched(BATCH)
    )
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=workers)
    samples, first = 0, 0.0
    for pixels, _ in loader:
        samples += pixels.shape[0]
        first = first or time.perf_counter()
    ended = time.perf_counter()
    return samples, ended - started, ended - first


def _table(rates: dict[str, list[float]]) -> list[str]:
    base = rates["fm, in-process"]
    lines = ["| path | samples/s | vs fm in-process |", "|---|--:|--:|"]
    for name, values in rates.items():
        ratio = [v / b for v, b in zip(values, base, strict=True)]
        lines.append(
            f"| {name} | {median_and_range(values, ',.0f')} | {median_and_range(ratio)}× |"
        )
    return lines


def _goals(rates: dict[str, list[float]]) -> str:
    two, alone = rates["fm, 2 workers"], rates["fm, in-process"]
    peer = rates["webdataset, 2 workers"]
    vs_self = [a / b for a, b in zip(two, alone, strict=True)]
    vs_peer = [a / b for a, b in zip(two, peer, strict=True)]
    return (
        f"fm with 2 workers ≥ 1.6× in-process: {met(median(vs_self) >= 1.6)} "
        f"({median_and_range(vs_self)}×); ≥ 1.0× webdataset's loader with the same workers: "
        f"{met(median(vs_peer) >= 1.0)} ({median_and_range(vs_peer)}×)"
    )


def render(
    stamp: Stamp, count: int, all_in: dict[str, list[float]], steady: dict[str, list[float]]
) -> str:
    return "\n".join(
        [
            "# Image-text loader: decoded batches",
            "",
            stamp.header(),
            "",
            stamp.machine_line(),
            "",
            f"{count:,} pairs (square JPEGs of 1024 x 1024, captions of 8-24 tokens), decoded and "
            f"fitted to {SIDE} x {SIDE}, captions padded to {TOKENS}, batches of {BATCH}; "
            f"webdataset reads {WDS_SHARDS} tar shards. Ratios are per round (paths interleaved, "
            "the first rotated), then the median and range over rounds.",
            "",
            "## All-in: opening the set to the last batch",
            "",
            "Worker start-up and our first-use sha256 of every shard counted.",
            "",
            *_table(all_in),
            "",
            f"**Goals, all-in**: {_goals(all_in)}.",
            "",
            "## Steady: after the first batch",
            "",
            "How fast batches arrive once the loader runs (the rest of the epoch).",
            "",
            *_table(steady),
            "",
            f"**Goals, steady**: {_goals(steady)}.",
        ]
    )


def main() -> None:
    cli = parser(
        "bench.image_loader",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "image_loader.md",
        "256 pairs and 2 rounds, not 1,024 and 5",
    )
    args = cli.parse_args()
    start = RunStart.now(rerun_command(cli))
    count, rounds = (256, 2) if args.quick else (1024, 5)
    with tempfile.TemporaryDirectory(prefix="fm-bench-image-loader-") as tmp:
        log(f"writing {count} pairs twice: a pair set and a WebDataset tar")
        pairs = make_pairs(count)
        directory = write_pair_set_dir(pairs, Path(tmp) / "set")
        tars = write_webdataset_tars(pairs, Path(tmp) / "wds")
        del pairs
        paths: dict[str, Callable[[], Epoch]] = {
            "fm, in-process": lambda: fm_epoch(directory, 0),
            "fm, 2 workers": lambda: fm_epoch(directory, 2),
            "webdataset, 2 workers": lambda: webdataset_epoch(tars, 2),
        }
        log("one untimed pass of each (page cache)")
        for run in paths.values():
            samples, _, _ = run()
            if samples != count:
                raise RuntimeError(f"a path served {samples} samples of {count}")
        log(f"{rounds} interleaved rounds")
        results = interleave(paths, rounds)
    all_in = {name: [n / s for n, s, _ in runs] for name, runs in results.items()}
    steady = {name: [(n - BATCH) / s for n, s_, s in runs] for name, runs in results.items()}
    write_report(args.output, render(start.finish(LIBRARIES), count, all_in, steady))


if __name__ == "__main__":
    main()
