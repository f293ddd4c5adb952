"""What the official Dagster Helm chart (1.13 line) renders from deploy/helm/values.yaml, for
the parts the platform relies on. No `helm` binary and no chart download are possible here, so
these functions follow the chart's templates in the dagster-io/dagster repository
(helm/dagster/...) line by line, each naming the template it follows:

- the instance's `concurrency` and `run_coordinator`:
  templates/helpers/instance/_concurrency.tpl, _run-coordinator.tpl, and configmap-instance.yaml
  (concurrency is written only when `concurrency.enabled`; the chart's own schema_tests/
  test_concurrency.py asserts that);
- the run launcher and compute logs: _run-launcher.tpl (K8sRunLauncher), _compute-log-manager.tpl;
- the pod specs of the webserver (helpers/_deployment-webserver.tpl), the daemon
  (deployment-daemon.yaml) and the code location (charts/dagster-user-deployments/templates/
  deployment-user.yaml), with the init containers the chart adds;
- the service accounts and Roles the chart creates (serviceaccount.yaml, role.yaml,
  rolebinding.yaml, and the subchart's).

Only what those templates do with the keys our values set is reproduced; nothing is invented.
"""

from __future__ import annotations

from typing import Any

RELEASE = "dagster"  # `helm upgrade --install dagster dagster/dagster` (docs/deploy.md)


def _set(value: Any) -> bool:
    """Helm's `not (kindIs "invalid" x)`: the key is present and not null."""
    return value is not None


def concurrency(values: dict[str, Any]) -> dict[str, Any] | None:
    """The instance's `concurrency:` block (None: the chart writes none)."""
    settings = values.get("concurrency") or {}
    if not settings.get("enabled"):
        return None
    pools, runs = settings.get("pools") or {}, settings.get("runs") or {}
    rendered: dict[str, Any] = {}
    if _set(pools.get("defaultLimit")) or pools.get("granularity"):
        rendered["pools"] = {}
        if _set(pools.get("defaultLimit")):
            rendered["pools"]["default_limit"] = pools["defaultLimit"]
        if pools.get("granularity"):
            rendered["pools"]["granularity"] = pools["granularity"]
    if _set(pools.get("opGranularityRunBuffer")):
        rendered.setdefault("pools", {})["op_granularity_run_buffer"] = pools[
            "opGranularityRunBuffer"
        ]
    limits = runs.get("tagConcurrencyLimits") or []
    if _set(runs.get("maxConcurrentRuns")) or limits:
        rendered["runs"] = {}
        if _set(runs.get("maxConcurrentRuns")):
            rendered["runs"]["max_concurrent_runs"] = runs["maxConcurrentRuns"]
        if limits:
            rendered["runs"]["tag_concurrency_limits"] = [
                {
                    "key": t["key"],
                    **({"value": t["value"]} if t.get("value") else {}),
                    "limit": t["limit"],
                }
                for t in limits
            ]
    return rendered


def run_coordinator(values: dict[str, Any]) -> dict[str, Any] | None:
    """The instance's `run_coordinator:` block (QueuedRunCoordinator)."""
    daemon = values.get("dagsterDaemon") or {}
    coordinator = daemon.get("runCoordinator") or {}
    if not (daemon.get("enabled") and coordinator.get("enabled")):
        return None
    if coordinator.get("type") != "QueuedRunCoordinator":
        raise ValueError("only the QueuedRunCoordinator is modelled")
    qrc = (coordinator.get("config") or {}).get("queuedRunCoordinator") or {}
    concurrency_enabled = bool((values.get("concurrency") or {}).get("enabled"))
    rendered: dict[str, Any] = {
        "module": "dagster.core.run_coordinator",
        "class": "QueuedRunCoordinator",
    }
    if not any(v for v in qrc.values() if v not in (None, "", [], {})):
        return rendered
    config: dict[str, Any] = {}
    if not concurrency_enabled or _set(qrc.get("maxConcurrentRuns")):
        config["max_concurrent_runs"] = qrc.get("maxConcurrentRuns", -1)
    if qrc.get("tagConcurrencyLimits"):
        config["tag_concurrency_limits"] = qrc["tagConcurrencyLimits"]
    if qrc.get("dequeueIntervalSeconds"):
        config["dequeue_interval_seconds"] = qrc["dequeueIntervalSeconds"]
    rendered["config"] = config
    return rendered


