"""fm_loader basics: exact samples, boundaries, placement, refusals, catalog, simple resume.

The contract's guarantees under random schedules are in test_loader_contract.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from fm_assets.settings import Settings, load_settings
from fm_assets.shards.writer import manifest_sha256
from fm_loader import IGNORE_INDEX, FmDataset, collate, make_dataset
from fm_loader.format.manifest import MANIFEST_NAME
from fm_loader.storage import retry
from tests.paths import NEOX_TOKENIZER
from tests.shard_sets import PAD, Built, SetShape, build, sha, synthetic_docs


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Built:
    # A small size limit gives several shards, so shard boundaries are exercised too.
    directory = tmp_path_factory.mktemp("synth") / "set"
    return build(directory, synthetic_docs(500), 64, size_limit_bytes=6 << 10)


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    # `web`: the shared WARC's pages in 256-token samples, 64 MB shards.
    return SetShape(seq_len=256)


def indices(dataset: FmDataset) -> list[int]:
    return [s["sample_index"] for s in dataset]


# --- samples -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["synth", "web"])
def test_samples_round_trip_exactly(fixture: str, request: pytest.FixtureRequest) -> None:
    built: Built = request.getfixturevalue(fixture)
    dataset = make_dataset(str(built.directory))
    seen = 0
    for sample in dataset:
        i = sample["sample_index"]
        assert sample["input_ids"].dtype == torch.int64
        assert sample["input_ids"].shape == (built.manifest.seq_len,)
        np.testing.assert_array_equal(sample["input_ids"].numpy(), built.expected_ids(i))
        assert sample["doc_ids"] == [s.doc_id for s in built.seqs[i].segments]
        seen += 1
    assert seen == built.manifest.num_samples == len(built.seqs)


def test_labels_positions_and_boundaries(tmp_path: Path) -> None:
    a, b, c = sha("a"), sha("b"), sha("c")
    docs = {
        a: np.array([11, 12, 13]),
        b: np.array([21, 22, 23, 24, 25]),
        c: np.arange(31, 43),  # 12 tokens: a full chunk of 10 plus a remainder of 2
    }
    built = build(tmp_path / "set", docs, 10, shuffle_seed=None)
    samples = {tuple(s["doc_ids"]): s for s in make_dataset(str(built.directory))}
    assert set(samples) == {(c,), (b, a, c)}

    full = samples[(c,)]  # one segment filling the sample: no padding tail
    assert full["input_ids"].tolist() == list(range(31, 41))
    assert full["labels"].tolist() == [*range(32, 41), IGNORE_INDEX]
    assert full["position_ids"].tolist() == list(range(10))
    assert full["cu_seqlens"].tolist() == [0, 10]
    assert full["cu_seqlens"].dtype == torch.int32

    mixed = samples[(b, a, c)]  # b (5), a (3), c's remainder (2): exactly full
    assert mixed["input_ids"].tolist() == [21, 22, 23, 24, 25, 11, 12, 13, 41, 42]
    x = IGNORE_INDEX
    assert mixed["labels"].tolist() == [22, 23, 24, 25, x, 12, 13, x, 42, x]
    assert mixed["loss_mask"].tolist() == [lab != x for lab in mixed["labels"].tolist()]
    assert mixed["position_ids"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1]
    assert mixed["cu_seqlens"].tolist() == [0, 5, 8, 10]


def test_padding_gets_no_loss_and_its_own_boundary(tmp_path: Path) -> None:
    a, b = sha("a"), sha("b")
    built = build(tmp_path / "set", {a: np.array([11, 12, 13]), b: np.array([21, 22])}, 8)
    (sample,) = list(make_dataset(str(built.directory)))
    x = IGNORE_INDEX
    assert sample["input_ids"].tolist() == [11, 12, 13, 21, 22, PAD, PAD, PAD]
    assert sample["labels"].tolist() == [12, 13, x, 22, x, x, x, x]
    assert sample["loss_mask"].tolist() == [True, True, False, True, False, False, False, False]
    assert sample["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert sample["cu_seqlens"].tolist() == [0, 3, 5, 8]


def test_collate_flattens_boundaries(tmp_path: Path) -> None:
    a, b, c = sha("a"), sha("b"), sha("c")
    docs = {a: np.array([1, 2, 3]), b: np.array([4, 5]), c: np.arange(1, 9)}
    built = build(tmp_path / "set", docs, 8, shuffle_seed=None)
    samples = sorted(make_dataset(str(built.directory)), key=lambda s: s["sample_index"])
    batch = collate(samples)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["labels"].shape == batch["position_ids"].shape == batch["loss_mask"].shape
    # sample 0: c fills 8; sample 1: a (3) + b (2) + padding (3)
    assert batch["cu_seqlens"].tolist() == [0, 8, 11, 13, 16]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["max_seqlen"] == 8
    assert batch["doc_ids"] == [[c], [a, b]]
    assert batch["sample_index"].tolist() == [0, 1]


def test_malformed_sample_is_rejected() -> None:
    from fm_loader.samples.tokens import build_sample

    raw = {
        "input_ids": np.arange(8, dtype=np.uint16),
        "doc_ids": f"{sha('a')}\n{sha('b')}",
        "doc_spans": np.array([0, 3, 0, 4, 2, 0], dtype=np.int32),  # second span leaves a gap
    }
    with pytest.raises(ValueError, match="not contiguous"):
        build_sample(raw, 8, 0)
    with pytest.raises(ValueError, match="malformed"):
        build_sample({**raw, "doc_ids": sha("a")}, 8, 0)


def test_dataset_pickles_for_spawned_workers(synth: Built) -> None:
    import pickle

    dataset = make_dataset(str(synth.directory), seed=2)
    first = next(iter(dataset))  # opens and maps a shard
    clone = pickle.loads(pickle.dumps(dataset))
    assert next(iter(clone))["sample_index"] == first["sample_index"]


# --- order and placement -----------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_every_sample_exactly_once_across_ranks(synth: Built, world_size: int) -> None:
    n = synth.manifest.num_samples
    per_rank = [
        indices(make_dataset(str(synth.directory), rank=r, world_size=world_size, seed=5))
        for r in range(world_size)
    ]
    assert sorted(i for rank in per_rank for i in rank) == list(range(n))
    # Remainder rule: the first n % world_size ranks serve one extra sample.
    base, extra = divmod(n, world_size)
    assert [len(r) for r in per_rank] == [base + (r < extra) for r in range(world_size)]


def test_dataloader_workers_split_each_rank_exactly_once(synth: Built) -> None:
    served = []
    for rank in range(2):
        dataset = make_dataset(str(synth.directory), rank=rank, world_size=2, seed=1)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=4, num_workers=2, collate_fn=collate, multiprocessing_context="fork"
        )
        rank_indices = [i for batch in loader for i in batch["sample_index"].tolist()]
        assert sorted(rank_indices) == sorted(indices(dataset))
        served += rank_indices
    assert sorted(served) == list(range(synth.manifest.num_samples))


def test_seed_and_epoch_fix_the_order(synth: Built) -> None:
    def order(seed: int, epoch: int = 0) -> list[int]:
        return indices(make_dataset(str(synth.directory), seed=seed, epoch=epoch))

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert order(1, epoch=0) != order(1, epoch=1)
    assert sorted(order(3)) == list(range(synth.manifest.num_samples))


def test_placement_from_environment(synth: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    dataset = make_dataset(str(synth.directory))
    assert (dataset.rank, dataset.world_size) == (2, 3)
    with pytest.raises(ValueError, match="rank=3, world_size=3"):
        make_dataset(str(synth.directory), rank=3)


# --- refusals ----------------------------------------------------------------------------------


def copy_set(built: Built, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built.directory, tmp_path / "copy"))


def rewrite_manifest(directory: Path, **changes: object) -> None:
    path = directory / MANIFEST_NAME
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_corrupt_shard_raises_naming_it_on_first_use(synth: Built, tmp_path: Path) -> None:
    directory = copy_set(synth, tmp_path)
    victim = synth.manifest.shards[1].name
    data = bytearray((directory / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (directory / victim).write_bytes(bytes(data))
    dataset = make_dataset(str(directory))  # shards are verified on first use, not at startup
    with pytest.raises(ValueError, match=rf"shard {victim} .*checksum.*fm shards build synth@v1"):
        list(dataset)


def test_refuses_a_different_tokenizer(web: Built, tmp_path: Path) -> None:
    other = tmp_path / "tokenizer.json"
    other.write_text('{"not": "the same tokenizer"}')
    with pytest.raises(ValueError, match=r"tokenized with tokenizer [0-9a-f]{64}.*fm shards build"):
        make_dataset(str(web.directory), tokenizer=str(other))
    with pytest.raises(ValueError, match="expected_tokenizer_hash has hash " + "f" * 64):
        make_dataset(str(web.directory), expected_tokenizer_hash="f" * 64)
    dataset = make_dataset(str(web.directory), tokenizer=str(NEOX_TOKENIZER), seq_len=256)
    assert (
        dataset.manifest.tokenizer_hash == hashlib.sha256(NEOX_TOKENIZER.read_bytes()).hexdigest()
    )


def test_refuses_schema_and_format_mismatches(
    synth: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="the trainer expects " + "0" * 64):
        make_dataset(str(synth.directory), expected_schema_fingerprint="0" * 64)
    with pytest.raises(ValueError, match="seq_len 64, the trainer asked for 128"):
        make_dataset(str(synth.directory), seq_len=128)
    directory = copy_set(synth, tmp_path)
    rewrite_manifest(directory, schema_fingerprint="1" * 64)
    with pytest.raises(ValueError, match="but this loader computes"):
        make_dataset(str(directory))
    rewrite_manifest(directory, format_version=3)
    with pytest.raises(ValueError, match="unsupported shard-set manifest format_version 3"):
        make_dataset(str(directory))
    rewrite_manifest(directory, format_version=2)  # the pair-set format: its fields are missing
    with pytest.raises(ValueError, match="manifest field 'buckets' must be a list"):
        make_dataset(str(directory))
    with pytest.raises(ValueError, match=r"fm_manifest\.json is missing"):
        make_dataset(str(tmp_path))
    # A store that cannot be reached is retried, then named as unavailable (not as a bad set).
    monkeypatch.setattr(retry.time, "sleep", lambda seconds: None)
    with pytest.raises(retry.StorageUnavailable, match=r"shards/set/fm_manifest\.json failed"):
        make_dataset("s3://bucket/shards/set", settings=load_settings({"FM_HOME": str(tmp_path)}))


def test_import_does_not_pull_orchestration_or_stages() -> None:
    code = (
        "import sys, fm_loader\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('dagster', 'ray', 'streaming')\n"
        "       or m.startswith(('fm_assets.stages', 'fm_assets.defs', 'fm_assets.storage'))]\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_options_come_as_keywords_or_as_one_object(synth: Built) -> None:
    from dataclasses import fields

    from fm_loader import LoaderOptions
    from fm_loader.options import LoaderKeywords

    # The keywords make_dataset declares are exactly the options' fields.
    assert list(LoaderKeywords.__annotations__) == [f.name for f in fields(LoaderOptions)]
    by_keywords = make_dataset(str(synth.directory), rank=1, world_size=2, seed=3, epoch=1)
    options = LoaderOptions(rank=1, world_size=2, seed=3, epoch=1)
    assert indices(make_dataset(str(synth.directory), options)) == indices(by_keywords)
    # Keywords given beside an options object replace its fields.
    other = make_dataset(str(synth.directory), options, seed=4)
    assert other.seed == 4 and indices(other) != indices(by_keywords)
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['shuffle_windw'\]"):
        make_dataset(str(synth.directory), shuffle_windw=8)
    with pytest.raises(ValueError, match="shuffle_window and batch_size positive"):
        LoaderOptions(shuffle_window=0)


def test_a_set_of_a_sample_kind_this_loader_does_not_know_is_refused() -> None:
    from types import SimpleNamespace

    from fm_loader.samples.kind import sample_kind

    newer = SimpleNamespace(sample_kind="audio", set_key="speech@v1/abc-s16000")
    with pytest.raises(
        ValueError, match=r"kind 'audio'.*knows \['image_text', 'tokens'\].*upgrade fm_loader"
    ):
        sample_kind(newer)


# --- catalog resolution ------------------------------------------------------------------------


def register(settings: Settings, rows: list[dict[str, Any]]) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from fm_assets.storage.schemas import SHARD_SETS

    settings.home.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        settings.catalog_name, uri=settings.catalog_uri, warehouse=settings.warehouse
    )
    identifier = f"{settings.namespace}.shard_sets"
    if not catalog.namespace_exists(settings.namespace):
        catalog.create_namespace(settings.namespace)
    table = catalog.create_table_if_not_exists(identifier, schema=SHARD_SETS)
    table.append(pa.Table.from_pylist(rows, schema=SHARD_SETS))


def row(built: Built, **overrides: object) -> dict[str, Any]:
    m = built.manifest
    return {
        "shard_set_key": m.shard_set_key,
        "version_key": m.source_version,
        "shard_config": m.shard_set_key.split("/", 1)[1],
        "tokenizer_hash": m.tokenizer_hash,
        "seq_len": m.seq_len,
        "uri": built.directory.as_uri(),
        "manifest_sha256": manifest_sha256(built.directory),
        "num_samples": m.num_samples,
        "num_tokens": m.num_tokens,
        "run_id": None,
        "created_at": datetime.now(UTC),
        **overrides,
    }


def test_resolves_versions_through_the_catalog(tmp_path: Path) -> None:
    settings = load_settings({"FM_HOME": str(tmp_path / "home")})
    tok_a, tok_b = tmp_path / "a.json", tmp_path / "b.json"
    tok_a.write_text('{"tokenizer": "a"}')
    tok_b.write_text('{"tokenizer": "b"}')
    hash_a = hashlib.sha256(tok_a.read_bytes()).hexdigest()
    hash_b = hashlib.sha256(tok_b.read_bytes()).hexdigest()
    docs = synthetic_docs(60, seed=9)
    set_a = build(tmp_path / "a", docs, 64, tokenizer_hash=hash_a)
    set_b = build(tmp_path / "b", docs, 32, tokenizer_hash=hash_b)
    register(settings, [row(set_a), row(set_b)])

    with pytest.raises(ValueError, match=r"2 shard sets.*Choose one with seq_len="):
        make_dataset("synth@v1", settings=settings)
    assert make_dataset("synth@v1", seq_len=32, settings=settings).manifest == set_b.manifest
    by_tokenizer = make_dataset("synth@v1", tokenizer=str(tok_a), settings=settings)
    assert by_tokenizer.manifest == set_a.manifest
    assert sorted(indices(by_tokenizer)) == list(range(set_a.manifest.num_samples))
    with pytest.raises(ValueError, match=r"no shard set of synth@v1 matches.*Available"):
        make_dataset("synth@v1", seq_len=32, tokenizer=str(tok_a), settings=settings)
    with pytest.raises(ValueError, match=r"unknown dataset version web@v7.*fm shards build web@v7"):
        make_dataset("web@v7", settings=settings)

    # The catalog pins the manifest bytes: a shard set edited after registration is refused.
    register(settings, [row(set_a, version_key="synth@v2", manifest_sha256="0" * 64)])
    with pytest.raises(ValueError, match="changed after it was registered"):
        make_dataset("synth@v2", settings=settings)


def test_missing_catalog_means_unknown_version_and_is_not_created(tmp_path: Path) -> None:
    settings = load_settings({"FM_HOME": str(tmp_path / "empty")})
    with pytest.raises(ValueError, match="fm shards build web@v1 --tokenizer PATH --seq-len N"):
        make_dataset("web@v1", settings=settings)
    assert not (tmp_path / "empty").exists()


# --- state -------------------------------------------------------------------------------------


def test_state_dict_resumes_the_same_stream(synth: Built) -> None:
    full = indices(make_dataset(str(synth.directory), rank=1, world_size=3, seed=4, epoch=2))
    first = make_dataset(str(synth.directory), rank=1, world_size=3, seed=4, epoch=2)
    stream = iter(first)
    head = [next(stream)["sample_index"] for _ in range(17)]
    state = first.state_dict()
    # Lockstep: 17 samples on each of 3 ranks is global position 51.
    assert state["position"] == 51 and state["epoch"] == 2 and state["source_counts"] == [51]
    assert state["content_hashes"] == [manifest_sha256(synth.directory)]

    resumed = make_dataset(str(synth.directory), rank=1, world_size=3, seed=4)
    resumed.load_state_dict(state)
    assert head + indices(resumed) == full
    assert resumed.state_dict()["position"] == synth.manifest.num_samples
    resumed.set_epoch(3)
    assert resumed.state_dict()["position"] == 0


def test_load_state_dict_refuses_mismatches(synth: Built, web: Built) -> None:
    state = make_dataset(str(synth.directory), seed=4).state_dict()
    with pytest.raises(ValueError, match="seed: checkpoint has 4, this loader 5"):
        make_dataset(str(synth.directory), seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle_window: checkpoint has 65536, this loader 8"):
        make_dataset(str(synth.directory), seed=4, shuffle_window=8).load_state_dict(state)
    with pytest.raises(ValueError, match=r"content_hashes.*seq_len: checkpoint has 64"):
        make_dataset(str(web.directory), seed=4).load_state_dict(
            {**state, "sources": [str(web.directory)]}
        )
    with pytest.raises(ValueError, match="format_version 9"):
        make_dataset(str(synth.directory), seed=4).load_state_dict({**state, "format_version": 9})
    with pytest.raises(ValueError, match="past this epoch"):
        make_dataset(str(synth.directory), seed=4).load_state_dict(
            {**state, "position": 10**9, "source_counts": [10**9]}
        )
    # A world-size change is not a mismatch: the state is global (elastic resume).
    make_dataset(str(synth.directory), seed=4, rank=1, world_size=2).load_state_dict(state)
