"""Run in a spawned loader worker (as its worker_init_fn): which top-level packages it imported.

Imports only the standard library, so importing it says nothing about the worker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def record(path: str, worker_id: int) -> None:
    """Write the worker's top-level imported packages to `path`-<worker_id>.json."""
    names = sorted({name.split(".")[0] for name in sys.modules})
    Path(f"{path}-{worker_id}.json").write_text(json.dumps(names))
