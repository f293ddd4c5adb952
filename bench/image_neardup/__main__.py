"""Near-dup quality of the pHash dedup stage on planted copies, our pHash vs imagehash's, and
`ImageIndex` lookup time as it grows.

    python -m bench.image_neardup            # max distances 4, 6, 8, 10; index up to 10^6
    python -m bench.image_neardup --quick    # the same quality run; index up to 10^5, at 8

Figures (each a module): `quality` (recall of planted near-duplicates per transform and the
share of distinct images dropped, by `DecodeStage` then `ImageDedupStage`), `phash_speed`
(`phash` vs `imagehash.phash` on the same decoded images, interleaved), `lookup`
(`ImageIndex.find` per query at 10^4, 10^5, 10^6 stored random hashes vs a numpy scan).
"""

from __future__ import annotations

from bench.harness import RESULTS, RunStart, log, parser, rerun_command, write_report
from bench.image_neardup import corpus as corpus_module
from bench.image_neardup import lookup, phash_speed, quality
from bench.image_neardup.report import render

LIBRARIES = ("pillow", "numpy", "scipy", "imagehash", "pyarrow")


def main() -> None:
    cli = parser(
        "bench.image_neardup",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "image_neardup.md",
        "index up to 10^5 stored hashes at max distance 8 only; 2 pHash rounds, not 5",
    )
    args = cli.parse_args()
    start = RunStart.now(rerun_command(cli))
    log("making the corpus: distinct photos and quadrants, planted copies")
    corpus = corpus_module.build()
    log(f"{len(corpus.distinct)} distinct images, {len(corpus.planted)} planted copies")
    log("decoding and deciding at each max distance")
    found = quality.measure(corpus)
    log("pHash: ours vs imagehash")
    images = phash_speed.stage_images([*corpus.distinct, *corpus.planted])
    speed = phash_speed.measure(images, repeats=2 if args.quick else 5)
    del images
    sizes = lookup.SIZES[:2] if args.quick else lookup.SIZES
    distances = (quality.DEFAULT_DISTANCE,) if args.quick else quality.DISTANCES
    lookups = []
    for distance in distances:
        log(f"ImageIndex lookups at max distance {distance}, up to {sizes[-1]:,} hashes")
        lookups += lookup.measure(distance, sizes)
    stamp = start.finish(LIBRARIES)
    write_report(args.output, render(stamp, corpus, found, speed, lookups))


if __name__ == "__main__":
    main()
