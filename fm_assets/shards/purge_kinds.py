"""A shard's samples without purged documents, for each kind of published set.

- packed tokens (`fm shards build` of a text version): a sample loses the segments of purged
  documents; the segments that stay move to its front, in order, and the rest is padding (as a
  revocation's revision does); a sample left with no segment is dropped;
- image-text pairs: a pair of a purged document is dropped (one pair per sample);
- text sets (`fm text export`): a purged document's sample is dropped.

Each returns the samples that stay, their real tokens, and the lineage segments of what stays
(sample number inside the shard, doc id, token span, offset in the document).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.shards.lineage import SAMPLE_DOCUMENTS
from fm_assets.shards.mds import NDArrayEncoding
from fm_assets.shards.mds_samples import Sample, Shard, decode_vector
from fm_loader.format.manifest import ShardInfo, ShardSetManifest
from fm_loader.format.pair_set import PairSetManifest
from fm_loader.format.text_set import TextSetManifest


@dataclass
class Edited:
    """One shard's samples after a purge."""

    samples: list[Sample] = field(default_factory=list)
    tokens: int = 0  # real tokens of the samples that stay
    # (sample inside the shard, doc id, token_start, token_end, doc_offset) of what stays
    segments: list[tuple[int, str, int, int, int]] = field(default_factory=list)
    removed_samples: int = 0
    removed_segments: int = 0
    removed_text_bytes: int = 0  # text sets: UTF-8 bytes of the dropped documents
    removed_buckets: Counter[int] = field(default_factory=Counter)  # pair sets: per bucket
    removed_docs: set[str] = field(default_factory=set)  # documents of which something went

    @property
    def changed(self) -> bool:
        return bool(self.removed_samples or self.removed_segments)


def edit_tokens(shard: Shard, documents: Set[str], manifest: ShardSetManifest) -> Edited:
    """Packed token samples less the segments of `documents`."""
    columns = manifest.columns()
    spans_encoding = NDArrayEncoding(columns["doc_spans"])
    dtype = np.dtype(manifest.token_dtype)
    edited = Edited()
    for sample in shard.samples:
        ids = sample["doc_ids"].decode("utf-8").split("\n")
        spans = decode_vector(sample["doc_spans"], "int32").reshape(-1, 3)
        kept = [(d, s) for d, s in zip(ids, spans.tolist(), strict=True) if d not in documents]
        if len(kept) == len(ids):
            _keep(edited, sample, [(d, *s) for d, s in zip(ids, spans.tolist(), strict=True)])
            continue
        edited.removed_segments += len(ids) - len(kept)
        edited.removed_docs.update(d for d in ids if d in documents)
        if not kept:
            edited.removed_samples += 1
            continue
        tokens = np.frombuffer(sample["input_ids"], dtype)
        parts, triples, start = [], [], 0
        for _, (begin, length, offset) in kept:
            parts.append(tokens[begin : begin + length])
            triples.append((start, length, offset))
            start += length
        input_ids = np.full(manifest.seq_len, manifest.pad_token_id, dtype=dtype)
        input_ids[:start] = np.concatenate(parts)
        new = {
            "input_ids": input_ids.tobytes(),
            "doc_ids": "\n".join(d for d, _ in kept).encode("utf-8"),
            "doc_spans": spans_encoding.encode(np.asarray(triples, np.int32).reshape(-1)),
        }
        _keep(edited, new, [(d, *t) for (d, _), t in zip(kept, triples, strict=True)])
    return edited


def _keep(edited: Edited, sample: Sample, segments: list[tuple[str, int, int, int]]) -> None:
    number = len(edited.samples)
    edited.samples.append(sample)
    for doc_id, start, length, offset in segments:
        edited.segments.append((number, doc_id, start, start + length, offset))
        edited.tokens += length


def edit_pairs(shard: Shard, documents: Set[str], manifest: PairSetManifest) -> Edited:
    """Image-text pairs less those of `documents`."""
    edited = Edited()
    for sample in shard.samples:
        doc_id = sample["doc_id"].decode("utf-8")
        if doc_id in documents:
            edited.removed_samples += 1
            edited.removed_docs.add(doc_id)
            edited.removed_buckets[int(np.frombuffer(sample["geometry"], np.int32)[2])] += 1
            continue
        tokens = len(decode_vector(sample["input_ids"], manifest.token_dtype))
        number = len(edited.samples)
        edited.samples.append(sample)
        edited.segments.append((number, doc_id, 0, max(tokens, 1), 0))
        edited.tokens += tokens
    return edited


