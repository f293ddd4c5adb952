"""img2dataset in a virtualenv of its own, made by the benchmark on first use (never by `make
install`): `.venv-img2dataset/` at the repository root, ignored by git.

img2dataset pins webdataset < 0.3 and pulls wandb, fire, pandas...; the platform's environment
must not change for a benchmark. So img2dataset goes in with `--no-deps`, plus what its
`resizer` module imports (albumentations within img2dataset's pin, which brings OpenCV, and
numpy) and imagehash. Pillow, imagehash, scipy and numpy are pinned to the platform's own
versions: the pHash half of the peer then runs the same code as our equality check.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from bench.harness import REPO, log

VENV = REPO / ".venv-img2dataset"
PYTHON = VENV / "bin" / "python"
IMG2DATASET = "img2dataset==1.47.0"
# img2dataset 1.47.0's own bounds for the two libraries its resizer imports.
RESIZER_IMPORTS = ("albumentations>=1.3.0,<2", "opencv-python-headless>=4.5.5.62,<5")
SAME_AS_PLATFORM = ("pillow", "imagehash", "scipy", "numpy")
PEER_LIBRARIES = ("img2dataset", "albumentations", "opencv-python-headless", "imagehash", "pillow")
_STAMP = VENV / ".installed"


def requirements() -> tuple[str, ...]:
    pinned = tuple(f"{n}=={importlib.metadata.version(n)}" for n in SAME_AS_PLATFORM)
    return (*RESIZER_IMPORTS, *pinned)


def ensure_img2dataset() -> Path:
    """The side venv's python, installing img2dataset's resizer and imagehash into it if needed."""
    wanted = "\n".join((IMG2DATASET, *requirements()))
    if _STAMP.is_file() and _STAMP.read_text() == wanted:
        return PYTHON
    log(f"installing {IMG2DATASET} (--no-deps), {', '.join(requirements())} into {VENV} (once)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", IMG2DATASET], check=True)
    subprocess.run([*pip, *requirements()], check=True)
    _STAMP.write_text(wanted)
    return PYTHON


def versions() -> str:
    """'img2dataset X, albumentations Y, ...' as installed in the side venv."""
    code = (
        "import importlib.metadata as m; print(', '.join(f'{n} {m.version(n)}' for n in "
        f"{PEER_LIBRARIES!r}))"
    )
    done = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()
