"""What every Ray worker's environment says about native thread pools: tokenizers runs its own
pool in each worker, with no more threads than a local Ray has CPUs."""

import os

import pytest

from fm_assets.execution.compute import LIBRARY_THREADS_PER_WORKER, worker_environment
from fm_assets.settings import Settings, load_settings


def _settings(**env: str) -> Settings:
    return load_settings({"FM_HOME": "/nonexistent/fm-home", **env})


def test_a_local_ray_of_one_cpu_gives_its_worker_one_library_thread() -> None:
    env = worker_environment(_settings(FM_RAY_NUM_CPUS="1"))
    assert env["RAYON_NUM_THREADS"] == "1"  # the scaling bench's "1 CPU" stays one core
    assert env["TOKENIZERS_PARALLELISM"] == "true"


def test_larger_rays_give_each_worker_a_few_library_threads() -> None:
    local = worker_environment(_settings(FM_RAY_NUM_CPUS="8"))
    cluster = worker_environment(_settings(RAY_ADDRESS="127.0.0.1:6379"))
    wanted = str(LIBRARY_THREADS_PER_WORKER)
    assert local["RAYON_NUM_THREADS"] == cluster["RAYON_NUM_THREADS"] == wanted


@pytest.mark.usefixtures("ray_session")
def test_the_session_rays_workers_run_with_that_environment() -> None:
    import ray

    @ray.remote(num_cpus=1)
    def seen() -> dict[str, str | None]:
        return {n: os.environ.get(n) for n in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}

    assert ray.get(seen.remote()) == {
        "TOKENIZERS_PARALLELISM": "true",
        "RAYON_NUM_THREADS": str(LIBRARY_THREADS_PER_WORKER),
    }
