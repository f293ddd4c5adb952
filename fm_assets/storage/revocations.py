"""Revocations: which documents may no longer be trained on, who said so, when and why.

A revocation names documents by one provenance column (a document, its raw bytes, a source, a
licence, a landing batch or the generator model that produced it), so it also covers documents
of that source, licence or generator landed later: every new dataset version leaves out what a
recorded revocation matches (`versions.dataset_version`), and `versions.revocation` cuts
replacements for the versions that already hold them.
"""

from __future__ import annotations

import datetime as dt
import getpass
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import TableSpec, declare

# What a revocation can name, and the provenance column (on every document table) it matches.
CRITERIA: dict[str, str] = {
    "doc": "doc_id",
    # The landed bytes: of a text document, its doc id again; of an image-text pair, its
    # image, so every pair (caption) landed with that image.
    "raw": "raw_sha256",
    "source": "source",
    "license": "license",
    "batch": "batch_id",
    # Everything a generator model produced (any revision, prompt or seed): `generator_model`.
    "generator": "generator_model",
}

REVOCATIONS = pa.schema(
    [
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("criterion", pa.string(), nullable=False),  # a key of CRITERIA
        pa.field("value", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("revoked_by", pa.string(), nullable=False),
        pa.field("revoked_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(TableSpec("revocations", REVOCATIONS, ("revocation_id",)))


@dataclass(frozen=True)
class RevocationRecord:
    """One recorded revocation."""

    revocation_id: str
    criterion: str
    value: str
    reason: str
    revoked_by: str
    revoked_at: dt.datetime

    @property
    def column(self) -> str:
        """The document column this revocation matches on."""
        return CRITERIA[self.criterion]

    def describe(self) -> str:
        return f"{self.criterion} {self.value}"


def current_user() -> str:
    """Who is revoking: FM_USER, else the login name."""
    return os.environ.get("FM_USER") or getpass.getuser()


def record_revocation(
    settings: Settings, criterion: str, value: str, reason: str, revoked_by: str | None = None
) -> RevocationRecord:
    """Append a revocation; raises naming the allowed criteria, or asking for a reason."""
    if criterion not in CRITERIA:
        raise ValueError(f"cannot revoke by {criterion!r}; choose one of {sorted(CRITERIA)}")
    if not value.strip():
        raise ValueError(f"name the {criterion} to revoke")
    if not reason.strip():
        raise ValueError("a revocation needs a reason (--reason TEXT): audits read it")
    at = dt.datetime.now(dt.UTC)
    who = revoked_by or current_user()
    digest = hashlib.sha256(f"{criterion}\n{value}\n{reason}\n{at.isoformat()}".encode())
    record = RevocationRecord(
        revocation_id=f"rev-{at:%Y%m%d%H%M%S}-{digest.hexdigest()[:8]}",
        criterion=criterion,
        value=value,
        reason=reason,
        revoked_by=who,
        revoked_at=at,
    )
    row = {name: getattr(record, name) for name in REVOCATIONS.names}
    catalog.append_rows(settings, "revocations", pa.Table.from_pylist([row]))
    return record


def read_revocations(settings: Settings) -> list[RevocationRecord]:
    """Every recorded revocation, oldest first."""
    rows = catalog.read_table(settings, "revocations").to_pylist()
    records = [RevocationRecord(**row) for row in rows]
    return sorted(records, key=lambda r: (r.revoked_at, r.revocation_id))


def require_revocation(settings: Settings, revocation_id: str) -> RevocationRecord:
    """A recorded revocation; raises naming how to record one."""
    rows = catalog.read_table(
        settings, "revocations", catalog.where_equal("revocation_id", revocation_id)
    ).to_pylist()
    if not rows:
        raise ValueError(
            f"no revocation {revocation_id} is recorded; revoke with `fm revoke` (it records the "
            "revocation, then materializes its partition)"
        )
    return RevocationRecord(**rows[0])


def revoked_mask(documents: pa.Table, revocations: Sequence[RevocationRecord]) -> pa.Array:
    """Which rows of `documents` (holding every column the revocations name) any revocation
    matches."""
    mask = pa.array([False] * documents.num_rows, pa.bool_())
    for revocation in revocations:
        matches = pc.equal(documents.column(revocation.column), revocation.value)
        mask = pc.or_(mask, pc.fill_null(matches, False))
    return mask
