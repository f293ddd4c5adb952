"""The landing sensor requests one run per new batch, but none for a batch already processed
(its last stage materialized, e.g. by `fm run`) or being processed by a tagged run."""

from __future__ import annotations

import dagster as dg

from fm_assets.commands import operations
from fm_assets.defs.landing import BATCH_TAG
from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from tests.paths import WARC_DIR


def _evaluate(instance: dg.DagsterInstance) -> dg.SensorResult:
    from fm_assets.definitions import defs

    sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
    context = dg.build_sensor_context(instance=instance, resources={"fm": defs.resources["fm"]})
    return sensor(context)  # type: ignore[return-value]


def test_only_unprocessed_batches_get_a_run(fm_settings: Settings) -> None:
    batches = [
        operations.land(fm_settings, [WARC_DIR / name], source="wget", license="Apache-2.0")[0]
        for name in ("wget-sample-0000.warc.gz", "wget-sample-0001.warc.gz")
    ]
    extra = WARC_DIR / "cc-main-2024-22-whirlwind.warc.gz"
    batches.append(operations.land(fm_settings, [extra], source="cc", license="CC0-1.0")[0])
    done, running, new = (b.batch_id for b in batches)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("landing_batch", [done, running])
        instance.report_runless_asset_event(
            dg.AssetMaterialization(dg.AssetKey(pipeline.STAGE_NAMES[-1]), partition=done)
        )
        instance.add_run(
            dg.DagsterRun(job_name="process_landing_batch", run_id="r1", tags={BATCH_TAG: running})
        )
        result = _evaluate(instance)
    assert [r.partition_key for r in result.run_requests or []] == [new]
    (added,) = result.dynamic_partitions_requests or []
    assert list(added.partition_keys) == [done, running, new]  # every batch shows in the UI
