"""The contamination registry in Iceberg: register a benchmark, load a matcher, pin the registry.

Registering writes a benchmark's n-gram rows, then its item rows, then its
`contamination_benchmarks` row last: a matcher only uses benchmarks listed there. Stages and
checks pin `registry_ref`, the three tables' snapshot ids (docs/contamination.md).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fm_assets.contamination.eval_items import read_eval_set
from fm_assets.contamination.matcher import DEFAULT_THRESHOLD, ContaminationMatcher, Match
from fm_assets.contamination.registry import CONTAMINATION_RULES_VERSION, build_registry
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import filesystem_for, open_object_store

REGISTRY_TABLES = ("contamination_benchmarks", "contamination_items", "contamination_ngrams")
_matchers: dict[tuple[str, str, float], ContaminationMatcher] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class BenchmarkInfo:
    benchmark: str
    file_uri: str
    file_sha256: str
    fields: tuple[str, ...]
    item_count: int
    empty_items: int
    unmatchable_items: int
    ngram_rows: int


def register_benchmark(
    settings: Settings, benchmark: str, path: str | Path, fields: Sequence[str]
) -> BenchmarkInfo:
    """Hash every item of an eval-set file into the registry under `benchmark` (replacing it)."""
    if not benchmark or not benchmark.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"benchmark name {benchmark!r} must be letters, digits, - and _")
    eval_set = read_eval_set(path, fields)
    built = build_registry(benchmark, eval_set)
    store = open_object_store(settings)
    suffix = "".join(Path(str(path)).suffixes) or ".data"
    key = f"registry/evalsets/{benchmark}/{eval_set.sha256}{suffix}"
    if not store.exists(key):
        store.write_bytes_atomic(key, Path(path).read_bytes())
    where = catalog.where_equal("benchmark", benchmark)
    props = {"fm.benchmark": benchmark, "fm.file_sha256": eval_set.sha256}
    catalog.replace_rows(settings, "contamination_ngrams", built.ngrams, where, props)
    catalog.replace_rows(settings, "contamination_items", built.items, where, props)
    info = BenchmarkInfo(
        benchmark=benchmark,
        file_uri=store.uri(key),
        file_sha256=eval_set.sha256,
        fields=tuple(fields),
        item_count=built.item_count,
        empty_items=len(built.empty_item_ids),
        unmatchable_items=len(built.unmatchable_item_ids),
        ngram_rows=built.ngrams.num_rows,
    )
    row = {
        "benchmark": benchmark,
        "file_uri": info.file_uri,
        "file_sha256": info.file_sha256,
        "fields": list(info.fields),
        "item_count": info.item_count,
        "empty_items": info.empty_items,
        "unmatchable_items": info.unmatchable_items,
        "rules_version": CONTAMINATION_RULES_VERSION,
        "registered_at": dt.datetime.now(dt.UTC),
    }
    catalog.replace_rows(
        settings, "contamination_benchmarks", pa.Table.from_pylist([row]), where, props
    )
    return info


def registered_benchmark(settings: Settings, benchmark: str) -> dict[str, object] | None:
    rows = catalog.read_table(
        settings, "contamination_benchmarks", row_filter=catalog.where_equal("benchmark", benchmark)
    ).to_pylist()
    return rows[0] if rows else None


def local_copy(settings: Settings, file_uri: str, directory: Path) -> Path:
    """Fetch a registered eval-set file from the object store (to register it again)."""
    fs, path = filesystem_for(file_uri, settings.s3_endpoint)
    target = directory / Path(path).name
    with fs.open_input_stream(path, compression=None) as f:
        target.write_bytes(f.read())
    return target


def registry_ref(settings: Settings) -> str:
    """The registry as it stands: the three tables' current snapshot ids, as canonical JSON."""
    return json.dumps(
        {name: catalog.current_snapshot_id(settings, name) for name in REGISTRY_TABLES},
        sort_keys=True,
    )


def load_matcher(
    settings: Settings, ref: str, threshold: float = DEFAULT_THRESHOLD
) -> ContaminationMatcher:
    """The matcher over the registry at `ref` (cached per process: Ray workers reuse it)."""
    key = (settings.catalog_uri, ref, threshold)
    with _lock:
        cached = _matchers.get(key)
        if cached is not None:
            return cached
        snapshots = json.loads(ref)
        names: list[str] = []
        if snapshots.get("contamination_benchmarks") is not None:
            names = (
                catalog.read_table(
                    settings,
                    "contamination_benchmarks",
                    snapshot_id=snapshots["contamination_benchmarks"],
                    columns=("benchmark",),
                )
                .column("benchmark")
                .to_pylist()
            )
        if not names:
            matcher = ContaminationMatcher.from_registries([], threshold=threshold)
        else:
            where = catalog.where_in("benchmark", names)
            items, ngrams = (
                catalog.read_table(settings, table, row_filter=where, snapshot_id=snapshots[table])
                for table in ("contamination_items", "contamination_ngrams")
            )
            matcher = ContaminationMatcher(items, ngrams, threshold=threshold)
        _matchers[key] = matcher
        return matcher


def describe(matches: Sequence[Match]) -> str:
    """'gsm8k item 12 (97% of its n-grams), nq_open item 3 (short match)' for a reason."""
    parts = [
        f"{m.benchmark} item {m.item_id} "
        + (f"({m.fraction:.0%} of its n-grams)" if m.rule == "ngram" else f"({m.rule} match)")
        for m in matches[:5]
    ]
    more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
    return ", ".join(parts) + more
