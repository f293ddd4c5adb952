"""deploy/ validates offline with the tools CI installs (PyPI only, no cluster, no network):

- every YAML file: yamllint (syntax, duplicate keys, indentation);
- core Kubernetes objects (deploy/k8s/): kubernetes-validate --strict against the Kubernetes
  OpenAPI schemas (unknown fields rejected);
- KubeRay RayCluster / RayJob: the v1.7.0 CRDs' openAPIV3Schema from ../shared/data/k8s/
  (jsonschema, plus the API server's pruning rule: a field the schema does not declare is an
  error here), and their pod templates, as Pods, through kubernetes-validate --strict;
- security lint: checkov (offline, --skip-download) on the Dockerfile, the core objects and
  the KubeRay pod templates;
- the Helm values: the same coordinator limits, pools and run retries as dagster.yaml and the
  production instance, credentials only from secrets. The chart itself is not fetched (no
  network in CI): tests/test_helm_values.py renders the instance as its templates do, and
  tests/test_pod_security.py checks the pods it renders against Pod Security `restricted`;
- the bucket policy: each namespace's role confined to its prefixes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO, SHARED_DATA

DEPLOY = REPO / "deploy"
CRDS = SHARED_DATA / "k8s" / "kuberay-v1.7.0"
KUBERAY = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}


def _tool(name: str) -> str:
    """A CLI installed beside this interpreter (.venv/bin) or in .venv-deploy/bin (checkov)."""
    for directory in (Path(sys.executable).parent, REPO / ".venv-deploy" / "bin"):
        if (directory / name).is_file():
            return str(directory / name)
    raise FileNotFoundError(f"{name} is not installed; run `make install` (it installs the tools)")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


def test_every_yaml_file_passes_yamllint() -> None:
    files = sorted(str(p) for p in DEPLOY.rglob("*.yaml"))
    assert len(files) >= 5
    result = _run([_tool("yamllint"), "-c", str(DEPLOY / ".yamllint.yaml"), "--strict", *files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_objects_validate_strictly_against_kubernetes_schemas() -> None:
    files = sorted(str(p) for p in (DEPLOY / "k8s").glob("*.yaml"))
    result = _run([_tool("kubernetes-validate"), "--strict", *files])
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = {d["kind"] for f in files for d in _documents(Path(f))}
    assert {"Namespace", "ServiceAccount", "NetworkPolicy"} <= kinds


def _crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / KUBERAY[kind]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return dict(version["schema"]["openAPIV3Schema"])


def _undeclared_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would prune (declared nowhere in a structural schema)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                found += _undeclared_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += _undeclared_fields(item, extra, f"{path}.{key}")
            elif properties is not None and key not in ("apiVersion", "kind", "metadata"):
                found.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += _undeclared_fields(item, schema["items"], f"{path}[{i}]")
    return found


def _kuberay_manifests() -> list[tuple[Path, dict[str, Any]]]:
    found = [(p, d) for p in sorted((DEPLOY / "kuberay").glob("*.yaml")) for d in _documents(p)]
    assert {d["kind"] for _, d in found} == set(KUBERAY)
    return found


@pytest.mark.parametrize("kind", sorted(KUBERAY))
def test_kuberay_manifests_match_the_v1_7_0_crd_schemas(kind: str) -> None:
    import jsonschema

    schema = _crd_schema(kind)
    for path, manifest in _kuberay_manifests():
        if manifest["kind"] != kind:
            continue
        assert manifest["apiVersion"] == "ray.io/v1", path
        errors = sorted(
            jsonschema.Draft7Validator(schema).iter_errors(manifest), key=lambda e: e.path
        )
        assert [f"{list(e.path)}: {e.message}" for e in errors] == [], path
        assert _undeclared_fields(manifest, schema) == [], f"{path}: fields the CRD lacks"


def _pod_templates() -> list[tuple[str, dict[str, Any]]]:
    pods = []
    for path, manifest in _kuberay_manifests():
        spec = manifest["spec"]
        templates = []
        if manifest["kind"] == "RayCluster":
            templates.append(("head", spec["headGroupSpec"]["template"]))
            templates += [(g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]]
        else:
            templates.append(("submitter", spec["submitterPodTemplate"]))
        for name, template in templates:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{manifest['metadata']['name']}-{name}",
                    "namespace": "fm",
                    **template.get("metadata", {}),
                },
                "spec": template["spec"],
            }
            pods.append((f"{path.name}:{name}", pod))
    return pods


def test_kuberay_pod_templates_are_valid_pods(tmp_path: Path) -> None:
    files = []
    for name, pod in _pod_templates():
        file = tmp_path / f"{name.replace(':', '-').replace('.', '-')}.yaml"
        file.write_text(yaml.safe_dump(pod))
        files.append(str(file))
    assert len(files) == 3  # head, cpu workers, the RayJob's submitter
    result = _run([_tool("kubernetes-validate"), "--strict", *files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_ray_cluster_autoscales_cpu_workers_and_takes_its_token_from_a_secret() -> None:
    (cluster,) = [m for _, m in _kuberay_manifests() if m["kind"] == "RayCluster"]
    spec = cluster["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    (cpu,) = spec["workerGroupSpecs"]
    assert cpu["groupName"] == "cpu" and 1 <= cpu["minReplicas"] <= cpu["replicas"]
    assert cpu["replicas"] <= cpu["maxReplicas"]
    assert spec["authOptions"] == {"mode": "token", "secretName": "fm-ray-auth"}
    import ray

    assert spec["rayVersion"] == ray.__version__, "the cluster must run the image's Ray"
    text = yaml.safe_dump(cluster)
    assert "RAY_AUTH_TOKEN" not in text and "AWS_SECRET_ACCESS_KEY" not in text


def test_checkov_finds_no_security_problem(tmp_path: Path) -> None:
    scan = tmp_path / "scan"
    scan.mkdir()
    for name, pod in _pod_templates():
        (scan / f"{name.replace(':', '-').replace('.', '-')}.yaml").write_text(yaml.safe_dump(pod))
    for path in (DEPLOY / "k8s").glob("*.yaml"):
        (scan / path.name).write_text(path.read_text())
    (scan / "Dockerfile").write_text((DEPLOY / "Dockerfile").read_text())
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    options = ["--config-file", str(DEPLOY / ".checkov.yaml"), "--skip-download", "-o", "json"]
    frameworks = ["--framework", "kubernetes", "dockerfile"]
    result = _run([_tool("checkov"), "-d", str(scan), *frameworks, *options], env=env)
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        f"{c['check_id']} {c['check_name']} in {c['file_path']} {c.get('resource', '')}"
        for report in reports
        for c in report["results"]["failed_checks"]
    ]
    passed = sum(r["summary"]["passed"] for r in reports)
    assert failed == [], "\n".join(failed)
    assert {r["check_type"] for r in reports} == {"kubernetes", "dockerfile"}
    assert passed > 50


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel(k): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def test_helm_values_carry_the_instance_settings_and_no_credentials() -> None:
    from fm_assets.defs.instance import RUN_RETRIES, embedded_config

    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    instance = embedded_config()
    concurrency = dict(values["concurrency"])
    # The chart writes the limits into the instance only when enabled (tests/test_helm_values.py).
    assert concurrency.pop("enabled") is True
    assert concurrency == _camel_keys(instance["concurrency"])
    assert values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"
    retries = values["dagsterDaemon"]["runRetries"]
    assert retries == _camel_keys(RUN_RETRIES)
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "fm_assets.definitions"]
    # Run pods get their settings from the run launcher (tests/test_helm_values.py).
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is False
    assert deployment["image"]["tag"] != "latest"
    env = {e["name"]: e["value"] for e in deployment["env"]}
    assert env["FM_OBJECT_STORE"].startswith("s3://") and env["RAY_ADDRESS"].startswith("ray://")
    secret_names = {"FM_CATALOG_URI", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"}
    assert secret_names.isdisjoint(env) and "RAY_AUTH_TOKEN" not in env
    assert {s["name"] for s in deployment["envSecrets"]} == {
        "fm-catalog",
        "fm-dagster-pg",
        "fm-s3-credentials",
        "fm-ray-auth",
    }
    postgres = values["postgresql"]
    assert postgres["enabled"] is False and "postgresqlPassword" not in postgres
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    logs = values["computeLogManager"]
    assert logs["type"] == "S3ComputeLogManager" and logs["config"]["s3ComputeLogManager"]["bucket"]


def test_bucket_policy_confines_each_namespace_to_its_prefixes() -> None:
    policy = json.loads((DEPLOY / "iam" / "bucket-policy.example.json").read_text())
    assert policy["Version"] == "2012-10-17"
    grants: dict[str, set[str]] = {}
    for statement in policy["Statement"]:
        assert {"Sid", "Effect", "Principal", "Action"} <= set(statement)
        assert len({"Resource", "NotResource"} & set(statement)) == 1, statement["Sid"]
        resources = statement.get("Resource", statement.get("NotResource"))
        resources = resources if isinstance(resources, list) else [resources]
        assert all(r.startswith("arn:aws:s3:::fm-data") for r in resources), statement["Sid"]
        if statement["Effect"] == "Allow":
            assert statement["Principal"] != "*", statement["Sid"]
            role = statement["Principal"]["AWS"].rsplit("/", 1)[-1]
            prefixes = {r.removeprefix("arn:aws:s3:::fm-data/") for r in resources}
            prefixes |= set(
                statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix", [])
            )
            grants.setdefault(role, set()).update(prefixes - {"arn:aws:s3:::fm-data"})
    assert grants["fm-platform-prod"] == {"prod/*", "prod-warehouse/*"}
    assert grants["fm-platform-staging"] == {"staging/*", "staging-warehouse/*"}
    assert grants["fm-trainers"] == {
        "prod/shards/*",
        "prod/texts/*",
        "prod-warehouse/fm/shard_sets/*",
        "prod-warehouse/fm/text_sets/*",
    }
    # Ray workers read their deployment's prefixes and create table data files, nothing else
    # (what they may not do is tests/test_namespace_bucket_policy.py's and, enforced by a real
    # store, tests/test_storage_identities.py's).
    assert grants["fm-ray-workers-prod"] == {
        "prod/*",
        "prod-warehouse/*",
        "prod-warehouse/*/data/*",
    }
