"""A real two-node Ray cluster for tests: `ray start --head` plus `ray start --address`, two
raylets on loopback, as a KubeRay head and worker pod would run.

    with ray_cluster(tmp_dir, env=s3.env()) as cluster:
        cluster.address         # "127.0.0.1:PORT", for RAY_ADDRESS
        cluster.client_address  # "ray://127.0.0.1:PORT" (Ray Client)

Every port is a free loopback port chosen here (never Ray's fixed defaults, which a colleague's
cluster on the same machine may hold). Each node runs `ray start --block` in its own process
group, so stopping one is SIGTERM to its own pid, a wait, then SIGKILL to its group: `ray stop`
is never used (it kills every Ray on the machine). `env` is given to the nodes' processes, as
a pod's environment from a secret: the workers get credentials without a runtime_env.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

STARTUP_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15


@dataclass(frozen=True)
class RayCluster:
    """A running two-node cluster: where to reach it and the pids of its `ray start` nodes."""

    address: str  # GCS "127.0.0.1:PORT"
    client_address: str  # "ray://127.0.0.1:PORT"
    temp_dir: Path  # the session's logs are below it
    node_pids: tuple[int, ...]
    env: dict[str, str] = field(default_factory=dict, repr=False)  # RAY_AUTH_* for drivers

    def driver_env(self, *, client: bool = False) -> dict[str, str]:
        """RAY_ADDRESS and auth settings for a driver process joining this cluster."""
        return {**self.env, "RAY_ADDRESS": self.client_address if client else self.address}


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _ray_binary() -> str:
    candidate = Path(sys.executable).with_name("ray")
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("ray")
    if not found:
        raise FileNotFoundError(f"the `ray` command is not next to {sys.executable} nor on PATH")
    return found


def _node_ports() -> list[str]:
    (node_manager, object_manager, agent_listen, agent_grpc, runtime_env, metrics) = _free_ports(6)
    return [
        f"--node-manager-port={node_manager}",
        f"--object-manager-port={object_manager}",
        f"--dashboard-agent-listen-port={agent_listen}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--metrics-export-port={metrics}",
    ]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM our `ray start --block`, which stops its node; SIGKILL its group if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT_S)
    # The node's daemons (raylet, gcs_server, agents) live in the group we created.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


_PROBE = (
    "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
    "log_to_driver=False); print(sum(n['Alive'] for n in ray.nodes()))"
)


def _alive_nodes(address: str, env: Mapping[str, str]) -> tuple[int | None, str]:
    """How many raylets of the cluster are alive (None: no answer), and what the probe said;
    asked from a separate driver process (this one may hold a local Ray of its own)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, address],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
    )
    said = (result.stdout + result.stderr).strip()
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].isdigit():
        return None, said
    return int(lines[-1]), said


