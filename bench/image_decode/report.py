"""The decode benchmark's table: per-core rates and ratios side by side, where each path's time
goes, and the checks that both sides did the same work (pHash bits, output sizes)."""

from __future__ import annotations

from collections.abc import Sequence

from bench.harness import MB, Stamp, median, median_and_range, met
from bench.image_decode.inputs import MAX_SIDE, NAMES, SCALES, Inputs
from bench.image_decode.ours import Pass
from fm_assets.curation.images.hashing import phash_hex
from fm_assets.curation.images.resize import ResizePolicy

LABELS = {
    "stage": "A. our decode stage (`DecodeStage.process`)",
    "functions": "B. our curation functions in a loop",
    "img2dataset": "C. img2dataset `Resizer` + `imagehash.phash`",
}


def _ratios(ours: Sequence[Pass], theirs: Sequence[Pass], cpu: bool) -> list[float]:
    """Per round: their seconds over ours (> 1: ours is faster)."""
    return [
        (t.cpu_s / o.cpu_s) if cpu else (t.wall_s / o.wall_s)
        for o, t in zip(ours, theirs, strict=True)
    ]


def _ms(seconds: float, count: int) -> str:
    return f"{seconds / count * 1000:.1f}"


def render(
    *,
    stamp: Stamp,
    images: Inputs,
    runs: dict[str, list[Pass]],
    reference: list[str],
    decoders: dict[str, float],
    pieces: dict[str, float],
    subset: int,
    peer_versions: str,
    policy: ResizePolicy,
) -> str:
    n = len(images.data)
    peer = runs["img2dataset"]
    rounds = len(peer)
    cpu_ratio = _ratios(runs["stage"], peer, cpu=True)
    lines = [
        "# Decode + validate + resize + pHash: our decode stage vs img2dataset's resizer",
        "",
        f"{stamp.header()} {stamp.machine_line()} Peer, in `.venv-img2dataset/`: "
        f"{peer_versions}. The machine is shared, so read the ratios measured side by side "
        "(per round, then the median), and the CPU figures before the wall ones.",
        "",
        f"**Images**: {n} JPEGs made from {len(NAMES)} scikit-image photos (its 16 distinct "
        "photos and the motorcycle stereo pair), each at its own size and upscaled "
        f"{', '.join(f'{s}x' for s in SCALES[1:])} (LANCZOS, longer side capped at {MAX_SIDE}; "
        "a scale the cap makes equal to a smaller one left out) and saved at JPEG quality "
        f"{', '.join(sorted({p.stem.rsplit('-q', 1)[1] for p in images.paths}))}: "
        f"{images.megapixels:.0f} MP in all, {median(images.pixels) / 1e6:.2f} MP median "
        f"({min(images.pixels) / 1e6:.2f}–{max(images.pixels) / 1e6:.2f}), "
        f"{images.megabytes:.1f} MB. Written once to a temp dir; both sides read the same "
        "bytes into memory before the clock starts. Upscaled photos are smoother than camera "
        "photos of the same size, so their JPEG decode is somewhat cheaper on both sides.",
        "",
        f"**Work**: longer side <= {policy.max_side}, aspect ratio kept, never enlarged, "
        f"re-encoded as JPEG quality {policy.quality} (our default `ResizePolicy`), and the "
        "64-bit pHash. A: `DecodeStage().process` on a `raw_pairs` table of the images "
        "(decode + validation, EXIF orientation, 8-bit RGB, resize + encode, pixel sha256, "
        "pHash, Arrow columns). B: `decode_image`, `resize_and_encode`, `phash`, "
        "`pixel_hash` in a loop, each call's CPU time taken. C: img2dataset 1.47's "
        "`Resizer(image_size=512, resize_mode='keep_ratio_largest', resize_only_if_bigger=True, "
        "downscale_interpolation='area', encode_format='jpg', encode_quality=90)` (OpenCV "
        "decode, albumentations `LongestMaxSize`, OpenCV encode; `skip_reencode` left at its "
        "default, off: every output is re-encoded, as ours) plus `imagehash.phash` of "
        "`PIL.Image.open` on the same bytes (the resizer hands back no pixels). C does less: "
        "no EXIF orientation, mode normalization, bomb or extension checks and no pixel sha256. "
        "`img2dataset/__init__.py` imports its downloader and writer (webdataset, wandb, "
        "pandas...), so C loads `img2dataset/resizer.py` from its file without running the "
        "package's `__init__`; img2dataset is installed with `--no-deps` plus what the resizer "
        "imports (albumentations within img2dataset's `<2` pin, which brings OpenCV), with "
        "Pillow, imagehash, scipy and numpy at the platform's versions; albumentations' "
        "update check is off (`NO_ALBUMENTATIONS_UPDATE=1`).",
        "",
        f"Each path is single-threaded in one process (C: a warm subprocess that times its own "
        f"loop; OpenCV held to one thread by the resizer itself); {rounds} interleaved rounds, "
        "the first path rotated each round, after one warm-up pass of 10 images each. Figures "
        "are medians (min–max) over the rounds; ratios are taken per round.",
        "",
        "| path | CPU s | wall s | images per CPU s (per core) | MP per CPU s | images/s "
        "(wall) | CPU/wall | speed vs C, CPU | speed vs C, wall |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, label in LABELS.items():
        passes = runs[name]
        cpu = [p.cpu_s for p in passes]
        wall = [p.wall_s for p in passes]
        per_cpu = [n / s for s in cpu]
        mp_cpu = [images.megapixels / s for s in cpu]
        per_wall = [n / s for s in wall]
        share = [p.cpu_s / p.wall_s for p in passes]
        vs_cpu = median_and_range(_ratios(passes, peer, cpu=True)) + "×"
        vs_wall = median_and_range(_ratios(passes, peer, cpu=False)) + "×"
        lines.append(
            f"| {label} | {median_and_range(cpu)} | {median_and_range(wall)} | "
            f"{median_and_range(per_cpu, '.1f')} | {median_and_range(mp_cpu, '.1f')} | "
            f"{median_and_range(per_wall, '.1f')} | {median_and_range(share)} | {vs_cpu} | "
            f"{vs_wall} |"
        )
    lines += [
        "",
        f"**Goal** (issue 32): the stage ≥ 1.0× img2dataset's resizer + `imagehash.phash` per "
        f"core for the same work: {met(median(cpu_ratio) >= 1.0)} "
        f"({median_and_range(cpu_ratio)}× on CPU seconds).",
        "",
        *_checks(images, runs, reference),
        "",
        *_parts(runs, decoders, n),
        "",
        *_pieces(pieces, subset),
    ]
    return "\n".join(lines)


def _checks(images: Inputs, runs: dict[str, list[Pass]], reference: list[str]) -> list[str]:
    n = len(images.data)
    ours = runs["stage"][0]
    peer = runs["img2dataset"][0]

    def mismatches(passes: Sequence[Pass]) -> int:
        return sum(
            sum(phash_hex(v) != r for v, r in zip(p.phashes, reference, strict=True))
            for p in passes
        )

    ours_bad = mismatches(runs["stage"]) + mismatches(runs["functions"])
    peer_bad = mismatches(runs["img2dataset"])
    ours_checked = n * (len(runs["stage"]) + len(runs["functions"]))
    size_diffs = [
        max(abs(a - c), abs(b - d))
        for (a, b), (c, d) in zip(ours.sizes, peer.sizes, strict=True)
        if (a, b) != (c, d)
    ]
    resized = sum(1 for (w, h), p in zip(ours.sizes, images.pixels, strict=True) if w * h < p)
    return [
        "## Same work",
        "",
        f"- **pHash bits**: our `phash` (A and B, every round: {ours_checked:,} hashes) against "
        f"`imagehash.phash` of a Pillow decode of the same bytes in this process: "
        f"**{ours_bad} mismatches** (goal 0: {met(ours_bad == 0)}); C's hashes (imagehash in "
        f"the side venv, every round) against the same reference: {peer_bad} mismatches.",
        f"- **Output sizes**: {n - len(size_diffs)} of {n} images came out at the same width "
        f"and height from A and C"
        + (
            f"; the other {len(size_diffs)} differ by at most {max(size_diffs)} px (rounding)."
            if size_diffs
            else "."
        )
        + f" {resized} of {n} were downscaled, the rest re-encoded at their size by both.",
        f"- **Output bytes**: A wrote {ours.out_bytes / MB:.1f} MB of JPEG, C "
        f"{peer.out_bytes / MB:.1f} MB (different filters and encoder settings at the same "
        "quality number).",
    ]


def _parts(runs: dict[str, list[Pass]], decoders: dict[str, float], n: int) -> list[str]:
    lines = [
        "## Where each path's time goes",
        "",
        "CPU ms per image, median over the rounds, and the share of the path's CPU time "
        "(B's and C's loops take each call's CPU time; the rest is the loop and the clock).",
        "",
        "| path | part | CPU ms per image | share |",
        "|---|---|--:|--:|",
    ]
    for name in ("functions", "img2dataset"):
        passes = runs[name]
        total = median([p.cpu_s for p in passes])
        for part in passes[0].parts:
            seconds = median([p.parts[part] for p in passes])
            lines.append(
                f"| {LABELS[name][:2]} | {part} | {_ms(seconds, n)} | {seconds / total:.0%} |"
            )
        lines.append(f"| {LABELS[name][:2]} | **all** | **{_ms(total, n)}** | 100% |")
    stage = median([p.cpu_s for p in runs["stage"]])
    functions = median([p.cpu_s for p in runs["functions"]])
    ours_resize = median([p.parts["resize_and_encode"] for p in runs["functions"]])
    their_resizer = median([p.parts["resizer"] for p in runs["img2dataset"]])
    lines += [
        "",
        f"Our `resize_and_encode` alone takes {_ms(ours_resize, n)} CPU ms per image, "
        f"{ours_resize / their_resizer:.1f}× C's whole resizer call ({_ms(their_resizer, n)} ms: "
        "OpenCV decode, area resize, OpenCV encode).",
        "",
        f"A less B (Arrow in and out, the stage's bookkeeping): "
        f"{_ms(stage - functions, n).replace('-0.0', '0.0')} CPU ms per image.",
        "",
        "The JPEG decoders alone on every image, in the side venv (one pass, CPU ms per "
        "image): " + ", ".join(f"`{name}` {_ms(s, n)}" for name, s in decoders.items()) + ".",
    ]
    return lines


def _pieces(pieces: dict[str, float], subset: int) -> list[str]:
    lines = [
        "## Inside our calls",
        "",
        f"Each piece alone on the {subset} quality-90 images (decoded once beforehand where the "
        "piece starts from pixels), CPU ms per image, the median of its passes. The resize "
        "rows other than the policy's are other Pillow filters on the same images: "
        "diagnostics of the filter's share, not the platform's path.",
        "",
        "| piece | CPU ms per image |",
        "|---|--:|",
    ]
    lines += [f"| {name} | {_ms(seconds, subset)} |" for name, seconds in pieces.items()]
    return lines
