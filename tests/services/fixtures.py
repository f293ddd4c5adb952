"""Session fixtures over real servers on loopback, shared by every test that asks for them.

- `postgres`: one throwaway Postgres (tests create their own databases in it);
- `s3_session`: one SeaweedFS S3 endpoint;
- `ray_cluster_session`: one two-node Ray cluster (head + worker raylet, token auth on); its
  nodes hold the test S3 credentials in their environment, as pods do from a secret;
- `production`: the production profile over all three (its own databases and bucket), with
  `fm dev` (webserver + daemon) on loopback, for tests that drive the platform as an operator.

Drivers join the cluster from subprocesses (`fm ...`, Dagster's run workers): this pytest
process may hold the session's local Ray (`ray_session`), and a process joins one Ray only.
A test that wants to `ray.init` the cluster in-process must `ray.shutdown()` first.
Every server is stopped by its own pid when the session ends.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO
from tests.policies import opt_out_policy
from tests.services import s3 as s3_service
from tests.services.postgres import PostgresServer, postgres_server
from tests.services.ray_cluster import RayCluster, ray_cluster
from tests.services.s3 import S3Server, seaweedfs_s3

LANDING_SENSOR = "new_landing_batch_sensor"
# The daemon's pass over its sensors starts every 5 s; a pass's ticks start within it, even on
# a loaded machine, this long after the pass read the sensors' states.
SENSOR_PASS_SETTLE_S = 12.0


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server(databases=("fm",)) as server:
        yield server


@pytest.fixture(scope="session")
def s3_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with seaweedfs_s3(tmp_path_factory.mktemp("seaweedfs-session"), bucket="fm-session") as server:
        yield server


def s3_credentials() -> dict[str, str]:
    """The credentials every SeaweedFS started by tests/services/s3.py accepts."""
    return {
        "AWS_ACCESS_KEY_ID": s3_service.ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": s3_service.SECRET_KEY,
        "AWS_REGION": s3_service.REGION,
    }


@pytest.fixture(scope="session")
def ray_cluster_session() -> Iterator[RayCluster]:
    """Two raylets on loopback with token auth; drivers use `cluster.driver_env()`."""
    token = secrets.token_hex(24)
    with ray_cluster(
        env={**s3_credentials(), "TOKENIZERS_PARALLELISM": "false"}, auth_token=token
    ) as cluster:
        yield cluster


def create_database(server: PostgresServer, name: str) -> None:
    import psycopg2

    connection = psycopg2.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        dbname="fm",
        connect_timeout=5,
    )
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
    finally:
        connection.close()


@dataclass
class Production:
    """The production profile: settings as environment variables, the servers behind them,
    and `fm dev` serving the UI on `port`."""

    env: dict[str, str] = field(repr=False)
    home: Path
    bucket: str
    prefix: str  # FM_OBJECT_STORE = s3://bucket/prefix/platform, FM_WAREHOUSE .../warehouse
    postgres: PostgresServer = field(repr=False)
    s3: S3Server = field(repr=False)
    cluster: RayCluster = field(repr=False)
    port: int = 0
    ui_log: Path | None = None
    ui_pid: int | None = None

    def secrets(self) -> list[str]:
        """Every credential of the profile: none may ever show in logs, metadata or the UI."""
        return [
            self.postgres.password,
            self.s3.secret_key,
            self.s3.access_key,
            self.cluster.env["RAY_AUTH_TOKEN"],
        ]

    def fm(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run the `fm` command with the production settings; raise with its output on failure."""
        fm = Path(sys.executable).with_name("fm")
        result = subprocess.run(
            [str(fm), *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        with (self.home.parent / "fm-commands.log").open("a") as log:
            log.write(f"$ fm {' '.join(args)}\n{result.stdout}{result.stderr}\n")
        if result.returncode != 0:
            raise AssertionError(
                f"fm {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}"
            )
        return result

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return dict(body["data"])

    def wait_for_code_location(self, timeout_s: float = 180) -> None:
        """Until the UI lists the platform's assets (the code location loads after start-up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.graphql("{ assetNodes { assetKey { path } } }")["assetNodes"]:
                return
            time.sleep(2)
        raise AssertionError(f"the code location did not load in fm dev within {timeout_s} s")

    def sensor(self, name: str = LANDING_SENSOR) -> tuple[dict[str, str], str]:
        """A sensor's selector and id, as the UI's GraphQL API names them."""
        query = """{ repositoriesOrError { ... on RepositoryConnection { nodes { name
            location { name } sensors { id name } } } } }"""
        for repo in self.graphql(query)["repositoriesOrError"]["nodes"]:
            for sensor in repo["sensors"]:
                if sensor["name"] == name:
                    selector = {
                        "repositoryLocationName": repo["location"]["name"],
                        "repositoryName": repo["name"],
                        "sensorName": name,
                    }
                    return selector, sensor["id"]
        raise AssertionError(f"the UI lists no sensor {name}")

    def set_sensor(self, running: bool, name: str = LANDING_SENSOR) -> None:
        """Start or stop a sensor through the UI's GraphQL API."""
        selector, sensor_id = self.sensor(name)
        if running:
            query = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
                __typename ... on PythonError { message } } }"""
            data = self.graphql(query, {"s": selector})["startSensor"]
        else:
            query = """mutation($id: String!) { stopSensor(id: $id) { __typename
                ... on PythonError { message } } }"""
            data = self.graphql(query, {"id": sensor_id})["stopSensor"]
        if data["__typename"] in ("PythonError", "UnauthorizedError"):
            raise AssertionError(f"could not {'start' if running else 'stop'} {name}: {data}")

    def stop_sensor(self, name: str = LANDING_SENSOR) -> None:
        """Stop a sensor and return once no tick of it can still start or is running.

        The daemon reads which sensors run at the start of each pass (every 5 s) and then ticks
        them one after another without looking again, so a pass that read the sensor as running
        just before the stop still ticks it after (seen in CI: such a tick requested a run of a
        batch landed after the stop). Waiting out a pass before looking for a running tick
        closes that window.
        """
        self.set_sensor(running=False, name=name)
        time.sleep(SENSOR_PASS_SETTLE_S)
        self.wait_for_sensor_idle(name)

    def wait_for_sensor_idle(self, name: str = LANDING_SENSOR, timeout_s: float = 120) -> None:
        """Until no tick of the sensor is being evaluated. A stopped sensor finishes the tick it
        had started; that tick may still read the landing log and request a run."""
        query = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
            ... on Sensor { sensorState { ticks(limit: 1) { status } } } } }"""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.graphql(query, {"s": self.sensor(name)[0]})["sensorOrError"]
            if all(t["status"] != "STARTED" for t in state["sensorState"]["ticks"]):
                return
            time.sleep(1)
        raise AssertionError(f"a tick of {name} was still running after {timeout_s} s")

    def run_errors(self, run_id: str) -> list[str]:
        """What a run's failure events say (step and run failures, error-level messages)."""
        query = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
            events { __typename ... on MessageEvent { message level }
                ... on ExecutionStepFailureEvent { stepKey error { message causes { message } } }
                ... on RunFailureEvent { error { message causes { message } } } } } } }"""
        events = self.graphql(query, {"id": run_id})["logsForRun"].get("events", [])
        said = []
        for event in events:
            failure = event.get("error") or {}
            # A step's error says which op failed; what went wrong is in its causes.
            causes = [c.get("message", "") for c in failure.get("causes") or []]
            error = " <- ".join([failure["message"], *causes]) if failure.get("message") else None
            if error or event.get("level") == "ERROR" or "Failure" in event["__typename"]:
                said.append(
                    f"{event['__typename']} {event.get('stepKey') or ''}: "
                    f"{event.get('message')} {error or ''}".strip()
                )
        return said

    def runs(self, **tags: str) -> list[dict[str, Any]]:
        """Runs with these tags (`dagster__partition=` for `dagster/partition`)."""
        query = """query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) {
            ... on Runs { results { runId status jobName tags { key value } } } } }"""
        filters = [{"key": k.replace("__", "/"), "value": v} for k, v in tags.items()]
        return list(self.graphql(query, {"tags": filters})["runsOrError"]["results"])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_fm_dev(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`fm dev` on a free loopback port; returns once the webserver answers."""
    port = _free_port()
    fm = Path(sys.executable).with_name("fm")
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(fm), "dev", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_fm_dev(process)
                raise RuntimeError(
                    f"fm dev did not start; log:\n{log_path.read_text()[-5000:]}"
                ) from None
            time.sleep(1)


