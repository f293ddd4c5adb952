"""Shared fixtures: a fresh FM_HOME per test, one Ray per session (paths: tests/paths.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fm_assets.settings import Settings, load_settings

# Paths are defined in tests/paths.py. SHARED_DATA is used here; the others stay importable from
# conftest for tests written against it (import new ones from tests.paths).
from tests.paths import LLAMA_TOKENIZER, NEOX_TOKENIZER, REPO, SHARED_DATA, WARC_DIR  # noqa: F401
from tests.services.fixtures import s3_credentials

# Session fixtures over real servers (Postgres, SeaweedFS S3, a two-node Ray cluster, fm dev),
# and the loader tests' shard sets (`web`, `code`, shaped per module by `set_shape`).
pytest_plugins = ["tests.services.fixtures", "tests.shard_sets"]

# Tests run on one machine with one trusted user; Ray's token auth is for clusters.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Tests over the session's real servers run last, together: the servers (and the Ray cluster's
# two raylets) start when the first of them needs one and stop when the session ends, so they
# never run alongside the rest of the suite.
# Longer than the whole suite runs (CI stops it at 45 min).
SESSION_RAY_IDLE_STOP_S = 45 * 60
SERVICE_FIXTURES = frozenset({"postgres", "s3_session", "ray_cluster_session", "production"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: bool(SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))))


def pytest_configure(config: pytest.Config) -> None:
    if not SHARED_DATA.is_dir():
        raise pytest.UsageError(
            f"the shared test data is missing: expected {SHARED_DATA} next to the repository"
        )


@pytest.fixture
def fm_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings over a fresh FM_HOME (also exported, for code that reads the environment)."""
    home = tmp_path / "fm-home"
    monkeypatch.setenv("FM_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return load_settings()


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One local Ray head for the whole session (starting Ray costs 10-25 s), exported as
    RAY_ADDRESS so every test and every `fm` subprocess connects to it; stopped by its pid."""
    from fm_assets.execution.local_ray import start_local_ray, stop_local_ray

    settings = load_settings(
        {
            "FM_HOME": str(tmp_path_factory.mktemp("ray-home")),
            "FM_RAY_NUM_CPUS": "2",
            # Idle between the session's Ray tests is no reason to stop; a session killed
            # before its teardown still leaves no head for good.
            "FM_RAY_IDLE_STOP_S": str(SESSION_RAY_IDLE_STOP_S),
        }
    )
    # Like a cluster's pods, the nodes get the (test) S3 credentials from their environment,
    # never through a job's runtime_env, which Ray writes to its logs.
    with pytest.MonkeyPatch.context() as env:
        for name, value in s3_credentials().items():
            env.setenv(name, value)
        address = start_local_ray(settings)
    previous = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = address
    yield address
    if previous is None:
        os.environ.pop("RAY_ADDRESS", None)
    else:
        os.environ["RAY_ADDRESS"] = previous
    stop_local_ray(settings)


@pytest.fixture(scope="session")
def ray_head_pid(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> int:
    """The pid of the session's Ray head (`ray start`): its process tree holds the workers."""
    import json

    for state in Path(tmp_path_factory.getbasetemp()).glob("ray-home*/ray/head.json"):
        head = json.loads(state.read_text())
        if head["address"] == ray_address:
            return int(head["pid"])
    raise RuntimeError(f"the session's Ray head at {ray_address} left no head.json")


@pytest.fixture(scope="session")
def ray_session(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This test process connected to the session's Ray."""
    import ray

    from fm_assets.execution.compute import ensure_ray

    home = tmp_path_factory.mktemp("ray-driver")
    ensure_ray(load_settings({"FM_HOME": str(home), "RAY_ADDRESS": ray_address}))
    yield
    ray.shutdown()


def ray_workers_with(env: dict[str, str]) -> None:
    """Check that the session's Ray workers see `env` (the S3 test credentials its nodes were
    started with), connecting this process to it first."""
    import ray

    from fm_assets.execution.compute import ensure_ray

    @ray.remote(num_cpus=0)
    def worker_env(names: list[str]) -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in names}

    ensure_ray(load_settings())
    seen = ray.get(worker_env.remote(list(env)))
    if seen != env:
        raise RuntimeError(
            f"the session's Ray workers see {seen}, not the test's {env}: its nodes are "
            "started with tests/services/fixtures.py s3_credentials()"
        )


def local_heads_under(root: Path) -> list[int]:
    """Pids of local Ray heads (`ray start`, whose environment names its FM_HOME) and of their
    watchdogs still running for an FM_HOME under `root`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"fm_assets.execution.ray_watchdog" in argv:
                homes = [a.removeprefix(b"--home=") for a in argv if a.startswith(b"--home=")]
            elif b"start" in argv and any(a.endswith(b"/ray") for a in argv[:2]):
                variables = (entry / "environ").read_bytes().split(b"\0")
                homes = [v.partition(b"=")[2] for v in variables if v.startswith(b"FM_RAY_HOME=")]
            else:
                continue
        except OSError:
            continue
        if any(Path(home.decode()).is_relative_to(root) for home in homes):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_local_ray_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test that ran a stage without the session's Ray started its FM_HOME's own: stop it.
    Then no head (or watchdog) of the session's FM_HOMEs may be left, recorded or not (a test
    that deleted its home would have left one behind before heads watched their homes)."""
    yield
    from fm_assets.execution.local_ray import kill_group, stop_local_ray

    root = Path(tmp_path_factory.getbasetemp())
    for state in root.rglob("ray/head.json"):
        stop_local_ray(load_settings({"FM_HOME": str(state.parent.parent)}))
    left = local_heads_under(root)
    for pid in left:
        kill_group(pid, timeout=10)
    if left:
        raise RuntimeError(
            f"local Ray heads or watchdogs of this session's FM_HOMEs were left running (pids "
            f"{left}; stopped now): a test must stop the head it started (`fm ray stop`)"
        )
