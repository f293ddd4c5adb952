"""Coverage-guided fuzzing of the readers with atheris (libFuzzer), bounded by its own flags.

    python -m tests.fuzz_atheris CORPUS_DIR -runs=20000 -max_total_time=60

The first byte of an input picks the target: a landed file under one of the seed names (every
format the readers take) or a manifest reader (landing batch, shard set); the rest is the file.
`write_corpus(directory)` writes every seed so, as the starting corpus libFuzzer mutates. An
input that breaks a reader's contract (tests/fuzzing.py) or makes it raise is a crash: libFuzzer
saves it as `crash-*` in the working directory and exits non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import fm_assets.formats
    import fm_assets.storage.landing  # noqa: F401
    import fm_loader.format.manifest  # noqa: F401

from tests.fuzzing import file_seeds, manifest_outcome, manifest_seeds, read_accounted

TARGETS = [
    *(("file", name) for name in sorted(file_seeds())),
    *(("manifest", kind) for kind in ("landing", "shard set")),
]


def write_corpus(directory: Path) -> int:
    """The seeds as libFuzzer inputs (target byte + content); returns how many."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, (kind, name) in enumerate(TARGETS):
        data = file_seeds()[name] if kind == "file" else manifest_seeds()[name]
        (directory / f"seed-{number:02d}").write_bytes(bytes([number]) + data)
    return len(TARGETS)


def one_input(data: bytes) -> None:
    """libFuzzer's entry point: read one input with the target its first byte names."""
    if not data:
        return
    kind, name = TARGETS[data[0] % len(TARGETS)]
    if kind == "file":
        read_accounted(name, data[1:])
    else:
        manifest_outcome(name, data[1:])


def main(argv: list[str]) -> None:
    corpus = [a for a in argv[1:] if not a.startswith("-")]
    for directory in corpus[:1]:
        write_corpus(Path(directory))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
