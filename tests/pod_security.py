"""Pod Security Standards, `restricted` profile (policy version `latest`), as admission applies
it to a pod template: the published rules of kubernetes.io/docs/concepts/security/
pod-security-standards/ (the baseline rules, which `restricted` includes, and restricted's own).

`violations(pod_spec, annotations)` lists every rule a PodSpec (camelCase, as in a manifest)
breaks, naming the container; an empty list means the namespace fm (enforce: restricted) admits it.
One platform rule is added and named as such: a numeric `runAsUser`, without which the kubelet
cannot verify `runAsNonRoot` for an image whose USER is a name.
"""

from __future__ import annotations

from typing import Any

# Baseline "Capabilities": what a container may add at most (restricted narrows it further).
RESTRICTED_ADD = {"NET_BIND_SERVICE"}
# Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
# Restricted "Volume Types": only these.
ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
APPARMOR_ALLOWED = ("runtime/default", "localhost/")


def _containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        found += [(f"{kind}[{c.get('name', i)}]", c) for i, c in enumerate(spec.get(kind) or [])]
    return found


def violations(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> list[str]:
    """Every `restricted` rule the pod spec breaks (empty: admitted)."""
    found: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = _containers(spec)
    if not spec.get("containers"):
        found.append("a pod needs at least one container")

    # Baseline: host namespaces, HostProcess, hostPath, host ports.
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"host namespaces: {field} must be unset or false")
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        found.append("HostProcess: pod windowsOptions.hostProcess must be unset or false")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"hostPath volumes: volume {volume.get('name')} is a hostPath")
        # Restricted: volume types.
        for kind in kinds - ALLOWED_VOLUMES - {"hostPath"}:
            found.append(f"volume types: volume {volume.get('name')} is {kind}")

    # Baseline: sysctls, SELinux, AppArmor, seccomp not Unconfined (pod level).
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl.get('name')} is not in the safe set")
    found += _selinux("pod", pod_sc)
    found += _apparmor("pod", pod_sc)
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        found.append(f"seccomp: pod seccompProfile.type is {pod_seccomp}")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value.startswith(APPARMOR_ALLOWED)
        ):
            found.append(f"AppArmor: annotation {key} is {value}")

    pod_non_root = pod_sc.get("runAsNonRoot")
    pod_user = pod_sc.get("runAsUser")
    if pod_user == 0:
        found.append("running as non-root user: pod runAsUser is 0")
    for where, container in containers:
        sc = container.get("securityContext") or {}
        # Baseline.
        if sc.get("privileged"):
            found.append(f"privileged containers: {where} is privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"HostProcess: {where} sets windowsOptions.hostProcess")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"host ports: {where} uses hostPort {port['hostPort']}")
        if sc.get("procMount") not in (None, "Default"):
            found.append(f"/proc mount type: {where} procMount is {sc['procMount']}")
        found += _selinux(where, sc)
        found += _apparmor(where, sc)
        # Restricted: privilege escalation.
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"privilege escalation: {where} must set allowPrivilegeEscalation: false")
        # Restricted: non-root (pod level true and no container false, or every container true).
        non_root = sc.get("runAsNonRoot", pod_non_root)
        if sc.get("runAsNonRoot") is False or non_root is not True:
            found.append(f"running as non-root: {where} must run with runAsNonRoot: true")
        if sc.get("runAsUser") == 0:
            found.append(f"running as non-root user: {where} runAsUser is 0")
        # Platform rule: a numeric user, so runAsNonRoot can be verified whatever the image says.
        if not isinstance(sc.get("runAsUser", pod_user), int):
            found.append(f"numeric user (platform rule): {where} has no runAsUser")
        # Restricted: seccomp RuntimeDefault or Localhost, at pod level or on every container.
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccomp: {where} must run with seccompProfile RuntimeDefault")
        # Restricted: drop ALL, add nothing but NET_BIND_SERVICE.
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"capabilities: {where} must drop ALL")
        for added in set(capabilities.get("add") or []) - RESTRICTED_ADD:
            found.append(f"capabilities: {where} adds {added}")
    return found


def _selinux(where: str, sc: dict[str, Any]) -> list[str]:
    options = sc.get("seLinuxOptions") or {}
    found = []
    if options.get("type", "") not in SELINUX_TYPES:
        found.append(f"SELinux: {where} seLinuxOptions.type is {options['type']}")
    for field in ("user", "role"):
        if options.get(field):
            found.append(f"SELinux: {where} sets seLinuxOptions.{field}")
    return found


def _apparmor(where: str, sc: dict[str, Any]) -> list[str]:
    profile = (sc.get("appArmorProfile") or {}).get("type")
    if profile not in (None, "RuntimeDefault", "Localhost"):
        return [f"AppArmor: {where} appArmorProfile.type is {profile}"]
    return []
