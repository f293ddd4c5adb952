"""The column-level expectations each kind of document table must meet, described without GE.

- all kinds: exactly the schema's columns (`fm_assets.storage.schemas`); every non-nullable
  column that is not bytes, a list or a map (`raw_content`, `tokens`, `scores`) is non-null;
  `doc_id` is unique; `doc_id` and `raw_sha256` are 64 lowercase hex digits.
- text documents (raw, text, tokenized): `doc_id` equals `raw_sha256` (the raw record's hash).
- raw: `raw_size` >= 1 and `content_type` in {"html", "text"}.
- text: `text` is non-empty (a tokenized table holds no text: its stage's input does).
- tokenized, tokenized_pairs: `num_tokens` >= 1 and `tokenizer_hash` is 64 lowercase hex digits.
- pairs, tokenized_pairs (an image-text pair's doc_id hashes image and caption, its raw_sha256
  the image): `width`, `height` >= 1, `pixel_hash` 32 lowercase hex digits, `image_format` one
  of the resize formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

import pyarrow as pa

from fm_assets.storage.image_text_schemas import PAIRS, RAW_PAIRS, TOKENIZED_PAIRS
from fm_assets.storage.schemas import RAW_DOCUMENTS, TEXT_DOCUMENTS, TOKENIZED_DOCUMENTS

DocumentKind = Literal["raw", "text", "tokenized", "raw_pairs", "pairs", "tokenized_pairs"]

DOCUMENT_SCHEMAS: Mapping[DocumentKind, pa.Schema] = {
    "raw": RAW_DOCUMENTS,
    "text": TEXT_DOCUMENTS,
    "tokenized": TOKENIZED_DOCUMENTS,
    "raw_pairs": RAW_PAIRS,
    "pairs": PAIRS,
    "tokenized_pairs": TOKENIZED_PAIRS,
}
_TEXT_KINDS = ("raw", "text", "tokenized")
_IMAGE_FORMATS = ("jpeg", "webp", "png")

SHA256_HEX = r"^[0-9a-f]{64}$"
XXH128_HEX = r"^[0-9a-f]{32}$"


@dataclass(frozen=True)
class ExpectationSpec:
    """One GE expectation by its snake_case type and keyword arguments, built without GE.

    `label` is the name reports use, e.g. "expect_column_values_to_be_unique(doc_id)".
    """

    type: str
    kwargs: Mapping[str, Any] = field(hash=False)

    @property
    def label(self) -> str:
        """The expectation type and the column(s) it reads."""
        columns = self.columns
        return f"{self.type}({', '.join(columns)})" if columns else self.type

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns whose values this expectation reads; none for table-level ones."""
        return tuple(self.kwargs[k] for k in ("column", "column_A", "column_B") if k in self.kwargs)


def document_schema(kind: str) -> pa.Schema:
    """The Arrow schema of `kind` documents; ValueError for an unknown kind."""
    for known, schema in DOCUMENT_SCHEMAS.items():
        if kind == known:
            return schema
    raise ValueError(f"unknown document kind {kind!r}; expected one of {get_args(DocumentKind)}")


def document_expectation_specs(kind: DocumentKind) -> list[ExpectationSpec]:
    """The expectations a table of `kind` documents must meet, in report order."""
    schema = document_schema(kind)

    def spec(type_: str, **kwargs: Any) -> ExpectationSpec:
        return ExpectationSpec(type_, MappingProxyType(kwargs))

    specs = [
        spec("expect_table_columns_to_match_set", column_set=tuple(schema.names), exact_match=True),
        # Bytes and list columns are never converted to pandas (they are most of the table's
        # bytes), so their nullability is left to the writer's Arrow schema.
        *(
            spec("expect_column_values_to_not_be_null", column=f.name)
            for f in schema
            if not f.nullable and not _is_bulky(f.type)
        ),
        spec("expect_column_values_to_be_unique", column="doc_id"),
        spec("expect_column_values_to_match_regex", column="raw_sha256", regex=SHA256_HEX),
    ]
    if kind in _TEXT_KINDS:
        specs.append(
            spec("expect_column_pair_values_to_be_equal", column_A="doc_id", column_B="raw_sha256")
        )
    else:
        specs.append(spec("expect_column_values_to_match_regex", column="doc_id", regex=SHA256_HEX))
    if kind in ("pairs", "tokenized_pairs"):
        specs += [
            spec("expect_column_values_to_be_between", column="width", min_value=1),
            spec("expect_column_values_to_be_between", column="height", min_value=1),
            spec("expect_column_values_to_match_regex", column="pixel_hash", regex=XXH128_HEX),
            spec(
                "expect_column_values_to_be_in_set", column="image_format", value_set=_IMAGE_FORMATS
            ),
        ]
    if kind == "raw":
        specs += [
            spec("expect_column_values_to_be_between", column="raw_size", min_value=1),
            spec(
                "expect_column_values_to_be_in_set",
                column="content_type",
                value_set=("html", "text"),
            ),
        ]
    elif kind == "text":
        specs.append(spec("expect_column_value_lengths_to_be_between", column="text", min_value=1))
    elif kind in ("tokenized", "tokenized_pairs"):
        specs += [
            spec("expect_column_values_to_be_between", column="num_tokens", min_value=1),
            spec("expect_column_values_to_match_regex", column="tokenizer_hash", regex=SHA256_HEX),
        ]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        # Reports and Dagster name outcomes by label; two specs with one label would be ambiguous.
        raise ValueError(f"duplicate expectation labels in the {kind} suite: {labels}")
    return specs


def _is_bulky(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_map(arrow_type)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
    )
