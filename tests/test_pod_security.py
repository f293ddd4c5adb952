"""Admission, offline: every pod the platform makes passes Pod Security `restricted`
(tests/pod_security.py), KubeRay's controller accepts the RayCluster and RayJob
(tests/kuberay_rules.py), and no object is created twice (by the chart or KubeRay and by
deploy/k8s/). The checkers are themselves shown to reject known-bad specs.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import helm_chart
from tests.kuberay_rules import raycluster_errors, rayjob_errors
from tests.paths import REPO
from tests.pod_security import violations

DEPLOY = REPO / "deploy"
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: fm}}]
current-context: x
"""


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kuberay(kind: str) -> dict[str, Any]:
    (found,) = [
        d for p in (DEPLOY / "kuberay").glob("*.yaml") for d in _docs(p) if d["kind"] == kind
    ]
    return found


def _values() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text()))


GOOD: dict[str, Any] = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "c",
            "image": "i",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [{"name": "tmp", "emptyDir": {}}],
}


def _bad(change: str) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    container = spec["containers"][0]
    sc = container["securityContext"]
    pod = spec["securityContext"]
    if change == "hostNetwork":
        spec["hostNetwork"] = True
    elif change == "hostPID":
        spec["hostPID"] = True
    elif change == "hostPath":
        spec["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    elif change == "nfs volume":
        spec["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}})
    elif change == "hostPort":
        container["ports"] = [{"containerPort": 80, "hostPort": 80}]
    elif change == "privileged":
        sc["privileged"] = True
    elif change == "escalation allowed":
        sc["allowPrivilegeEscalation"] = True
    elif change == "escalation unset":
        del sc["allowPrivilegeEscalation"]
    elif change == "root allowed":
        del pod["runAsNonRoot"]
    elif change == "container overrides non-root":
        sc["runAsNonRoot"] = False
    elif change == "uid 0":
        sc["runAsUser"] = 0
    elif change == "no numeric user":
        del pod["runAsUser"]
    elif change == "no seccomp":
        del pod["seccompProfile"]
    elif change == "seccomp unconfined":
        sc["seccompProfile"] = {"type": "Unconfined"}
    elif change == "capabilities kept":
        del sc["capabilities"]
    elif change == "SYS_ADMIN added":
        sc["capabilities"]["add"] = ["SYS_ADMIN"]
    elif change == "unsafe sysctl":
        pod["sysctls"] = [{"name": "kernel.msgmax", "value": "1"}]
    elif change == "procMount":
        sc["procMount"] = "Unmasked"
    elif change == "init container as root":
        spec["initContainers"] = [{"name": "init", "image": "i"}]
    return spec


@pytest.mark.parametrize(
    "change",
    [
        "hostNetwork",
        "hostPID",
        "hostPath",
        "nfs volume",
        "hostPort",
        "privileged",
        "escalation allowed",
        "escalation unset",
        "root allowed",
        "container overrides non-root",
        "uid 0",
        "no numeric user",
        "no seccomp",
        "seccomp unconfined",
        "capabilities kept",
        "SYS_ADMIN added",
        "unsafe sysctl",
        "procMount",
        "init container as root",
    ],
)
def test_checker_rejects_each_published_violation(change: str) -> None:
    assert violations(GOOD) == []
    assert violations(_bad(change)), f"{change} was admitted"


def test_checker_admits_net_bind_service_and_allowed_volumes() -> None:
    spec = copy.deepcopy(GOOD)
    spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    spec["volumes"] += [
        {"name": "p", "projected": {"sources": []}},
        {"name": "s", "secret": {"secretName": "x"}},
    ]
    assert violations(spec) == []


def _head_pod(cluster: dict[str, Any]) -> dict[str, Any]:
    """The head pod as KubeRay builds it: the template plus the autoscaler sidecar, made from
    autoscalerOptions (BuildAutoscalerContainer + mergeAutoscalerOverrides, common/pod.go)."""
    spec = copy.deepcopy(cluster["spec"]["headGroupSpec"]["template"]["spec"])
    options = cluster["spec"].get("autoscalerOptions") or {}
    if cluster["spec"].get("enableInTreeAutoscaling"):
        spec["containers"].append(
            {
                "name": "autoscaler",
                "image": spec["containers"][0]["image"],
                "securityContext": options.get("securityContext") or {},
                "volumeMounts": options.get("volumeMounts") or [],
            }
        )
    return spec


def _worker_pod(group: dict[str, Any]) -> dict[str, Any]:
    """A worker pod as KubeRay builds it: the template plus the `wait-gcs-ready` init container,
    which copies the Ray container's image and securityContext (DefaultWorkerPodTemplate)."""
    spec = copy.deepcopy(group["template"]["spec"])
    ray = spec["containers"][0]
    init = {
        "name": "wait-gcs-ready",
        "image": ray["image"],
        "securityContext": copy.deepcopy(ray.get("securityContext") or {}),
    }
    spec["initContainers"] = [init, *(spec.get("initContainers") or [])]
    return spec


def _run_pod_spec() -> dict[str, Any]:
    """A run pod's spec as dagster-k8s's K8sRunLauncher builds it from the rendered config."""
    import kubernetes
    from dagster import DagsterRun
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import construct_dagster_k8s_job

    config = helm_chart.run_launcher_config(_values())
    # No API server here: a kubeconfig naming an unreachable one (only parsed, never called).
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG)
        config.update(load_incluster_config=False, kubeconfig_file=str(kubeconfig))
        processed = process_config(K8sRunLauncher.config_type(), config)
        assert processed.success, processed.errors
        launcher = K8sRunLauncher(**dict(processed.value or {}))
    run = DagsterRun(job_name="landing_batch_job", run_id="0123abcd-0000-0000-0000-000000000000")
    context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=False)
    job_config = context.get_k8s_job_config(
        job_image="REGISTRY/fm-platform:TAG", run_launcher=launcher
    )
    job = construct_dagster_k8s_job(
        job_config=job_config,
        args=["dagster", "api", "execute_run", "{}"],
        job_name="dagster-run-0123abcd",
        user_defined_k8s_config=context.run_k8s_config,
        component="run_worker",
    )
    serialized = kubernetes.client.ApiClient().sanitize_for_serialization(job)
    return dict(serialized["spec"]["template"]["spec"])


