"""MDS shard sets: on-disk columns, exact token round trip, manifest and checksums, failures."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from fm_assets.shards.packing import PackedSequence, Segment, pack_documents
from fm_assets.shards.writer import (
    ShardSetHeader,
    manifest_sha256,
    sequence_tokens,
    token_dtype_for,
    write_shard_set,
)
from fm_loader.format.manifest import (
    INDEX_NAME,
    MANIFEST_NAME,
    ShardSetManifest,
    mds_columns,
    read_manifest,
    schema_fingerprint,
)
from tests.paths import NEOX_TOKENIZER, WGET_WARC
from tests.shard_sets import PAD, VOCAB, Docs, sha, synthetic_docs, warc_texts


def header(version: str = "synth@v1", tokenizer_hash: str = "a" * 64) -> ShardSetHeader:
    return ShardSetHeader(
        shard_set_key=f"{version}/{tokenizer_hash[:12]}-s64",
        source_version=version,
        version_content_hash="c" * 64,
        tokenizer_hash=tokenizer_hash,
    )


def write_docs(
    docs: Docs, out: str | tuple[str, str], seq_len: int = 64, **kw: Any
) -> tuple[list[PackedSequence], ShardSetManifest]:
    seqs = pack_documents([(d, len(t)) for d, t in docs.items()], seq_len, shuffle_seed=0)
    items = [(s, sequence_tokens(s, docs)) for s in seqs]
    kw.setdefault("header", header())
    manifest = write_shard_set(
        items, out, seq_len=seq_len, vocab_size=VOCAB, pad_token_id=PAD, **kw
    )
    return seqs, manifest


def read_mds(directory: Path) -> list[dict[str, Any]]:
    """Every sample, decoded by mosaicml-streaming's own reader (independent of fm_loader)."""
    from streaming.base.format import reader_from_json

    index = json.loads((directory / INDEX_NAME).read_text())
    readers = [reader_from_json(str(directory), None, shard) for shard in index["shards"]]
    return [reader.get_item(i) for reader in readers for i in range(reader.samples)]


def assert_round_trip(
    samples: list[dict[str, Any]], seqs: list[PackedSequence], docs: Docs, seq_len: int
) -> None:
    assert len(samples) == len(seqs)
    for sample, seq in zip(samples, seqs, strict=True):
        expected = np.full(seq_len, PAD)
        expected[: seq.num_tokens] = np.concatenate(
            [docs[s.doc_id][s.doc_offset : s.doc_offset + s.length] for s in seq.segments]
        )
        np.testing.assert_array_equal(sample["input_ids"], expected)
        assert sample["doc_ids"].split("\n") == [s.doc_id for s in seq.segments]
        starts = np.cumsum([0] + [s.length for s in seq.segments])[:-1]
        triples = [
            (int(a), s.length, s.doc_offset) for a, s in zip(starts, seq.segments, strict=True)
        ]
        assert sample["doc_spans"].reshape(-1, 3).tolist() == [list(t) for t in triples]


def test_token_dtype_for() -> None:
    assert token_dtype_for(50_280) == "uint16"
    assert token_dtype_for(65_536) == "uint16"
    assert token_dtype_for(65_537) == "uint32"
    assert token_dtype_for(128_256) == "uint32"
    with pytest.raises(ValueError):
        token_dtype_for(0)


def test_synthetic_round_trip_manifest_and_checksums(tmp_path: Path) -> None:
    docs = synthetic_docs(400)
    out = tmp_path / "set"
    seqs, manifest = write_docs(docs, str(out), size_limit_bytes=8 << 10)

    assert len(manifest.shards) > 1, "size limit should split the set into several shards"
    assert (out / MANIFEST_NAME).is_file()
    assert read_manifest(out) == manifest == read_manifest(out.as_uri())
    assert ShardSetManifest.from_json(manifest.to_json()) == manifest
    assert manifest.format_version == 1
    assert manifest.token_dtype == "uint16"
    assert manifest.schema_fingerprint == schema_fingerprint(64, "uint16")
    assert manifest.num_samples == len(seqs) == sum(s.samples for s in manifest.shards)
    assert manifest.num_tokens == sum(len(t) for t in docs.values())
    assert manifest.num_tokens == sum(s.tokens for s in manifest.shards)
    assert manifest.num_documents == len(docs)
    assert manifest.packing_efficiency == pytest.approx(manifest.num_tokens / (len(seqs) * 64))
    for shard in manifest.shards:
        data = (out / shard.name).read_bytes()
        assert shard.sha256 == hashlib.sha256(data).hexdigest()
        assert shard.bytes == len(data)
    assert manifest_sha256(out) == hashlib.sha256((out / MANIFEST_NAME).read_bytes()).hexdigest()

    index = json.loads((out / INDEX_NAME).read_text())
    columns = mds_columns(64, "uint16")
    for shard in index["shards"]:
        assert dict(zip(shard["column_names"], shard["column_encodings"], strict=True)) == columns
        assert shard["compression"] is None
    assert_round_trip(read_mds(out), seqs, docs, 64)


