"""Decode + validate + resize + pHash per core: our decode stage vs img2dataset's resizer plus
`imagehash.phash`, on the same JPEGs in memory, interleaved.

    python -m bench.image_decode             # 212 images (0.1-4 MP), 5 rounds
    python -m bench.image_decode --quick     # 53 images, 2 rounds

Paths, each single-threaded in its own process, interleaved (the first rotated each round):

- **A, the stage**: `DecodeStage().process` on a `raw_pairs` table of the images: decode and
  validate (Pillow), EXIF orientation, 8-bit RGB, resize (longer side <= 512, aspect kept, never
  enlarged) and JPEG re-encode at quality 90, pixel sha256, pHash, the Arrow columns.
- **B, the functions**: the same curation calls in a loop, each part's CPU time taken.
- **C, img2dataset**: `img2dataset.resizer.Resizer` (keep_ratio_largest, only if bigger,
  area downscale, jpg quality 90) plus `imagehash.phash` of a Pillow decode of the same bytes,
  in `.venv-img2dataset/` (installed by the script on first use) as a warm subprocess that times
  its own loop.

A pass of C does less than A: no EXIF, mode or bomb checks and no pixel sha256. Nothing here
asserts a speed; the script fails only if a path rejects a benchmark image.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import imagehash
from PIL import Image

from bench.harness import RESULTS, RunStart, interleave, log, parser, rerun_command, write_report
from bench.image_decode import diagnostics, inputs
from bench.image_decode.ours import Pass, functions_pass, stage_pass
from bench.image_decode.peer_process import PeerProcess
from bench.image_decode.report import render
from bench.image_decode.side_venv import ensure_img2dataset, versions
from bench.image_pairs import raw_pairs
from fm_assets.curation.images.resize import ResizePolicy

LIBRARIES = ("pillow", "numpy", "scipy", "imagehash", "pyarrow")
DIAGNOSTIC_QUALITY = 90  # the diagnostics run on the images saved at this quality alone


def main() -> None:
    cli = parser(
        "bench.image_decode",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "image_decode.md",
        "53 images (one JPEG quality), 2 rounds",
    )
    cli.add_argument("--repeats", type=int, default=None, help="interleaved rounds (default 5)")
    args = cli.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    qualities = inputs.QUICK_QUALITIES if args.quick else inputs.QUALITIES
    start = RunStart.now(rerun_command(cli))
    python = ensure_img2dataset()
    policy = ResizePolicy()  # the default policy: longer side <= 512, JPEG quality 90
    work = Path(tempfile.mkdtemp(prefix="fm-bench-image-decode-"))
    try:
        images = inputs.write_images(work / "images", qualities)
        log(
            f"{len(images.data)} JPEGs, {images.megapixels:.0f} MP, {images.megabytes:.1f} MB "
            f"in {work / 'images'}"
        )
        table = raw_pairs(
            [(p.stem, d, "jpg") for p, d in zip(images.paths, images.data, strict=True)]
        )
        with PeerProcess(python, work / "images", policy.max_side, policy.quality) as peer:
            if peer.count != len(images.data):
                raise RuntimeError(f"the peer read {peer.count} images, not {len(images.data)}")
            log("warm-up: every path once on 10 images")
            peer.run(10)
            functions_pass(images.data[:10], policy)
            stage_pass(table.slice(0, 10), policy)

            def stage() -> Pass:
                run = stage_pass(table, policy)
                log(f"A stage: {run.wall_s:.2f} s wall, {run.cpu_s:.2f} s CPU")
                return run

            def functions() -> Pass:
                run = functions_pass(images.data, policy)
                log(f"B functions: {run.wall_s:.2f} s wall, {run.cpu_s:.2f} s CPU")
                return run

            def img2dataset() -> Pass:
                run = peer.run()
                log(f"C img2dataset: {run.wall_s:.2f} s wall, {run.cpu_s:.2f} s CPU")
                return run

            runs = interleave(
                {"stage": stage, "functions": functions, "img2dataset": img2dataset}, repeats
            )
            log("decoders alone, and our pieces")
            decoders = peer.decoders()
        subset = [
            d
            for p, d in zip(images.paths, images.data, strict=True)
            if p.stem.endswith(f"-q{DIAGNOSTIC_QUALITY}")
        ]
        pieces = diagnostics.measure(subset, policy, passes=1 if args.quick else 3)
        log("imagehash.phash on every image, for the equality check")
        reference = [str(imagehash.phash(Image.open(io.BytesIO(d)))) for d in images.data]
        stamp = start.finish(LIBRARIES)
        text = render(
            stamp=stamp,
            images=images,
            runs=runs,
            reference=reference,
            decoders=decoders,
            pieces=pieces,
            subset=len(subset),
            peer_versions=versions(),
            policy=policy,
        )
        write_report(args.output, text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
