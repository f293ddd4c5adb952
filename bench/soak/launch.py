"""What the Dagster daemon does for a landed batch, done by the benchmark one step at a time:
evaluate a tick of `new_landing_batch_sensor`, add the partitions it asks for, and launch each
run it requests in a process of its own.

The embedded instance (the repository's dagster.yaml) names no run launcher, so Dagster's
DefaultRunLauncher launches every run as a new process of the code location; on Kubernetes the
K8sRunLauncher makes it a pod. So here each run is a new Python process executing the job the
request names, for the request's partition with its tags, against the FM_HOME's instance:
interpreter start, imports, the instance, connecting to the home's Ray, all paid per run, and
nothing (caches, memory) carried from one run to the next, as in production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

# The run worker: the job of the request, in this process, as the launched run process does.
RUN_WORKER = """
import json, sys
from fm_assets.defs import build_definitions
from fm_assets.defs.materialize import dagster_instance
from fm_assets.settings import load_settings

job_name, partition, tags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
job = build_definitions().get_job_def(job_name)
result = job.execute_in_process(
    partition_key=partition, tags=tags, instance=dagster_instance(load_settings()),
    raise_on_error=False,
)
print(result.run_id)
sys.exit(0 if result.success else 1)
"""


@dataclass(frozen=True)
class Tick:
    """One sensor evaluation: the runs it requested and the cursor it left."""

    requests: list[dg.RunRequest]
    cursor: str | None
    skip_reason: str | None


def tick(instance: dg.DagsterInstance, cursor: str | None) -> Tick:
    """Evaluate `new_landing_batch_sensor` from `cursor` and add the dynamic partitions it asks
    for, as the daemon does before it submits the tick's runs. The sensor reads the platform's
    settings from this process's environment (FM_HOME, ...)."""
    from fm_assets.definitions import defs

    sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"fm": defs.resources["fm"]}
    )
    result: Any = sensor(context)
    for added in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(added.partitions_def_name, list(added.partition_keys))
    skip = result.skip_reason.skip_message if result.skip_reason else None
    return Tick(list(result.run_requests or []), result.cursor or cursor, skip)


@dataclass(frozen=True)
class LaunchedRun:
    """A requested run, executed in a process of its own."""

    partition: str
    run_id: str
    process_s: float  # from spawning the run's process to its exit
    returncode: int
    stderr_tail: str


def launch(request: dg.RunRequest, env: dict[str, str], timeout_s: float = 1800) -> LaunchedRun:
    """Execute `request`'s job for its partition in a new process with `env`; wait for it."""
    if request.job_name is None or request.partition_key is None:
        raise ValueError(f"the sensor requested a run without a job or partition: {request}")
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_WORKER,
            request.job_name,
            request.partition_key,
            json.dumps(dict(request.tags)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    return LaunchedRun(
        partition=request.partition_key,
        run_id=lines[-1] if lines else "",
        process_s=time.perf_counter() - started,
        returncode=done.returncode,
        stderr_tail=done.stderr[-4000:],
    )


def run_environment(overrides: dict[str, str]) -> dict[str, str]:
    """This process's environment without its FM_* settings, plus `overrides`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FM_")} | overrides
