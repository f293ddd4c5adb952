"""Training documents for `fm classifier train`: JSONL(.gz) with a "text" field, or text files."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path


def read_documents(paths: Iterable[str]) -> list[str]:
    """Documents from each path: one per JSONL line (`text` field), or one per other file.

    Raises ValueError naming the file and line of a record without a string `text`.
    """
    documents: list[str] = []
    for name in paths:
        path = Path(name)
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    text = record.get("text") if isinstance(record, dict) else None
                    if not isinstance(text, str):
                        raise ValueError(f"{path}:{number}: no string field 'text'")
                    documents.append(text)
        else:
            documents.append(path.read_text(encoding="utf-8", errors="replace"))
    return documents
