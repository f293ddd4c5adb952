"""The landing zone: content-addressed, immutable, atomic batches and the `fm land` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fm_assets.settings import Settings
from fm_assets.storage.landing import land_files, list_batches, published_log, read_manifest
from fm_assets.storage.objectstore import open_object_store
from tests.paths import REPO, WARC_DIR


def test_same_files_land_as_the_same_batch(fm_settings: Settings, tmp_path: Path) -> None:
    store = open_object_store(fm_settings)
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text("first document\n")
    b.write_text(json.dumps({"text": "second"}) + "\n")
    first, created = land_files(store, [a, b], source="unit", license="CC0-1.0")
    again, created_again = land_files(store, [b, a], source="unit", license="CC0-1.0")
    assert created and not created_again
    assert again.batch_id == first.batch_id
    assert [e for _, e in published_log(store)] == [first.batch_id]
    manifest = read_manifest(store, first.batch_id)
    assert {f.name for f in manifest.files} == {"a.txt", "b.jsonl"}
    assert (manifest.source, manifest.license, manifest.namespace) == ("unit", "CC0-1.0", "cloud")
    assert all(len(f.sha256) == 64 and f.size > 0 for f in manifest.files)
    assert manifest.tool_version and manifest.ingested_at
    # The bytes live under their data namespace's prefix (bucket policies match it), and no
    # temporary file is left behind once a batch is published.
    prefix = f"landing/data/cloud/{first.batch_id}"
    assert {f.key.rpartition("/")[0] for f in manifest.files} == {prefix}
    names = sorted(f.key.rpartition("/")[2] for f in manifest.files)
    assert store.list_dir(prefix) == names
    assert store.list_dir("landing/data") == ["cloud"]


def test_relanding_with_other_metadata_is_refused(fm_settings: Settings, tmp_path: Path) -> None:
    store = open_object_store(fm_settings)
    path = tmp_path / "doc.txt"
    path.write_text("some text")
    land_files(store, [path], source="unit", license="CC0-1.0")
    with pytest.raises(ValueError, match="immutable"):
        land_files(store, [path], source="unit", license="MIT")


def test_landed_bytes_are_identical_and_batches_ordered(fm_settings: Settings) -> None:
    store = open_object_store(fm_settings)
    warcs = sorted(WARC_DIR.glob("*.warc.gz"))
    first, _ = land_files(store, warcs[:1], source="cc", license="Apache-2.0")
    second, _ = land_files(store, warcs[1:], source="cc", license="Apache-2.0")
    assert [m.batch_id for m in list_batches(store)] == [first.batch_id, second.batch_id]
    for landed in second.files:
        original = next(p for p in warcs if p.name == landed.name)
        assert store.read_bytes(landed.key) == original.read_bytes()


def test_bad_arguments_fail_with_a_message(fm_settings: Settings, tmp_path: Path) -> None:
    store = open_object_store(fm_settings)
    with pytest.raises(ValueError, match="not a readable file"):
        land_files(store, [tmp_path / "missing.txt"], source="unit", license="MIT")
    path = tmp_path / "x.txt"
    path.write_text("x")
    with pytest.raises(ValueError, match="--source"):
        land_files(store, [path], source="a/b", license="MIT")
    for namespace in ("On-Device", "a/b", "", "../x"):
        with pytest.raises(ValueError, match="--namespace must be lower-case"):
            land_files(store, [path], source="unit", license="MIT", namespace=namespace)


def test_each_namespace_lands_under_its_own_prefix(fm_settings: Settings, tmp_path: Path) -> None:
    store = open_object_store(fm_settings)
    device, web = tmp_path / "device.txt", tmp_path / "web.txt"
    device.write_text("typed on a phone")
    web.write_text("read on a page")
    on_device, _ = land_files(store, [device], source="kb", license="MIT", namespace="on-device")
    cloud, _ = land_files(store, [web], source="crawl", license="MIT", namespace="cloud")
    assert store.list_dir("landing/data") == ["cloud", "on-device"]
    assert store.list_dir("landing/data/on-device") == [on_device.batch_id]
    assert all(f.key.startswith("landing/data/on-device/") for f in on_device.files)
    assert all(f.key.startswith("landing/data/cloud/") for f in cloud.files)


def test_fm_land_prints_the_batch_id_last(fm_settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "doc.html"
    path.write_text("<html><body><p>Hello landing zone.</p></body></html>")
    command = [
        sys.executable,
        "-m",
        "fm_assets.commands.cli",
        "land",
        str(path),
        "--source",
        "web",
        "--license",
        "CC-BY-4.0",
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    batch_id = out.stdout.strip().splitlines()[-1]
    assert batch_id.startswith("b-")
    again = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    assert again.stdout.strip().splitlines()[-1] == batch_id
    assert "already landed" in again.stderr


def test_fm_land_loads_neither_dagster_nor_ray(fm_settings: Settings) -> None:
    """Landing is a copy and a manifest: it must not pay seconds for the orchestrator's imports."""
    code = (
        "import sys\n"
        "from fm_assets.commands.cli import main\n"
        "try:\n"
        f"    main(['land', {str(WARC_DIR / 'wget-sample-0000.warc.gz')!r}, '--source', 's',"
        " '--license', 'CC0-1.0'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'ray', 'streaming'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert len(list_batches(open_object_store(fm_settings))) == 1