def test_per_shard_token_counts(tmp_path: Path) -> None:
    docs = synthetic_docs(300, seed=3)
    seqs, manifest = write_docs(docs, str(tmp_path / "set"), size_limit_bytes=4 << 10)
    first = 0
    for shard in manifest.shards:
        chunk = seqs[first : first + shard.samples]
        assert shard.tokens == sum(s.num_tokens for s in chunk)
        first += shard.samples


def test_real_text_round_trip(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(NEOX_TOKENIZER))
    texts = warc_texts(WGET_WARC)
    assert len(texts) >= 15
    encodings = tokenizer.encode_batch(list(texts.values()))
    docs = {d: np.asarray(e.ids, dtype=np.int64) for d, e in zip(texts, encodings, strict=True)}
    vocab = tokenizer.get_vocab_size()
    pad = tokenizer.token_to_id("<|padding|>")
    tok_hash = hashlib.sha256(NEOX_TOKENIZER.read_bytes()).hexdigest()
    seqs = pack_documents([(d, len(t)) for d, t in docs.items()], 512, shuffle_seed=1)
    manifest = write_shard_set(
        [(s, sequence_tokens(s, docs)) for s in seqs],
        str(tmp_path / "warc"),
        seq_len=512,
        vocab_size=vocab,
        pad_token_id=pad,
        header=header("web@v1", tok_hash),
    )
    assert manifest.tokenizer_hash == tok_hash
    assert manifest.num_documents == len(docs)
    assert manifest.num_tokens == sum(len(t) for t in docs.values())
    samples = read_mds(tmp_path / "warc")
    for sample, seq in zip(samples, seqs, strict=True):
        n = seq.num_tokens
        np.testing.assert_array_equal(sample["input_ids"][:n], sequence_tokens(seq, docs))
        assert (sample["input_ids"][n:] == pad).all()
    # A whole document read back from its segments decodes to the text it was tokenized from.
    doc, text = next((d, t) for d, t in texts.items() if len(docs[d]) < 512)
    seq = next(s for s in seqs if any(seg.doc_id == doc for seg in s.segments))
    sample = samples[seqs.index(seq)]
    start = 0
    for seg in seq.segments:
        if seg.doc_id == doc:
            ids = sample["input_ids"][start : start + seg.length].tolist()
            assert tokenizer.decode(ids) == text
        start += seg.length


def test_upload_to_remote_directory(tmp_path: Path) -> None:
    docs = synthetic_docs(50)
    local, remote = tmp_path / "local", tmp_path / "remote"
    _, manifest = write_docs(docs, (str(local), str(remote)))
    for name in [MANIFEST_NAME, INDEX_NAME, *(s.name for s in manifest.shards)]:
        assert (remote / name).read_bytes() == (local / name).read_bytes()


@pytest.mark.parametrize(
    ("sequence", "tokens", "match"),
    [
        (PackedSequence((Segment(sha("x"), 0, 4),)), np.arange(1, 4), "shape"),
        (PackedSequence((Segment(sha("x"), 0, 3),)), np.array([1, 2, VOCAB]), "vocabulary"),
        (PackedSequence((Segment("not-a-sha", 0, 3),)), np.arange(1, 4), "64-hex"),
        (PackedSequence(()), np.arange(0), "no segments"),
        (PackedSequence((Segment(sha("x"), 0, 65),)), np.ones(65, int), "more than seq_len"),
    ],
)
def test_invalid_sequences_leave_no_shard_set(
    tmp_path: Path, sequence: PackedSequence, tokens: npt.NDArray[Any], match: str
) -> None:
    good = PackedSequence((Segment(sha("ok"), 0, 5),))
    items = [(good, np.arange(1, 6)), (sequence, tokens)]
    out = tmp_path / "bad"
    with pytest.raises(ValueError, match=match):
        write_shard_set(
            items, str(out), seq_len=64, vocab_size=VOCAB, pad_token_id=0, header=header()
        )
    assert not (out / MANIFEST_NAME).exists()
    assert not (out / INDEX_NAME).exists()


