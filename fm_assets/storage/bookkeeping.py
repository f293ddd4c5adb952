"""The platform's own records, in SQL tables beside the Iceberg catalog (same database).

`fm_stage_runs` holds the content keys that make reruns free: the runner looks up the latest run
of a stage for a batch. `fm_check_results` holds every check evaluation, so `fm status` and
`fm version create` see which batches passed without asking Dagster. Both are small, hot and
append-mostly: as Iceberg tables every row cost a snapshot and a commit; here a row is one indexed
INSERT, and a lookup one indexed SELECT.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from fm_assets.settings import Settings
from fm_assets.storage.catalog import open_catalog
from fm_assets.storage.locks import exclusive

_METADATA = sa.MetaData()

STAGE_RUNS = sa.Table(
    "fm_stage_runs",
    _METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("namespace", sa.String(255), nullable=False),  # the catalog namespace it belongs to
    sa.Column("batch_id", sa.String(255), nullable=False),
    sa.Column("stage", sa.String(255), nullable=False),
    sa.Column("code_version", sa.String(255), nullable=False),
    sa.Column("config_hash", sa.String(64), nullable=False),
    sa.Column("stage_key", sa.String(64), nullable=False),
    sa.Column("input_snapshot_id", sa.BigInteger, nullable=True),
    sa.Column("output_snapshot_id", sa.BigInteger, nullable=False),
    sa.Column("records_in", sa.BigInteger, nullable=False),
    sa.Column("records_kept", sa.BigInteger, nullable=False),
    sa.Column("records_quarantined", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(255), nullable=True),
    sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
    # What decided the output: the batch's curation policy and the stage's own config, as
    # canonical JSON (null for runs recorded before they were kept).
    sa.Column("policy_json", sa.Text, nullable=True),
    sa.Column("config_json", sa.Text, nullable=True),
    # What the run's Ray work cost: CPU seconds of its slice tasks' processes, and GPU seconds
    # of those that held a GPU (null for runs recorded before they were measured).
    sa.Column("cpu_seconds", sa.Float, nullable=True),
    sa.Column("gpu_seconds", sa.Float, nullable=True),
    sa.Index("fm_stage_runs_lookup", "namespace", "batch_id", "stage", "committed_at"),
)

CHECK_RESULTS = sa.Table(
    "fm_check_results",
    _METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("namespace", sa.String(255), nullable=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(512), nullable=False),
    sa.Column("check_name", sa.String(255), nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(255), nullable=True),
    sa.Column("data_version", sa.String(512), nullable=True),  # what the check read
    sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("fm_check_results_lookup", "namespace", "asset", "partition", "check_name"),
)

# sha256 of the Iceberg manifests and manifest lists the platform committed: Avro has no
# checksum of its own, and a flipped bit in a manifest mostly still decodes (42% of single-bit
# flips, measured), silently changing which rows a scan returns. `fm verify` compares.
FILE_CHECKSUMS = sa.Table(
    "fm_file_checksums",
    _METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("namespace", sa.String(255), nullable=False),
    sa.Column("path", sa.String(2048), nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Index("fm_file_checksums_lookup", "namespace", "path"),
)

_STAGE_RUN_FIELDS = [c.name for c in STAGE_RUNS.columns if c.name not in ("id", "namespace")]
_CHECK_FIELDS = [c.name for c in CHECK_RESULTS.columns if c.name not in ("id", "namespace")]
_created: set[int] = set()


def _engine(settings: Settings) -> sa.engine.Engine:
    """The catalog's own engine (one per process), with the bookkeeping tables created once."""
    engine: sa.engine.Engine = open_catalog(settings).engine  # type: ignore[attr-defined]
    if id(engine) not in _created:
        # Two commands starting on a new FM_HOME would both see no table and both create it.
        with exclusive(settings, "bookkeeping-tables"):
            _METADATA.create_all(engine, checkfirst=True)
            _add_new_columns(engine)
        _created.add(id(engine))
    return engine


