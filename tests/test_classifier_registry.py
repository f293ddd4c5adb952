"""The quality-classifier registry (fm_assets.registries.classifiers): lookups by full hash and
by prefix, and which of them may be answered without reading the registry table again."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fm_assets.registries import classifiers
from fm_assets.registries.classifiers import find_classifier, register_classifier
from fm_assets.settings import Settings
from fm_assets.storage import catalog


@dataclass(frozen=True)
class _Report:
    """What `register_classifier` reads of a training report."""

    model_path: str
    model_sha256: str
    recipe_version: str = "test-1"
    holdout_accuracy: float = 0.9
    holdout_precision: float = 0.9
    holdout_recall: float = 0.9
    positives_sha256: str = "p" * 64
    negatives_sha256: str = "n" * 64

    def to_dict(self) -> dict[str, Any]:
        return {"recipe_version": self.recipe_version}


def _model(tmp_path: Path, seed: int) -> _Report:
    path = tmp_path / f"model-{seed}.bin"
    path.write_bytes(f"model bytes {seed}".encode())
    return _Report(str(path), hashlib.sha256(path.read_bytes()).hexdigest())


def test_full_hash_lookups_are_kept_and_prefixes_see_later_registrations(
    fm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two models whose hashes share their first hex digit: that prefix names both.
    first = _model(tmp_path, 0)
    second = next(
        report
        for report in (_model(tmp_path, seed) for seed in itertools.count(1))
        if report.model_sha256[0] == first.model_sha256[0]
    )
    prefix = first.model_sha256[0]
    register_classifier(fm_settings, first)
    found = find_classifier(fm_settings, prefix)
    assert found is not None and found.model_sha256 == first.model_sha256

    register_classifier(fm_settings, second)
    with pytest.raises(ValueError, match="ambiguous"):
        find_classifier(fm_settings, prefix)  # the earlier prefix answer was not kept

    reads = 0
    real_read = catalog.read_table

    def counting_read(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return real_read(*args, **kwargs)

    monkeypatch.setattr(classifiers.catalog, "read_table", counting_read)
    for report in (first, second, first):
        info = find_classifier(fm_settings, report.model_sha256)
        assert info is not None and info.model_sha256 == report.model_sha256
        assert info.uri.endswith(f"{report.model_sha256}.bin")
    assert reads == 0  # both were looked up by full hash when registered
    assert find_classifier(fm_settings, "f" * 64) is None and reads == 1