def _wait_for_nodes(address: str, env: Mapping[str, str], nodes: int, log: Path) -> None:
    """Wait until `nodes` raylets are alive."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        alive, last = _alive_nodes(address, env)
        if alive == nodes:
            return
        time.sleep(2)
    raise TimeoutError(f"the Ray cluster at {address} did not show {nodes} nodes: {last}\n{log}")


@contextlib.contextmanager
def joined_node(
    cluster: RayCluster, *, cpus: int = 1, env: Mapping[str, str] | None = None
) -> Iterator[int]:
    """One more worker node joining `cluster` (`ray start --address`, as a pod the autoscaler
    adds): yields its `ray start` pid once the cluster shows it; stopped by that pid after."""
    before, said = _alive_nodes(cluster.address, cluster.env)
    if before is None:
        raise RuntimeError(f"the Ray cluster at {cluster.address} does not answer: {said}")
    node_env = {
        **os.environ,
        **(env or {}),
        **cluster.env,
        "RAY_USAGE_STATS_ENABLED": "0",
        # Stopping it must not wait out Ray's 30 s drain for Serve replicas (there are none).
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    }
    command = [
        _ray_binary(),
        "start",
        f"--address={cluster.address}",
        f"--num-cpus={cpus}",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        *_node_ports(),
    ]
    log = cluster.temp_dir / "ray-start-joined.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, env=node_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_for_nodes(cluster.address, cluster.env, before + 1, log)
        yield process.pid
    finally:
        _stop(process)


@contextlib.contextmanager
def ray_cluster(
    env: Mapping[str, str] | None = None,
    *,
    head_cpus: int = 1,
    worker_cpus: int = 1,
    auth_token: str | None = None,
) -> Iterator[RayCluster]:
    """Start a head and one worker node on loopback; yield once both raylets are alive.

    With `auth_token`, the cluster requires Ray's token authentication (RAY_AUTH_MODE=token),
    as the KubeRay manifests configure it; drivers get the token through `driver_env()`.
    """
    # Short path: Ray's unix socket paths must stay under 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="fm-ray-"))
    auth = (
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": auth_token}
        if auth_token
        else {"RAY_AUTH_MODE": "disabled"}
    )
    node_env = {**os.environ, **(env or {}), **auth, "RAY_USAGE_STATS_ENABLED": "0"}
    gcs, client = _free_ports(2)
    common = ["--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    head = [
        _ray_binary(),
        "start",
        "--head",
        f"--port={gcs}",
        f"--ray-client-server-port={client}",
        "--include-dashboard=false",
        f"--temp-dir={temp_dir}",
        f"--num-cpus={head_cpus}",
        *common,
        *_node_ports(),
    ]
    worker = [
        _ray_binary(),
        "start",
        f"--address=127.0.0.1:{gcs}",
        f"--num-cpus={worker_cpus}",
        *common,
        *_node_ports(),
    ]
    processes: list[subprocess.Popen[bytes]] = []
    log = temp_dir / "ray-start.log"
    try:
        with log.open("ab") as out:
            processes.append(
                subprocess.Popen(
                    head, env=node_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
            _wait_for_nodes(f"127.0.0.1:{gcs}", auth, 1, log)
            processes.append(
                subprocess.Popen(
                    worker,
                    env=node_env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            _wait_for_nodes(f"127.0.0.1:{gcs}", auth, 2, log)
        yield RayCluster(
            address=f"127.0.0.1:{gcs}",
            client_address=f"ray://127.0.0.1:{client}",
            temp_dir=temp_dir,
            node_pids=tuple(p.pid for p in processes),
            env=auth,
        )
    finally:
        for process in reversed(processes):
            _stop(process)
        shutil.rmtree(temp_dir, ignore_errors=True)


@dataclass
class RestartableHead:
    """A one-node cluster whose head can crash and come back at the same addresses, as a KubeRay
    head pod restarted behind its service: `kill()` SIGKILLs every process of the node, `start()`
    starts a fresh head on the same GCS and Ray Client ports."""

    gcs_port: int
    client_port: int
    cpus: int
    temp_dir: Path
    env: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def client_address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        command = [
            _ray_binary(),
            "start",
            "--head",
            "--block",
            f"--port={self.gcs_port}",
            f"--ray-client-server-port={self.client_port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            f"--num-cpus={self.cpus}",
            *_node_ports(),
        ]
        log = self.temp_dir / "ray-start.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait_for_nodes(self.address, {"RAY_AUTH_MODE": "disabled"}, 1, log)

    def kill(self) -> None:
        """Every process of the node dies at once (a crashed pod): none cleans up after itself."""
        from fm_assets.execution.local_ray import session_processes

        if self.process is None:
            return
        for pid in session_processes(self.process.pid):  # workers have process groups of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)
        self.process = None


@contextlib.contextmanager
def restartable_head(cpus: int = 2) -> Iterator[RestartableHead]:
    """A started `RestartableHead` (no auth: the subject is losing the cluster); stopped after."""
    temp_dir = Path(tempfile.mkdtemp(prefix="fm-ray-"))
    gcs, client = _free_ports(2)
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    }
    head = RestartableHead(gcs, client, cpus, temp_dir, env)
    try:
        head.start()
        yield head
    finally:
        if head.process is not None:
            _stop(head.process)
        shutil.rmtree(temp_dir, ignore_errors=True)
