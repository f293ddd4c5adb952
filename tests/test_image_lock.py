"""The image installs what CI tested, and builds without resolving anything (offline checks).

deploy/lock/ is made by `make lock` from pyproject.toml: CI installs `dev.txt`, the image
(deploy/Dockerfile) `platform.txt` plus the torch family of its variant. These tests prove, with
no registry and no Docker daemon:

- the lock is current (pyproject.toml's dependencies are what it was resolved from);
- the image's pins are CI's pins, hash for hash;
- every package the image installs has a wheel for the image's platform (CPython 3.11,
  manylinux x86_64 on glibc 2.36), judged by `packaging.tags` on the wheel file names recorded
  at lock time, or is compiled in the Dockerfile's builder stage, which has the compiler;
- the Dockerfile: base image by digest, both torch variants from the lock, a non-root numeric
  user in a runtime stage without a compiler;
- the KubeRay manifests run the lock's Ray.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.paths import REPO

LOCK = REPO / "deploy" / "lock"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
# Packages with no wheel for the image's platform, and what the builder stage needs to build them.
BUILT_IN_BUILDER = {"fasttext": "g++"}
# Debian bookworm (the base image) has glibc 2.36: manylinux_2_5 .. manylinux_2_36 wheels run.
GLIBC_MINOR = 36


def _image_tags() -> set[tags.Tag]:
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    platforms.append("linux_x86_64")
    found = set(tags.cpython_tags((3, 11), abis=["cp311"], platforms=platforms))
    return found | set(tags.compatible_tags((3, 11), "cp311", platforms))


def _pins(path: Path) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, hashes) of a hashed requirements file."""
    pins: dict[str, tuple[str, set[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\\n]+)", block)
        if match:
            hashes = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
            if not hashes:
                raise ValueError(f"{path.name}: {match.group(1)} has no hash")
            pins[canonicalize_name(match.group(1))] = (match.group(2), hashes)
    return pins


def _pylock() -> dict[str, dict[str, Any]]:
    lock = tomllib.loads((LOCK / "pylock.platform.toml").read_text())
    assert lock["lock-version"] == "1.0"
    return {canonicalize_name(p["name"]): p for p in lock["packages"]}


def _stages() -> list[str]:
    """The Dockerfile's build stages, each from its FROM line to the next."""
    text = DOCKERFILE.read_text()
    return re.split(r"(?m)^(?=FROM )", text)[1:]


def test_lock_is_current_with_pyproject() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("lock", LOCK / "lock.py")
    assert spec and spec.loader
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    recorded = (LOCK / "inputs.sha256").read_text().strip()
    assert lock.inputs_digest() == recorded, (
        "pyproject.toml's dependencies (or deploy/lock/constraints.txt) changed since the lock "
        "was made: run `make lock` and commit deploy/lock/"
    )


def test_image_installs_cis_versions_hash_for_hash() -> None:
    dev = _pins(LOCK / "dev.txt")
    image = _pins(LOCK / "platform.txt") | _pins(LOCK / "torch-cuda.txt")
    assert len(image) > 150
    differ = {n: (v, dev.get(n, ("missing", set()))[0]) for n, (v, _) in image.items()}
    assert {n: d for n, d in differ.items() if d[0] != d[1]} == {}, "image pin != CI pin"
    assert all(image[n][1] == dev[n][1] for n in image)
    # The CPU variant installs only torch and torchvision from the torch index: the rest of
    # the family (CUDA libraries, triton) comes with neither.
    torch_family = _pins(LOCK / "torch-cuda.txt")
    assert {"torch", "torchvision"} <= set(torch_family)
    assert all(re.match(r"(torch|torchvision|triton|nvidia-.+|cuda-.+)$", n) for n in torch_family)
    assert not any(n.startswith("nvidia-") for n in _pins(LOCK / "platform.txt"))


def test_wheel_manifest_is_the_image_lock() -> None:
    image = _pins(LOCK / "platform.txt") | _pins(LOCK / "torch-cuda.txt")
    manifest = _pylock()
    assert set(manifest) == set(image)
    for name, package in manifest.items():
        assert package["version"] == image[name][0], name
        files = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
        assert files, name
        for file in files:
            assert file["hashes"]["sha256"] in image[name][1], f"{name}: {file['url']}"


def test_every_image_package_installs_from_a_wheel_or_is_built_in_the_builder() -> None:
    supported = _image_tags()
    no_wheel = {}
    for name, package in _pylock().items():
        wheels = [w["url"].rsplit("/", 1)[-1] for w in package.get("wheels", [])]
        if not any(parse_wheel_filename(w)[3] & supported for w in wheels):
            no_wheel[name] = "sdist" in package
    assert no_wheel == dict.fromkeys(BUILT_IN_BUILDER, True), (
        "packages without a wheel for cp311 manylinux x86_64 (glibc 2.36) must be built in the "
        "Dockerfile's builder stage: add the tools they need there and to BUILT_IN_BUILDER"
    )
    builder, runtime = _stages()
    for tool in BUILT_IN_BUILDER.values():
        word = rf"(?<![\w+-]){re.escape(tool)}(?![\w+-])"
        assert re.search(rf"apt-get install[^\n]*{word}", builder), tool
        assert tool not in runtime, f"{tool} must stay in the builder stage"
    assert "-r /tmp/lock/platform.txt" in builder and "--require-hashes" in builder


def test_supported_tags_reject_what_the_image_cannot_run() -> None:
    supported = _image_tags()

    def runs(wheel: str) -> bool:
        return bool(parse_wheel_filename(wheel)[3] & supported)

    assert runs("numpy-2.1.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert runs("pyarrow-17.0.0-cp311-abi3-manylinux_2_28_x86_64.whl")
    assert runs("click-8.1.0-py3-none-any.whl")
    assert not runs("numpy-2.1.3-cp312-cp312-manylinux_2_17_x86_64.whl")  # other Python
    assert not runs("numpy-2.1.3-cp311-cp311-manylinux_2_39_x86_64.whl")  # newer glibc
    assert not runs("numpy-2.1.3-cp311-cp311-manylinux_2_17_aarch64.whl")  # other machine
    assert not runs("numpy-2.1.3-cp311-cp311-musllinux_1_2_x86_64.whl")  # Alpine's libc


def test_dockerfile_pins_its_base_and_runs_as_a_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"(?m)^ARG PYTHON_IMAGE=(\S+)$", text)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base)
    builder, runtime = _stages()
    assert builder.startswith("FROM ${PYTHON_IMAGE} AS builder")
    assert runtime.startswith("FROM ${PYTHON_IMAGE}\n")
    users = re.findall(r"(?m)^USER (\S+)$", runtime)
    assert users and re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", users[-1]), "numeric non-root"
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime


