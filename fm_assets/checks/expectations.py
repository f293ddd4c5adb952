"""Run the document expectation suites (`expectation_specs.py`) with great-expectations.

`validate_documents(table, kind)` validates one batch's Arrow table and returns an
`ExpectationReport`. great_expectations is imported on first validation, never at import time
(the import takes seconds); one in-memory GE context per process holds one validation per kind.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from fm_assets.checks.expectation_specs import (
    DocumentKind,
    ExpectationSpec,
    document_expectation_specs,
    document_schema,
)

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.core.validation_definition import ValidationDefinition
    from great_expectations.data_context import EphemeralDataContext
    from great_expectations.data_context.store import ValidationResultsStore
    from great_expectations.datasource.fluent import PandasDatasource
    from great_expectations.expectations import Expectation

# How many offending values an outcome quotes, and how much of each.
_SAMPLE_VALUES = 3
_SAMPLE_CHARS = 24


@dataclass(frozen=True)
class ExpectationOutcome:
    """What one expectation concluded about one table."""

    expectation: str  # ExpectationSpec.label, e.g. "expect_column_values_to_be_unique(doc_id)"
    success: bool
    observed: str  # short human summary: unexpected count and sample values, or the GE error


@dataclass(frozen=True)
class ExpectationReport:
    """The outcomes of a whole suite on one table, in the suite's order."""

    success: bool  # all outcomes succeeded
    outcomes: tuple[ExpectationOutcome, ...]

    def failures(self) -> tuple[ExpectationOutcome, ...]:
        """The outcomes that did not succeed."""
        return tuple(o for o in self.outcomes if not o.success)

    def summary(self) -> str:
        """One line per failure, or "all N expectations met"."""
        failures = self.failures()
        if not failures:
            return f"all {len(self.outcomes)} expectations met"
        return "\n".join(f"{o.expectation}: {o.observed}" for o in failures)


def validate_documents(table: pa.Table, kind: DocumentKind) -> ExpectationReport:
    """Run the `kind` suite on `table` with great_expectations and report every outcome.

    The column-set expectation sees all of `table`'s columns; value expectations see only the
    columns they read. A column the suite reads but the table lacks fails the expectations on
    it with GE's "does not exist" error rather than raising. A table with no rows passes every
    value expectation vacuously: that a batch is not empty is another check's job.
    """
    validation = _validation(kind)
    frame = _to_checked_frame(table, validation.read_columns)
    with _lock:
        result = validation.definition.run(
            batch_parameters={"dataframe": frame}, result_format=_RESULT_FORMAT
        )
        # The ephemeral context stores every result in memory; we read the returned copy, so
        # drop the stored one to keep a long-lived Dagster process from growing without bound.
        store = validation.results_store
        for key in store.list_keys():
            store.remove_key(key)

    by_id = {r.expectation_config.id: r for r in result.results if r.expectation_config}
    outcomes = []
    for gx_id, spec in validation.specs_by_id.items():
        gx_result = by_id.get(gx_id)
        if gx_result is None:
            outcomes.append(ExpectationOutcome(spec.label, False, "GE returned no result"))
        else:
            outcomes.append(
                ExpectationOutcome(spec.label, bool(gx_result.success), _observed(gx_result))
            )
    return ExpectationReport(success=all(o.success for o in outcomes), outcomes=tuple(outcomes))


def gx_expectation(spec: ExpectationSpec) -> Expectation:
    """The great_expectations expectation object `spec` describes (imports great_expectations)."""
    gxe = _import_gx().expectations
    class_name = "".join(part.capitalize() for part in spec.type.split("_"))
    expectation_class = getattr(gxe, class_name, None)
    if expectation_class is None:
        raise ValueError(
            f"great_expectations has no expectation {class_name} for {spec.type!r}; "
            "check the spelling of the type in fm_assets/checks/expectation_specs.py"
        )
    # GE validates kwargs with pydantic and wants lists, not the tuples the specs hold.
    kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.kwargs.items()}
    return expectation_class(**kwargs)


# --- great_expectations plumbing -------------------------------------------------------------

# BASIC carries the unexpected count and a sample; SUMMARY adds per-value counts and row indexes
# we never show.
_RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": _SAMPLE_VALUES}


class _GxHandle(NamedTuple):
    context: EphemeralDataContext
    source: PandasDatasource  # one dataframe asset per document kind


@dataclass(frozen=True)
class _KindValidation:
    """The validation definition of one kind and what is needed to read its results."""

    results_store: ValidationResultsStore
    definition: ValidationDefinition
    specs_by_id: Mapping[str, ExpectationSpec]  # GE expectation id -> spec, in suite order
    read_columns: frozenset[str]


# Guards building and running validations: a GE context is not thread-safe, and two threads
# building the same suite would collide on its name.
_lock = threading.Lock()
_gx_handles: list[_GxHandle] = []  # at most one: this process's GE context
_validations: dict[DocumentKind, _KindValidation] = {}


