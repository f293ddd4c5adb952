"""Corrupt bytes, planted: one flipped bit at a seeded random place of a file a version stands on;
`fm verify` must name that file, and the loader must refuse a damaged shard by name."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import log
from fm_assets.checks.integrity import verify
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.versions.dataset_version import require_version


@dataclass
class Planted:
    kind: str
    files: int = 0  # distinct files of the kind the version stands on
    planted: int = 0
    named: int = 0  # verification failed naming exactly the damaged file
    consumed: int = 0  # damage that verification passed (goal 0)


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _iceberg(settings: Settings, version_key: str) -> dict[str, list[Path]]:
    version = require_version(settings, version_key)
    data: list[Path] = []
    manifests: list[Path] = []
    lists: list[Path] = []
    pinned = [
        (namespace, name, snapshot_id)
        for namespace, snapshots in version.snapshot_ids.items()
        for name, snapshot_id in snapshots.items()
    ]
    for namespace, name, snapshot_id in pinned:
        table = catalog.load_table(settings, name, namespace=namespace)
        snapshot = table.snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        lists.append(_local(snapshot.manifest_list))
        manifests += [_local(m.manifest_path) for m in snapshot.manifests(table.io)]
        data += [_local(t.file.file_path) for t in table.scan(snapshot_id=snapshot_id).plan_files()]
    return {
        "Iceberg data file": data,
        "Iceberg manifest": manifests,
        "Iceberg manifest list": lists,
    }


def file_kinds(settings: Settings, version_key: str, shard_dir: Path) -> dict[str, list[Path]]:
    """Every file the version stands on, by kind."""
    landing = settings.home / "objects" / "landing"
    return {
        # landing/data/<namespace>/<batch>/<file> (storage.landing's layout)
        "landed file": sorted(landing.glob("data/*/*/*")),
        "landing manifest": sorted(landing.glob("batches/*/manifest.json")),
        **_iceberg(settings, version_key),
        "shard-set manifest": [shard_dir / "fm_manifest.json"],
        "MDS shard": sorted(shard_dir.glob("*.mds")),
    }


def _flip(path: Path, rng: random.Random) -> bytes:
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(damaged))
    return original


def measure(
    settings: Settings, version_key: str, shard_dir: Path, per_kind: int, seed: int
) -> list[Planted]:
    rng = random.Random(seed)
    results = []
    for kind, files in file_kinds(settings, version_key, shard_dir).items():
        if not files:  # a layout this benchmark no longer knows: say so, do not count 0 of 0
            raise RuntimeError(f"no {kind} found under {settings.home} for {version_key}")
        planted = Planted(kind, files=len(files))
        for _ in range(per_kind):
            victim = rng.choice(files)
            original = _flip(victim, rng)
            try:
                outcome = verify(settings, version_key)
            finally:
                victim.write_bytes(original)
            planted.planted += 1
            named = {bad.location for bad in outcome.bad}
            if outcome.ok:
                planted.consumed += 1
            elif named and all(loc.endswith(victim.name) for loc in named):
                planted.named += 1
        log(f"corruption: {kind}: {planted.named}/{planted.planted} named")
        results.append(planted)
    results.append(_loader(shard_dir, per_kind, rng))
    return results


def _loader(shard_dir: Path, per_kind: int, rng: random.Random) -> Planted:
    """make_dataset over the set with one shard damaged: iterating must raise naming it."""
    from fm_loader import make_dataset

    shards = sorted(shard_dir.glob("*.mds"))
    planted = Planted("MDS shard, read by the loader", files=len(shards))
    for _ in range(per_kind):
        victim = rng.choice(shards)
        original = _flip(victim, rng)
        try:
            list(make_dataset(str(shard_dir)))
            planted.consumed += 1
        except ValueError as exc:
            planted.named += victim.name in str(exc)
        finally:
            victim.write_bytes(original)
        planted.planted += 1
    return planted


def section(results: list[Planted], check: Callable[[], bool]) -> str:
    lines = [
        "## 3. Corrupt bytes",
        "",
        "One bit flipped at a seeded random byte of a seeded random file of each kind that the "
        "crash benchmark's uninterrupted version (and its shard set) stands on, then "
        "`fm verify` of the version (the loader: `make_dataset` over the set, iterated); the "
        f"file is restored after each plant (the version verifies clean afterwards: {check()}).",
        "",
        "| file kind | files | planted | detected, naming the file | consumed undetected "
        "(goal 0) |",
        "|---|---|---|---|---|",
    ]
    for p in results:
        lines.append(f"| {p.kind} | {p.files} | {p.planted} | {p.named} | {p.consumed} |")
    return "\n".join(lines)
