"""deploy/helm/values.yaml does in production what the docs say (offline, in seconds).

The chart's rendering of the instance is reproduced by tests/helm_chart.py (from its templates);
what it renders is then handed to Dagster's own code: a real DagsterInstance built from the
rendered `concurrency` and `run_coordinator` must enforce dagster.yaml's limits, and the real
dagster-k8s builds the run pods (tests/test_pod_security.py checks those).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import helm_chart
from tests.paths import REPO

VALUES = REPO / "deploy" / "helm" / "values.yaml"


def _values() -> dict[str, Any]:
    return dict(yaml.safe_load(VALUES.read_text()))


def _instance_limits(values: dict[str, Any]) -> tuple[int, list[dict[str, Any]], int | None]:
    """(max concurrent runs, tag limits, default pool limit) a Dagster instance enforces when
    its dagster.yaml is what the chart renders from `values`."""
    from dagster._core.instance.config import validate_concurrency_config
    from dagster._core.test_utils import instance_for_test

    overrides: dict[str, Any] = {}
    coordinator = helm_chart.run_coordinator(values)
    if coordinator:
        overrides["run_coordinator"] = coordinator
    rendered = helm_chart.concurrency(values)
    if rendered is not None:
        overrides["concurrency"] = rendered
        validate_concurrency_config(overrides)  # the chart's output passes Dagster's checks
    with instance_for_test(overrides=overrides) as instance:
        config = instance.get_concurrency_config()
        queue = config.run_queue_config
        assert queue is not None
        return (
            queue.max_concurrent_runs,
            list(queue.tag_concurrency_limits),
            config.pool_config.default_pool_limit,
        )


def test_production_instance_enforces_the_repositorys_limits() -> None:
    from fm_assets.defs.instance import embedded_config

    expected = embedded_config()["concurrency"]
    max_runs, tag_limits, pool_limit = _instance_limits(_values())
    assert max_runs == expected["runs"]["max_concurrent_runs"] == 4
    assert tag_limits == expected["runs"]["tag_concurrency_limits"]
    assert tag_limits[0]["key"] == "dagster/partition" and tag_limits[0]["limit"] == 1
    assert pool_limit == expected["pools"]["default_limit"]


def test_without_enabled_the_chart_would_drop_every_limit() -> None:
    values = _values()
    values["concurrency"]["enabled"] = False
    max_runs, tag_limits, pool_limit = _instance_limits(values)
    # Dagster's defaults: what production ran with before `enabled: true`.
    assert (max_runs, tag_limits, pool_limit) == (10, [], None)


def test_limits_in_both_places_are_the_chart_error_dagster_raises() -> None:
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import validate_concurrency_config

    values = _values()
    values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"] = {
        "maxConcurrentRuns": 3
    }
    overrides = {
        "run_coordinator": helm_chart.run_coordinator(values),
        "concurrency": helm_chart.concurrency(values),
    }
    with pytest.raises(DagsterInvalidConfigError, match="max_concurrent_runs"):
        validate_concurrency_config(overrides)


def test_run_retries_and_monitoring_are_the_instances() -> None:
    from fm_assets.defs.instance import RUN_RETRIES

    daemon = _values()["dagsterDaemon"]
    assert daemon["runMonitoring"]["enabled"] is True
    retries = daemon["runRetries"]
    assert retries["enabled"] is RUN_RETRIES["enabled"]
    assert retries["maxRetries"] == RUN_RETRIES["max_retries"]
    assert retries["retryOnAssetOrOpFailure"] is RUN_RETRIES["retry_on_asset_or_op_failure"]


def _env(names_values: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in names_values)


def test_run_pods_get_the_code_locations_settings() -> None:
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    location_env = {e["name"]: e["value"] for e in deployment["env"]}
    launcher = helm_chart.run_launcher_config(values)
    assert _env(launcher["env_vars"]) == location_env
    assert set(launcher["env_secrets"]) == {s["name"] for s in deployment["envSecrets"]}
    # Passed on, the code location's container context would override the run pods' account.
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is False


def test_ui_reads_the_compute_logs_runs_write() -> None:
    from fm_assets.defs.instance import compute_logs_config
    from fm_assets.settings import load_settings

    values = _values()
    rendered = helm_chart.compute_logs(values)["config"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    settings = load_settings({**env, "FM_HOME": "/home/fm/.cache/fm"})
    # `fm` in any pod writes compute logs where the release's instance reads them.
    fm = compute_logs_config(settings)
    assert (rendered["bucket"], rendered["prefix"]) == (fm["bucket"], fm["prefix"])
    assert rendered["endpoint_url"] == fm["endpoint_url"]
    # Static keys: the webserver (which serves the logs) has the same secret as the writers.
    webserver_secrets = {s["name"] for s in values["dagsterWebserver"]["envSecrets"]}
    assert "fm-s3-credentials" in webserver_secrets
    assert "fm-s3-credentials" in helm_chart.run_launcher_config(values)["env_secrets"]
    region = {e["name"]: e["value"] for e in values["dagsterWebserver"]["env"]}["AWS_REGION"]
    assert region == env["AWS_REGION"]


def _deploy_doc_secret(name: str, key: str) -> str:
    text = (REPO / "docs" / "deploy.md").read_text()
    match = re.search(
        rf"create secret generic {name} \\\s*\n\s*--from-literal={key}='([^']+)'", text
    )
    assert match, f"docs/deploy.md creates no secret {name} with {key}"
    return match.group(1)


def test_fm_in_any_pod_uses_the_releases_postgres_instance() -> None:
    from sqlalchemy.engine import make_url

    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert "fm-dagster-pg" in {s["name"] for s in deployment["envSecrets"]}
    assert "fm-dagster-pg" in helm_chart.run_launcher_config(values)["env_secrets"]
    # The URL the docs put in that secret names the database the chart's instance uses.
    url = make_url(_deploy_doc_secret("fm-dagster-pg", "FM_DAGSTER_PG_URL"))
    postgres = values["postgresql"]
    assert url.host == postgres["postgresqlHost"]
    assert url.username == postgres["postgresqlUsername"]
    assert url.database == postgres["postgresqlDatabase"]
    assert url.port == postgres["service"]["port"]


def test_credentials_only_from_secrets() -> None:
    text = VALUES.read_text()
    for name in (
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "RAY_AUTH_TOKEN",
        "FM_CATALOG_URI",
        "FM_DAGSTER_PG_URL",
        "postgresqlPassword",
    ):
        assert not re.search(rf"(?m)^\s*(- name: )?{name}\b", text), name
    values = _values()
    assert values["postgresql"]["enabled"] is False
    assert values["generatePostgresqlPasswordSecret"] is False


def test_every_component_has_its_own_service_account() -> None:
    values = _values()
    pods = helm_chart.pod_specs(values)
    launcher = helm_chart.run_launcher_config(values)
    run_account = launcher["run_k8s_config"]["pod_spec_config"]["serviceAccountName"]
    accounts = {
        "control plane (webserver, daemon)": pods["webserver"]["serviceAccountName"],
        "code location": pods["user-code:fm-assets"]["serviceAccountName"],
        "run pods": run_account,
    }
    assert pods["daemon"]["serviceAccountName"] == accounts["control plane (webserver, daemon)"]
    assert len(set(accounts.values())) == 3, accounts
    assert "serviceAccountName" not in values.get("global", {})


def test_images_are_one_tagged_build(tmp_path: Path) -> None:
    values = _values()
    images = {
        helm_chart._image(values["dagsterWebserver"]["image"]),
        helm_chart._image(values["dagsterDaemon"]["image"]),
        *(helm_chart._image(d["image"]) for d in values["dagster-user-deployments"]["deployments"]),
    }
    assert images == {"REGISTRY/fm-platform:TAG"}