def _add_new_columns(engine: sa.engine.Engine) -> None:
    """Add the nullable columns a newer platform declares to tables an older one created."""
    inspector = sa.inspect(engine)
    for table in _METADATA.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present or not column.nullable:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            with engine.begin() as connection:
                connection.execute(
                    sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")
                )


def _utc(value: Any) -> Any:
    # SQLite hands timestamps back without a zone; they were written in UTC.
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def _row(mapping: Any, fields: list[str]) -> dict[str, Any]:
    return {name: _utc(mapping[name]) for name in fields}


def latest_stage_run(settings: Settings, batch_id: str, stage: str) -> dict[str, Any] | None:
    """The last committed run of `stage` for `batch_id`, or None."""
    query = (
        sa.select(STAGE_RUNS)
        .where(
            STAGE_RUNS.c.namespace == settings.namespace,
            STAGE_RUNS.c.batch_id == batch_id,
            STAGE_RUNS.c.stage == stage,
        )
        .order_by(STAGE_RUNS.c.committed_at.desc(), STAGE_RUNS.c.id.desc())
        .limit(1)
    )
    with _engine(settings).connect() as connection:
        found = connection.execute(query).mappings().first()
    return _row(found, _STAGE_RUN_FIELDS) if found else None


def stage_runs(settings: Settings) -> list[dict[str, Any]]:
    """Every committed stage run, oldest first."""
    query = (
        sa.select(STAGE_RUNS)
        .where(STAGE_RUNS.c.namespace == settings.namespace)
        .order_by(STAGE_RUNS.c.committed_at, STAGE_RUNS.c.id)
    )
    with _engine(settings).connect() as connection:
        return [_row(r, _STAGE_RUN_FIELDS) for r in connection.execute(query).mappings()]


def record_stage_run(settings: Settings, row: dict[str, Any]) -> None:
    """Record one stage run: the commit that makes a stage run count as done."""
    unknown = set(row) - set(_STAGE_RUN_FIELDS)
    if unknown:
        raise ValueError(f"stage run has unknown fields {sorted(unknown)}")
    with _engine(settings).begin() as connection:
        connection.execute(sa.insert(STAGE_RUNS).values(namespace=settings.namespace, **row))


def record_check_result(
    settings: Settings,
    *,
    asset: str,
    partition: str,
    check_name: str,
    passed: bool,
    description: str,
    run_id: str | None,
    data_version: str | None = None,
) -> None:
    """Log a check evaluation so `fm status` and `fm version create` can see it."""
    values = {
        "namespace": settings.namespace,
        "asset": asset,
        "partition": partition,
        "check_name": check_name,
        "passed": passed,
        "description": description,
        "run_id": run_id,
        "data_version": data_version,
        "checked_at": dt.datetime.now(dt.UTC),
    }
    with _engine(settings).begin() as connection:
        connection.execute(sa.insert(CHECK_RESULTS).values(**values))


def check_results(settings: Settings, partition: str | None = None) -> list[dict[str, Any]]:
    """Every check evaluation (of one partition, if given), oldest first."""
    query = sa.select(CHECK_RESULTS).where(CHECK_RESULTS.c.namespace == settings.namespace)
    if partition is not None:
        query = query.where(CHECK_RESULTS.c.partition == partition)
    query = query.order_by(CHECK_RESULTS.c.checked_at, CHECK_RESULTS.c.id)
    with _engine(settings).connect() as connection:
        return [_row(r, _CHECK_FIELDS) for r in connection.execute(query).mappings()]


