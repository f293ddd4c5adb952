"""What the data checks recount from committed data files, computed by Ray tasks, one per group of
files, and merged on the driver: counts, order-free fingerprints and small per-file summaries,
never the rows themselves, so checking a batch costs the driver as little as running it.

A multiset of record ids is fingerprinted by the sum (mod 2**64) of a 64-bit hash of each id:
equal multisets give equal sums, and a lost, extra or repeated record changes the sum.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import FileScanTask

from fm_assets.checks.expectation_specs import DocumentKind
from fm_assets.checks.expectations import ExpectationOutcome, ExpectationReport, validate_documents
from fm_assets.execution.compute import ensure_ray, ray_cpus, remote, run_tasks
from fm_assets.execution.planning import table_slices
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle, plan_files, read_files, table_handle

_MASK = (1 << 64) - 1


def id_hash(value: str) -> int:
    """A 64-bit hash of an id, the same in every process."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")


def index_mix(index: int) -> int:
    """A 64-bit mix of a record number (splitmix64), so sums of numbers fingerprint sets."""
    z = (index + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


@dataclass(frozen=True)
class Wanted:
    """Which facts a check needs besides row counts and record fingerprints."""

    expectations: DocumentKind | None = None  # run this great-expectations suite per file group
    expectation_columns: tuple[str, ...] | None = None  # the columns the suite sees (None: all)
    doc_ids: bool = False  # collect doc id hashes (for a batch-wide uniqueness check)
    numbering: bool = False  # per landed file: how records are numbered (the raw stage)
    tokens: bool = False  # token-list statistics (tokenized documents)


@dataclass
class Facts:
    """Facts of a set of data files; `merge` combines the facts of two sets."""

    rows: int = 0
    record_sum: int = 0
    doc_hashes: list[np.ndarray[Any, Any]] = field(default_factory=list)
    numbering: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # count, max, sum
    expectations: list[ExpectationReport] = field(default_factory=list)
    token_mismatches: int = 0
    token_min: int | None = None
    token_max: int | None = None
    tokens: int = 0
    tokenizers: set[str] = field(default_factory=set)

    def merge(self, other: Facts) -> None:
        self.rows += other.rows
        self.record_sum = (self.record_sum + other.record_sum) & _MASK
        self.doc_hashes += other.doc_hashes
        for prefix, (count, top, total) in other.numbering.items():
            mine = self.numbering.get(prefix, (0, -1, 0))
            self.numbering[prefix] = (mine[0] + count, max(mine[1], top), (mine[2] + total) & _MASK)
        self.expectations += other.expectations
        self.token_mismatches += other.token_mismatches
        self.tokens += other.tokens
        self.tokenizers |= other.tokenizers
        for name, pick in (("token_min", min), ("token_max", max)):
            values = [v for v in (getattr(self, name), getattr(other, name)) if v is not None]
            setattr(self, name, pick(values) if values else None)

    def duplicate_doc_ids(self) -> int:
        """How many doc ids occur more than once across the files."""
        if not self.doc_hashes:
            return 0
        hashes = np.concatenate(self.doc_hashes)
        return int(hashes.size - np.unique(hashes).size)

    def expectation_report(self) -> ExpectationReport:
        """One report: an expectation passes only where it passed on every file group."""
        if not self.expectations:
            return ExpectationReport(success=True, outcomes=())
        merged: dict[str, list[ExpectationOutcome]] = {}
        for report in self.expectations:
            for outcome in report.outcomes:
                merged.setdefault(outcome.expectation, []).append(outcome)
        outcomes = tuple(
            ExpectationOutcome(
                label,
                all(o.success for o in found),
                "; ".join(dict.fromkeys(o.observed for o in found if not o.success))
                or found[0].observed,
            )
            for label, found in merged.items()
        )
        return ExpectationReport(success=all(o.success for o in outcomes), outcomes=outcomes)


def table_facts(
    settings: Settings,
    table: str,
    where: BooleanExpression,
    wanted: Wanted,
    snapshot_id: int | None = None,
    namespace: str | None = None,
) -> Facts:
    """The facts of the rows of `table` (of data namespace `namespace`) matching `where` (at
    `snapshot_id`), recounted on Ray."""

    if catalog.current_snapshot_id(settings, table, namespace=namespace) is None:
        return Facts()
    files = plan_files(settings, table, where, snapshot_id, namespace)
    if not files:
        return Facts()
    ensure_ray(settings)
    # One group per CPU: recounting is light, and each group pays a read and a validation.
    groups = table_slices(files, ray_cpus(), per_cpu=1)
    handle = table_handle(settings, table, namespace)
    facts_of = remote(file_facts)
    facts = Facts()
    found = run_tasks(lambda i: facts_of.remote(handle, groups[i], where, wanted), len(groups))
    for group_facts in found:
        facts.merge(group_facts)
    return facts


def file_facts(
    handle: TableHandle, tasks: Sequence[FileScanTask], where: BooleanExpression, wanted: Wanted
) -> Facts:
    """The facts of some data files (runs on a worker)."""
    data = read_files(handle, tasks, row_filter=where)
    facts = Facts(rows=data.num_rows)
    records = data.column("record_id").to_pylist()
    facts.record_sum = sum(id_hash(r) for r in records) & _MASK
    if wanted.doc_ids:
        ids = [d for d in data.column("doc_id").to_pylist() if d is not None]
        facts.doc_hashes = [np.array([id_hash(d) for d in ids], dtype=np.uint64)]
    if wanted.numbering:
        for record_id in records:
            prefix, _, index = record_id.partition(":")
            count, top, total = facts.numbering.get(prefix, (0, -1, 0))
            facts.numbering[prefix] = (
                count + 1,
                max(top, int(index)),
                (total + index_mix(int(index))) & _MASK,
            )
    if wanted.expectations is not None:
        checked = (
            data.select(list(wanted.expectation_columns)) if wanted.expectation_columns else data
        )
        facts.expectations = [validate_documents(checked, wanted.expectations)]
    if wanted.tokens:
        _token_facts(data, facts)
    return facts


def _token_facts(data: pa.Table, facts: Facts) -> None:
    lengths = pc.list_value_length(data.column("tokens"))
    facts.token_mismatches = int(
        pc.sum(pc.not_equal(lengths, data.column("num_tokens"))).as_py() or 0
    )
    flat = pc.list_flatten(data.column("tokens"))
    if len(flat):
        facts.token_min, facts.token_max = int(pc.min(flat).as_py()), int(pc.max(flat).as_py())
    facts.tokens = int(pc.sum(data.column("num_tokens")).as_py() or 0)
    facts.tokenizers = set(pc.unique(data.column("tokenizer_hash")).to_pylist())


def expected_numbering_sum(count: int) -> int:
    """The fingerprint of record numbers 0 .. count-1."""
    return sum(index_mix(i) for i in range(count)) & _MASK