def test_dockerfile_takes_torch_from_the_lock_in_both_variants() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"(?m)^ARG TORCH_VARIANT=cpu$", text)
    assert re.search(r"(?m)^ARG TORCH_INDEX_URL=https://\S+/cpu$", text)
    builder = _stages()[0]
    # cpu: the lock's torch and torchvision versions from the torch index, nothing else of
    # the family; cuda: the locked family with hashes.
    cpu = re.search(r"cpu\) (.*?);;", builder, re.DOTALL)
    cuda = re.search(r"cuda\) (.*?);;", builder, re.DOTALL)
    assert cpu and cuda
    assert '--index-url "$TORCH_INDEX_URL"' in cpu.group(1)
    pattern = re.search(r"grep -oE '(.*?)' /tmp/lock/torch-cuda.txt", cpu.group(1))
    assert pattern, "the cpu variant reads torch's versions from the lock"
    lines = (LOCK / "torch-cuda.txt").read_text()
    picked = [m.group(0) for m in re.finditer(pattern.group(1), lines, re.MULTILINE)]
    versions = {n: v for n, (v, _) in _pins(LOCK / "torch-cuda.txt").items()}
    expected = [f"{name}=={versions[name]}" for name in ("torch", "torchvision")]
    assert sorted(picked) == expected
    assert "--require-hashes" in cuda.group(1) and "torch-cuda.txt" in cuda.group(1)


@pytest.mark.parametrize("manifest", ["raycluster.yaml"])
def test_kuberay_runs_the_locked_ray(manifest: str) -> None:
    (cluster,) = [
        d for d in yaml.safe_load_all((REPO / "deploy" / "kuberay" / manifest).read_text()) if d
    ]
    ray_version = _pins(LOCK / "platform.txt")["ray"][0]
    assert cluster["spec"]["rayVersion"] == ray_version, "rayVersion must be the lock's ray"
