"""The great-expectations suites of the document tables, run for real on tiny Arrow tables."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from fm_assets.checks.expectation_specs import (
    DOCUMENT_SCHEMAS,
    DocumentKind,
    document_expectation_specs,
)
from fm_assets.checks.expectations import (
    ExpectationOutcome,
    ExpectationReport,
    gx_expectation,
    validate_documents,
)
from tests.paths import REPO

KINDS: tuple[DocumentKind, ...] = ("raw", "text", "tokenized")
TOKENIZER_HASH = hashlib.sha256(b"tokenizer.json").hexdigest()
FILE_SHA = hashlib.sha256(b"part-0.jsonl").hexdigest()


def documents(kind: DocumentKind, n: int = 3, **columns: list[Any]) -> pa.Table:
    """`n` valid `kind` documents with the real schema; `columns` replaces whole columns.

    Nullable columns the test does not name are null, so the builder keeps up with new
    optional provenance fields.
    """
    sha = [hashlib.sha256(f"record {i}".encode()).hexdigest() for i in range(n)]
    valid: dict[str, list[Any]] = {
        "doc_id": sha,
        "raw_sha256": sha,
        "batch_id": ["batch-0001"] * n,
        "record_id": [f"{FILE_SHA[:16]}:{i}" for i in range(n)],
        "source_file": ["part-0.jsonl"] * n,
        "source": ["web"] * n,
        "license": ["cc-by-4.0"] * n,
        "namespace": ["en"] * n,
        "content_type": ["html" if kind == "raw" else "text"] * n,
        "raw_size": [11] * n,
        "raw_content": [b"<p>doc</p>\n"] * n,
        "text": [f"document {i}" for i in range(n)],
        "tokenizer_hash": [TOKENIZER_HASH] * n,
        "num_tokens": [2] * n,
        "tokens": [[17, i] for i in range(n)],
    }
    schema = DOCUMENT_SCHEMAS[kind]
    data = {f.name: columns.get(f.name, valid.get(f.name, [None] * n)) for f in schema}
    return pa.table(data, schema=schema)


def failed(report: ExpectationReport) -> set[str]:
    return {o.expectation for o in report.failures()}


@pytest.fixture(scope="module", autouse=True)
def gx_ready() -> None:
    """Pay the great_expectations import and context setup once, not in the first test."""
    for kind in KINDS:
        validate_documents(documents(kind, 1), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_suite_checks_the_schema_column_set_and_names_are_unique(kind: DocumentKind) -> None:
    specs = document_expectation_specs(kind)
    column_set = [s for s in specs if s.type == "expect_table_columns_to_match_set"]
    assert len(column_set) == 1
    assert list(column_set[0].kwargs["column_set"]) == DOCUMENT_SCHEMAS[kind].names
    assert column_set[0].kwargs["exact_match"] is True
    assert len({s.label for s in specs}) == len(specs)
    # Bytes and lists are never handed to pandas, so no expectation may read them.
    assert not {c for s in specs for c in s.columns} & {"raw_content", "tokens"}


@pytest.mark.parametrize("kind", KINDS)
def test_specs_build_the_named_gx_expectations(kind: DocumentKind) -> None:
    for spec in document_expectation_specs(kind):
        assert gx_expectation(spec).expectation_type == spec.type


@pytest.mark.parametrize("kind", KINDS)
def test_valid_documents_meet_every_expectation(kind: DocumentKind) -> None:
    report = validate_documents(documents(kind), kind)
    assert report.success, report.summary()
    assert [o.expectation for o in report.outcomes] == [
        s.label for s in document_expectation_specs(kind)
    ]
    assert report.summary() == f"all {len(report.outcomes)} expectations met"


@pytest.mark.parametrize("kind", KINDS)
def test_empty_table_passes_value_expectations_vacuously(kind: DocumentKind) -> None:
    report = validate_documents(documents(kind, 0), kind)
    assert report.success, report.summary()
    assert "expect_table_columns_to_match_set" in {o.expectation for o in report.outcomes}


def test_empty_table_still_checks_its_columns() -> None:
    report = validate_documents(documents("text", 0).drop_columns(["url"]), "text")
    assert failed(report) == {"expect_table_columns_to_match_set"}


def test_duplicated_doc_id_fails_uniqueness() -> None:
    sha = hashlib.sha256(b"one record, landed three times").hexdigest()
    table = documents("text", 3, doc_id=[sha] * 3, raw_sha256=[sha] * 3)
    report = validate_documents(table, "text")
    assert failed(report) == {"expect_column_values_to_be_unique(doc_id)"}
    (outcome,) = report.failures()
    assert outcome.observed.startswith("3 of 3 values unexpected")


def test_empty_text_fails_value_length() -> None:
    report = validate_documents(documents("text", 3, text=["a", "", "c"]), "text")
    assert failed(report) == {"expect_column_value_lengths_to_be_between(text)"}
    assert report.failures()[0].observed == "1 of 3 values unexpected, e.g. ''"


def test_null_text_fails_not_null() -> None:
    report = validate_documents(documents("text", 2, text=["a", None]), "text")
    assert failed(report) == {"expect_column_values_to_not_be_null(text)"}
    assert report.failures()[0].observed == "1 of 2 values unexpected"


def test_bad_sha_fails_regex() -> None:
    upper = hashlib.sha256(b"x").hexdigest().upper()
    short = "abc123"
    table = documents(
        "raw", 3, doc_id=["0" * 64, upper, short], raw_sha256=["0" * 64, upper, short]
    )
    report = validate_documents(table, "raw")
    assert failed(report) == {"expect_column_values_to_match_regex(raw_sha256)"}
    assert report.failures()[0].observed.startswith("2 of 3 values unexpected")


def test_missing_column_fails_column_set_and_the_expectations_reading_it() -> None:
    report = validate_documents(documents("text").drop_columns(["license"]), "text")
    assert failed(report) == {
        "expect_table_columns_to_match_set",
        "expect_column_values_to_not_be_null(license)",
    }
    by_name = {o.expectation: o for o in report.failures()}
    assert by_name["expect_table_columns_to_match_set"].observed == "missing ['license']"
    assert "does not exist" in by_name["expect_column_values_to_not_be_null(license)"].observed


def test_extra_column_fails_column_set() -> None:
    table = documents("text").append_column("score", pa.array([1.0, 2.0, 3.0]))
    report = validate_documents(table, "text")
    assert failed(report) == {"expect_table_columns_to_match_set"}
    assert report.failures()[0].observed == "unexpected ['score']"


def test_doc_id_not_raw_sha256_fails_pair_equality() -> None:
    table = documents("tokenized", 3)
    doc_ids = table.column("doc_id").to_pylist()
    report = validate_documents(documents("tokenized", 3, doc_id=doc_ids[::-1]), "tokenized")
    # Reversing three ids moves two of them.
    assert failed(report) == {"expect_column_pair_values_to_be_equal(doc_id, raw_sha256)"}
    assert report.failures()[0].observed.startswith("2 of 3 values unexpected")


def test_raw_size_and_content_type_are_checked() -> None:
    table = documents("raw", 2, raw_size=[0, 5], content_type=["html", "pdf"])
    assert failed(validate_documents(table, "raw")) == {
        "expect_column_values_to_be_between(raw_size)",
        "expect_column_values_to_be_in_set(content_type)",
    }


def test_tokenized_counts_and_tokenizer_hash_are_checked() -> None:
    table = documents("tokenized", 2, num_tokens=[0, 3], tokenizer_hash=[TOKENIZER_HASH, "gpt2"])
    assert failed(validate_documents(table, "tokenized")) == {
        "expect_column_values_to_be_between(num_tokens)",
        "expect_column_values_to_match_regex(tokenizer_hash)",
    }


def test_null_provenance_fails_not_null() -> None:
    report = validate_documents(documents("raw", 2, batch_id=[None, "b"]), "raw")
    assert failed(report) == {"expect_column_values_to_not_be_null(batch_id)"}


def test_summary_lists_one_line_per_failure() -> None:
    report = ExpectationReport(
        success=False,
        outcomes=(
            ExpectationOutcome("expect_a(x)", True, "0 of 3 values unexpected"),
            ExpectationOutcome("expect_b(y)", False, "1 of 3 values unexpected, e.g. ''"),
            ExpectationOutcome("expect_c", False, "missing ['z']"),
        ),
    )
    assert report.summary() == (
        "expect_b(y): 1 of 3 values unexpected, e.g. ''\nexpect_c: missing ['z']"
    )


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown document kind 'parquet'"):
        validate_documents(documents("text"), "parquet")  # type: ignore[arg-type]


def test_importing_the_module_leaves_great_expectations_unimported() -> None:
    code = "import sys, fm_assets.checks.expectations; print('great_expectations' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
