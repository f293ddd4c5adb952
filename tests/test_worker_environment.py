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


WORKER_KEYS = {
    "FM_S3_WORKER_ACCESS_KEY_ID": "worker-key",
    "FM_S3_WORKER_SECRET_ACCESS_KEY": "worker-secret",
}


def test_workers_of_a_local_ray_get_the_worker_identity_not_the_drivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "control-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "control-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "control-token")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    env = worker_environment(_settings(**WORKER_KEYS))
    assert env["AWS_ACCESS_KEY_ID"] == "worker-key"
    assert env["AWS_SECRET_ACCESS_KEY"] == "worker-secret"
    assert env["AWS_SESSION_TOKEN"] == ""  # the driver's token belongs to the driver's key
    assert env["AWS_REGION"] == "eu-west-1"
    assert "control" not in " ".join(env.values())
    # Without a worker identity, workers of a local Ray share the driver's credentials.
    assert worker_environment(_settings())["AWS_ACCESS_KEY_ID"] == "control-key"


def test_a_clusters_workers_get_no_credentials_from_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "control-key")
    env = worker_environment(_settings(RAY_ADDRESS="127.0.0.1:6379", **WORKER_KEYS))
    # A runtime_env lands in the cluster's job table: its nodes hold their own secret.
    assert not any(name.startswith("AWS_") for name in env)


def test_half_a_worker_identity_is_refused_naming_both_settings() -> None:
    with pytest.raises(ValueError, match="FM_S3_WORKER_SECRET_ACCESS_KEY"):
        _settings(FM_S3_WORKER_ACCESS_KEY_ID="worker-key")
    assert "worker-secret" not in repr(_settings(**WORKER_KEYS))
