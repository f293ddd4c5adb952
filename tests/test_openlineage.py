"""OpenLineage run events: valid against the schema, sent over HTTP to a real server on loopback
and to a file; a failing endpoint never fails the caller."""

import dataclasses
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from openlineage.client.serde import Serde

import fm_assets.execution.pipelines  # noqa: F401  (declares the stage tables)
from fm_assets.defs.openlineage import emits_lineage
from fm_assets.defs.resources import FmPlatform
from fm_assets.lineage_events.datasets import (
    CheckResult,
    iceberg_table,
    location_dataset,
    version_dataset,
)
from fm_assets.lineage_events.events import emit, lineage_run_id, run_event
from fm_assets.settings import Settings, load_settings
from tests.openlineage_validation import validate_event


class LineageServer:
    """A tiny OpenLineage endpoint on loopback: keeps what is POSTed, answers `status`."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.authorization: list[str | None] = []  # each request's Authorization header
        self.status = 201
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.received.append((self.path, json.loads(body)))
                owner.authorization.append(self.headers.get("Authorization"))
                self.send_response(owner.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LineageServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server() -> Iterator[LineageServer]:
    with LineageServer() as running:
        yield running


def _events(settings: Settings) -> list[Any]:
    run = str(uuid.uuid4())
    common: dict[str, Any] = {
        "asset": "extracted_documents",
        "partition": "b-0123",
        "dagster_run_id": run,
        "dagster_job": "process_landing_batch",
    }
    inputs = [iceberg_table(settings, "raw_documents", "cloud", 11)]
    outputs = [
        iceberg_table(
            settings,
            "extracted_documents",
            "cloud",
            12,
            rows=40,
            checks=[CheckResult("records_accounted_for", True, "40 in = 40 kept + 0")],
        ),
        version_dataset(settings, "web@v2", "f" * 64, rows=40),
        iceberg_table(settings, "decoded_pairs", "cloud", 5, rows=7),  # an image-text stage
        location_dataset("s3://bucket/shards/cloud/web/v2/abc-s2048", rows=9, files=2),
    ]
    return [
        run_event(settings, "START", **common),
        run_event(
            settings,
            "COMPLETE",
            **common,
            inputs=inputs,
            outputs=outputs,
            code={"codeVersion": "3", "configHash": "ab12"},
        ),
        run_event(settings, "FAIL", **common, error=RuntimeError("stage lost records")),
    ]


def test_events_validate_against_the_openlineage_schema(fm_settings: Settings) -> None:
    start, complete, fail = (Serde.to_dict(e) for e in _events(fm_settings))
    for event in (start, complete, fail):
        validate_event(event)
    assert start["run"]["runId"] == complete["run"]["runId"] == fail["run"]["runId"]
    output = complete["outputs"][0]
    assert output["name"] == "fm_cloud.extracted_documents"
    assert output["facets"]["version"]["datasetVersion"] == "12"
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 40
    assert output["facets"]["dataQualityAssertions"]["assertions"][0]["success"] is True
    assert {"doc_id", "generator_model", "text"} <= {
        f["name"] for f in output["facets"]["schema"]["fields"]
    }
    assert complete["run"]["facets"]["fm_code"]["codeVersion"] == "3"
    assert complete["outputs"][3]["namespace"] == "s3://bucket"
    pairs = {f["name"] for f in complete["outputs"][2]["facets"]["schema"]["fields"]}
    assert {"image", "pixel_hash", "width"} <= pairs, pairs
    assert "stage lost records" in fail["run"]["facets"]["errorMessage"]["message"]
    # A broken event is caught: the check is not vacuous.
    broken = json.loads(json.dumps(complete))
    broken["run"]["runId"] = "not-a-uuid"
    with pytest.raises(AssertionError, match="runId"):
        validate_event(broken)
    del broken["outputs"][0]["facets"]["catalog"]["framework"]
    broken["run"]["runId"] = complete["run"]["runId"]
    with pytest.raises(AssertionError, match="framework"):
        validate_event(broken)


def test_events_reach_a_real_http_endpoint_and_a_file(
    fm_settings: Settings, server: LineageServer, tmp_path: Path
) -> None:
    log = tmp_path / "lineage" / "events.jsonl"
    settings = dataclasses.replace(fm_settings, openlineage_url=server.url, openlineage_file=log)
    events = _events(settings)
    for event in events:
        assert emit(settings, event) == 2
    assert [path for path, _ in server.received] == ["/api/v1/lineage"] * 3
    from_file = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e for _, e in server.received] == from_file
    assert [e["eventType"] for e in from_file] == ["START", "COMPLETE", "FAIL"]
    for event in from_file:
        validate_event(event)
    # An endpoint that refuses events raises (the asset wrapper turns this into a warning).
    server.status = 400
    with pytest.raises(Exception, match="400"):
        emit(dataclasses.replace(settings, openlineage_file=None), events[0])


def test_the_run_id_is_one_per_materialization() -> None:
    a = lineage_run_id("r1", "shard_set", "web@v1|cfg")
    assert a == lineage_run_id("r1", "shard_set", "web@v1|cfg")
    assert a != lineage_run_id("r1", "shard_set", "web@v2|cfg")
    assert uuid.UUID(a).version == 5


def test_an_api_key_is_sent_as_a_bearer_token(
    fm_settings: Settings, server: LineageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FM_OPENLINEAGE_URL", server.url)
    monkeypatch.setenv("FM_OPENLINEAGE_API_KEY", "s3cr3t-token")
    settings = load_settings()
    assert "s3cr3t-token" not in repr(settings)
    assert emit(settings, _events(settings)[0]) == 1
    assert server.authorization == ["Bearer s3cr3t-token"]


def test_every_asset_of_the_code_location_emits_lineage() -> None:
    from fm_assets.definitions import defs

    missing = []
    for assets_def in defs.assets or []:
        if not isinstance(assets_def, dg.AssetsDefinition):
            continue
        function = assets_def.op.compute_fn.decorated_fn  # type: ignore[union-attr]
        if not getattr(function, "emits_openlineage", False):
            missing.extend(k.to_user_string() for k in assets_def.keys)
    assert not missing, f"assets without @emits_lineage: {missing}"


def _materialize(asset: dg.AssetsDefinition, home: Path) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [asset],
        resources={"fm": FmPlatform(home=str(home))},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_a_dagster_materialization_emits_start_then_complete_or_fail(
    fm_settings: Settings, server: LineageServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FM_OPENLINEAGE_URL", server.url)
    monkeypatch.setenv("FM_OPENLINEAGE_FILE", str(log))
    out = tmp_path / "written"

    @dg.asset(name="lineage_probe_ok")
    @emits_lineage()
    def ok(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]
        out.mkdir()
        return dg.MaterializeResult(metadata={"uri": f"file://{out}"})

    @dg.asset(name="lineage_probe_fails")
    @emits_lineage()
    def fails(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]
        raise RuntimeError("the probe's stage lost 3 records")

    def undescribable(*args: object) -> Any:
        raise KeyError("stage")

    @dg.asset(name="lineage_probe_undescribed")
    @emits_lineage(undescribable)
    def undescribed(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]
        return dg.MaterializeResult()

    home = fm_settings.home
    assert _materialize(ok, home).success
    assert not _materialize(fails, home).success
    assert _materialize(undescribed, home).success
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e for _, e in server.received] == events
    for event in events:
        validate_event(event)
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("lineage_probe_ok", "START"),
        ("lineage_probe_ok", "COMPLETE"),
        ("lineage_probe_fails", "START"),
        ("lineage_probe_fails", "FAIL"),
        ("lineage_probe_undescribed", "START"),
        ("lineage_probe_undescribed", "COMPLETE"),
    ]
    assert events[1]["outputs"] == [
        {"namespace": "file", "name": str(out), "facets": {}, "outputFacets": {}}
    ]
    assert "lost 3 records" in events[3]["run"]["facets"]["errorMessage"]["message"]
    assert events[5]["outputs"] == []
    # Lineage is reported, not relied on: an endpoint that is down fails no materialization.
    server.__exit__(None, None, None)
    monkeypatch.delenv("FM_OPENLINEAGE_FILE")
    assert _materialize(undescribed, home).success
