"""Regenerate the lock files in this folder from pyproject.toml (run by `make lock`).

One resolution, for the platform the image and CI run on (CPython 3.11, manylinux x86_64,
glibc 2.36 = Debian bookworm), written as:

- `dev.txt`: every package of the `[dev]` extra (what CI installs), pinned with hashes;
- `platform.txt`: the `[platform]` extra (what the image installs) at the same versions, without
  the torch family, which the image installs from the torch index of its variant;
- `torch-cuda.txt`: the torch family as PyPI serves it (CUDA builds), for the CUDA image variant;
- `pylock.platform.toml` (PEP 751): the same `[platform]` set with the one file each package
  installs from on that platform (a wheel, or the sdist the builder stage compiles), so
  tests/test_image_lock.py can prove the image builds without a network it does not have;
- `checkov.txt`: the manifest scanner's own environment (it pins much of its stack);
- `inputs.sha256`: a digest of what the lock was made from, so CI fails when pyproject.toml's
  dependencies change and the lock was not regenerated.

Needs `uv` beside this interpreter (`make lock` installs the pinned version into .venv-lock).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PYTHON_VERSION = "3.11"
# Debian bookworm's glibc (the python:3.11-slim-bookworm base image and CI's machines).
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
# Installed from the torch index of the image variant (CPU or CUDA), not from platform.txt.
TORCH_FAMILY = re.compile(r"^(torch|torchvision|triton|nvidia-.+|cuda-.+)$")
CHECKOV = "checkov>=3.2,<4"
COMPILE_COMMAND = "make lock"


def inputs_digest(pyproject: Path = REPO / "pyproject.toml") -> str:
    """A digest of everything the lock is resolved from: dependency tables and constraints."""
    project = tomllib.loads(pyproject.read_text())
    inputs = {
        "build-system": project["build-system"]["requires"],
        "dependencies": project["project"].get("dependencies", []),
        "optional-dependencies": project["project"].get("optional-dependencies", {}),
        "constraints": (HERE / "constraints.txt").read_text(),
        "checkov": CHECKOV,
        "python": [PYTHON_VERSION, PYTHON_PLATFORM],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _uv(*args: str) -> None:
    uv = Path(sys.executable).parent / "uv"
    command = [str(uv), "pip", "compile", "--quiet", "--python-version", PYTHON_VERSION]
    command += ["--python-platform", PYTHON_PLATFORM, "--custom-compile-command", COMPILE_COMMAND]
    subprocess.run([*command, *args], check=True, cwd=REPO)


def _entries(text: str) -> list[tuple[str, str]]:
    """(normalized name, the entry's lines) of a hashed requirements file, header dropped."""
    entries: list[tuple[str, str]] = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", block)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            entries.append((name, block.rstrip("\n") + "\n"))
    return entries


def _publish(source: Path, target: Path, names: dict[Path, str]) -> str:
    """Copy a uv output into this folder with its temporary input paths named for a reader."""
    text = source.read_text()
    for path, name in names.items():
        text = text.replace(str(path), name)
    target.write_text(text)
    return text


def _header(text: str) -> str:
    return text[: re.search(r"^[A-Za-z0-9]", text, re.MULTILINE).start()]  # type: ignore[union-attr]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build = work / "build-system.in"
        requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
        build.write_text("\n".join(requires) + "\n")
        pins = work / "pins.txt"
        checkov = work / "checkov.in"
        checkov.write_text(CHECKOV + "\n")
        names = {
            build: "pyproject.toml [build-system]",
            pins: "deploy/lock/dev.txt",
            checkov: CHECKOV,
            HERE / "constraints.txt": "deploy/lock/constraints.txt",
        }
        constraints = str(HERE / "constraints.txt")

        _uv(
            "pyproject.toml",
            str(build),
            "--extra",
            "dev",
            "--generate-hashes",
            "-c",
            constraints,
            "-o",
            str(work / "dev.txt"),
        )
        dev = _publish(work / "dev.txt", HERE / "dev.txt", names)

        # The image's set at exactly CI's versions.
        pins.write_text("".join(e.split(" \\", 1)[0].strip() + "\n" for _, e in _entries(dev)))
        _uv(
            "pyproject.toml",
            str(build),
            "--extra",
            "platform",
            "--generate-hashes",
            "-c",
            str(pins),
            "-o",
            str(work / "platform.txt"),
        )
        text = (work / "platform.txt").read_text()
        for path, name in names.items():
            text = text.replace(str(path), name)
        entries = _entries(text)
        (HERE / "platform.txt").write_text(
            _header(text) + "".join(e for n, e in entries if not TORCH_FAMILY.match(n))
        )
        (HERE / "torch-cuda.txt").write_text(
            _header(text) + "".join(e for n, e in entries if TORCH_FAMILY.match(n))
        )
        _uv(
            "pyproject.toml",
            str(build),
            "--extra",
            "platform",
            "-c",
            str(pins),
            "-o",
            str(work / "pylock.platform.toml"),
        )
        _publish(work / "pylock.platform.toml", HERE / "pylock.platform.toml", names)

        _uv(str(checkov), "--generate-hashes", "-o", str(work / "checkov.txt"))
        _publish(work / "checkov.txt", HERE / "checkov.txt", names)
    (HERE / "inputs.sha256").write_text(inputs_digest() + "\n")


if __name__ == "__main__":
    main()
