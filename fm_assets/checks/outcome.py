"""What a data check returns: passed or not, a sentence a person can act on, and figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CheckOutcome:
    """One evaluation of a data check; a failed check is a result, never an exception."""

    name: str
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # What the check read (snapshot ids, content keys): an evaluation of the same data version
    # stands for a new one.
    data_version: str | None = None
