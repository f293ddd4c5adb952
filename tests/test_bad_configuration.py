"""Bad production settings fail within seconds, name the setting, and never print a credential.

Each case runs `fm status` as an operator would, against the session's real Postgres and S3
with one setting broken: wrong credentials, a server that is not there, a Ray address with
nothing listening, a malformed value. A Dagster run with the same settings fails the same way
(the platform resource probes the services when the run starts).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.services.fixtures import s3_credentials
from tests.services.postgres import PostgresServer
from tests.services.s3 import S3Server

pytestmark = pytest.mark.slow

# The probes' own budget is 5 s; the rest is the interpreter starting and importing.
BUDGET_S = 30


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def good_env(
    postgres: PostgresServer, s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Working production settings (no Ray cluster: RAY_ADDRESS is added per case)."""
    home = tmp_path_factory.mktemp("bad-config") / "fm"
    env = {
        **os.environ,
        **s3_credentials(),
        "FM_HOME": str(home),
        "FM_OBJECT_STORE": f"s3://{s3_session.bucket}/bad-config/platform",
        "FM_WAREHOUSE": f"s3://{s3_session.bucket}/bad-config/warehouse",
        "FM_S3_ENDPOINT": s3_session.endpoint,
        "FM_CATALOG_URI": postgres.url("fm", driver="postgresql+psycopg2"),
        "FM_DAGSTER_PG_URL": postgres.url("fm"),
    }
    env.pop("RAY_ADDRESS", None)
    return env


def _fm_status(env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("fm")), "status"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUDGET_S * 4,  # a hang shows as a failed budget below, not a stuck suite
    )
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def test_good_settings_pass_the_probes(good_env: dict[str, str]) -> None:
    code, output, _ = _fm_status(good_env)
    assert code == 0, output


CASES = {
    "wrong S3 secret": (
        {"AWS_SECRET_ACCESS_KEY": "not-the-secret-key-000"},
        "FM_OBJECT_STORE",
    ),
    "unreachable S3": ({"FM_S3_ENDPOINT": "http://127.0.0.1:{dead}"}, "FM_S3_ENDPOINT"),
    "wrong catalog password": ({"FM_CATALOG_URI": "catalog:wrong-password-111"}, "FM_CATALOG_URI"),
    "unreachable Dagster Postgres": (
        {"FM_DAGSTER_PG_URL": "dagster:port:{dead}"},
        "FM_DAGSTER_PG_URL",
    ),
    "Ray address that does not answer": ({"RAY_ADDRESS": "127.0.0.1:{dead}"}, "RAY_ADDRESS"),
    "Ray Client address that does not answer": (
        {"RAY_ADDRESS": "ray://127.0.0.1:{dead}"},
        "RAY_ADDRESS",
    ),
    "malformed Ray address": ({"RAY_ADDRESS": "head-without-port"}, "RAY_ADDRESS"),
}


def _broken(env: dict[str, str], change: dict[str, str], postgres: PostgresServer) -> dict:
    broken = dict(env)
    for name, value in change.items():
        value = value.replace("{dead}", str(_dead_port()))
        if value.startswith("catalog:"):  # the real URL with a wrong password
            value = postgres.url(
                "fm", driver="postgresql+psycopg2", password=value.split(":", 1)[1]
            )
        elif value.startswith("dagster:port:"):  # the real URL on a port nobody serves
            value = postgres.url("fm").replace(f":{postgres.port}/", f":{value.rsplit(':')[-1]}/")
        broken[name] = value
    return broken


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_setting_fails_fast_naming_it_without_credentials(
    case: str, good_env: dict[str, str], postgres: PostgresServer
) -> None:
    change, setting = CASES[case]
    env = _broken(good_env, change, postgres)
    code, output, seconds = _fm_status(env)
    assert code == 1, output
    assert seconds < BUDGET_S, f"{case}: took {seconds:.0f} s"
    assert setting in output, output
    assert "Traceback" not in output, output
    secrets = [postgres.password, s3_credentials()["AWS_SECRET_ACCESS_KEY"]]
    secrets += [v.split(":", 1)[1] for v in change.values() if v.startswith("catalog:")]
    secrets += ["not-the-secret-key-000"]
    assert [s for s in secrets if s in output] == [], f"{case}: a credential in the output"


def test_a_dagster_run_with_a_dead_service_fails_in_seconds_naming_it(
    good_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The platform resource probes when a run starts: the run fails, it does not hang."""
    import dagster as dg

    from fm_assets.defs import build_definitions
    from fm_assets.defs.landing import LANDING_BATCH

    env = dict(good_env, RAY_ADDRESS=f"127.0.0.1:{_dead_port()}")
    for name in ("FM_HOME", "FM_OBJECT_STORE", "FM_WAREHOUSE", "FM_S3_ENDPOINT", "RAY_ADDRESS"):
        monkeypatch.setenv(name, env[name])
    for name, value in s3_credentials().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FM_CATALOG_URI", env["FM_CATALOG_URI"])
    defs = build_definitions()
    started = time.monotonic()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("landing_batch", ["b-00000000000000000000"])
        result = dg.materialize(
            [d for d in defs.assets or [] if getattr(d, "key", None) == LANDING_BATCH],  # type: ignore[misc]
            partition_key="b-00000000000000000000",
            instance=instance,
            resources={"fm": defs.resources["fm"]} if defs.resources else None,
            raise_on_error=False,
        )
    assert not result.success
    assert time.monotonic() - started < BUDGET_S
    failures = " ".join(str(e.event_specific_data) for e in result.all_events if e.is_failure)
    assert "RAY_ADDRESS" in failures, failures
