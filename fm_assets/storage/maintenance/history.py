"""What `fm maintain` expired from each table's metadata, kept in SQL beside the catalog.

An expired snapshot leaves the table's metadata, and pyiceberg cuts the parent link of the
snapshot after it. The platform still asks three things of that history, and this table answers:

- which batches (and stages) ever committed rows to a table (`batch_history.may_hold_rows`: a
  batch's first run commits without a delete or a scan);
- which snapshots a snapshot descends from (`ancestors`: the stage runs a version's rows came
  from, for lineage);
- which live snapshot holds what an expired one held of a batch (`readable_snapshot`: a stage-run
  row names the snapshot a run wrote or read, and a later stage or check reads the batch there).

One row per expired snapshot: its parent and child (the lineage across the cut), sequence number,
time, operation, the batch and stage it committed for, its total record count, and whether its
history reaches the table's first commit. Rows are keyed by table UUID and snapshot id and are
written before the snapshots are removed, so a run killed in between leaves rows for snapshots
still in the table, which say what the table itself says. The commit that removes snapshots also
sets the table property `EXPIRED_PROPERTY`: only tables carrying it are looked up here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass

import sqlalchemy as sa
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.locks import exclusive

# Set by the commit that expires snapshots: this table's older history is in fm_expired_snapshots.
EXPIRED_PROPERTY = "fm.expired-history"
EXPIRED_TABLE = "fm_expired_snapshots"

_METADATA = sa.MetaData()
EXPIRED_SNAPSHOTS = sa.Table(
    EXPIRED_TABLE,
    _METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("table_uuid", sa.String(36), nullable=False),
    sa.Column("table_name", sa.String(512), nullable=False),  # for a person reading it
    sa.Column("snapshot_id", sa.BigInteger, nullable=False),
    sa.Column("parent_snapshot_id", sa.BigInteger, nullable=True),
    sa.Column("child_snapshot_id", sa.BigInteger, nullable=True),
    sa.Column("sequence_number", sa.BigInteger, nullable=False),
    sa.Column("timestamp_ms", sa.BigInteger, nullable=False),
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("batch_id", sa.String(255), nullable=True),
    sa.Column("stage", sa.String(255), nullable=True),
    sa.Column("total_records", sa.BigInteger, nullable=True),
    sa.Column("history_complete", sa.Boolean, nullable=False),
    sa.Column("expired_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("fm_expired_snapshots_id", "table_uuid", "snapshot_id", unique=True),
    sa.Index("fm_expired_snapshots_child", "table_uuid", "child_snapshot_id"),
    sa.Index("fm_expired_snapshots_batch", "table_uuid", "batch_id"),
)
_created: set[int] = set()


@dataclass(frozen=True)
class ExpiredSnapshot:
    """One expired snapshot as the history table keeps it."""

    snapshot_id: int
    parent_snapshot_id: int | None
    child_snapshot_id: int | None
    operation: str
    batch_id: str | None
    stage: str | None
    total_records: int | None
    history_complete: bool


def _engine(settings: Settings) -> sa.engine.Engine:
    engine: sa.engine.Engine = catalog.open_catalog(settings).engine  # type: ignore[attr-defined]
    if id(engine) not in _created:
        with exclusive(settings, "bookkeeping-tables"):
            _METADATA.create_all(engine, checkfirst=True)
        _created.add(id(engine))
    return engine


def moves_rows_only(operation: str) -> bool:
    """Whether a snapshot of `operation` leaves the table's rows as they were (a compaction or a
    manifest rewrite: Iceberg's `replace`)."""
    return operation == Operation.REPLACE.value


