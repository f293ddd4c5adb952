"""Tokenizing in the loader: real WARC text sets, a tokenizer given at load time, packed on the fly.

Every document's tokens are served exactly once (as the platform's tokenize stage would make
them), with workers and ranks, across an elastic restart from merged rank states; the state
pins the tokenizer.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from fm_assets.shards.text_export import write_text_set
from fm_loader import make_dataset, make_loader, merge_states
from fm_loader.serving.online import OnlineDataset
from tests.paths import LLAMA_TOKENIZER, NEOX_TOKENIZER, WGET_WARC, WGET_WARC_2
from tests.shard_sets import warc_texts

SEQ_LEN = 256
EOS = "<|endoftext|>"


def text_set(directory: Path, warc: Path, version: str) -> dict[str, str]:
    texts = warc_texts(warc)
    docs = sorted(texts.items())
    write_text_set(
        iter(docs),
        directory,
        text_set_key=version,
        version_content_hash="c" * 64,
        size_limit_bytes=32 << 10,  # several shards
    )
    return texts


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, str]]]:
    root = tmp_path_factory.mktemp("texts")
    return {
        "web": (root / "web", text_set(root / "web", WGET_WARC, "web@v1")),
        "code": (root / "code", text_set(root / "code", WGET_WARC_2, "code@v1")),
    }


def expected_tokens(texts: dict[str, str]) -> dict[str, list[int]]:
    """What the platform's tokenize stage stores: no special tokens, EOS appended."""
    tokenizer = Tokenizer.from_file(str(NEOX_TOKENIZER))
    eos = tokenizer.token_to_id(EOS)
    out = {}
    for doc_id, encoding in zip(
        texts, tokenizer.encode_batch(list(texts.values()), add_special_tokens=False), strict=True
    ):
        if encoding.ids:
            out[doc_id] = [*encoding.ids, eos]
    return out


def online(source: Any, **kwargs: Any) -> OnlineDataset:
    dataset = make_dataset(
        source, tokenizer=str(NEOX_TOKENIZER), seq_len=SEQ_LEN, tokenize_online=True, **kwargs
    )
    assert isinstance(dataset, OnlineDataset)
    return dataset


