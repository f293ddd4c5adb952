"""The daily cost report: per team, source and version, month to date as of each day, with a
plot; materialized every day by a schedule (docs/costs.md)."""

import datetime as dt

import dagster as dg

from fm_assets.costs.plot import cost_plot
from fm_assets.costs.report import cost_report, month_start, render_table, report_json
from fm_assets.defs.openlineage import emits_lineage
from fm_assets.defs.resources import FmPlatform
from fm_assets.storage.objectstore import open_object_store
from fm_loader.storage.cache_dir import default_cache_dir

cost_days = dg.DailyPartitionsDefinition(start_date="2026-01-01", timezone="UTC", end_offset=1)


@dg.asset(
    name="cost_report",
    partitions_def=cost_days,
    group_name="costs",
    kinds={"svg"},
    description="Month-to-date cost per team, source and version as of the end of the day "
    "(or now, for today): object-store bytes and byte-hours, node-cache byte-hours, CPU and GPU "
    "seconds of stage runs, priced by FM_PRICES_FILE; the table, its JSON and a bar plot per "
    "team under costs/<day>/ in the object store.",
)
@emits_lineage()
def cost_report_asset(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    day = dt.datetime.fromisoformat(context.partition_key).replace(tzinfo=dt.UTC)
    until = min(day + dt.timedelta(days=1), dt.datetime.now(dt.UTC))
    report = cost_report(settings, [default_cache_dir()], month_start(day), until)
    store = open_object_store(settings)
    prefix = f"costs/{context.partition_key}"
    table = render_table(report)
    store.write_bytes_atomic(f"{prefix}/cost_report.svg", cost_plot(report))
    store.write_bytes_atomic(f"{prefix}/cost_report.json", report_json(report).encode())
    store.write_bytes_atomic(f"{prefix}/cost_report.txt", table.encode())
    per_team = {
        team: {**row.__dict__, "costs": row.costs(report.prices)}
        for team, row in report.team_totals().items()
    }
    return dg.MaterializeResult(
        metadata={
            "since": report.since.isoformat(),
            "until": report.until.isoformat(),
            "teams": dg.MetadataValue.json(per_team),
            "table": dg.MetadataValue.md(f"```\n{table}\n```"),
            "plot": dg.MetadataValue.path(store.uri(f"{prefix}/cost_report.svg")),
            "uri": store.uri(prefix),  # the table, its JSON and the plot
            "currency": report.prices.currency if report.prices else "none (no FM_PRICES_FILE)",
        }
    )


cost_report_job = dg.define_asset_job("cost_report_job", selection=[cost_report_asset])

# Each day just after midnight UTC, the day that ended (the schedule picks its partition).
cost_report_schedule = dg.build_schedule_from_partitioned_job(
    cost_report_job,
    hour_of_day=0,
    minute_of_hour=30,
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