def latest_check_results(
    settings: Settings, partition: str | None = None
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(asset, partition, check) -> its latest evaluation (of one partition, if given: a
    batch's lookups must not read every evaluation the platform ever recorded)."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in check_results(settings, partition):  # oldest first: later rows win
        latest[(row["asset"], row["partition"], row["check_name"])] = row
    return latest


def record_file_checksums(settings: Settings, checksums: dict[str, tuple[str, int]]) -> None:
    """Pin files the platform wrote: path -> (sha256, size)."""
    if not checksums:
        return
    rows = [
        {"namespace": settings.namespace, "path": path, "sha256": sha, "size": size}
        for path, (sha, size) in checksums.items()
    ]
    with _engine(settings).begin() as connection:
        connection.execute(sa.insert(FILE_CHECKSUMS), rows)


def file_checksums(settings: Settings, paths: list[str]) -> dict[str, tuple[str, int]]:
    """The pinned (sha256, size) of those of `paths` the platform recorded."""
    found: dict[str, tuple[str, int]] = {}
    with _engine(settings).connect() as connection:
        for start in range(0, len(paths), 500):
            query = sa.select(FILE_CHECKSUMS).where(
                FILE_CHECKSUMS.c.namespace == settings.namespace,
                FILE_CHECKSUMS.c.path.in_(paths[start : start + 500]),
            )
            for row in connection.execute(query).mappings():
                found[row["path"]] = (row["sha256"], int(row["size"]))
    return found


def forget_file_checksums(settings: Settings, paths: list[str]) -> None:
    """Drop the pins of files that are being deleted (catalog maintenance): no snapshot
    references them any more, so nothing will verify them."""
    with _engine(settings).begin() as connection:
        for start in range(0, len(paths), 500):
            connection.execute(
                sa.delete(FILE_CHECKSUMS).where(
                    FILE_CHECKSUMS.c.namespace == settings.namespace,
                    FILE_CHECKSUMS.c.path.in_(paths[start : start + 500]),
                )
            )


def stage_totals(settings: Settings) -> list[dict[str, Any]]:
    """Per stage, over every committed run: how many runs, records in, kept and quarantined,
    and the last commit (what the metrics exporter reports; one grouped SELECT)."""
    c = STAGE_RUNS.c
    query = (
        sa.select(
            c.stage,
            sa.func.count().label("runs"),
            sa.func.sum(c.records_in).label("records_in"),
            sa.func.sum(c.records_kept).label("records_kept"),
            sa.func.sum(c.records_quarantined).label("records_quarantined"),
            sa.func.max(c.committed_at).label("last_commit"),
        )
        .where(c.namespace == settings.namespace)
        .group_by(c.stage)
    )
    with _engine(settings).connect() as connection:
        return [
            {**dict(row), "last_commit": _utc(row["last_commit"])}
            for row in connection.execute(query).mappings()
        ]


def check_totals(settings: Settings) -> list[dict[str, Any]]:
    """Per asset and check: evaluations that passed and failed, and the partitions whose latest
    evaluation failed."""
    c = CHECK_RESULTS.c
    mine = c.namespace == settings.namespace
    latest = (
        sa.select(sa.func.max(c.id)).where(mine).group_by(c.asset, c.partition, c.check_name)
    ).scalar_subquery()
    evaluations = (
        sa.select(c.asset, c.check_name, c.passed, sa.func.count().label("n"))
        .where(mine)
        .group_by(c.asset, c.check_name, c.passed)
    )
    failing = (
        sa.select(c.asset, c.check_name, sa.func.count().label("n"))
        .where(c.id.in_(latest), sa.not_(c.passed))
        .group_by(c.asset, c.check_name)
    )
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    with _engine(settings).connect() as connection:
        for row in connection.execute(evaluations).mappings():
            entry = totals.setdefault(
                (row["asset"], row["check_name"]),
                {"asset": row["asset"], "check": row["check_name"], "passed": 0, "failed": 0},
            )
            entry["passed" if row["passed"] else "failed"] += int(row["n"])
        failing_now = {
            (row["asset"], row["check_name"]): int(row["n"])
            for row in connection.execute(failing).mappings()
        }
    return [{**entry, "failing": failing_now.get(key, 0)} for key, entry in totals.items()]