def stop_fm_dev(process: subprocess.Popen[bytes], timeout_s: float = 30) -> float:
    """SIGTERM `fm dev` (its own pid); SIGKILL its group if it outlives `timeout_s`.
    Returns the seconds it took to exit."""
    started = time.monotonic()
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return time.monotonic() - started


@pytest.fixture(scope="session")
def production(
    postgres: PostgresServer,
    s3_session: S3Server,
    ray_cluster_session: RayCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Production]:
    """The production profile with its own catalog and Dagster databases and bucket, and
    `fm dev` on loopback over it."""
    root = tmp_path_factory.mktemp("production")
    home = root / "fm-home"
    # One bucket (a SeaweedFS collection reserves volumes for each bucket), own prefixes.
    bucket, prefix = s3_session.bucket, "production"
    for database in ("fm_catalog", "fm_dagster"):
        create_database(postgres, database)
    env = {
        **os.environ,
        **s3_credentials(),
        **ray_cluster_session.driver_env(),
        "FM_HOME": str(home),
        "FM_OBJECT_STORE": f"s3://{bucket}/{prefix}/platform",
        "FM_WAREHOUSE": f"s3://{bucket}/{prefix}/warehouse",
        "FM_S3_ENDPOINT": s3_session.endpoint,
        "FM_CATALOG_URI": postgres.url("fm_catalog", driver="postgresql+psycopg2"),
        "FM_DAGSTER_PG_URL": postgres.url("fm_dagster"),
        "TOKENIZERS_PARALLELISM": "false",
        # The subject is the production services, not curation: the sample's repetitive
        # generated prose goes through (the default web policy has its own test).
        "FM_POLICY_FILE": str(opt_out_policy(root)),
    }
    for name in ("DAGSTER_HOME", "FM_RAY_NUM_CPUS"):
        env.pop(name, None)
    profile = Production(
        env=env,
        home=home,
        bucket=bucket,
        prefix=prefix,
        postgres=postgres,
        s3=s3_session,
        cluster=ray_cluster_session,
    )
    profile.ui_log = root / "fm-dev.log"
    process, profile.port = start_fm_dev(env, profile.ui_log)
    profile.ui_pid = process.pid
    try:
        yield profile
    finally:
        stop_fm_dev(process)