def documents_from(samples: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each document's tokens, from the segments that carry it (the pieces of a document longer
    than seq_len are packed apart, in no particular order: compared as multisets)."""
    segments: dict[str, list[tuple[int, list[int]]]] = defaultdict(list)
    order: dict[str, int] = defaultdict(int)
    for sample in samples:
        cu = sample["cu_seqlens"].tolist()
        ids = sample["input_ids"].tolist()
        for doc, start, end in zip(sample["doc_ids"], cu[:-1], cu[1:], strict=False):
            segments[doc].append((order[doc], ids[start:end]))
            order[doc] += 1
    return {doc: [t for _, part in sorted(parts) for t in part] for doc, parts in segments.items()}


def test_every_document_is_served_once_as_the_platform_tokenizes_it(
    texts: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    directory, docs = texts["web"]
    samples = list(online(str(directory), seed=3, docs_per_pack=8))
    expected = expected_tokens(docs)
    got = documents_from(samples)
    assert got.keys() == expected.keys()
    # A long document is cut into seq_len pieces packed apart: sort its pieces by content.
    for doc, tokens in expected.items():
        assert sorted(got[doc]) == sorted(tokens), doc
    assert sum(len(t) for t in got.values()) == sum(int(s["num_tokens"]) for s in samples)
    for sample in samples:  # the shard sets' sample layout and label convention
        ids, labels = sample["input_ids"], sample["labels"]
        real = int(sample["num_tokens"])
        assert ids.shape == (SEQ_LEN,) and bool((labels[real:] == -100).all())
        assert int(sample["loss_mask"].sum()) + len(sample["doc_ids"]) == real
    groups = {(int(s["pack_group"]), int(s["pack_index"])) for s in samples}
    assert len(groups) == len(samples)


def stream(batches: list[dict[str, Any]]) -> list[tuple[int, int, bytes]]:
    return [
        (int(g), int(i), ids.numpy().tobytes())
        for b in batches
        for g, i, ids in zip(b["pack_group"], b["pack_index"], b["input_ids"], strict=True)
    ]


def test_workers_and_ranks_split_the_samples_exactly(
    texts: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    directory = str(texts["web"][0])
    reference = stream(list(make_loader(online(directory, docs_per_pack=8), batch_size=4)))
    served: list[tuple[int, int, bytes]] = []
    for rank in range(3):
        dataset = online(directory, docs_per_pack=8, rank=rank, world_size=3)
        served += stream(list(make_loader(dataset, batch_size=4, num_workers=2)))
    assert sorted(served) == sorted(reference)


def test_an_elastic_restart_from_merged_rank_states_serves_each_sample_once(
    texts: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    mixture = {str(texts["web"][0]): 0.6, str(texts["code"][0]): 0.4}
    reference = stream(list(make_loader(online(mixture, seed=5, docs_per_pack=6), batch_size=4)))
    # Job 1: 2 ranks with 2 workers each, 5 steps of 3 samples, then a checkpoint.
    served: list[tuple[int, int, bytes]] = []
    states = []
    for rank in range(2):
        dataset = online(mixture, seed=5, docs_per_pack=6, rank=rank, world_size=2)
        loader = make_loader(dataset, batch_size=3, num_workers=2)
        batches = iter(loader)
        served += stream([next(batches) for _ in range(5)])
        states.append(loader.state_dict())
        batches.close()  # type: ignore[attr-defined]
    state = json.loads(json.dumps(merge_states(states)))  # survives a JSON checkpoint
    assert state["partial"] or state["done"] or state["frontier"]
    # Job 2: 3 ranks, 1 worker each, batch size 4, to the end of the epoch.
    for rank in range(3):
        dataset = online(mixture, seed=5, docs_per_pack=6, rank=rank, world_size=3)
        loader = make_loader(dataset, batch_size=4, num_workers=1)
        loader.load_state_dict(state)
        served += stream(list(loader))
    assert len(served) == len(set(served)) == len(reference)
    assert sorted(served) == sorted(reference)


def test_the_state_pins_the_tokenizer_and_refuses_a_shard_set_state(
    texts: dict[str, tuple[Path, dict[str, str]]], web: Any
) -> None:
    directory = str(texts["web"][0])
    dataset = online(directory)
    next(iter(dataset))
    state = dataset.state_dict()
    other = make_dataset(
        directory, tokenizer=str(LLAMA_TOKENIZER), seq_len=SEQ_LEN, tokenize_online=True
    )
    with pytest.raises(ValueError, match=r"tokenizer_hash: checkpoint has"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="not one of a dataset tokenized in the loader"):
        dataset.load_state_dict(make_dataset(str(web.directory)).state_dict())


def test_online_needs_a_tokenizer_and_a_seq_len(
    texts: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    with pytest.raises(ValueError, match=r"tokenize_online=True\) needs the tokenizer"):
        make_dataset(str(texts["web"][0]), tokenize_online=True, seq_len=SEQ_LEN)


def test_in_process_iteration_resumes_from_its_own_state(
    texts: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    directory = str(texts["web"][0])

    def key(sample: dict[str, Any]) -> tuple[int, int, bytes]:
        return (
            int(sample["pack_group"]),
            int(sample["pack_index"]),
            sample["input_ids"].numpy().tobytes(),
        )

    reference = [key(s) for s in online(directory, docs_per_pack=5)]
    first = online(directory, docs_per_pack=5)
    samples = iter(first)
    served = [key(next(samples)) for _ in range(17)]
    again = online(directory, docs_per_pack=5)
    again.load_state_dict(first.state_dict())
    served += [key(s) for s in again]
    assert sorted(served) == sorted(reference) and len(served) == len(set(served))


def test_a_version_key_finds_its_text_set_through_the_catalog_as_shard_sets_do(
    texts: dict[str, tuple[Path, dict[str, str]]], tmp_path: Path
) -> None:
    """Text sets go through the same lookup as shard sets: the latest registration in the
    catalog, pinned by its manifest's sha256, with the same refusals."""
    import datetime as dt
    import hashlib

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from fm_assets.settings import load_settings
    from fm_assets.shards.text_export import TEXT_SETS

    directory = texts["web"][0]
    digest = hashlib.sha256((directory / "fm_text_manifest.json").read_bytes()).hexdigest()
    settings = load_settings({"FM_HOME": str(tmp_path / "home")})
    settings.home.mkdir(parents=True)
    catalog = SqlCatalog(
        settings.catalog_name, uri=settings.catalog_uri, warehouse=settings.warehouse
    )
    catalog.create_namespace(settings.namespace)
    table = catalog.create_table(f"{settings.namespace}.text_sets", schema=TEXT_SETS)

    def register(version: str, sha: str, at: int) -> None:
        row = {
            "version_key": version,
            "uri": directory.as_uri(),
            "manifest_sha256": sha,
            "num_documents": 1,
            "num_bytes": 1,
            "run_id": None,
            "created_at": dt.datetime(2024, 1, at, tzinfo=dt.UTC),
        }
        table.append(pa.Table.from_pylist([row], schema=TEXT_SETS))

    # An older registration pinning other bytes, then the current one: the latest wins.
    register("web@v1", "0" * 64, 1)
    register("web@v1", digest, 2)
    by_key = [s["doc_ids"] for s in online("web@v1", settings=settings)]
    assert by_key == [s["doc_ids"] for s in online(str(directory))]
    with pytest.raises(ValueError, match=r"unknown dataset version web@v9.*fm text export web@v9"):
        online("web@v9", settings=settings)
    register("web@v2", "0" * 64, 3)  # the set's bytes differ from what the catalog pinned
    with pytest.raises(ValueError, match="text set changed after it was registered"):
        online("web@v2", settings=settings)
    register("web@v3", digest, 4)  # a row pointing at another version's text
    with pytest.raises(ValueError, match="says it was built from web@v1"):
        online("web@v3", settings=settings)
