"""The Dagster UI on loopback: `fm dev` serves the asset graph, and its daemon processes a batch.

Starts the real webserver and daemon (`dagster dev -w workspace.yaml` via `fm dev`) on a free
127.0.0.1 port, reads the graph through the UI's GraphQL API, and waits for the landing sensor
to launch and finish a run for a batch landed beforehand. The server is stopped by its own pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution.pipelines import PIPELINES
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import load_settings
from tests.paths import NEOX_TOKENIZER, REPO, WARC_DIR

pytestmark = pytest.mark.slow

GRAPH_QUERY = """{ assetNodes { assetKey { path } dependencyKeys { path } isPartitioned
  assetChecksOrError { ... on AssetChecks { checks { name blocking } } } } }"""
RUNS_QUERY = """{ runsOrError { ... on Runs { results { runId status jobName
  tags { key value } } } } }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


@pytest.fixture
def dagster_ui(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A landed batch, then `fm dev` on loopback over the same FM_HOME; yields (port, batch)."""
    home = tmp_path / "fm"
    env = {
        **os.environ,
        "FM_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "RAY_AUTH_MODE": "disabled",
        "FM_RAY_NUM_CPUS": "2",
    }
    settings = load_settings(env)
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batch, _ = operations.land(
        settings, [WARC_DIR / "wget-sample-0001.warc.gz"], source="wget", license="Apache-2.0"
    )
    port = _free_port()
    fm = Path(sys.executable).with_name("fm")
    log = (tmp_path / "dagster-dev.log").open("wb")
    server = subprocess.Popen(
        [str(fm), "dev", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    output = (tmp_path / "dagster-dev.log").read_text()
                    raise RuntimeError(f"dagster dev did not start; log:\n{output}") from None
                time.sleep(1)
        yield port, batch.batch_id
    finally:
        # dagster dev runs the webserver, daemon and code servers in its process group.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def test_ui_serves_the_graph_and_its_sensor_processes_a_batch(dagster_ui: tuple[int, str]) -> None:
    port, batch_id = dagster_ui
    nodes: dict[str, dict] = {}
    deadline = time.monotonic() + 60
    while not nodes and time.monotonic() < deadline:
        # The code location loads in the background after the webserver answers.
        nodes = {n["assetKey"]["path"][0]: n for n in _graphql(port, GRAPH_QUERY)["assetNodes"]}
        if not nodes:
            time.sleep(2)
    assert set(nodes) == {
        "landing_batch",
        *(name for modality in PIPELINES.values() for name in modality.names),
        "dataset_version",
        "shard_set",
        "shard_set_cache",
        "text_set",
        "quality_classifier_registry",
        "contamination_registry",
        "contamination_scan",
        "revocation",
        "cost_report",
    }
    for modality in PIPELINES.values():  # each modality's stages chain from the landing batch
        upstream = "landing_batch"
        for stage in modality.names:
            node = nodes[stage]
            assert [k["path"][0] for k in node["dependencyKeys"]] == [upstream]
            assert node["isPartitioned"]
            checks = {c["name"]: c["blocking"] for c in node["assetChecksOrError"]["checks"]}
            assert checks["records_accounted_for"] and checks["document_expectations"]
            upstream = stage
    assert nodes["shard_set"]["isPartitioned"]

    deadline = time.monotonic() + 420
    status = None
    while time.monotonic() < deadline:
        runs = _graphql(port, RUNS_QUERY)["runsOrError"]["results"]
        mine = [
            r
            for r in runs
            if {"key": "dagster/partition", "value": batch_id} in r["tags"]
            and r["jobName"] == "process_landing_batch"
        ]
        if mine:
            status = mine[0]["status"]
            tags = {t["key"]: t["value"] for t in mine[0]["tags"]}
            assert tags["dagster/sensor_name"] == "new_landing_batch_sensor"
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
        time.sleep(3)
    assert status == "SUCCESS", f"sensor-launched run ended as {status}"
