"""Quality classifiers registered by the sha256 of their model file, copied into the object store.

`fm classifier train` trains one (fm_assets.curation.classifier.training), then registers it here:
the model is copied to `registry/classifiers/<sha256>.bin` and a `quality_classifiers` row keeps
its held-out accuracy and training-data provenance. A dataset policy names a model by hash; the
quality stage loads it by that hash on every worker, refusing bytes that do not match.

One registered model is the *default* (`registry/classifiers/DEFAULT`): the one a policy that
names `sha256 = "default"` (the default web policy does) scores with. `fm classifier train
--default-recipe` (or `--default`) makes its model the default.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from fm_assets.curation.classifier.scoring import load_classifier
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.locks import exclusive
from fm_assets.storage.objectstore import open_object_store, read_verified

_DEFAULT_KEY = "registry/classifiers/DEFAULT"


class NoDefaultClassifier(ValueError):
    """A policy scores with the default quality classifier and none is registered."""


@dataclass(frozen=True)
class ClassifierInfo:
    model_sha256: str
    uri: str
    recipe_version: str
    holdout_accuracy: float
    report: dict[str, Any]


_SHA256_HEX_CHARS = 64
# Registered classifiers by (catalog, full sha256): a registration is never changed or removed,
# and every stage of a run resolves the policy's classifier (a read of the whole registry table,
# ~10 ms, most of a light stage's planning).
_registered: dict[tuple[str, str], ClassifierInfo] = {}


def register_classifier(
    settings: Settings, report: Any, *, make_default: bool = False
) -> ClassifierInfo:
    """Copy a trained model into the registry (once per content hash) and record its report;
    `make_default` also makes it the default classifier."""
    path = Path(report.model_path)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != report.model_sha256:
        raise ValueError(
            f"{path} has sha256 {digest}, its training report says {report.model_sha256}"
        )
    store = open_object_store(settings)
    key = f"registry/classifiers/{digest}.bin"
    if not store.exists(key):
        store.write_bytes_atomic(key, data)
    existing = find_classifier(settings, digest)
    if existing is not None:
        if make_default:
            _set_default(settings, digest)
        return existing
    summary = report.to_dict()
    row = {
        "model_sha256": digest,
        "uri": store.uri(key),
        "recipe_version": report.recipe_version,
        "holdout_accuracy": float(report.holdout_accuracy),
        "holdout_precision": float(report.holdout_precision),
        "holdout_recall": float(report.holdout_recall),
        "positives_sha256": report.positives_sha256,
        "negatives_sha256": report.negatives_sha256,
        "report": json.dumps(summary, sort_keys=True, default=str),
        "registered_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(settings, "quality_classifiers", pa.Table.from_pylist([row]))
    if make_default:
        _set_default(settings, digest)
    # As a later lookup reads it back: the report as stored (JSON).
    info = ClassifierInfo(
        digest,
        row["uri"],
        report.recipe_version,
        row["holdout_accuracy"],
        json.loads(row["report"]),
    )
    _registered[(settings.catalog_uri, digest)] = info
    return info


def find_classifier(settings: Settings, model_sha256: str) -> ClassifierInfo | None:
    """The registered classifier whose sha256 starts with `model_sha256` (a prefix will do)."""
    key = (settings.catalog_uri, model_sha256)
    if key in _registered:
        return _registered[key]
    info = _read_classifier(settings, model_sha256)
    if info is not None and len(model_sha256) == _SHA256_HEX_CHARS:
        _registered[key] = info  # a prefix is not kept: a later registration can make it ambiguous
    return info


def _read_classifier(settings: Settings, model_sha256: str) -> ClassifierInfo | None:
    rows = catalog.read_table(settings, "quality_classifiers").to_pylist()
    # One row per model: two registrations of one model at once may both have appended.
    by_hash = {r["model_sha256"]: r for r in rows if r["model_sha256"].startswith(model_sha256)}
    found = list(by_hash.values())
    if len(found) > 1:
        raise ValueError(f"classifier prefix {model_sha256} is ambiguous; give more characters")
    if not found:
        return None
    r = found[0]
    return ClassifierInfo(
        r["model_sha256"],
        r["uri"],
        r["recipe_version"],
        r["holdout_accuracy"],
        json.loads(r["report"]),
    )


def require_classifier(settings: Settings, model_sha256: str) -> ClassifierInfo:
    info = find_classifier(settings, model_sha256)
    if info is None:
        raise ValueError(
            f"no quality classifier {model_sha256} is registered; train one with "
            "`fm classifier train --default-recipe` (or --positive/--negative files)"
        )
    return info


def _set_default(settings: Settings, model_sha256: str) -> None:
    payload = json.dumps({"model_sha256": model_sha256}).encode()
    open_object_store(settings).write_bytes_atomic(_DEFAULT_KEY, payload)


def default_classifier(settings: Settings) -> ClassifierInfo:
    """The default quality classifier; NoDefaultClassifier (saying how to get one) if unset."""
    store = open_object_store(settings)
    if not store.exists(_DEFAULT_KEY):
        raise NoDefaultClassifier(
            "the dataset's policy scores with the default quality classifier and none is "
            "registered: run `fm classifier train --default-recipe` (`fm run` does this itself "
            "when the shared data is at FM_SHARED_DATA), or name a classifier (or sha256 = "
            '"none") under [datasets.<source>.classifier] in FM_POLICY_FILE'
        )
    digest = json.loads(store.read_bytes(_DEFAULT_KEY))["model_sha256"]
    return require_classifier(settings, digest)


def ensure_default_classifier(settings: Settings, log: Callable[[str], None]) -> str:
    """The default classifier's sha256, training it with the default recipe on first need
    (from settings.shared_data) and registering it as the default; ValueError naming the fix
    when the recipe's data is not there. One process trains; others wait and find it."""
    from fm_assets.curation.classifier.recipe import BENCHMARK, default_training_data
    from fm_assets.curation.classifier.training import train_classifier

    data = settings.shared_data
    with exclusive(settings, "training the default quality classifier", log):
        with contextlib.suppress(NoDefaultClassifier):
            return default_classifier(settings).model_sha256  # another run trained it
        if not (data / BENCHMARK / "ground-truth.json").is_file():
            raise ValueError(
                "quality_scored_documents cannot run: the batch's policy scores with the default "
                f"quality classifier, none is registered, and its training data is not at {data} "
                f"({BENCHMARK}); set FM_SHARED_DATA to the shared data directory, register one "
                "with `fm classifier train --default-recipe --data-dir DIR` (or --positive/"
                '--negative files and --default), or set sha256 = "none" under '
                '[datasets.<source>.classifier] (or base = "none") in FM_POLICY_FILE'
            )
        log(
            "the batch's policy scores with the default quality classifier and none is "
            f"registered: training it once with the default recipe on {data / BENCHMARK} "
            "(`fm classifier train --default-recipe`)"
        )
        positives, negatives, sources = default_training_data(data)
        with tempfile.TemporaryDirectory(prefix="fm-classifier-") as out:
            report = train_classifier(positives, negatives, Path(out), sources=sources)
            info = register_classifier(settings, report, make_default=True)
        log(
            f"quality classifier {info.model_sha256[:12]} is the default (held-out accuracy "
            f"{report.holdout_accuracy:.3f})"
        )
        return info.model_sha256


@functools.lru_cache(maxsize=4)
def load_registered_classifier(uri: str, model_sha256: str, s3_endpoint: str | None) -> Any:
    """Fetch a registered model into a per-process temp file (fastText loads from a path)."""

    data = read_verified(
        uri, model_sha256, s3_endpoint, "register the model again with `fm classifier train`"
    )
    local = Path(tempfile.mkdtemp(prefix="fm-classifier-")) / f"{model_sha256}.bin"
    local.write_bytes(data)
    return load_classifier(local)
