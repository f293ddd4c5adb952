"""The loader's side of provenance, with no platform: run records and revocation markers beside a
shard set directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fm_assets.shards.packing import pack_documents
from fm_assets.shards.writer import ShardSetHeader, sequence_tokens, write_shard_set
from fm_loader import make_dataset
from fm_loader.sources.provenance import (
    PROVENANCE_FORMAT_VERSION,
    REVOCATION_NAME,
    Revocation,
    RunRecord,
    read_run_records,
    write_revocation,
)


@pytest.fixture
def shard_dir(tmp_path: Path) -> Path:
    """A small synthetic shard set of synth@v1 (60 documents, seq_len 64)."""
    rng = np.random.default_rng(0)
    docs = {
        f"{i:064x}": rng.integers(1, 1000, int(n)).astype(np.int32)
        for i, n in enumerate(rng.integers(1, 200, 60))
    }
    sequences = pack_documents([(d, len(t)) for d, t in docs.items()], 64, shuffle_seed=0)
    directory = tmp_path / "set"
    write_shard_set(
        [(s, sequence_tokens(s, docs)) for s in sequences],
        str(directory),
        seq_len=64,
        vocab_size=1000,
        pad_token_id=0,
        header=ShardSetHeader("synth@v1/aaaaaaaaaaaa-s64", "synth@v1", "0" * 64, "a" * 64),
    )
    return directory


def test_rank_zero_records_the_run_and_each_checkpoint(shard_dir: Path) -> None:
    rank0 = make_dataset(str(shard_dir), rank=0, world_size=2, run_id="run-7")
    rank1 = make_dataset(str(shard_dir), rank=1, world_size=2, run_id="run-7")
    (record,) = read_run_records(str(shard_dir))
    assert (record.run_id, record.position, record.world_size) == ("run-7", 0, 2)
    assert record.shard_set_key == rank0.manifest.shard_set_key
    for _, _ in zip(range(3), iter(rank0), strict=False):
        pass
    rank0.state_dict()
    rank1.state_dict(consumed_samples=1)  # rank 1 never writes: it would race rank 0
    (record,) = read_run_records(str(shard_dir))
    assert record.position == 6  # 3 samples on each of 2 ranks


def test_a_run_id_that_is_not_a_safe_object_name_is_refused(shard_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"run_id '\.\./x' must be"):
        make_dataset(str(shard_dir), rank=0, world_size=1, run_id="../x")


def test_a_revoked_set_is_refused_unless_auditing(shard_dir: Path) -> None:
    marker = Revocation(
        format_version=PROVENANCE_FORMAT_VERSION,
        revocation_id="rev-1",
        reason="licensor withdrew consent",
        revoked_by="alice",
        revoked_at="2026-05-05T00:00:00+00:00",
        replacement="synth@v2/aaaaaaaaaaaa-s64",
    )
    write_revocation(str(shard_dir), marker, None)
    with pytest.raises(ValueError, match=r"revoked: licensor withdrew consent.*synth@v2"):
        make_dataset(str(shard_dir), rank=0, world_size=1)
    assert len(make_dataset(str(shard_dir), rank=0, world_size=1, allow_revoked=True)) > 0


def test_records_of_another_format_are_refused(shard_dir: Path) -> None:
    (shard_dir / REVOCATION_NAME).write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ValueError, match=r"format_version 99.*upgrade fm_loader"):
        make_dataset(str(shard_dir), rank=0, world_size=1)
    text = RunRecord(
        PROVENANCE_FORMAT_VERSION, "r", "k", "v@v1", "0" * 64, ("v@v1",), 1, 0, 0, 0, (0,), "t"
    ).to_json()
    with pytest.raises(ValueError, match=r"unknown fields \['extra'\]"):
        RunRecord.from_json(json.dumps(json.loads(text) | {"extra": 1}))