def edit_texts(shard: Shard, documents: Set[str]) -> Edited:
    """A text set's documents less `documents`."""
    edited = Edited()
    for sample in shard.samples:
        doc_id = sample["doc_id"].decode("utf-8")
        if doc_id in documents:
            edited.removed_samples += 1
            edited.removed_docs.add(doc_id)
            edited.removed_text_bytes += len(sample["text"])
            continue
        edited.samples.append(sample)
    return edited


def purged_manifest(old: Any, infos: list[ShardInfo], edits: dict[int, Edited]) -> Any:
    """`old` describing the shards `infos` after the purge's `edits`."""
    samples = sum(s.samples for s in infos)
    tokens = sum(s.tokens for s in infos)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    removed = set().union(*(e.removed_docs for e in edits.values()))
    if isinstance(old, TextSetManifest):
        text_bytes = sum(e.removed_text_bytes for e in edits.values())
        return dataclasses.replace(
            old,
            created_at=now,
            num_documents=samples,
            num_bytes=old.num_bytes - text_bytes,
            shards=tuple(infos),
        )
    fields: dict[str, Any] = {
        "created_at": now,
        "num_samples": samples,
        "num_tokens": tokens,
        "num_documents": old.num_documents - len(removed),
        "packing_efficiency": tokens / (samples * old.seq_len),
        "shards": tuple(infos),
    }
    if isinstance(old, PairSetManifest):
        gone = sum((e.removed_buckets for e in edits.values()), start=Counter[int]())
        buckets, first = [], 0
        for bucket in old.buckets:
            count = bucket.samples - gone[bucket.index]
            buckets.append(dataclasses.replace(bucket, first=first, samples=count))
            first += count
        fields |= {"buckets": tuple(buckets), "num_documents": samples, "packing_efficiency": 1.0}
    manifest = dataclasses.replace(old, **fields)
    manifest.check_consistency()
    return manifest


def purged_lineage(
    key: str, lineage: pa.Table, old: Any, new: Any, edits: dict[int, Edited]
) -> pa.Table:
    """The set's lineage after the purge: rows of untouched shards moved to their shards' new
    first sample, rows of rewritten shards from what they hold now."""
    old_bounds = np.cumsum([0] + [s.samples for s in old.shards])
    new_first = np.zeros(len(old.shards), np.int64)
    at = 0
    for i, shard in enumerate(old.shards):
        new_first[i] = at
        at += len(edits[i].samples) if i in edits else shard.samples
    samples = lineage.column("sample").to_numpy()
    shard_of = np.searchsorted(old_bounds, samples, side="right") - 1
    untouched = ~np.isin(shard_of, list(edits))
    kept = lineage.filter(pa.array(untouched))
    shift = (new_first - old_bounds[:-1])[shard_of[untouched]]
    parts = [kept.set_column(1, "sample", pa.array(samples[untouched] + shift, pa.int64()))]
    for i, edited in sorted(edits.items()):
        if not edited.segments:
            continue
        number, doc_id, start, end, offset = zip(*edited.segments, strict=True)
        parts.append(
            pa.table(
                {
                    "shard_set_key": [key] * len(doc_id),
                    "sample": np.asarray(number, np.int64) + new_first[i],
                    "doc_id": list(doc_id),
                    "token_start": list(start),
                    "token_end": list(end),
                    "doc_offset": list(offset),
                },
                schema=SAMPLE_DOCUMENTS,
            )
        )
    columns = SAMPLE_DOCUMENTS.names
    rows = pa.concat_tables([p.select(columns).cast(SAMPLE_DOCUMENTS) for p in parts])
    if rows.num_rows and int(pc.max(rows.column("sample")).as_py()) >= new.num_samples:
        raise RuntimeError(f"{key}: the purged lineage names samples past the set's end")
    return rows.sort_by([("sample", "ascending"), ("token_start", "ascending")])