def run_launcher_config(values: dict[str, Any], namespace: str = "fm") -> dict[str, Any]:
    """The K8sRunLauncher's `config:` (_run-launcher.tpl, dagsterYaml.runLauncher.k8s)."""
    launcher = values["runLauncher"]
    if launcher["type"] != "K8sRunLauncher":
        raise ValueError("only the K8sRunLauncher is modelled")
    k8s = launcher["config"]["k8sRunLauncher"]
    config: dict[str, Any] = {
        "load_incluster_config": k8s["loadInclusterConfig"],
        "job_namespace": k8s.get("jobNamespace") or namespace,
        "image_pull_policy": k8s.get("imagePullPolicy"),
        "service_account_name": service_account_name(values),
        "dagster_home": "/opt/dagster/dagster_home",
        "instance_config_map": f"{RELEASE}-instance",
        "postgres_password_secret": values["global"]["postgresqlSecretName"],
    }
    if k8s.get("envSecrets"):
        config["env_secrets"] = [s["name"] for s in k8s["envSecrets"] if "name" in s]
    for key, name in (
        ("envVars", "env_vars"),
        ("volumeMounts", "volume_mounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
        ("securityContext", "security_context"),
    ):
        if k8s.get(key):
            config[name] = k8s[key]
    run_k8s = k8s.get("runK8sConfig") or {}
    if run_k8s:
        config["run_k8s_config"] = {
            snake: run_k8s[camel]
            for camel, snake in (
                ("containerConfig", "container_config"),
                ("podSpecConfig", "pod_spec_config"),
                ("podTemplateSpecMetadata", "pod_template_spec_metadata"),
                ("jobSpecConfig", "job_spec_config"),
                ("jobMetadata", "job_metadata"),
            )
            if run_k8s.get(camel)
        }
    return config


def compute_logs(values: dict[str, Any]) -> dict[str, Any]:
    """The instance's `compute_logs:` (_compute-log-manager.tpl, S3ComputeLogManager)."""
    manager = values["computeLogManager"]
    if manager["type"] != "S3ComputeLogManager":
        raise ValueError("only the S3ComputeLogManager is modelled")
    s3 = manager["config"]["s3ComputeLogManager"]
    config: dict[str, Any] = {"bucket": s3["bucket"], "verify": s3.get("verify") is not False}
    for camel, snake in (
        ("localDir", "local_dir"),
        ("prefix", "prefix"),
        ("useSsl", "use_ssl"),
        ("endpointUrl", "endpoint_url"),
        ("skipEmptyFiles", "skip_empty_files"),
        ("uploadInterval", "upload_interval"),
        ("region", "region"),
    ):
        if s3.get(camel):
            config[snake] = s3[camel]
    return {
        "module": "dagster_aws.s3.compute_log_manager",
        "class": "S3ComputeLogManager",
        "config": config,
    }


def service_account_name(values: dict[str, Any]) -> str:
    """_helpers.tpl dagster.serviceAccountName: webserver, daemon, run launcher default."""
    return (
        (values.get("global") or {}).get("serviceAccountName")
        or (values.get("serviceAccount") or {}).get("name")
        or f"{RELEASE}-dagster"
    )


def user_code_service_account_name(values: dict[str, Any]) -> str:
    """The subchart's dagsterUserDeployments.serviceAccountName."""
    sub = values.get("dagster-user-deployments") or {}
    return (
        (values.get("global") or {}).get("serviceAccountName")
        or (sub.get("serviceAccount") or {}).get("name")
        or f"{RELEASE}-dagster-user-deployments"
    )


def created_objects(values: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of the service accounts and RBAC objects the chart creates in the namespace."""
    created = set()
    if (values.get("serviceAccount") or {}).get("create", True):
        created.add(("ServiceAccount", service_account_name(values)))
    if values.get("rbacEnabled", True):
        created |= {
            ("Role", f"{RELEASE}-dagster-role"),
            ("RoleBinding", f"{RELEASE}-dagster-rolebinding"),
        }
    sub = values.get("dagster-user-deployments") or {}
    if sub.get("enabled") and sub.get("enableSubchart"):
        global_name = (values.get("global") or {}).get("serviceAccountName")
        if (sub.get("serviceAccount") or {}).get("create", True) and not global_name:
            created.add(("ServiceAccount", user_code_service_account_name(values)))
        if sub.get("rbacEnabled", True):
            created |= {
                ("Role", f"{RELEASE}-dagster-role"),
                ("RoleBinding", f"{RELEASE}-dagster-rolebinding"),
            }
    return created


def _image(image: dict[str, Any]) -> str:
    return f"{image['repository']}:{image['tag']}"


def _init_containers(values: dict[str, Any], security: dict[str, Any]) -> list[dict[str, Any]]:
    """check-db-ready (postgresql.image) and, per code location, a busybox wait."""
    inits = [
        {
            "name": "check-db-ready",
            "image": _image(values["postgresql"]["image"]),
            "securityContext": security,
        }
    ]
    sub = values.get("dagster-user-deployments") or {}
    if sub.get("enabled") and sub.get("enableSubchart"):
        for deployment in sub["deployments"]:
            inits.append(
                {
                    "name": f"init-user-deployment-{deployment['name']}",
                    "image": _image(values["busybox"]["image"]),
                    "securityContext": security,
                }
            )
    return inits


def _volumes(component: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "dagster-instance", "configMap": {"name": f"{RELEASE}-instance"}},
        {"name": "dagster-workspace-yaml", "configMap": {"name": f"{RELEASE}-workspace-yaml"}},
        *(component.get("volumes") or []),
    ]


def pod_specs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The PodSpec of each long-running Dagster component, as the chart renders it."""
    pods: dict[str, dict[str, Any]] = {}
    for name, key in (("webserver", "dagsterWebserver"), ("daemon", "dagsterDaemon")):
        component = values[key]
        security = component.get("securityContext") or {}
        pods[name] = {
            "serviceAccountName": service_account_name(values),
            "securityContext": component.get("podSecurityContext") or {},
            "initContainers": _init_containers(values, security),
            "containers": [
                {
                    "name": "dagster",
                    "image": _image(component["image"]),
                    "securityContext": security,
                }
            ],
            "volumes": _volumes(component),
        }
    for deployment in values["dagster-user-deployments"]["deployments"]:
        pods[f"user-code:{deployment['name']}"] = {
            "serviceAccountName": user_code_service_account_name(values),
            "securityContext": deployment.get("podSecurityContext") or {},
            "containers": [
                {
                    "name": "dagster-user-deployments",
                    "image": _image(deployment["image"]),
                    "securityContext": deployment.get("securityContext") or {},
                    "ports": [],
                }
            ],
            "volumes": deployment.get("volumes") or [],
        }
    return pods