def _every_pod() -> dict[str, dict[str, Any]]:
    cluster, job = _kuberay("RayCluster"), _kuberay("RayJob")
    pods = {"ray head": _head_pod(cluster)}
    for group in cluster["spec"]["workerGroupSpecs"]:
        pods[f"ray worker {group['groupName']}"] = _worker_pod(group)
    pods["rayjob submitter"] = job["spec"]["submitterPodTemplate"]["spec"]
    for name, spec in helm_chart.pod_specs(_values()).items():
        pods[f"dagster {name}"] = spec
    pods["dagster run pod"] = _run_pod_spec()
    for manifest in ("ui-auth.yaml", "metrics.yaml"):
        for doc in _docs(DEPLOY / "k8s" / manifest):
            if doc["kind"] == "Deployment":
                pods[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    return pods


def test_every_pod_the_platform_makes_passes_restricted() -> None:
    pods = _every_pod()
    assert len(pods) == 9
    failures = {name: violations(spec) for name, spec in pods.items()}
    assert {name: found for name, found in failures.items() if found} == {}


def test_run_pods_run_as_their_own_account_without_a_token() -> None:
    spec = _run_pod_spec()
    assert spec["serviceAccountName"] == "fm-dagster-run"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert {e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e} >= {
        "fm-catalog",
        "fm-dagster-pg",
        "fm-s3-credentials",
        "fm-ray-auth",
    }


def _secret_refs(spec: dict[str, Any]) -> set[str]:
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    found = {e["secretRef"]["name"] for c in containers for e in c.get("envFrom", [])}
    found |= {
        e["valueFrom"]["secretKeyRef"]["name"]
        for c in containers
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    return found


def test_ray_pods_hold_the_workers_s3_identity_and_dagster_the_control_planes() -> None:
    """Ray workers parse untrusted input: their S3 identity creates data files and deletes
    nothing (deploy/iam/); the head, which every Ray pod can reach with the cluster's token,
    holds no more. Only Dagster's pods hold the keys that commit and delete."""
    cluster = _kuberay("RayCluster")
    ray_pods = {"head": _head_pod(cluster)}
    for group in cluster["spec"]["workerGroupSpecs"]:
        ray_pods[group["groupName"]] = _worker_pod(group)
    for name, spec in ray_pods.items():
        refs = _secret_refs(spec)
        assert "fm-s3-worker-credentials" in refs and "fm-s3-credentials" not in refs, name
    submitter = _kuberay("RayJob")["spec"]["submitterPodTemplate"]["spec"]
    assert not {"fm-s3-credentials", "fm-s3-worker-credentials"} & _secret_refs(submitter)
    run_pod = _secret_refs(_run_pod_spec())
    assert "fm-s3-credentials" in run_pod and "fm-s3-worker-credentials" not in run_pod
    assert "fm-s3-worker-credentials" not in (DEPLOY / "helm" / "values.yaml").read_text()


def test_only_the_autoscaler_holds_the_heads_api_token() -> None:
    from ray.autoscaler._private.kuberay import node_provider

    cluster = _kuberay("RayCluster")
    head = _head_pod(cluster)
    assert head["automountServiceAccountToken"] is False
    ray_container, autoscaler = head["containers"]
    token_dir = str(Path(node_provider.IN_CLUSTER_TOKEN_PATH).parent)
    assert str(Path(node_provider.IN_CLUSTER_CA_CERT_PATH).parent) == token_dir
    (mount,) = [m for m in autoscaler["volumeMounts"] if m["mountPath"] == token_dir]
    (volume,) = [v for v in head["volumes"] if v["name"] == mount["name"]]
    sources = volume["projected"]["sources"]
    paths = {"token"} & {s.get("serviceAccountToken", {}).get("path") for s in sources}
    paths |= {
        i["path"]
        for s in sources
        for i in (s.get("configMap") or s.get("downwardAPI") or {}).get("items", [])
    }
    assert paths == {"token", "ca.crt", "namespace"}
    assert mount["name"] not in {m["name"] for m in ray_container.get("volumeMounts", [])}
    for group in cluster["spec"]["workerGroupSpecs"]:
        worker = group["template"]["spec"]
        assert worker["automountServiceAccountToken"] is False
        assert not any("projected" in v for v in worker.get("volumes", []))


def test_kuberay_accepts_the_cluster_and_the_job() -> None:
    assert raycluster_errors(_kuberay("RayCluster")) == []
    assert rayjob_errors(_kuberay("RayJob")) == []


def test_kuberay_rules_reject_what_the_operator_rejects() -> None:
    job = _kuberay("RayJob")
    shipped_before = copy.deepcopy(job)
    shipped_before["spec"]["ttlSecondsAfterFinished"] = 86400
    del shipped_before["spec"]["shutdownAfterJobFinishes"]
    assert any("TTLSecondsAfterFinished" in e for e in rayjob_errors(shipped_before))
    no_target = copy.deepcopy(job)
    del no_target["spec"]["clusterSelector"]
    assert any("RayClusterSpec or ClusterSelector" in e for e in rayjob_errors(no_target))
    long_name = copy.deepcopy(job)
    long_name["metadata"]["name"] = "x" * 48
    assert rayjob_errors(long_name)
    cluster = _kuberay("RayCluster")
    old_ray = copy.deepcopy(cluster)
    old_ray["spec"]["rayVersion"] = "2.51.0"
    assert any("2.52.0" in e for e in raycluster_errors(old_ray))
    both = copy.deepcopy(cluster)
    both["spec"]["workerGroupSpecs"][0]["rayStartParams"] = {"num-cpus": "4"}
    both["spec"]["workerGroupSpecs"][0]["resources"] = {"CPU": "4"}
    assert any("rayStartParams and Resources" in e for e in raycluster_errors(both))


def test_ray_cluster_upgrades_all_at_once() -> None:
    assert _kuberay("RayCluster")["spec"]["upgradeStrategy"] == {"type": "Recreate"}


def _core_objects() -> list[dict[str, Any]]:
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in _docs(p)]


def test_no_object_is_created_twice() -> None:
    values = _values()
    ours = [(d["kind"], d["metadata"]["name"]) for d in _core_objects()]
    assert len(ours) == len(set(ours)), "deploy/k8s/ creates an object twice"
    chart = helm_chart.created_objects(values)
    # KubeRay creates the autoscaler's Role and RoleBinding, named after the cluster.
    cluster = _kuberay("RayCluster")["metadata"]["name"]
    kuberay = {("Role", cluster), ("RoleBinding", cluster)}
    assert set(ours).isdisjoint(chart), set(ours) & chart
    assert set(ours).isdisjoint(kuberay), set(ours) & kuberay
    # Every account a pod runs as is created by exactly one of them.
    accounts = {name for kind, name in (set(ours) | chart) if kind == "ServiceAccount"}
    used = {spec.get("serviceAccountName") for spec in _every_pod().values()} - {None}
    assert used <= accounts, used - accounts


def test_the_old_layout_would_create_a_service_account_twice() -> None:
    values = _values()
    values["global"]["serviceAccountName"] = "fm-dagster"
    ours = {("ServiceAccount", "fm-dagster")}
    assert ours & helm_chart.created_objects(values)


def test_only_the_control_plane_may_launch_runs() -> None:
    objects = _core_objects()
    roles = {d["metadata"]["name"]: d for d in objects if d["kind"] == "Role"}
    bindings = [d for d in objects if d["kind"] == "RoleBinding"]
    subjects = {s["name"] for b in bindings for s in b["subjects"]}
    assert subjects == {helm_chart.service_account_name(_values())}
    (role,) = roles.values()
    rules = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert "create" in rules[("batch", "jobs")]
    assert all("*" not in verbs for verbs in rules.values())
    assert all(verbs <= {"get", "list", "watch"} for (g, _), verbs in rules.items() if g == "")
    assert _values()["rbacEnabled"] is False  # the chart's every-verb Role stays off


def _admits(policy: dict[str, Any], namespace: str, labels: dict[str, str], port: int) -> bool:
    """NetworkPolicy ingress semantics for one peer (namespace labels = its name only)."""
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule.get("ports", [])}
        if ports and port not in ports:
            continue
        for peer in rule.get("from", []):
            ns_sel = peer.get("namespaceSelector")
            pod_sel = peer.get("podSelector")
            if ns_sel is None and namespace != "fm":
                continue
            if ns_sel is not None and not all(
                {"kubernetes.io/metadata.name": namespace}.get(k) == v
                for k, v in ns_sel.get("matchLabels", {}).items()
            ):
                continue
            if pod_sel is not None and not all(
                labels.get(k) == v for k, v in pod_sel.get("matchLabels", {}).items()
            ):
                continue
            return True
    return False


