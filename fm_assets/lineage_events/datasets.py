"""OpenLineage datasets: Iceberg tables at a snapshot, dataset versions, and sets in the object
store, with their facets (schema, version, catalog, row counts, data-quality assertions).

Naming follows OpenLineage's conventions: an Iceberg table is named by its catalog identifier
within the warehouse's URI; a location in an object store by its path within `scheme://bucket`
(`file` for a local directory); a dataset version by its key within the platform's namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from openlineage.client.generated import (
    catalog_dataset,
    data_quality_assertions_dataset,
    dataset_version_dataset,
    output_statistics_output_dataset,
    schema_dataset,
)

from fm_assets.settings import Settings
from fm_assets.storage import catalog


@dataclass(frozen=True)
class CheckResult:
    """One data check evaluated on a dataset: its name, outcome and what it said."""

    name: str
    passed: bool
    description: str = ""


@dataclass(frozen=True)
class LineageDataset:
    """A dataset of a run event, with its facets (static) and output facets (this run's)."""

    namespace: str
    name: str
    facets: dict[str, Any] = field(default_factory=dict)
    output_facets: dict[str, Any] = field(default_factory=dict)


def schema_facet(schema: pa.Schema) -> schema_dataset.SchemaDatasetFacet:
    """The columns of an Arrow schema, with their Arrow types."""
    return schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in schema
        ]
    )


def quality_facet(checks: Sequence[CheckResult]) -> dict[str, Any]:
    """The `dataQualityAssertions` facet of the checks run on a dataset ({} without checks).

    The spec types it as an input facet (checks run on what a job read); the platform's checks
    run on what a step wrote, so it goes in that output's dataset facets, where consumers also
    keep it by name."""
    if not checks:
        return {}
    assertions = [
        data_quality_assertions_dataset.Assertion(
            assertion=c.name,
            success=c.passed,
            severity="error",
            name=c.name,
            description=c.description or None,
        )
        for c in checks
    ]
    facet = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(assertions=assertions)
    return {"dataQualityAssertions": facet}


def statistics(
    rows: int | None, size: int | None = None, files: int | None = None
) -> dict[str, Any]:
    """The `outputStatistics` facet: rows (and bytes, files) this run wrote."""
    if rows is None:
        return {}
    facet = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=rows, size=size, fileCount=files
    )
    return {"outputStatistics": facet}


def iceberg_table(
    settings: Settings,
    table: str,
    namespace: str | None,
    snapshot_id: int | None,
    *,
    rows: int | None = None,
    checks: Sequence[CheckResult] = (),
) -> LineageDataset:
    """A platform table (of data namespace `namespace`, or platform-wide) at `snapshot_id`."""
    facets: dict[str, Any] = {
        "schema": schema_facet(catalog.table_schema(table)),
        "catalog": catalog_dataset.CatalogDatasetFacet(
            framework="iceberg",
            type="sql",
            name=settings.catalog_name,
            warehouseUri=settings.warehouse,
            source="fm-platform",
        ),
        **quality_facet(checks),
    }
    if snapshot_id is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(snapshot_id)
        )
    return LineageDataset(
        namespace=settings.warehouse,
        name=catalog.table_identifier(settings, table, namespace),
        facets=facets,
        output_facets=statistics(rows),
    )


def version_dataset(
    settings: Settings,
    version_key: str,
    content_hash: str | None = None,
    *,
    rows: int | None = None,
    checks: Sequence[CheckResult] = (),
) -> LineageDataset:
    """A dataset version (`web@v3`): its documents, as the Iceberg tags of that name read them."""
    facets: dict[str, Any] = dict(quality_facet(checks))
    if content_hash:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=content_hash
        )
    return LineageDataset(
        settings.openlineage_namespace, f"dataset_version/{version_key}", facets, statistics(rows)
    )


def location_dataset(
    uri: str,
    *,
    version: str | None = None,
    rows: int | None = None,
    files: int | None = None,
    checks: Sequence[CheckResult] = (),
) -> LineageDataset:
    """A directory or object in a store (a shard set, a landing batch's files)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        namespace, name = "file", parsed.path or uri
    else:
        namespace, name = f"{parsed.scheme}://{parsed.netloc}", parsed.path or "/"
    facets: dict[str, Any] = dict(quality_facet(checks))
    if version:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=version
        )
    return LineageDataset(namespace, name, facets, statistics(rows, files=files))
