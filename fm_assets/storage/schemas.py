"""Arrow schemas of every table the platform writes, and the columns every document row carries.

Every document table keeps the provenance columns, from the raw record to the tokenized document,
so any row can be traced to its landing batch, file and raw bytes.
"""

from __future__ import annotations

import pyarrow as pa

from fm_assets.storage.tables import TableSpec, declare

# Carried unchanged by every document table, from raw_documents to tokenized_documents.
PROVENANCE_FIELDS: list[pa.Field] = [
    pa.field("doc_id", pa.string(), nullable=False),  # sha256 hex of the raw record bytes
    pa.field("raw_sha256", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("record_id", pa.string(), nullable=False),  # "<file sha256[:16]>:<record index>"
    pa.field("source_file", pa.string(), nullable=False),  # file name inside the landing batch
    pa.field("source", pa.string(), nullable=False),
    pa.field("license", pa.string(), nullable=False),
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("url", pa.string(), nullable=True),
    pa.field(
        "lang_hint", pa.string(), nullable=True
    ),  # from the input (JSONL `lang`), not detected
    pa.field("external_id", pa.string(), nullable=True),  # the input's own id (JSONL `id`)
    # What produced a synthetic document (`storage.generators`): the model id, and the whole
    # generator record as canonical JSON; null for natural documents and rows written before.
    pa.field("generator_model", pa.string(), nullable=True),
    pa.field("generator", pa.string(), nullable=True),
]

RAW_DOCUMENTS = pa.schema(
    [
        *PROVENANCE_FIELDS,
        pa.field("content_type", pa.string(), nullable=False),  # "html" or "text"
        pa.field("charset", pa.string(), nullable=True),  # declared by HTTP header / meta, if any
        # Where the record is in its landed file: its byte offset (for gzip files, the offset
        # of the gzip member holding it: one member per record in Common Crawl's WARCs), the
        # JSONL line, the WARC-Record-ID. Null in rows written before they were recorded.
        pa.field("record_offset", pa.int64(), nullable=True),
        pa.field("record_line", pa.int64(), nullable=True),
        pa.field("warc_record_id", pa.string(), nullable=True),
        pa.field("raw_size", pa.int64(), nullable=False),
        pa.field("raw_content", pa.large_binary(), nullable=False),
    ]
)

TEXT_DOCUMENTS = pa.schema(
    [
        *PROVENANCE_FIELDS,
        pa.field("content_type", pa.string(), nullable=False),
        pa.field("text", pa.large_string(), nullable=False),
    ]
)

# The text stays in the table before (`pipeline.upstream_of("tokenized_documents")`): a copy here
# would more than double what the stage writes. Tables an older platform wrote keep a `text`
# column, optional from then on (`schema_evolution`).
TOKENIZED_DOCUMENTS = pa.schema(
    [
        *PROVENANCE_FIELDS,
        pa.field("tokenizer_hash", pa.string(), nullable=False),
        pa.field("num_tokens", pa.int64(), nullable=False),
        pa.field("tokens", pa.large_list(pa.int32()), nullable=False),
    ]
)

# What a stage hands back for each record it does not keep; the runner adds batch/stage/version.
QUARANTINED_RECORDS = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=True),  # null when the record had no content
        pa.field("raw_sha256", pa.string(), nullable=True),
        pa.field("source_file", pa.string(), nullable=True),
        pa.field("rule", pa.string(), nullable=False),  # short machine code: exact_duplicate, ...
        pa.field("reason", pa.string(), nullable=False),  # human-readable explanation
    ]
)

