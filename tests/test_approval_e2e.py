"""Quarantined batches stop after validation until a person approves them; rejected ones never
reach the curated tables; every decision is audited. The data is a small JSONL the test writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.approvals import AwaitingApproval, decisions
from tests.conftest import NEOX_TOKENIZER
from tests.policies import OPT_OUT, opt_out_policy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def settings(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    home = tmp_path_factory.mktemp("approval") / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_USER", "FM_POLICY_FILE")}
    os.environ |= {"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "FM_USER": "bob"}
    # The posts repeat one sentence: the subject here is approval, not curation.
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(home.parent))
    s = load_settings()
    register_tokenizer(s, NEOX_TOKENIZER, make_default=True)
    yield s
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _land(settings: Settings, path: Path, topic: str) -> str:
    path.write_text(
        "".join(
            json.dumps({"text": f"A forum post about {topic}, number {i}. " * 30}) + "\n"
            for i in range(5)
        )
    )
    batch, _ = operations.land(
        settings, [path], source="forum", license="unknown", namespace="quarantine"
    )
    return batch.batch_id


def _rows(settings: Settings, table: str, batch_id: str) -> int:
    return catalog.read_batch(settings, table, batch_id, columns=("doc_id",)).num_rows


def test_a_quarantined_batch_waits_after_validation_until_approved(
    settings: Settings, tmp_path: Path
) -> None:
    batch = _land(settings, tmp_path / "posts.jsonl", "kites")
    with pytest.raises(AwaitingApproval, match=f"fm approve {batch} --reason"):
        operations.run_batch(settings, batch, lambda message: None)
    assert _rows(settings, pipeline.STAGE_NAMES[0], batch) == 5  # validated
    assert _rows(settings, pipeline.STAGE_NAMES[-1], batch) == 0  # not curated

    result = CliRunner().invoke(main, ["approve", batch, "--reason", "read every post"])
    assert result.exit_code == 0, result.output
    assert _rows(settings, pipeline.STAGE_NAMES[-1], batch) > 0
    (decision,) = decisions(settings, batch)
    assert (decision["decision"], decision["decided_by"], decision["reason"]) == (
        "approved",
        "bob",
        "read every post",
    )


def test_a_rejected_batch_never_reaches_the_curated_tables(
    settings: Settings, tmp_path: Path
) -> None:
    batch = _land(settings, tmp_path / "spam.jsonl", "cheap watches")
    result = CliRunner().invoke(main, ["approve", batch, "--reject", "--reason", "spam"])
    assert result.exit_code == 0, result.output
    with pytest.raises(ValueError, match=r"rejected by bob .*\(spam\)"):
        operations.run_batch(settings, batch, lambda message: None)
    result = CliRunner().invoke(main, ["run", "--batch", batch])
    assert result.exit_code == 1 and "never reaches the curated tables" in result.stderr
    for stage in pipeline.STAGE_NAMES[1:]:
        assert _rows(settings, stage, batch) == 0


def test_a_source_the_policy_marks_untrusted_waits_and_is_approved_in_the_ui(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    from fm_assets.defs.approval import build_approved_batch_sensor, decide_quarantined_batch
    from fm_assets.defs.jobs import BATCH_JOBS
    from fm_assets.defs.resources import FmPlatform

    policy = tmp_path / "policy.toml"
    policy.write_text(OPT_OUT + '[approval]\nuntrusted_sources = ["forum-scrape"]\n')
    monkeypatch.setenv("FM_POLICY_FILE", str(policy))
    strict = load_settings()
    path = tmp_path / "scraped.jsonl"
    path.write_text(json.dumps({"text": "A scraped forum post about ferns. " * 30}) + "\n")
    landed, _ = operations.land(strict, [path], source="forum-scrape", license="unknown")
    batch = landed.batch_id  # the namespace is the default, cloud: the source makes it wait
    with pytest.raises(AwaitingApproval, match="source 'forum-scrape', which the policy marks"):
        operations.run_batch(strict, batch, lambda message: None)
    # Validated, not curated.
    assert _rows(strict, pipeline.STAGE_NAMES[-1], batch) == 0

    # A data engineer launches the decision job from the UI; its success requests the run.
    instance = dg.DagsterInstance.get()
    decision = {"batch_id": batch, "approve": True, "reason": "moderated", "decided_by": "ana"}
    result = decide_quarantined_batch.execute_in_process(
        run_config={"ops": {"record_batch_decision": {"config": decision}}},
        resources={"fm": FmPlatform()},
        instance=instance,
    )
    assert result.success
    assert [(d["decision"], d["decided_by"]) for d in decisions(strict, batch)] == [
        ("approved", "ana")
    ]
    sensor = build_approved_batch_sensor(BATCH_JOBS)
    request = sensor(
        dg.build_run_status_sensor_context(
            sensor_name=sensor.name,
            dagster_event=result.get_run_success_event(),
            dagster_instance=instance,
            dagster_run=result.dagster_run,
            resources={"fm": FmPlatform()},
        )
    )
    assert isinstance(request, dg.RunRequest) and request.partition_key == batch
    assert request.job_name == "process_landing_batch"  # the job of the batch's modality
    operations.run_batch(strict, batch, lambda message: None)  # what the requested run does
    assert _rows(strict, pipeline.STAGE_NAMES[-1], batch) == 1
