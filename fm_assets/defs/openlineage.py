"""Every asset materialization as an OpenLineage run: `emits_lineage` wraps an asset's function.

START when the step begins; COMPLETE when it returns, with the datasets it read and wrote
(described from its MaterializeResult: Iceberg tables at their snapshot ids, dataset versions,
shard-set and landing URIs) and its checks' results as data-quality assertions; FAIL (ABORT for
a retry Dagster will make) when it raises. Events go where FM_OPENLINEAGE_URL and
FM_OPENLINEAGE_FILE say (docs/openlineage.md). Lineage is reported, not relied on: an endpoint
that is down is logged as a warning on the run and never fails the materialization.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import dagster as dg

from fm_assets.defs.resources import FmPlatform
from fm_assets.execution.pipelines import pipeline_for
from fm_assets.lineage_events.datasets import (
    CheckResult,
    LineageDataset,
    iceberg_table,
    location_dataset,
    version_dataset,
)
from fm_assets.lineage_events.events import emit, run_event, transports
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.landing import data_prefix, read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import require_version

T = TypeVar("T")
Described = tuple[list[LineageDataset], list[LineageDataset], dict[str, str]]
Describe = Callable[[Settings, str | None, dict[str, Any], Sequence[CheckResult]], Described]


def _plain(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v.value if isinstance(v, dg.MetadataValue) else v for k, v in metadata.items()}


def _checks(result: object) -> list[CheckResult]:
    found = []
    for check in getattr(result, "check_results", None) or []:
        said = (check.metadata or {}).get("description")
        text = said.value if isinstance(said, dg.MetadataValue) else str(said or "")
        found.append(CheckResult(check.check_name or "", bool(check.passed), str(text)))
    return found


def describe_stage(
    settings: Settings, batch: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A stage run: its upstream table (or the batch's landed files) at the snapshot it read,
    its output table and the quarantine as committed."""
    batch = str(batch)
    manifest = read_manifest(open_object_store(settings), batch)
    namespace, stage = manifest.namespace, str(md["stage"])
    upstream = pipeline_for(manifest.modality).upstream_of(stage)
    if upstream is None:
        store = open_object_store(settings)
        inputs = [location_dataset(store.uri(data_prefix(namespace, batch)), version=batch)]
    else:
        inputs = [iceberg_table(settings, upstream, namespace, md.get("input_snapshot_id"))]
    quarantine_snapshot = catalog.current_snapshot_id(settings, "quarantine", namespace=namespace)
    outputs = [
        iceberg_table(
            settings,
            stage,
            namespace,
            md.get("output_snapshot_id"),
            rows=md.get("records_kept"),
            checks=checks,
        ),
        iceberg_table(
            settings,
            "quarantine",
            namespace,
            quarantine_snapshot,
            rows=md.get("records_quarantined"),
        ),
    ]
    code = {"codeVersion": str(md["code_version"]), "configHash": str(md["config_hash"])}
    return inputs, outputs, code


