"""The peer's side, run by `.venv-img2dataset/bin/python` (not part of the `bench` package's
imports): img2dataset's `Resizer` and `imagehash.phash` on the same images, timed here.

Protocol on stdin/stdout, one JSON object a line: after loading, it prints {"ready": ...};
then each `run N` line runs the first N images (all when N is 0) and prints the pass's wall and
CPU seconds, CPU seconds per part, and per image the resizer's output size, error, pHash and
encoded bytes; `decoders` times OpenCV's and Pillow's JPEG decoders alone on every image (CPU
seconds); `quit` ends it.

`img2dataset/__init__.py` imports its downloader, writer and wandb logger (webdataset, fsspec,
pandas, wandb...); the resizer module needs none of them, so it is loaded from its file.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no update check over the network

import cv2
import imagehash
import numpy as np
from PIL import Image


def load_resizer_module() -> types.ModuleType:
    package = importlib.util.find_spec("img2dataset")  # finds the package, imports nothing
    if package is None or not package.submodule_search_locations:
        raise SystemExit("img2dataset is not installed in this interpreter")
    path = Path(next(iter(package.submodule_search_locations))) / "resizer.py"
    spec = importlib.util.spec_from_file_location("img2dataset_resizer", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    directory, max_side, quality = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    images = [p.read_bytes() for p in sorted(directory.glob("*.jpg"))]
    resizer_module = load_resizer_module()
    # The job our default ResizePolicy does: longer side <= max_side, aspect ratio kept, never
    # enlarged, JPEG at `quality`; img2dataset's default (and cheapest) downscale filter, area.
    resizer = resizer_module.Resizer(
        image_size=max_side,
        resize_mode="keep_ratio_largest",
        resize_only_if_bigger=True,
        downscale_interpolation="area",
        encode_format="jpg",
        encode_quality=quality,
    )
    print(json.dumps({"ready": len(images)}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        if command[0] == "decoders":
            print(json.dumps(time_decoders(images)), flush=True)
            continue
        count = int(command[1]) or len(images)
        resize_s = phash_s = 0.0
        outputs = []
        clock = time.process_time
        wall, cpu = time.perf_counter(), clock()
        for data in images[:count]:
            t0 = clock()
            encoded, width, height, _, _, error = resizer(io.BytesIO(data))
            t1 = clock()
            value = str(imagehash.phash(Image.open(io.BytesIO(data))))
            t2 = clock()
            resize_s += t1 - t0
            phash_s += t2 - t1
            outputs.append([width, height, error, value, len(encoded or b"")])
        wall, cpu = time.perf_counter() - wall, clock() - cpu
        parts = {"resizer": resize_s, "PIL decode + imagehash.phash": phash_s}
        print(json.dumps({"wall": wall, "cpu": cpu, "parts": parts, "images": outputs}), flush=True)


def time_decoders(images: list[bytes]) -> dict[str, float]:
    """CPU seconds of each JPEG decoder alone over all images: OpenCV as the resizer calls it,
    Pillow as the pHash side (and our decode) loads it."""
    cv2.setNumThreads(1)
    clock = time.process_time
    started = clock()
    for data in images:
        cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    opencv = clock() - started
    started = clock()
    for data in images:
        Image.open(io.BytesIO(data)).load()
    return {"cv2.imdecode": opencv, "PIL Image.open + load": clock() - started}


if __name__ == "__main__":
    main()
