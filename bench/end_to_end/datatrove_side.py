"""Running DataTrove's pipeline (`datatrove_pipeline.py`) in its side venv, timed all-in."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.end_to_end.side_venv import PYTHON
from bench.harness import NEOX_TOKENIZER

SCRIPT = Path(__file__).with_name("datatrove_pipeline.py")


@dataclass(frozen=True)
class DatatroveRun:
    seconds: float  # the whole process: interpreter start, imports, every step
    steps: dict[str, float]
    kept_after_quality: int
    kept_after_neardup: int
    tokens: int


def run_datatrove(
    corpus: Path, work: Path, workers: int, lid_model: Path, limits: dict[str, float]
) -> DatatroveRun:
    command = [
        str(PYTHON),
        str(SCRIPT),
        "--input",
        str(corpus),
        "--work",
        str(work),
        "--workers",
        str(workers),
        "--tokenizer",
        str(NEOX_TOKENIZER),
        "--lid",
        str(lid_model),
        "--thresholds",
        json.dumps(limits),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"DataTrove's pipeline failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return DatatroveRun(
        seconds=seconds,
        steps=found["seconds"],
        kept_after_quality=found["documents_after_filters"],
        kept_after_neardup=found["documents_after_minhash"],
        tokens=found["tokens"],
    )