def _tags(snapshot: Snapshot) -> dict[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


def _operation(snapshot: Snapshot) -> str:
    return snapshot.summary.operation.value if snapshot.summary is not None else "unknown"


def _count(snapshot: Snapshot, key: str) -> int | None:
    value = _tags(snapshot).get(key)
    return int(value) if value not in (None, "") else None


def _lineage(metadata: TableMetadata) -> tuple[list[Snapshot], int]:
    """The current snapshot and its live ancestors (newest first), and the records they added
    less those they deleted."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    found: list[Snapshot] = []
    seen: set[int] = set()
    counted = 0
    snapshot = metadata.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id not in seen:
        found.append(snapshot)
        seen.add(snapshot.snapshot_id)
        counted += (_count(snapshot, "added-records") or 0) - (
            _count(snapshot, "deleted-records") or 0
        )
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    return found, counted


def _read(
    settings: Settings, table_uuid: str, where: sa.ColumnElement[bool]
) -> list[ExpiredSnapshot]:
    query = sa.select(EXPIRED_SNAPSHOTS).where(EXPIRED_SNAPSHOTS.c.table_uuid == table_uuid, where)
    with _engine(settings).connect() as connection:
        return [
            ExpiredSnapshot(
                snapshot_id=int(r["snapshot_id"]),
                parent_snapshot_id=r["parent_snapshot_id"],
                child_snapshot_id=r["child_snapshot_id"],
                operation=str(r["operation"]),
                batch_id=r["batch_id"],
                stage=r["stage"],
                total_records=r["total_records"],
                history_complete=bool(r["history_complete"]),
            )
            for r in connection.execute(query).mappings()
        ]


def _expired_parent(
    settings: Settings, metadata: TableMetadata, oldest: Snapshot
) -> ExpiredSnapshot | None:
    """The expired snapshot `oldest` (the oldest live one of the lineage) descends from."""
    table_uuid = str(metadata.table_uuid)
    if oldest.parent_snapshot_id is not None:
        where = EXPIRED_SNAPSHOTS.c.snapshot_id == oldest.parent_snapshot_id
    else:
        where = EXPIRED_SNAPSHOTS.c.child_snapshot_id == oldest.snapshot_id
    rows = _read(settings, table_uuid, where)
    return rows[0] if rows else None


def history_complete(settings: Settings, metadata: TableMetadata) -> bool:
    """Whether the table's history, live snapshots then expired ones, reaches back to its first
    commit: the records its commits added less those they deleted make the current total."""
    current = metadata.current_snapshot()
    if current is None:
        return True
    lineage, counted = _lineage(metadata)
    total = _count(current, "total-records")
    if total is None:
        return False
    oldest = lineage[-1]
    parent = (
        _expired_parent(settings, metadata, oldest)
        if EXPIRED_PROPERTY in metadata.properties
        else None
    )
    if parent is None:
        return oldest.parent_snapshot_id is None and counted == total
    return parent.history_complete and (parent.total_records or 0) + counted == total


def record_expired(
    settings: Settings, table_name: str, metadata: TableMetadata, snapshot_ids: Collection[int]
) -> None:
    """Keep `snapshot_ids` of the table at `metadata` in the history (before they are removed;
    those already kept are left as they are)."""
    wanted = set(snapshot_ids)
    if not wanted:
        return
    table_uuid = str(metadata.table_uuid)
    children: dict[int, list[int]] = {}
    for snapshot in metadata.snapshots:
        if snapshot.parent_snapshot_id is not None:
            children.setdefault(snapshot.parent_snapshot_id, []).append(snapshot.snapshot_id)
    complete = history_complete(settings, metadata)  # of the whole history, before this cut
    now = dt.datetime.now(dt.UTC)
    known = {
        r.snapshot_id
        for r in _read(settings, table_uuid, EXPIRED_SNAPSHOTS.c.snapshot_id.in_(wanted))
    }
    rows = []
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in wanted or snapshot.snapshot_id in known:
            continue
        tags = _tags(snapshot)
        kids = children.get(snapshot.snapshot_id, [])
        rows.append(
            {
                "table_uuid": table_uuid,
                "table_name": table_name,
                "snapshot_id": snapshot.snapshot_id,
                "parent_snapshot_id": snapshot.parent_snapshot_id,
                # A branch would give a snapshot two children; the platform commits to main only.
                "child_snapshot_id": kids[0] if len(kids) == 1 else None,
                "sequence_number": snapshot.sequence_number or 0,
                "timestamp_ms": snapshot.timestamp_ms,
                "operation": _operation(snapshot),
                "batch_id": tags.get("fm.batch_id"),
                "stage": tags.get("fm.stage"),
                "total_records": _count(snapshot, "total-records"),
                "history_complete": complete,
                "expired_at": now,
            }
        )
    if rows:
        with _engine(settings).begin() as connection:
            connection.execute(sa.insert(EXPIRED_SNAPSHOTS), rows)


def batch_committed(
    settings: Settings,
    metadata: TableMetadata,
    batch_id: str,
    *,
    stage: str | None = None,
    untagged_only_move_rows: bool = False,
) -> bool:
    """Whether an expired snapshot of the table committed rows for `batch_id` (and `stage`), or
    may have (it names no batch and is not a compaction, unless `untagged_only_move_rows`)."""
    if EXPIRED_PROPERTY not in metadata.properties:
        return False
    c = EXPIRED_SNAPSHOTS.c
    named = c.batch_id == batch_id
    if stage is not None:
        named = sa.and_(named, sa.or_(c.stage.is_(None), c.stage == stage))
    clauses = [named]
    if not untagged_only_move_rows:
        clauses.append(sa.and_(c.batch_id.is_(None), c.operation != Operation.REPLACE.value))
    query = (
        sa.select(c.snapshot_id)
        .where(c.table_uuid == str(metadata.table_uuid), sa.or_(*clauses))
        .limit(1)
    )
    with _engine(settings).connect() as connection:
        return connection.execute(query).first() is not None


def _archived(settings: Settings, metadata: TableMetadata) -> dict[int, ExpiredSnapshot]:
    if EXPIRED_PROPERTY not in metadata.properties:
        return {}
    rows = _read(settings, str(metadata.table_uuid), sa.true())
    return {r.snapshot_id: r for r in rows}


def ancestors(settings: Settings, metadata: TableMetadata, snapshot_id: int) -> set[int]:
    """The snapshot and every snapshot it descends from, live or expired."""
    archived = _archived(settings, metadata)
    parent_of_cut = {
        r.child_snapshot_id: r.snapshot_id for r in archived.values() if r.child_snapshot_id
    }
    found: set[int] = set()
    current: int | None = snapshot_id
    while current is not None and current not in found:
        found.add(current)
        live = metadata.snapshot_by_id(current)
        if live is not None:
            parent = live.parent_snapshot_id
            current = parent if parent is not None else parent_of_cut.get(current)
        elif current in archived:
            current = archived[current].parent_snapshot_id
        else:
            current = None
    return found


def _changes_batch(operation: str, batch_id: str | None, wanted: str) -> bool:
    """Whether a commit may have changed `wanted`'s rows (one naming no batch may have)."""
    if moves_rows_only(operation):
        return False
    return batch_id is None or batch_id == wanted


def readable_snapshot(
    settings: Settings, name: str, namespace: str | None, batch_id: str, snapshot_id: int
) -> int:
    """`snapshot_id` of table `name` while the table keeps it; once `fm maintain` expired it,
    the oldest live snapshot after it that holds the same rows of `batch_id` (no commit in
    between changed them). Raises, saying what to do, when there is none.

    What a stage-run row names (the snapshot a run wrote, the one it read) is read through
    this: a later stage reads its input there, a check recounts it there.
    """
    metadata = catalog.load_table(settings, name, namespace=namespace).metadata
    if metadata.snapshot_by_id(snapshot_id) is not None:
        return snapshot_id
    archived = _archived(settings, metadata)
    step = archived.get(snapshot_id)
    if step is None:
        raise ValueError(
            f"snapshot {snapshot_id} of table {name} no longer exists and `fm maintain` did not "
            f"expire it (were snapshots expired by another tool?); rerun batch {batch_id} "
            f"(`fm run --batch {batch_id}`) to write its rows again"
        )
    seen = {snapshot_id}
    while True:
        child = step.child_snapshot_id
        if child is None or child in seen:
            raise ValueError(
                f"snapshot {snapshot_id} of table {name} was expired and the snapshot after it "
                f"is not known; rerun batch {batch_id} (`fm run --batch {batch_id}`)"
            )
        seen.add(child)
        live = metadata.snapshot_by_id(child)
        if live is not None:
            operation, batch = _operation(live), _tags(live).get("fm.batch_id")
        elif child in archived:
            operation, batch = archived[child].operation, archived[child].batch_id
        else:
            raise ValueError(
                f"snapshot {snapshot_id} of table {name} was expired and its successor "
                f"{child} is gone; rerun batch {batch_id} (`fm run --batch {batch_id}`)"
            )
        if _changes_batch(operation, batch, batch_id):
            raise ValueError(
                f"snapshot {snapshot_id} of table {name} was expired by `fm maintain`, and batch "
                f"{batch_id}'s rows changed after it: what a run read or wrote there is gone; "
                f"rerun the batch (`fm run --batch {batch_id}`)"
            )
        if live is not None:
            return child
        step = archived[child]


def subtract_records(
    settings: Settings, metadata: TableMetadata, oldest: Snapshot, rows: int
) -> None:
    """The expired snapshot `oldest` (the table's oldest live snapshot) descends from held `rows`
    fewer rows than recorded: a purge removed them (`storage.purge`). Its recorded total drops by
    them, so the table's history still adds up (`history_complete`)."""
    if not rows or EXPIRED_PROPERTY not in metadata.properties:
        return
    parent = _expired_parent(settings, metadata, oldest)
    if parent is None or parent.total_records is None:
        return
    c = EXPIRED_SNAPSHOTS.c
    with _engine(settings).begin() as connection:
        connection.execute(
            sa.update(EXPIRED_SNAPSHOTS)
            .where(c.table_uuid == str(metadata.table_uuid), c.snapshot_id == parent.snapshot_id)
            .values(total_records=c.total_records - rows)
        )
