"""`fm verify`: a flipped byte anywhere a version stands on is found and the file named.

One real version (a shared WARC through every stage) and its shard set; each test flips one byte
of one kind of file — a landed WARC, an Iceberg data file, an Iceberg manifest, the shard-set
manifest, an MDS shard — checks that verification names exactly that file, and restores it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.checks.integrity import verify
from fm_assets.commands import operations
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import read_shard_set_row
from tests.paths import NEOX_TOKENIZER, WGET_WARC
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Built:
    settings: Settings
    env: dict[str, str]
    version_key: str
    shard_set_key: str
    shard_dir: Path


@pytest.fixture(scope="module")
def built(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    home = tmp_path_factory.mktemp("verify") / "fm"
    env = {"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "RAY_ADDRESS": ray_address}
    # The subject is file integrity, not curation: every page of the crawl goes through.
    env["FM_POLICY_FILE"] = str(opt_out_policy(home.parent))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        settings = load_settings(env)
        register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
        batch, _ = operations.land(settings, [WGET_WARC], source="wget", license="Apache-2.0")
        operations.run_batch(settings, batch.batch_id, lambda message: None)
        version_key = operations.create_version(settings, "web", [], lambda message: None)
        shard_set_key = operations.build_shards(
            settings, version_key, str(NEOX_TOKENIZER), 512, lambda message: None
        )
        row = read_shard_set_row(settings, shard_set_key)
        assert row is not None
        shard_dir = Path(str(row["uri"]).removeprefix("file://"))
        yield Built(settings, env, version_key, shard_set_key, shard_dir)


@contextlib.contextmanager
def flipped(path: Path) -> Iterator[Path]:
    """One bit of `path` flipped (in the middle of the file) for the block, then restored."""
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x10
    path.write_bytes(bytes(damaged))
    try:
        yield path
    finally:
        path.write_bytes(original)


def _largest(files: list[Path]) -> Path:
    assert files, "no such file was written"
    return max(files, key=lambda p: p.stat().st_size)


def _landed(b: Built) -> Path:
    return _largest(list((b.settings.home / "objects" / "landing").rglob("*.warc.gz")))


def _data_file(b: Built) -> Path:
    tables = b.settings.home / "warehouse"
    return _largest(list(tables.glob("fm_cloud/extracted_documents/data/**/*.parquet")))


def _iceberg_manifest(b: Built) -> Path:
    """The manifest of raw_documents that the version's snapshot reads."""
    from fm_assets.storage import catalog
    from fm_assets.versions.dataset_version import require_version

    snapshot_id = require_version(b.settings, b.version_key).snapshot_ids["cloud"]["raw_documents"]
    table = catalog.load_table(b.settings, "raw_documents", namespace="cloud")
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    return _largest([_local(m.manifest_path) for m in snapshot.manifests(table.io)])


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _landing_manifest(b: Built) -> Path:
    return next((b.settings.home / "objects" / "landing").rglob("manifest.json"))


def _manifest_list(b: Built) -> Path:
    """The manifest list of the snapshot of tokenized_documents that the version reads."""
    from fm_assets.storage import catalog
    from fm_assets.versions.dataset_version import require_version

    version = require_version(b.settings, b.version_key)
    snapshot_id = version.snapshot_ids["cloud"]["tokenized_documents"]
    table = catalog.load_table(b.settings, "tokenized_documents", namespace="cloud")
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    return _local(snapshot.manifest_list)


def _shard_manifest(b: Built) -> Path:
    return b.shard_dir / "fm_manifest.json"


def _shard(b: Built) -> Path:
    return _largest(list(b.shard_dir.glob("*.mds")))


def test_an_untouched_version_and_its_shard_set_verify(built: Built) -> None:
    result = verify(built.settings, built.version_key)
    assert result.ok, result.bad
    assert set(result.checked) == {
        "landing manifests",
        "landed files",
        "Iceberg manifests",
        "Iceberg snapshots",
        "Iceberg data files",
        "shard-set manifests",
        "MDS shards",
    }
    assert result.checked["Iceberg data files"] >= 10


@pytest.mark.parametrize(
    "find",
    [
        _landed,
        _landing_manifest,
        _data_file,
        _iceberg_manifest,
        _manifest_list,
        _shard_manifest,
        _shard,
    ],
    ids=[
        "landed-warc",
        "landing-manifest",
        "iceberg-data-file",
        "iceberg-manifest",
        "iceberg-manifest-list",
        "shard-manifest",
        "mds-shard",
    ],
)
def test_one_flipped_bit_is_found_and_the_file_named(
    built: Built, find: Callable[[Built], Path]
) -> None:
    with flipped(find(built)) as damaged:
        result = verify(built.settings, built.version_key)
    assert not result.ok, f"a flipped bit in {damaged} went unnoticed"
    named = {bad.location for bad in result.bad}
    assert all(loc.endswith(damaged.name) for loc in named), named
    assert verify(built.settings, built.version_key).ok, "restoring the file restores the version"


def _flip_that_still_decodes(data: bytes) -> int:
    """The first byte of the Parquet footer whose lowest bit, flipped, leaves a file that still
    decodes with every page CRC checked, to the same rows: what a CRC check cannot see."""
    import io

    import pyarrow.parquet as pq

    def decoded(raw: bytes) -> object:
        return pq.ParquetFile(io.BytesIO(raw), page_checksum_verification=True).read()

    rows = decoded(data)
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    for position in range(footer, len(data) - 8):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        try:
            if decoded(bytes(damaged)) == rows:
                return position
        except Exception:  # this flip is caught by decoding: try the next byte
            continue
    raise AssertionError("every flip of the footer broke decoding: nothing to test here")


def test_a_flip_that_parquet_decodes_unchanged_is_still_found(built: Built) -> None:
    path = _data_file(built)
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[_flip_that_still_decodes(original)] ^= 0x01
    path.write_bytes(bytes(damaged))
    try:
        result = verify(built.settings, built.version_key)
    finally:
        path.write_bytes(original)
    assert [bad.location for bad in result.bad] == [f"file://{path}"], result.bad
    assert "pinned at commit" in result.bad[0].problem


def test_fm_verify_exits_non_zero_naming_the_bad_shard(built: Built) -> None:
    from fm_assets.commands.cli import main

    with flipped(_shard(built)) as damaged:
        run = CliRunner().invoke(main, ["verify", built.shard_set_key], env=built.env)
    assert run.exit_code == 1, run.output
    bad = [line for line in run.output.splitlines() if line.startswith("BAD ")]
    assert len(bad) == 1 and damaged.name in bad[0] and "sha256" in bad[0], run.output
    clean = CliRunner().invoke(main, ["verify", built.shard_set_key], env=built.env)
    assert clean.exit_code == 0 and "MDS shards:" in clean.output, clean.output
