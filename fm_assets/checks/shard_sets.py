"""Checks on a shard set: checksums, token counts, sample provenance, and the contamination gate.

The checks read a local directory. A set published on S3 is checked on a fresh download of
what the store holds (`published_copy`), not on the staging copy it was uploaded from, so a
failed or damaged upload fails the checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow.fs as pafs

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.contamination.store import load_matcher, registry_ref
from fm_assets.settings import Settings
from fm_assets.storage.objectstore import filesystem_for
from fm_assets.versions.contamination_scan import scan_version
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents
from fm_loader.format.manifest import INDEX_NAME, ShardSetManifest, local_directory
from fm_loader.format.pair_set import PairSet, PairSetManifest
from fm_loader.format.shard_set import ShardSet
from fm_loader.storage.cache import is_remote
from fm_loader.storage.fetch import DOWNLOAD_THREADS, copy_remote_file

SAMPLES_PER_READ = 1024  # samples decoded at a time: a few MB of tokens at any seq_len used


def open_set(directory: Path, manifest: ShardSetManifest) -> ShardSet | PairSet:
    """The set's shards, read in place: packed token samples, or image-text pairs."""
    if isinstance(manifest, PairSetManifest):
        return PairSet(directory, manifest)
    return ShardSet(directory, manifest)


def sample_segments(
    shard_set: ShardSet | PairSet,
) -> Iterator[tuple[int, list[str], npt.NDArray[np.int32]]]:
    """(index, doc ids, (start, length, doc offset) rows) of every sample, read in place as the
    loader reads them for a trainer (no torch: the checks run inside `fm shards build`). A pair
    is one segment: its caption's tokens."""
    for first in range(0, len(shard_set), SAMPLES_PER_READ):
        indices = np.arange(first, min(first + SAMPLES_PER_READ, len(shard_set)), dtype=np.int64)
        if isinstance(shard_set, PairSet):
            pairs = shard_set.read_raw(indices)
            for index, doc_id, tokens in zip(
                indices.tolist(), pairs.doc_ids, pairs.input_ids, strict=True
            ):
                yield index, [doc_id], np.array([[0, len(tokens), 0]], np.int32)
            continue
        _, views, doc_ids = shard_set.read_raw(indices)
        # Copies: views into a shard's memory map would keep the set from closing.
        spans = [rows.reshape(-1, 3).copy() for rows in views]
        del views
        for index, ids, rows in zip(indices.tolist(), doc_ids, spans, strict=True):
            yield index, ids if ids != [""] else [], rows


@contextlib.contextmanager
def published_copy(uri: str, manifest: ShardSetManifest, s3_endpoint: str | None) -> Iterator[str]:
    """A local directory with the files of the shard set published at `uri`, for the checks.

    A local set is checked in place. A remote one is downloaded as it is, unverified (judging
    it is the checks' job) into a temporary directory removed afterwards; objects missing from
    the store stay missing in the copy.
    """
    if not is_remote(uri):
        yield str(local_directory(uri))
        return
    fs, remote = filesystem_for(uri, s3_endpoint)
    with tempfile.TemporaryDirectory(prefix="fm-shard-check-") as tmp:

        def fetch(name: str) -> None:
            path = f"{remote.rstrip('/')}/{name}"
            if fs.get_file_info(path).type == pafs.FileType.File:
                copy_remote_file(fs, path, Path(tmp) / name)

        names = [INDEX_NAME, *(shard.name for shard in manifest.shards)]
        with ThreadPoolExecutor(max_workers=DOWNLOAD_THREADS) as pool:
            list(pool.map(fetch, names))  # list(): re-raise a failed download here
        yield tmp


