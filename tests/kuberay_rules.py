"""KubeRay's controller-side validation: what the operator rejects after the API server has
accepted a RayCluster or RayJob against the CRD schema.

Each rule is KubeRay's own, from ray-operator/controllers/ray/utils/validation.go
(`ValidateRayClusterMetadata`, `ValidateRayClusterSpec`, `ValidateRayJobMetadata`,
`ValidateRayJobSpec`, `validateDeletionConfiguration`) and the name limits of
ray-operator/controllers/ray/utils/constant.go, as published in the ray-project/kuberay
repository (the v1.7 line); only rules that apply to the fields a manifest can set are here.
The comment on each names its function. Platform rules of our own are marked as such.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# constant.go: "-serve-svc" is the longest suffix KubeRay appends: 63 - 10.
MAX_RAYCLUSTER_NAME = 53
# constant.go: RayJob names get 6 characters appended for their cluster.
MAX_RAYJOB_NAME = MAX_RAYCLUSTER_NAME - 6
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")


def _name(kind: str, metadata: dict[str, Any], limit: int) -> list[str]:
    # ValidateRayClusterMetadata / ValidateRayJobMetadata.
    name = metadata.get("name", "")
    found = []
    if len(name) > limit:
        found.append(f"{kind} name should be no more than {limit} characters")
    if not DNS1035.match(name):
        found.append(f"{kind} name should be a valid DNS1035 label")
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def raycluster_spec_errors(spec: dict[str, Any], annotations: dict[str, str]) -> list[str]:
    """ValidateRayClusterSpec."""
    found = []
    head = spec.get("headGroupSpec") or {}
    head_containers = ((head.get("template") or {}).get("spec") or {}).get("containers") or []
    if not head_containers:
        return ["headGroupSpec should have at least one container"]
    groups = [("Head", head)] + [
        (g.get("groupName", ""), g) for g in spec.get("workerGroupSpecs") or []
    ]
    for name, group in groups:
        containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            found.append("workerGroupSpec should have at least one container")
        params = group.get("rayStartParams") or {}
        # validateRayGroupResources: resources in one place only.
        if any(params.get(p) for p in RESOURCE_PARAMS) and group.get("resources"):
            found.append(f"resource fields set in both rayStartParams and Resources for {name}")
        # validateRayGroupLabels.
        if "labels" in params:
            found.append(f"rayStartParams['labels'] is not supported for {name} group")
    head_env = _env(head_containers[0])
    gcs_ft = spec.get("gcsFaultToleranceOptions") is not None
    if annotations.get("ray.io/ft-enabled") and gcs_ft:
        found.append("ray.io/ft-enabled annotation and GcsFaultToleranceOptions are both set")
    if not gcs_ft and not annotations.get("ray.io/ft-enabled") and "RAY_REDIS_ADDRESS" in head_env:
        found.append("RAY_REDIS_ADDRESS is set but GcsFaultToleranceOptions is not")
    if (head.get("rayStartParams") or {}).get("redis-username") or "REDIS_USERNAME" in head_env:
        found.append("cannot set redis username in rayStartParams or environment variables")
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    v2 = (spec.get("autoscalerOptions") or {}).get("version") == "v2" or head_env.get(
        "RAY_enable_autoscaler_v2"
    ) in ("1", "true")
    if not autoscaling and head_env.get("RAY_enable_autoscaler_v2") in ("1", "true"):
        found.append("RAY_enable_autoscaler_v2 cannot be set when enableInTreeAutoscaling is false")
    if autoscaling:
        for name, group in groups[1:]:
            if group.get("suspend"):
                found.append(f"worker group {name} cannot be suspended with Autoscaler enabled")
        if (spec.get("autoscalerOptions") or {}).get("version") and (
            "RAY_enable_autoscaler_v2" in head_env
        ):
            found.append("both autoscalerOptions.version and RAY_enable_autoscaler_v2 are set")
        if v2:
            for name, group in groups:
                policy = ((group.get("template") or {}).get("spec") or {}).get("restartPolicy")
                if policy not in (None, "", "Never"):
                    found.append(f"restartPolicy for {name} should be Never or unset (v2)")
    # Token authentication needs a Ray that supports it.
    if (spec.get("authOptions") or {}).get("mode") == "token":
        version = spec.get("rayVersion") or ""
        if not version:
            found.append("authOptions.mode is 'token' but RayVersion was not specified")
        elif _version(version) < (2, 52, 0):
            found.append(
                f"authOptions.mode is 'token' but minimum Ray version is 2.52.0, got {version}"
            )
    return found


def raycluster_errors(cluster: dict[str, Any]) -> list[str]:
    """What the operator rejects in a RayCluster."""
    metadata = cluster.get("metadata") or {}
    return _name("RayCluster", metadata, MAX_RAYCLUSTER_NAME) + raycluster_spec_errors(
        cluster.get("spec") or {}, metadata.get("annotations") or {}
    )


def rayjob_errors(job: dict[str, Any]) -> list[str]:
    """ValidateRayJobMetadata + ValidateRayJobSpec (validateDeletionConfiguration included)."""
    metadata = job.get("metadata") or {}
    spec = job.get("spec") or {}
    found = _name("RayJob", metadata, MAX_RAYJOB_NAME)
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    selector = spec.get("clusterSelector") or {}
    mode = spec.get("submissionMode", "K8sJobMode")
    if spec.get("suspend") and not shutdown:
        found.append("a RayJob with shutdownAfterJobFinishes false is not allowed to be suspended")
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0:
        found.append("TTLSecondsAfterFinished must be a non-negative integer")
    if not shutdown and ttl > 0:
        found.append(
            "a RayJob with shutdownAfterJobFinishes set to false cannot have "
            "TTLSecondsAfterFinished"
        )
    if spec.get("deletionStrategy") is not None:
        # Needs the RayJobDeletionPolicy feature gate, off by default in the operator chart.
        found.append("DeletionStrategy needs the RayJobDeletionPolicy feature gate")
    if spec.get("suspend") and selector:
        found.append("the ClusterSelector mode doesn't support the suspend operation")
    if spec.get("rayClusterSpec") is None and not selector:
        found.append("one of RayClusterSpec or ClusterSelector must be set")
    if selector:
        if not selector.get("ray.io/cluster"):
            found.append("cluster name in ClusterSelector should not be empty")
        if mode == "SidecarMode":
            found.append("ClusterSelector is not supported in SidecarMode")
    if mode == "InteractiveMode" and (spec.get("backoffLimit") or 0) > 0:
        found.append("BackoffLimit is incompatible with InteractiveMode")
    if mode == "SidecarMode" and (spec.get("submitterPodTemplate") or spec.get("submitterConfig")):
        found.append("SidecarMode doesn't support SubmitterPodTemplate or SubmitterConfig")
    if spec.get("rayClusterSpec") is not None:
        found += raycluster_spec_errors(spec["rayClusterSpec"], metadata.get("annotations") or {})
    try:
        yaml.safe_load(spec.get("runtimeEnvYAML") or "")
    except yaml.YAMLError as error:
        found.append(f"runtimeEnvYAML is not valid YAML: {error}")
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        found.append("activeDeadlineSeconds must be a positive integer")
    if spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0:
        found.append("backoffLimit must be a positive integer")
    # Platform rule: a job on the shared, long-lived cluster must never be the one to shut it
    # down (KubeRay tears down what shutdownAfterJobFinishes covers).
    if selector and shutdown:
        found.append("platform rule: a job on a selected cluster must not shut the cluster down")
    return found