def test_network_policies_let_in_the_operator_and_the_proxy_only() -> None:
    policies = {d["metadata"]["name"]: d for d in _core_objects() if d["kind"] == "NetworkPolicy"}
    ray = policies["fm-ray-ingress"]
    operator = {"app.kubernetes.io/name": "kuberay-operator"}
    assert _admits(ray, "kuberay", operator, 8265)
    assert not _admits(ray, "kuberay", operator, 6379)
    assert not _admits(ray, "other", operator, 8265)
    assert _admits(ray, "fm", {"component": "run_worker"}, 10001)
    ui = policies["fm-dagster-webserver-ingress"]
    assert ui["spec"]["podSelector"]["matchLabels"] == {"component": "dagster-webserver"}
    assert _admits(ui, "fm", {"app.kubernetes.io/name": "fm-ui-proxy"}, 80)
    assert not _admits(ui, "fm", {"component": "dagster-daemon"}, 80)
    assert not _admits(ui, "ingress-nginx", {}, 80)
    proxy = policies["fm-ui-proxy-ingress"]
    assert _admits(proxy, "ingress-nginx", {}, 4180)
    assert not _admits(proxy, "fm", {}, 4180)
    exporter = policies["fm-metrics-ingress"]
    assert _admits(exporter, "monitoring", {}, 9464)
    assert not _admits(exporter, "fm", {}, 9464)


def test_ui_is_reached_through_the_authenticating_proxy() -> None:
    objects = {
        (d["kind"], d["metadata"]["name"]): d for d in _docs(DEPLOY / "k8s" / "ui-auth.yaml")
    }
    proxy = objects[("Deployment", "fm-ui-proxy")]["spec"]["template"]["spec"]["containers"][0]
    args = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert args["upstream"].startswith("http://dagster-dagster-webserver.fm.svc")
    assert args["pass-user-headers"] == "true" and args["provider"] == "oidc"
    backend = objects[("Ingress", "fm-ui")]["spec"]["rules"][0]["http"]["paths"][0]["backend"]
    assert backend["service"]["name"] == "fm-ui"
    assert _values()["dagsterWebserver"]["nameOverride"] == "dagster-webserver"


def test_head_has_a_disruption_budget() -> None:
    (pdb,) = [d for d in _core_objects() if d["kind"] == "PodDisruptionBudget"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    cluster = _kuberay("RayCluster")["metadata"]["name"]
    assert selector == {"ray.io/cluster": cluster, "ray.io/node-type": "head"}
    assert pdb["spec"]["minAvailable"] == 1
