"""Catalog maintenance as a job, run every day by a schedule (on by default): expire snapshots no
version pins, merge small files and manifests, delete what no live snapshot references.
What it keeps and why: docs/maintenance.md. `fm maintain` runs the same job in-process."""

import dagster as dg

from fm_assets.defs.progress import PROGRESS
from fm_assets.defs.resources import FmPlatform
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.report import MaintenanceReport
from fm_assets.storage.maintenance.run import maintain

MAINTAIN_OP = "maintain_catalog"


class MaintenanceConfig(dg.Config):
    """One run's settings; unset hours take FM_MAINTENANCE_RETENTION_HOURS (168) and
    FM_MAINTENANCE_GRACE_HOURS (24)."""

    retention_hours: float | None = None
    grace_hours: float | None = None
    namespace: str | None = None  # only this data namespace's tables
    dry_run: bool = False


@dg.op(
    name=MAINTAIN_OP,
    description="Expire snapshots no dataset version pins, merge small data files and "
    "manifests, delete files no live snapshot references; files and bytes before and after.",
)
def maintain_catalog(
    context: dg.OpExecutionContext,
    config: MaintenanceConfig,
    fm: FmPlatform,  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
) -> dg.Output[MaintenanceReport]:
    settings = fm.settings()
    policy = MaintenancePolicy.from_settings(
        settings, retention_hours=config.retention_hours, grace_hours=config.grace_hours
    )

    def progress(message: str) -> None:
        context.log.info(message)
        PROGRESS.info(message)  # what `fm maintain` prints

    report = maintain(
        settings, policy, namespace=config.namespace, dry_run=config.dry_run, progress=progress
    )
    totals = report.totals()
    return dg.Output(
        report,
        metadata={
            **{name: dg.MetadataValue.int(value) for name, value in totals.items()},
            "dry_run": report.dry_run,
            "retention_hours": report.retention_hours,
            "grace_hours": report.grace_hours,
            "tables": dg.MetadataValue.md(f"```\n{report.render()}\n```"),
            "per_table": dg.MetadataValue.json([t.as_dict() for t in report.tables]),
        },
    )


@dg.job(
    name="catalog_maintenance",
    executor_def=dg.in_process_executor,
    description="Catalog maintenance (docs/maintenance.md): what it expired, merged and deleted "
    "is in the op's output metadata, per table and in total.",
)
def catalog_maintenance() -> None:
    maintain_catalog()


# On by default: a catalog that is never maintained slows every commit as it ages, and nothing
# a version reads is touched (docs/maintenance.md says how to turn it off or move it).
catalog_maintenance_schedule = dg.ScheduleDefinition(
    name="catalog_maintenance_schedule",
    job=catalog_maintenance,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Catalog maintenance every day at 03:00 UTC, with the settings' retention and "
    "grace period.",
)
