"""The soak's per-batch figures as JSON lines, written as they are measured: the full series
behind the table's points, and what is left of a run that fails late."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from bench.harness import log


class RecordLog:
    """A JSON-lines file opened anew; calling it appends one record and flushes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def __enter__(self) -> RecordLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="utf-8")
        log(f"per-batch figures go to {self.path}")
        return self

    def __call__(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError("RecordLog used outside its `with` block")
        self._file.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._file.flush()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self._file.close()