QUARANTINE = pa.schema(
    [
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("code_version", pa.string(), nullable=False),
        *QUARANTINED_RECORDS,
        pa.field("quarantined_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

TOKENIZERS = pa.schema(
    [
        pa.field("tokenizer_hash", pa.string(), nullable=False),  # sha256 of tokenizer.json bytes
        pa.field("name", pa.string(), nullable=False),
        pa.field("vocab_size", pa.int64(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),  # copy inside the object store
        pa.field("registered_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

DATASET_VERSIONS = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),  # "<dataset>@v<N>"
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("batches", pa.list_(pa.string()), nullable=False),
        # JSON {data namespace: {document table: snapshot id}}
        pa.field("snapshot_ids", pa.string(), nullable=False),
        pa.field("code_versions", pa.string(), nullable=False),  # JSON {stage: code version}
        pa.field("tokenizer_hash", pa.string(), nullable=False),
        pa.field("num_documents", pa.int64(), nullable=False),
        pa.field("num_tokens", pa.int64(), nullable=False),
        pa.field(
            "content_hash", pa.string(), nullable=False
        ),  # over sorted (doc_id) of the version
        pa.field("run_id", pa.string(), nullable=True),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        # "text" or "image-text"; null in rows written before image-text existed (text).
        pa.field("modality", pa.string(), nullable=True),
    ]
)

SHARD_SETS = pa.schema(
    [
        pa.field("shard_set_key", pa.string(), nullable=False),  # "<version_key>/<shard config>"
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("shard_config", pa.string(), nullable=False),  # "<tokenizer hash[:12]>-s<seq_len>"
        pa.field("tokenizer_hash", pa.string(), nullable=False),
        pa.field("seq_len", pa.int64(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),  # directory holding index.json + manifest
        pa.field("manifest_sha256", pa.string(), nullable=False),
        pa.field("num_samples", pa.int64(), nullable=False),
        pa.field("num_tokens", pa.int64(), nullable=False),
        pa.field("run_id", pa.string(), nullable=True),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


# --- curation stages ---------------------------------------------------------------------------


LANGUAGE_TAGGED_DOCUMENTS = pa.schema(
    [
        *TEXT_DOCUMENTS,
        pa.field("language", pa.string(), nullable=False),  # lid.176 label, "und" if no text
        pa.field("language_score", pa.float64(), nullable=False),
    ]
)

# One row per redaction; never the redacted value itself.
PII_REDACTIONS = pa.schema(
    [
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD
        pa.field("start", pa.int64(), nullable=False),  # span in the text before redaction
        pa.field("end", pa.int64(), nullable=False),
        pa.field("rule_version", pa.string(), nullable=False),
    ]
)

# Trained fastText quality classifiers, by the sha256 of the model file.
QUALITY_CLASSIFIERS = pa.schema(
    [
        pa.field("model_sha256", pa.string(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),  # copy inside the object store
        pa.field("recipe_version", pa.string(), nullable=False),
        pa.field("holdout_accuracy", pa.float64(), nullable=False),
        pa.field("holdout_precision", pa.float64(), nullable=False),
        pa.field("holdout_recall", pa.float64(), nullable=False),
        pa.field("positives_sha256", pa.string(), nullable=False),
        pa.field("negatives_sha256", pa.string(), nullable=False),
        pa.field("report", pa.string(), nullable=False),  # the full ClassifierReport as JSON
        pa.field("registered_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


# --- contamination registry ----------------------------------------------------------------------

# One row per registered benchmark: where its file lives, and what it held.
CONTAMINATION_BENCHMARKS = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("file_uri", pa.string(), nullable=False),  # copy inside the object store
        pa.field("file_sha256", pa.string(), nullable=False),
        pa.field("fields", pa.list_(pa.string()), nullable=False),
        pa.field("item_count", pa.int64(), nullable=False),
        pa.field("empty_items", pa.int64(), nullable=False),
        pa.field("unmatchable_items", pa.int64(), nullable=False),
        pa.field("rules_version", pa.string(), nullable=False),
        pa.field("registered_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

# Which registered items each batch's documents matched (decontamination stage audit).
CONTAMINATION_MATCHES = pa.schema(
    [
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("fraction", pa.float64(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),  # ngram | short | exact
        pa.field("action", pa.string(), nullable=False),  # dropped | redacted
    ]
)

# Versions re-scanned against the registry as it grew: one row per contaminated document.
CONTAMINATION_FLAGS = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("fraction", pa.float64(), nullable=False),
        pa.field("registry", pa.string(), nullable=False),  # the registry snapshot scanned against
        pa.field("scanned_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


# Every kept raw document of every batch of one data namespace, by hash bucket: what exact
# deduplication of a new batch of that namespace compares against, one bucket per task (a pruned
# scan, never the whole corpus).
DOCUMENT_INDEX_BUCKETS = 16
DOCUMENT_INDEX = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),  # int(doc_id[:8], 16) % buckets
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("record_id", pa.string(), nullable=False),
    ]
)


def document_bucket(doc_id: str) -> int:
    """The document-index bucket of a document."""
    return int(doc_id[:8], 16) % DOCUMENT_INDEX_BUCKETS


# Tables storage owns; stage outputs, the MinHash index and the contamination registry's hash tables
# are declared by their owners. Quarantine rows, redaction and contamination audits, the exact-dedup
# index and a version's contamination flags name documents: each data namespace keeps its own.
declare(
    # Each stage replaces its own quarantine rows of a batch: a partition-aligned, metadata-only
    # replacement.
    TableSpec("quarantine", QUARANTINE, ("batch_id", "stage"), per_namespace=True),
    TableSpec("tokenizers", TOKENIZERS),
    TableSpec("quality_classifiers", QUALITY_CLASSIFIERS),
    TableSpec("dataset_versions", DATASET_VERSIONS),
    TableSpec("shard_sets", SHARD_SETS),
    TableSpec("pii_redactions", PII_REDACTIONS, ("batch_id",), per_namespace=True),
    TableSpec("document_index", DOCUMENT_INDEX, ("bucket",), per_namespace=True),
    TableSpec("contamination_benchmarks", CONTAMINATION_BENCHMARKS, ("benchmark",)),
    TableSpec("contamination_matches", CONTAMINATION_MATCHES, ("batch_id",), per_namespace=True),
    TableSpec("contamination_flags", CONTAMINATION_FLAGS, ("version_key",), per_namespace=True),
)