def test_rejects_empty_input_and_bad_pad(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no sequences"):
        write_shard_set(
            [], str(tmp_path / "e"), seq_len=8, vocab_size=VOCAB, pad_token_id=0, header=header()
        )
    assert not (tmp_path / "e" / MANIFEST_NAME).exists()
    with pytest.raises(ValueError, match="pad_token_id"):
        write_shard_set(
            [],
            str(tmp_path / "p"),
            seq_len=8,
            vocab_size=VOCAB,
            pad_token_id=VOCAB,
            header=header(),
        )


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    docs = synthetic_docs(20)
    write_docs(docs, str(tmp_path / "set"))
    with pytest.raises(FileExistsError):
        write_docs(docs, str(tmp_path / "set"))


def test_manifest_rejects_unknown_versions_and_fields(tmp_path: Path) -> None:
    _, manifest = write_docs(synthetic_docs(20), str(tmp_path / "set"))
    obj = json.loads(manifest.to_json())
    with pytest.raises(ValueError, match="format_version 2"):
        ShardSetManifest.from_json(json.dumps({**obj, "format_version": 2}))
    with pytest.raises(ValueError, match="unknown \\['extra'\\]"):
        ShardSetManifest.from_json(json.dumps({**obj, "extra": 1}))
    with pytest.raises(ValueError, match="'seq_len' must be int"):
        ShardSetManifest.from_json(json.dumps({**obj, "seq_len": "64"}))
    with pytest.raises(ValueError, match="num_samples"):
        ShardSetManifest.from_json(json.dumps({**obj, "num_samples": obj["num_samples"] + 1}))
    with pytest.raises(ValueError, match="missing"):
        read_manifest(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.seq_len = 1  # type: ignore[misc]


_LIGHT_WRITE = """
import sys
from pathlib import Path
from tests.test_shard_writer import write_docs
from tests.shard_sets import synthetic_docs

out = Path(sys.argv[1])
_, manifest = write_docs(synthetic_docs(5, seed=3), str(out))
heavy = sorted(m for m in ("torch", "transformers", "torchvision") if m in sys.modules)
print("heavy:", ",".join(heavy) or "-")
from streaming import StreamingDataset  # the whole library is still there when asked for

rows = list(StreamingDataset(local=str(out), batch_size=1, shuffle=False))
print("read:", len(rows), "of", manifest.num_samples)
"""


def test_writing_shards_imports_neither_torch_nor_streamings_datasets(tmp_path: Path) -> None:
    """`fm shards build` pays for no torch (1.4-1.9 s) and no transformers or torchvision
    (5-7 s); a later `from streaming import ...` in the same process still gets the library,
    and its StreamingDataset reads every sample written."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _LIGHT_WRITE, str(tmp_path / "set")],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines["heavy"] == "-"
    read, _, written = lines["read"].partition(" of ")
    assert read == written and int(read) > 0


@pytest.mark.parametrize("size_limit", [64 << 20, 3 << 10, 700, 400])
def test_shards_are_byte_identical_to_mdswriters(tmp_path: Path, size_limit: int) -> None:
    """The same samples through mosaicml-streaming's MDSWriter give the same files, byte for
    byte: every shard and index.json (one shard; several; one or two samples a shard; a limit
    below a header and one sample, where MDSWriter starts with an empty shard)."""
    from streaming.base.format.mds.writer import MDSWriter

    from fm_assets.shards.writer import SampleEncoder

    docs = synthetic_docs(40, seed=5)
    seqs, manifest = write_docs(docs, str(tmp_path / "ours"), size_limit_bytes=size_limit)
    encoder = SampleEncoder(64, VOCAB, PAD, manifest.token_dtype)
    theirs = tmp_path / "theirs"
    with MDSWriter(
        columns=encoder.columns,
        out=str(theirs),
        compression=None,
        hashes=["sha256"],
        size_limit=size_limit,
    ) as writer:
        for number, seq in enumerate(seqs):
            writer.write(encoder.encode(number, seq, sequence_tokens(seq, docs)))
    names = sorted(p.name for p in theirs.iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ours").iterdir() if p.name != MANIFEST_NAME)
    assert len(names) == len(manifest.shards) + 1 > (2 if size_limit < 64 << 20 else 1)
    for name in names:
        assert (tmp_path / "ours" / name).read_bytes() == (theirs / name).read_bytes(), name