def _validation(kind: DocumentKind) -> _KindValidation:
    """The cached validation definition of `kind`, built on first use."""
    document_schema(kind)  # reject an unknown kind before importing GE
    with _lock:
        if kind not in _validations:
            if not _gx_handles:
                _gx_handles.append(_new_gx_handle())
            _validations[kind] = _build_validation(_gx_handles[0], kind)
        return _validations[kind]


@functools.cache
def _import_gx() -> ModuleType:
    """great_expectations, imported with analytics off and its import-time noise muted."""
    # GE 1.x releases that ship the analytics client read this at import time and otherwise
    # send usage events; the context's analytics_enabled=False is the other documented switch.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    gx_logger = logging.getLogger("great_expectations")
    if gx_logger.level == logging.NOTSET:
        # GE logs a few hundred INFO lines on import (doc-decorator registration); keep them
        # out of Dagster step logs unless someone configured this logger on purpose.
        gx_logger.setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # GE's own imports trip DeprecationWarning (sre_constants, sre_parse) and the
        # google-cloud extras an ImportWarning; they are GE's to fix and would show in every
        # pytest warnings summary.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", ImportWarning)
        import great_expectations as gx
    return gx


def _new_gx_handle() -> _GxHandle:
    """A new in-memory GE context, analytics and progress bars off, with one pandas datasource."""
    gx = _import_gx()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        # No temporary data-docs site: nothing here renders docs.
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        # Otherwise every validation writes a tqdm bar to the Dagster step's stderr.
        progress_bars=ProgressBarsConfig(globally=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    return _GxHandle(context, context.data_sources.add_pandas("fm_documents"))


def _build_validation(handle: _GxHandle, kind: DocumentKind) -> _KindValidation:
    """Add the `kind` dataframe asset, suite and validation definition to the GE context."""
    gx = _import_gx()
    context, source = handle
    name = f"{kind}_documents"
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole_table")
    suite = context.suites.add(gx.ExpectationSuite(name=name))
    specs = document_expectation_specs(kind)
    specs_by_id: dict[str, ExpectationSpec] = {}
    for spec in specs:
        added = suite.add_expectation(gx_expectation(spec))
        if added.id is None:
            raise RuntimeError(f"GE gave no id to {spec.label} in suite {name}; cannot map results")
        specs_by_id[added.id] = spec
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=batch, suite=suite)
    )
    return _KindValidation(
        results_store=context.validation_results_store,
        definition=definition,
        specs_by_id=MappingProxyType(specs_by_id),
        read_columns=frozenset(c for s in specs for c in s.columns),
    )


def _to_checked_frame(table: pa.Table, read_columns: frozenset[str]) -> pd.DataFrame:
    """`table` as a pandas DataFrame with every column it has, but only `read_columns` filled.

    Columns no expectation reads become all-null placeholders, which cost nothing to convert,
    so the column-set expectation still sees the table's real column names while the bytes of
    `raw_content` and `tokens` never reach pandas.
    """
    placeholder = pa.nulls(table.num_rows)
    arrays = [
        table.column(i) if name in read_columns else placeholder
        for i, name in enumerate(table.column_names)
    ]
    return pa.Table.from_arrays(arrays, names=table.column_names).to_pandas()


def _observed(result: ExpectationValidationResult) -> str:
    """A one-line summary of what GE observed for one expectation."""
    error = _error_message(result.exception_info)
    if error:
        return f"error: {error}"
    details = result.result or {}
    if "observed_value" in details:  # table-level: the column set
        mismatched = (details.get("details") or {}).get("mismatched") or {}
        parts = [f"{k} {sorted(v)}" for k, v in sorted(mismatched.items()) if v]
        return (
            "; ".join(parts) if parts else f"{len(details['observed_value'])} columns as expected"
        )
    unexpected = details.get("unexpected_count", 0)
    text = f"{unexpected} of {details.get('element_count', 0)} values unexpected"
    # Nulls say nothing a not-null count does not; GE reports them as None or NaN.
    sample = [
        _short(v) for v in details.get("partial_unexpected_list") or [] if v is not None and v == v
    ]
    return f"{text}, e.g. {', '.join(sample)}" if unexpected and sample else text


def _error_message(exception_info: Mapping[str, Any] | None) -> str | None:
    """The first exception message in GE's exception_info, which comes in two shapes."""
    if not exception_info:
        return None
    # Flat when the expectation itself raised; keyed by metric id when a metric failed (e.g.
    # a missing column).
    infos = [exception_info] if "raised_exception" in exception_info else exception_info.values()
    for info in infos:
        if isinstance(info, Mapping) and info.get("raised_exception"):
            return str(info.get("exception_message") or "unknown error").splitlines()[0]
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SAMPLE_CHARS else text[: _SAMPLE_CHARS - 1] + "…"
