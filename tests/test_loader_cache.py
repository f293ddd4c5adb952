"""The node's hot cache on a real S3 server (SeaweedFS on loopback): pre-warm, then serve with
the shards gone from the store; quota, LRU eviction and pins; several processes at once; a
download cut short resumes; a copy of a set a purge replaced is deleted at its next pre-warm or
open; the `fm cache` commands."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import fm_loader.storage.fetch
from fm_assets.settings import Settings, load_settings
from fm_loader import make_dataset, make_loader, prewarm
from fm_loader.storage import retry
from fm_loader.storage.cache_dir import CacheFull, cache_status, pin, set_quota, unpin
from fm_loader.storage.cache_purge import PURGED_NAME, PurgedManifest, with_purged
from tests.paths import REPO
from tests.services.flaky_proxy import FlakyProxy, flaky_proxy
from tests.services.s3 import S3Server
from tests.shard_sets import Built, build, synthetic_docs

pytestmark = pytest.mark.slow


@dataclass
class Store:
    s3: S3Server
    settings: Settings
    proxy: FlakyProxy
    home: Path

    def upload(self, built: Built, name: str) -> str:
        prefix = f"{self.s3.bucket}/loader-cache/{name}"
        fs = self.s3.filesystem()
        for path in sorted(built.directory.iterdir()):
            with fs.open_output_stream(f"{prefix}/{path.name}", compression=None) as out:
                out.write(path.read_bytes())
        return f"s3://{prefix}"

    def delete_shards(self, uri: str, built: Built) -> None:
        fs, prefix = self.s3.filesystem(), uri.removeprefix("s3://")
        for shard in built.manifest.shards:
            fs.delete_file(f"{prefix}/{shard.name}")
        fs.delete_file(f"{prefix}/index.json")


@pytest.fixture(scope="module")
def store(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    home = tmp_path_factory.mktemp("cache-home")
    port = int(s3_session.endpoint.rsplit(":", 1)[1])
    with pytest.MonkeyPatch.context() as env, flaky_proxy(port) as proxy:
        for name, value in s3_session.env().items():
            env.setenv(name, value)
        settings = load_settings({"FM_HOME": str(home), "FM_S3_ENDPOINT": proxy.endpoint})
        yield Store(s3_session, settings, proxy, home)


def one_set(tmp_path: Path, seed: int, docs: int = 300) -> Built:
    return build(
        tmp_path / f"set-{seed}",
        synthetic_docs(docs, seed=seed),
        64,
        version=f"synth{seed}@v1",
        size_limit_bytes=4 << 10,
    )


def manifest_sha256(built: Built) -> str:
    return hashlib.sha256((built.directory / "fm_manifest.json").read_bytes()).hexdigest()


def served_ids(built: Built) -> list[list[int]]:
    return sorted(built.expected_ids(i).tolist() for i in range(built.num_samples))


def test_a_prewarmed_set_serves_epochs_with_its_shards_gone_from_the_store(
    store: Store, tmp_path: Path
) -> None:
    built = one_set(tmp_path, 1)
    uri = store.upload(built, "gone")
    cache = tmp_path / "cache"
    set_bytes = sum(s.bytes for s in built.manifest.shards)
    (report,) = prewarm(uri, cache_dir=cache, settings=store.settings)
    assert report.fetched_bytes == report.bytes_total == set_bytes and report.warm_bytes == 0
    store.delete_shards(uri, built)  # nothing but the manifest is left in the bucket

    for epoch in (0, 1):
        dataset = make_dataset(uri, cache_dir=cache, settings=store.settings, epoch=epoch)
        loader = make_loader(dataset, batch_size=4, num_workers=2)
        got = sorted(ids for batch in loader for ids in batch["input_ids"].tolist())
        assert got == served_ids(built)
        figures = loader.metrics.snapshot()
        assert figures["cache_hit_rate"] == 1.0 and figures["cache_fetched_bytes"] == 0
        assert figures["cache_warmup_s"] == 0.0
        dataset.close()
    # A second pre-warm finds everything warm: it hashes every shard again, fetches nothing.
    (again,) = prewarm(uri, cache_dir=cache, settings=store.settings)
    assert (again.warm_bytes, again.fetched_bytes) == (set_bytes, 0)
    (status,) = cache_status(cache)
    assert status.complete and status.bytes_present == status.bytes_total == set_bytes
    assert status.shard_set_key == built.manifest.shard_set_key and status.uri == uri


def test_a_cold_open_reports_its_warm_up_and_misses(store: Store, tmp_path: Path) -> None:
    built = one_set(tmp_path, 2)
    uri = store.upload(built, "cold")
    dataset = make_dataset(uri, cache_dir=tmp_path / "cache", settings=store.settings)
    loader = make_loader(dataset, batch_size=8)
    assert sum(len(b["sample_index"]) for b in loader) == built.num_samples
    figures = loader.metrics.snapshot()
    assert figures["cache_hit_rate"] == 0.0 and figures["cache_warmup_s"] > 0
    assert figures["cache_fetched_bytes"] == sum(s.bytes for s in built.manifest.shards)


def test_the_quota_evicts_least_recently_used_sets_never_pinned_or_open_ones(
    store: Store, tmp_path: Path
) -> None:
    sets = {name: one_set(tmp_path, seed) for name, seed in (("a", 3), ("b", 4), ("c", 5))}
    uris = {name: store.upload(built, f"lru-{name}") for name, built in sets.items()}
    size = {name: sum(s.bytes for s in b.manifest.shards) for name, b in sets.items()}
    digest = {name: manifest_sha256(b) for name, b in sets.items()}
    cache = tmp_path / "cache"
    # Room for any two of the three sets (plus their small manifests and indexes), not three.
    set_quota(cache, max(size.values()) * 2 + (64 << 10))
    for name in ("a", "b"):
        prewarm(uris[name], cache_dir=cache, settings=store.settings)

    def cached() -> set[str]:
        return {n for n in sets if (cache / digest[n] / "fm_manifest.json").exists()}

    held = make_dataset(uris["a"], cache_dir=cache, settings=store.settings)  # open: pinned
    pin(cache, digest["b"], "b", "run-7")
    with pytest.raises(CacheFull, match=r"over its quota") as full:
        prewarm(uris["c"], cache_dir=cache, settings=store.settings)
    # Named least recently used first: a's open touched its entry after b's pre-warm, but the
    # two can share one tick of the file system's clock, so the order is not asserted.
    held_sets = str(full.value).split("nothing more can be evicted: ", 1)[1]
    assert f"[{digest['a'][:12]}] (open or downloading)" in held_sets
    assert f"[{digest['b'][:12]}] (pinned)" in held_sets
    assert cached() == {"a", "b"} and not (cache / digest["c"]).exists()

    assert unpin(cache, digest["b"])
    prewarm(uris["c"], cache_dir=cache, settings=store.settings)  # b goes; a is open
    assert cached() == {"a", "c"}
    assert len(list(held)) == sets["a"].num_samples  # still served from its entry
    held.close()
    time.sleep(0.05)  # a's last use (its open) is now older than c's warm-up by a margin
    prewarm(uris["b"], cache_dir=cache, settings=store.settings)  # now a is the oldest
    assert cached() == {"b", "c"}
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


TRAINER = textwrap.dedent(
    """
    import hashlib, json, sys, time
    from pathlib import Path
    from fm_loader import make_dataset, make_loader, prewarm
    from fm_loader.settings import load_loader_settings
    uri, cache, role, go = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    Path(f"{go}.ready-{role}").touch()
    while not go.exists():
        time.sleep(0.01)
    settings = load_loader_settings()
    if role == "prewarm":
        (report,) = prewarm(uri, cache_dir=cache, settings=settings)
        print(json.dumps({"fetched": report.fetched_bytes}))
    else:
        dataset = make_dataset(uri, cache_dir=cache, seed=1)
        loader = make_loader(dataset, batch_size=8, num_workers=1)
        digest = hashlib.sha256()
        for batch in loader:
            digest.update(batch["input_ids"].numpy().tobytes())
        fetched = loader.metrics.snapshot()["cache_fetched_bytes"]
        print(json.dumps({"fetched": fetched, "digest": digest.hexdigest()}))
    """
)


def test_trainers_and_a_prewarm_at_once_download_once_and_never_show_a_partial_file(
    store: Store, tmp_path: Path
) -> None:
    built = one_set(tmp_path, 6, docs=1500)  # ~60 shards: the download takes a while
    uri = store.upload(built, "together")
    cache, go = tmp_path / "cache", tmp_path / "go"
    entry = cache / manifest_sha256(built)
    env = {
        **os.environ,
        **store.s3.env(),
        "PYTHONPATH": str(REPO),
        "FM_HOME": str(store.home),
        "FM_S3_ENDPOINT": store.s3.endpoint,
    }
    roles = ["trainer-1", "trainer-2", "prewarm"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TRAINER, uri, str(cache), role, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for role in roles
    ]
    while not all(Path(f"{go}.ready-{r}").exists() for r in roles):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.05)
    sizes = {s.name: s.bytes for s in built.manifest.shards}
    seen_partial: list[str] = []
    mid_download = 0  # looks at the entry with some shards there and not all
    go.touch()
    while any(p.poll() is None for p in procs):  # watch the entry while they work
        present = 0
        for item in os.scandir(entry) if entry.is_dir() else []:
            if item.name not in sizes:
                continue
            present += 1
            try:
                size = item.stat().st_size
            except FileNotFoundError:
                continue
            if size != sizes[item.name]:
                seen_partial.append(f"{item.name}: {size} of {sizes[item.name]} bytes")
        mid_download += 0 < present < len(sizes)
        time.sleep(0.005)
    results = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert mid_download > 0, "the download was never watched in progress"
    assert seen_partial == []
    assert results[0]["digest"] == results[1]["digest"]
    # One process downloaded the set, the others waited and read its copy.
    assert sum(r["fetched"] for r in results) == sum(sizes.values())
    leftovers = [p.name for p in cache.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_a_download_cut_short_keeps_its_verified_shards_and_resumes(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = one_set(tmp_path, 7)
    uri = store.upload(built, "resume")
    cache = tmp_path / "cache"
    copies = 0
    real_copy = fm_loader.storage.fetch.copy_remote_file
    lock = threading.Lock()

    def copy_then_cut(*args: object) -> tuple[str, int]:
        nonlocal copies
        with lock:
            copies += 1
            mine = copies
        if mine > 4:  # the store stays away after four files (what retries end in)
            raise retry.StorageUnavailable("store unavailable: failed 6 times; rerun")
        return real_copy(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(fm_loader.storage.fetch, "copy_remote_file", copy_then_cut)
    with pytest.raises(retry.StorageUnavailable):
        prewarm(uri, cache_dir=cache, settings=store.settings)
    monkeypatch.setattr(fm_loader.storage.fetch, "copy_remote_file", real_copy)
    (status,) = cache_status(cache)
    assert not status.complete and 0 < status.shards_present < status.shards_total
    entry = cache / status.manifest_sha256
    assert [p.name for p in entry.iterdir() if p.name.startswith(".")] == []  # no partial file
    for shard in built.manifest.shards:  # whatever is there is whole and verified
        path = entry / shard.name
        if path.exists():
            assert hashlib.sha256(path.read_bytes()).hexdigest() == shard.sha256
    (report,) = prewarm(uri, cache_dir=cache, settings=store.settings)
    assert report.warm_bytes == status.bytes_present  # kept, hashed again
    assert report.fetched_bytes == report.bytes_total - status.bytes_present
    dataset = make_dataset(uri, cache_dir=cache, settings=store.settings)
    assert sorted(s["input_ids"].tolist() for s in dataset) == served_ids(built)


def fm(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **store.s3.env(),
        "PYTHONPATH": str(REPO),
        "FM_HOME": str(store.home),
        "FM_S3_ENDPOINT": store.s3.endpoint,
    }
    command = [str(Path(sys.executable).with_name("fm")), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def test_a_prewarm_or_open_deletes_the_copy_of_what_a_purge_replaced(
    store: Store, tmp_path: Path
) -> None:
    """A purge rewrites a published set without the revoked documents and names the manifest it
    replaced in the set's fm_purged.json (`fm_assets.shards.purge_sets`); a node's cached copy
    of the old manifest goes at the set's next pre-warm, or at the next open once no one reads
    it, and the old manifest is refused."""
    docs = synthetic_docs(200, seed=11)
    built = build(tmp_path / "before", docs, 64, version="synth11@v1", size_limit_bytes=4 << 10)
    uri = store.upload(built, "purged")
    cache = tmp_path / "cache"
    old = manifest_sha256(built)
    (report,) = prewarm(uri, cache_dir=cache, settings=store.settings)
    assert report.entry == cache / old
    held = make_dataset(uri, cache_dir=cache, settings=store.settings)  # a trainer reading it

    revoked = sorted(docs)[0]
    kept = {d: t for d, t in docs.items() if d != revoked}
    after = build(tmp_path / "after", kept, 64, version="synth11@v1", size_limit_bytes=4 << 10)
    prefix = uri.removeprefix("s3://")
    fs = store.s3.filesystem()
    for path in sorted(after.directory.iterdir()):
        with fs.open_output_stream(f"{prefix}/{path.name}", compression=None) as out:
            out.write(path.read_bytes())
    record = with_purged(None, PurgedManifest(old, "rev-11", "2026-01-02T03:04:05+00:00"))
    with fs.open_output_stream(f"{prefix}/{PURGED_NAME}", compression=None) as out:
        out.write(record.to_json().encode())
    new = manifest_sha256(after)

    # Open by the trainer: the entry stays until it is closed.
    (report,) = prewarm(uri, cache_dir=cache, settings=store.settings)
    assert report.entry == cache / new and (cache / old).is_dir()
    held.close()
    again = make_dataset(uri, cache_dir=cache, settings=store.settings)
    assert not (cache / old).exists() and (cache / new).is_dir()
    assert len(again) == after.num_samples
    again.close()
    assert [s.shard_set_key for s in cache_status(cache)] == [after.manifest.shard_set_key]


def test_the_fm_cache_commands(store: Store, tmp_path: Path) -> None:
    built = one_set(tmp_path, 8)
    uri = store.upload(built, "cli")
    cache = str(tmp_path / "cache")
    assert fm(store, "cache", "quota", "10M", "--cache-dir", cache).returncode == 0
    out = fm(store, "cache", "prewarm", uri, "--cache-dir", cache).stdout
    assert out.strip().splitlines()[-1] == uri
    fm(store, "cache", "pin", uri, "--cache-dir", cache, "--by", "run-42")
    lines = fm(store, "cache", "status", "--cache-dir", cache).stdout.splitlines()
    assert "of a 10.5 MB quota" in lines[0]
    row = lines[2].split("\t")
    total = sum(s.bytes for s in built.manifest.shards)
    assert row[0] == built.manifest.shard_set_key and row[1] == "100%"
    assert row[2] == f"{len(built.manifest.shards)}/{len(built.manifest.shards)}"
    assert row[3] == f"{total / 1e6:,.1f}/{total / 1e6:,.1f}" and row[5] == "run-42"
    fm(store, "cache", "unpin", uri, "--cache-dir", cache)
    row = fm(store, "cache", "status", "--cache-dir", cache).stdout.splitlines()[2].split("\t")
    assert row[5] == "-"
