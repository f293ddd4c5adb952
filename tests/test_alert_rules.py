"""The example alert rules (deploy/prometheus/alerts.yaml), checked by Prometheus's own tool:
`promtool check rules` parses every PromQL expression and template, and `promtool test rules`
replays series into the rules and compares the alerts that fire, with their labels and rendered
annotations, to each case below: each alert fires on the situation it names and stays quiet on
a healthy one. promtool comes from Debian's `prometheus` package (`make install-system`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO

RULES = REPO / "deploy" / "prometheus" / "alerts.yaml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        raise FileNotFoundError(
            "promtool is not installed: `make install-system` installs Debian's prometheus "
            "package, which ships it"
        )
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120)


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _render(template: str, labels: dict[str, str], value: float) -> str:
    """The annotation Prometheus renders: `{{ $labels.NAME }}` and `{{ $value }}` only."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return text.replace("{{ $value }}", f"{value:g}")


def _case(
    alert: str,
    series: dict[str, str],
    at: str,
    firing: list[tuple[dict[str, str], float]],
    quiet_at: str | None = None,
) -> dict[str, Any]:
    """A promtool test: `series` (selector -> values, one a minute), the alerts expected at
    `at` (their labels and value), and none at `quiet_at`."""
    rule = _rules()[alert]
    expected = []
    for labels, value in firing:
        every = {**labels, **rule.get("labels", {})}
        annotations = {k: _render(v, every, value) for k, v in rule["annotations"].items()}
        expected.append({"exp_labels": every, "exp_annotations": annotations})
    checks = [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]
    if quiet_at:
        checks.append({"eval_time": quiet_at, "alertname": alert, "exp_alerts": []})
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": checks,
    }


CASES = {
    "FmMetricsDown": _case(
        "FmMetricsDown",
        {'up{job="fm-metrics", instance="m:9464"}': "1 1 0x30"},
        "25m",
        [({"job": "fm-metrics", "instance": "m:9464"}, 0)],
        quiet_at="5m",
    ),
    "FmMetricsSourceDown": _case(
        "FmMetricsSourceDown",
        {
            'fm_metrics_source_up{source="catalog"}': "1 0x30",
            'fm_metrics_source_up{source="dagster"}': "1x30",
        },
        "20m",
        [({"source": "catalog"}, 0)],
        quiet_at="5m",
    ),
    "FmRunQueueBacklog": _case(
        "FmRunQueueBacklog",
        {'fm_dagster_runs{status="QUEUED"}': "25x60", 'fm_dagster_runs{status="STARTED"}': "40x60"},
        "45m",
        [({"status": "QUEUED"}, 25)],
        quiet_at="20m",  # not yet 30 minutes
    ),
    "FmQueuedRunStuck": _case(
        "FmQueuedRunStuck",
        {"fm_dagster_oldest_queued_run_age_seconds": "0+600x40"},  # waits on: 10 min a minute
        "35m",
        [({}, 21000)],
        quiet_at="15m",
    ),
    "FmStageFailing": _case(
        "FmStageFailing",
        {
            'fm_stage_failures_total{stage="raw_documents"}': "0 0 0 1x20",
            'fm_stage_failures_total{stage="tokenized_documents"}': "2x20",  # old failures
        },
        "10m",
        [({"stage": "raw_documents"}, 1)],
    ),
    "FmStageSlow": _case(
        "FmStageSlow",
        {
            # near dedup: every run between 2 and 4 hours; tokenize: every run under a minute
            'fm_stage_duration_seconds_bucket{stage="near_deduplicated_documents", le="60"}': (
                "0x420"
            ),
            'fm_stage_duration_seconds_bucket{stage="near_deduplicated_documents", le="7200"}': (
                "0x420"
            ),
            'fm_stage_duration_seconds_bucket{stage="near_deduplicated_documents", le="14400"}': (
                "0+1x420"
            ),
            'fm_stage_duration_seconds_bucket{stage="near_deduplicated_documents", le="+Inf"}': (
                "0+1x420"
            ),
            'fm_stage_duration_seconds_bucket{stage="tokenized_documents", le="60"}': "0+1x420",
            'fm_stage_duration_seconds_bucket{stage="tokenized_documents", le="7200"}': "0+1x420",
            'fm_stage_duration_seconds_bucket{stage="tokenized_documents", le="14400"}': "0+1x420",
            'fm_stage_duration_seconds_bucket{stage="tokenized_documents", le="+Inf"}': "0+1x420",
        },
        "7h",
        [({"stage": "near_deduplicated_documents"}, 14040)],
    ),
    "FmQuarantineSpike": _case(
        "FmQuarantineSpike",
        {
            'fm_stage_records_total{stage="quality_filtered_documents", outcome="in"}': "0+100x420",
            'fm_stage_records_total{stage="quality_filtered_documents", outcome="quarantined"}': (
                "0+60x420"
            ),
            'fm_stage_records_total{stage="raw_documents", outcome="in"}': "0+100x420",
            'fm_stage_records_total{stage="raw_documents", outcome="quarantined"}': "0+5x420",
        },
        "7h",
        [({"stage": "quality_filtered_documents"}, 0.6)],
    ),
    "FmCheckFailing": _case(
        "FmCheckFailing",
        {
            'fm_check_failing_partitions{asset="raw_documents", check="records_accounted_for"}': (
                "0 0 1x40"
            ),
            'fm_check_failing_partitions{asset="shard_set", check="shard_set_checksums"}': "0x40",
        },
        "25m",
        [({"asset": "raw_documents", "check": "records_accounted_for"}, 1)],
        quiet_at="10m",
    ),
    "FmNothingCommitted": _case(
        "FmNothingCommitted",
        {
            # the last commit at the epoch's second 0, runs running all along
            'fm_stage_last_commit_timestamp_seconds{stage="raw_documents"}': "0x480",
            'fm_dagster_runs{status="STARTED"}': "1x480",
            'fm_dagster_runs{status="QUEUED"}': "0x480",
        },
        "7h",
        [({}, 25200)],
        quiet_at="6h15m",  # stalled for 6 hours, but not yet for 30 minutes more
    ),
    "FmLoaderStalled": _case(
        "FmLoaderStalled",
        {
            # rank 0 waits half of every minute, rank 1 a second a minute
            'fm_loader_wait_seconds_total{instance="t:9400", rank="0"}': "0+30x60",
            'fm_loader_elapsed_seconds_total{instance="t:9400", rank="0"}': "0+60x60",
            'fm_loader_wait_seconds_total{instance="t:9400", rank="1"}': "0+1x60",
            'fm_loader_elapsed_seconds_total{instance="t:9400", rank="1"}': "0+60x60",
        },
        "40m",
        [({"instance": "t:9400", "rank": "0"}, 0.5)],
        quiet_at="15m",
    ),
}


def test_promtool_accepts_every_rule() -> None:
    result = _run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_rules())} rules found" in result.stdout


def test_every_alert_has_a_case() -> None:
    assert set(CASES) == set(_rules())


@pytest.mark.parametrize("alert", sorted(CASES))
def test_each_alert_fires_on_its_situation_only(alert: str, tmp_path: Path) -> None:
    tests = tmp_path / "alerts.test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [CASES[alert]]}
        )
    )
    result = _run("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
