"""OpenLineage run events and where they go.

Each asset materialization is one OpenLineage run of a job named after the asset: a START event
when it begins, then COMPLETE (with its input and output datasets and their facets) or FAIL
(with the error). The run's id derives from the Dagster run, asset and partition, so the two
events of one materialization share it, and the Dagster run is the parent run. The code version
travels in the `processing_engine` facet (the platform's release) and the `fm_code` facet
(asset, partition, and a stage's code version and config hash).

Events go to FM_OPENLINEAGE_URL (HTTP, POSTed to `/api/v1/lineage` by the openlineage-python
client) and/or FM_OPENLINEAGE_FILE (one JSON event per line); with neither, nowhere.
"""

from __future__ import annotations

import datetime as dt
import logging
import traceback
import uuid
from collections.abc import Sequence
from importlib.metadata import version as package_version
from typing import Any, ClassVar

import attr
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated import (
    error_message_run,
    job_type_job,
    parent_run,
    processing_engine_run,
)
from openlineage.client.generated.base import RunFacet
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import HttpConfig, HttpTransport
from openlineage.client.transport.transport import Transport

from fm_assets.lineage_events.datasets import LineageDataset
from fm_assets.settings import PIPELINE_VERSION, Settings

PRODUCER = f"urn:fm-platform:{PIPELINE_VERSION}"
FM_CODE_SCHEMA = "urn:fm-platform:openlineage:facets:FmCodeRunFacet:1-0-0"
log = logging.getLogger("fm.openlineage")


@attr.define
class FmCodeRunFacet(RunFacet):
    """The platform's own run facet: which asset and partition ran, at which code version."""

    asset: str
    partition: str | None = attr.field(default=None)
    pipelineVersion: str = attr.field(default=PIPELINE_VERSION)
    codeVersion: str | None = attr.field(default=None)  # a stage's version
    configHash: str | None = attr.field(default=None)
    dagsterRunId: str | None = attr.field(default=None)
    _additional_skip_redact: ClassVar[list[str]] = ["asset", "partition", "codeVersion"]

    @staticmethod
    def _get_schema() -> str:
        return FM_CODE_SCHEMA


def lineage_run_id(dagster_run_id: str, asset: str, partition: str | None) -> str:
    """One OpenLineage run per (Dagster run, asset, partition): the same id for its events."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fm:{dagster_run_id}/{asset}/{partition or ''}"))


def _input(d: LineageDataset) -> InputDataset:
    return InputDataset(namespace=d.namespace, name=d.name, facets=dict(d.facets))


def _output(d: LineageDataset) -> OutputDataset:
    return OutputDataset(
        namespace=d.namespace,
        name=d.name,
        facets=dict(d.facets),
        outputFacets=dict(d.output_facets),
    )


def run_event(
    settings: Settings,
    state: str,
    *,
    asset: str,
    partition: str | None,
    dagster_run_id: str,
    dagster_job: str,
    inputs: Sequence[LineageDataset] = (),
    outputs: Sequence[LineageDataset] = (),
    code: dict[str, str] | None = None,
    error: BaseException | None = None,
    at: dt.datetime | None = None,
) -> RunEvent:
    """One event (`START`, `COMPLETE` or `FAIL`) of an asset's materialization."""
    namespace = settings.openlineage_namespace
    facets: dict[str, Any] = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=PIPELINE_VERSION,
            name="fm-platform",
            openlineageAdapterVersion=package_version("openlineage-python"),
        ),
        "fm_code": FmCodeRunFacet(
            asset=asset, partition=partition, dagsterRunId=dagster_run_id, **(code or {})
        ),
        "parent": parent_run.ParentRunFacet(
            run=parent_run.Run(runId=dagster_run_id),
            job=parent_run.Job(namespace=namespace, name=dagster_job),
        ),
    }
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=str(error) or type(error).__name__,
            programmingLanguage="PYTHON",
            stackTrace="".join(traceback.format_exception(error)),
        )
    job_facets: dict[str, Any] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="DAGSTER", jobType="ASSET"
        )
    }
    return RunEvent(
        eventType=RunState[state],
        eventTime=(at or dt.datetime.now(dt.UTC)).isoformat(),
        run=Run(runId=lineage_run_id(dagster_run_id, asset, partition), facets=facets),
        job=Job(namespace=namespace, name=asset, facets=job_facets),
        inputs=[_input(d) for d in inputs],
        outputs=[_output(d) for d in outputs],
        producer=PRODUCER,
    )


def transports(settings: Settings) -> list[Transport]:
    """The configured transports: HTTP, a file, both, or none."""
    found: list[Transport] = []
    if settings.openlineage_url:
        auth = {}
        if settings.openlineage_api_key:
            auth = {"type": "api_key", "apiKey": settings.openlineage_api_key}
        # Three tries over about 2 s: a restarting endpoint is waited for, one that is down
        # costs a step seconds, not the client's default of five tries over about 10 s.
        retry = {"total": 3, "connect": 3, "read": 3, "backoff_factor": 0.3}
        config = HttpConfig.from_dict(
            {"url": settings.openlineage_url, "timeout": 5.0, "auth": auth, "retry": retry}
        )
        found.append(HttpTransport(config))
    if settings.openlineage_file:
        settings.openlineage_file.parent.mkdir(parents=True, exist_ok=True)
        found.append(
            FileTransport(FileConfig(log_file_path=str(settings.openlineage_file), append=True))
        )
    return found


def emit(settings: Settings, event: RunEvent) -> int:
    """Send `event` to every configured transport; how many took it. One that fails does not
    keep the event from the others; then the first failure is raised."""
    failures: list[Exception] = []
    sent = 0
    for destination in transports(settings):
        try:
            OpenLineageClient(transport=destination).emit(event)
            sent += 1
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]
    return sent