def shard_checksums_valid(directory: str, manifest: ShardSetManifest) -> CheckOutcome:
    """Every shard's bytes hash to the manifest's sha256."""
    bad = []
    for shard in manifest.shards:
        path = Path(directory) / shard.name
        if not path.is_file():
            bad.append(f"{shard.name}: missing")
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
        if digest.hexdigest() != shard.sha256:
            bad.append(f"{shard.name}: sha256 {digest.hexdigest()[:12]} != {shard.sha256[:12]}")
    return CheckOutcome(
        "shard_checksums_valid",
        not bad,
        "; ".join(bad) or f"{len(manifest.shards)} shards match their checksums",
        {"shards": len(manifest.shards)},
    )


def token_counts_match_version(manifest: ShardSetManifest, documents_tokens: int) -> CheckOutcome:
    """The shard set holds exactly the tokens of the version's documents: none lost or added."""
    ok = manifest.num_tokens == documents_tokens
    return CheckOutcome(
        "token_counts_match_version",
        ok,
        f"manifest {manifest.num_tokens} tokens, version documents {documents_tokens} tokens",
        {"manifest_tokens": manifest.num_tokens, "document_tokens": documents_tokens},
    )


def samples_carry_provenance(
    directory: str, manifest: ShardSetManifest, settings: Settings, version: DatasetVersion
) -> CheckOutcome:
    """Every sample names documents of the version, with spans that tile its real tokens.

    Also re-derives the shard set's token and document totals from the samples themselves.
    """
    known = set(
        version_documents(settings, version, version.pipeline.final, ("doc_id",))
        .column("doc_id")
        .to_pylist()
    )
    shard_set = open_set(Path(directory), manifest)
    problems: list[str] = []
    seen_docs: set[str] = set()
    tokens = 0
    try:
        for index, doc_ids, spans in sample_segments(shard_set):
            if len(doc_ids) != len(spans):
                problems.append(f"{shard_set.where(index)}: {len(doc_ids)} ids, {len(spans)} spans")
                continue
            position = 0
            for start, length, _offset in spans.tolist():
                if start != position or length <= 0:
                    problems.append(f"{shard_set.where(index)}: spans do not tile the sample")
                    break
                position += length
            unknown = [d for d in doc_ids if d not in known]
            if unknown:
                problems.append(
                    f"{shard_set.where(index)}: {len(unknown)} documents not in version"
                )
            seen_docs.update(doc_ids)
            tokens += position
            if len(problems) >= 5:
                break
    finally:
        shard_set.close()
    if not problems and tokens != manifest.num_tokens:
        problems.append(f"samples hold {tokens} tokens, manifest says {manifest.num_tokens}")
    if not problems and seen_docs != known:
        problems.append(f"{len(known - seen_docs)} version documents appear in no sample")
    return CheckOutcome(
        "samples_carry_provenance",
        not problems,
        "; ".join(problems)
        or f"{len(shard_set)} samples name {len(seen_docs)} version documents, {tokens} tokens",
        {"samples": len(shard_set), "documents": len(seen_docs)},
    )


def no_contaminated_samples(
    settings: Settings, directory: str, manifest: ShardSetManifest, version: DatasetVersion
) -> CheckOutcome:
    """The gate: no sample of the shard set holds a document matching the current registry."""
    ref = registry_ref(settings)
    flagged = {row["doc_id"] for row in scan_version(settings, version, ref)}
    shard_set = open_set(Path(directory), manifest)
    bad_samples = 0
    try:
        for _, ids, _ in sample_segments(shard_set):
            bad_samples += bool(flagged.intersection(ids))
    finally:
        shard_set.close()
    benchmarks = load_matcher(settings, ref).item_count
    description = (
        f"0 of {manifest.num_samples} samples match the registry ({benchmarks} items)"
        if not bad_samples
        else f"{bad_samples} of {manifest.num_samples} samples hold {len(flagged)} documents "
        f"matching registered eval items; rerun the batches (`fm run --batch ID`: the "
        "decontamination stage now sees the registry), cut a new version and rebuild"
    )
    return CheckOutcome(
        "no_contaminated_samples",
        bad_samples == 0,
        description,
        {"contaminated_samples": bad_samples, "contaminated_documents": len(flagged)},
    )