def describe_version(
    settings: Settings, key: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A version: the last stage's table of each data namespace at the snapshot it tags."""
    version = require_version(settings, str(key))
    final = version.pipeline.final
    inputs = [
        iceberg_table(settings, final, namespace, tables.get(final))
        for namespace, tables in sorted(version.snapshot_ids.items())
    ]
    output = version_dataset(
        settings, version.version_key, version.content_hash, rows=version.num_documents,
        checks=checks,
    )  # fmt: skip
    return inputs, [output], {}


def describe_set(
    settings: Settings, partition: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A shard set or text set: its version in, its directory out."""
    version_key = str(md.get("shard_set_key", partition)).split("/", 1)[0]
    output = location_dataset(
        str(md["uri"]),
        version=str(md.get("shard_set_key") or md.get("manifest_sha256") or ""),
        rows=md.get("num_samples", md.get("num_documents")),
        files=md.get("shards"),
        checks=checks,
    )
    return [version_dataset(settings, version_key)], [output], {}


def describe_revocation(
    settings: Settings, revocation_id: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A revocation: the versions it touched in; its row and the replacement versions out."""
    replaced: dict[str, str | None] = md.get("versions") or {}
    snapshot = catalog.current_snapshot_id(settings, "revocations")
    outputs = [iceberg_table(settings, "revocations", None, snapshot, rows=1)]
    outputs += [version_dataset(settings, new) for new in sorted(v for v in replaced.values() if v)]
    return [version_dataset(settings, old) for old in sorted(replaced)], outputs, {}


def describe_landing(
    settings: Settings, batch: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A landing batch: its files, published."""
    store = open_object_store(settings)
    uri = store.uri(data_prefix(str(md["namespace"]), str(batch)))
    files = md.get("files")
    count = len(files) if isinstance(files, list) else None
    return [], [location_dataset(uri, version=str(batch), files=count, checks=checks)], {}


def describe_cache(
    settings: Settings, partition: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A pre-warm: the shard set in, the node's cached copy out (none for a set read in place)."""
    source = location_dataset(str(md["uri"]), version=str(md.get("manifest_sha256") or ""))
    entry = str(md.get("cache_entry") or "")
    if not entry.startswith("/"):
        return [source], [], {}
    return [source], [location_dataset(entry, version=str(md.get("manifest_sha256") or ""))], {}


def describe_scan(
    settings: Settings, version_key: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """A contamination scan: the version in, its refreshed dataset card out."""
    card = md.get("dataset_card_uri")
    outputs = [location_dataset(str(card), checks=checks)] if card else []
    return [version_dataset(settings, str(version_key))], outputs, {}


WRITTEN_KEYS = ("uri", "file_uri", "dataset_card_uri")  # metadata naming what an asset wrote


def describe_location(
    settings: Settings, partition: str | None, md: dict[str, Any], checks: Sequence[CheckResult]
) -> Described:
    """Any other asset: what its metadata names as written (`uri`, ...), else no dataset."""
    written = next((str(md[k]) for k in WRITTEN_KEYS if md.get(k)), None)
    if written:
        return [], [location_dataset(written, checks=checks)], {}
    return [], [], {}


def emits_lineage(
    describe: Describe = describe_location,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Wrap an asset's function (taking `context` and the `fm` resource) to emit its run's
    OpenLineage events, the datasets given by `describe`."""

    def wrap(step: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(step)  # Dagster reads the wrapped function's parameters
        def run(context: dg.AssetExecutionContext, *args: Any, **kwargs: Any) -> T:
            fm = kwargs.get("fm") or next(a for a in args if isinstance(a, FmPlatform))
            settings = fm.settings()
            if not transports(settings):
                return step(context, *args, **kwargs)
            partition = str(context.partition_key) if context.has_partition_key else None
            common: dict[str, Any] = {
                "asset": context.asset_key.to_user_string(),
                "partition": partition,
                "dagster_run_id": context.run.run_id,
                "dagster_job": context.job_name,
            }
            _send(context, settings, lambda: run_event(settings, "START", **common))
            try:
                result = step(context, *args, **kwargs)
            except Exception as exc:
                error, state = exc, "ABORT" if isinstance(exc, dg.RetryRequested) else "FAIL"
                _send(context, settings, lambda: run_event(settings, state, **common, error=error))
                raise

            def complete() -> Any:
                checks = _checks(result)
                metadata = _plain(dict(getattr(result, "metadata", None) or {}))
                try:
                    inputs, outputs, code = describe(settings, partition, metadata, checks)
                except Exception as exc:
                    # The run still completed: say so, without the datasets that could not be
                    # described, rather than leave the START without its end.
                    context.log.warning(
                        f"OpenLineage: the datasets of this materialization could not be "
                        f"described ({type(exc).__name__}: {exc}); its COMPLETE event has none"
                    )
                    inputs, outputs, code = [], [], {}
                return run_event(
                    settings, "COMPLETE", **common, inputs=inputs, outputs=outputs, code=code
                )

            _send(context, settings, complete)
            return result

        run.emits_openlineage = True  # type: ignore[attr-defined]  # read by tests/test_openlineage.py
        return run

    return wrap


def _send(context: dg.AssetExecutionContext, settings: Settings, build: Callable[[], Any]) -> None:
    try:
        emit(settings, build())
    except Exception as exc:
        context.log.warning(
            f"OpenLineage event not sent ({type(exc).__name__}: {exc}); the materialization "
            "stands. Check FM_OPENLINEAGE_URL / FM_OPENLINEAGE_FILE (docs/openlineage.md)"
        )
