"""Published sets rewritten in place without purged documents: shard sets (packed tokens or
image-text pairs) and text sets.

Only shards holding a purged document are written again (`purge_kinds` says how, per kind),
under a new name, so the published set stays whole until its new `index.json` and manifest
replace the old ones; then the catalog row (the manifest's new sha256), the set's lineage, and
last the old shards go. `fm_purged.json` beside the manifest names the manifest the purge
replaced, first of all, so a node's cache drops its copy at the set's next open
(`fm_loader.storage.cache_purge`).

A journal beside the set (`fm_purge_journal.json`: the old manifest and index, and how far the
purge got) makes a purge killed anywhere finish when run again: the shards to rewrite are found
from the old manifest and the set's lineage as it was, which is replaced only after the new
manifest is published and registered.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import tempfile
from collections.abc import Callable, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.shards.build import register_shard_set
from fm_assets.shards.lineage import write_lineage
from fm_assets.shards.mds_samples import read_shard, write_shard
from fm_assets.shards.purge_kinds import (
    Edited,
    edit_pairs,
    edit_texts,
    edit_tokens,
    purged_lineage,
    purged_manifest,
)
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.versions.dataset_version import DatasetVersion
from fm_loader.format.manifest import INDEX_NAME, MANIFEST_NAME, ShardInfo, parse_manifest
from fm_loader.format.text_set import TEXT_MANIFEST_NAME, TextSetManifest
from fm_loader.storage.cache_purge import PURGED_NAME, PurgedManifest, PurgedManifests, with_purged

JOURNAL_NAME = "fm_purge_journal.json"
Progress = Callable[[str], None]


@dataclass
class SetPurge:
    """What a purge did to one published set."""

    key: str
    noun: str  # "shard set" or "text set"
    uri: str
    shards_total: int = 0
    shards_rewritten: int = 0  # written again (or dropped: no sample left)
    samples_removed: int = 0
    bytes_before: int = 0  # the shards' bytes
    bytes_after: int = 0
    manifest_before: str = ""
    manifest_after: str | None = None  # None: nothing was left, the set is gone

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class _Kind:
    noun: str
    manifest_name: str
    edit: Callable[[Any, Set[str], Any], Edited]


TOKENS = _Kind("shard set", MANIFEST_NAME, edit_tokens)
PAIRS = _Kind("shard set", MANIFEST_NAME, edit_pairs)
TEXTS = _Kind("text set", TEXT_MANIFEST_NAME, lambda shard, docs, _: edit_texts(shard, docs))


def _tag(revocation_id: str) -> str:
    return "p" + hashlib.sha256(revocation_id.encode()).hexdigest()[:8]


def _renamed(name: str, revocation_id: str) -> str:
    """shard.00003.mds -> shard.00003.p<tag>.mds (a purged shard's new name)."""
    stem = ".".join(name.split(".")[:2])
    return f"{stem}.{_tag(revocation_id)}.mds"


def _journal(store: ObjectStore, prefix: str, revocation_id: str) -> dict[str, Any] | None:
    key = f"{prefix}/{JOURNAL_NAME}"
    if not store.exists(key):
        return None
    journal: dict[str, Any] = json.loads(store.read_bytes(key))
    if journal.get("revocation_id") != revocation_id:
        raise ValueError(
            f"{store.uri(prefix)} holds the journal of an unfinished purge of "
            f"{journal.get('revocation_id')}: run `fm purge {journal.get('revocation_id')}` first"
        )
    return journal


def _save(store: ObjectStore, prefix: str, journal: dict[str, Any]) -> None:
    store.write_bytes_atomic(f"{prefix}/{JOURNAL_NAME}", json.dumps(journal).encode())


def _mark_purged(store: ObjectStore, prefix: str, digest: str, revocation_id: str) -> None:
    key = f"{prefix}/{PURGED_NAME}"
    known = PurgedManifests.from_json(store.read_bytes(key).decode()) if store.exists(key) else None
    entry = PurgedManifest(
        digest, revocation_id, dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    )
    store.write_bytes_atomic(key, with_purged(known, entry).to_json().encode())


def purge_shard_set(
    settings: Settings,
    row: dict[str, Any],
    version: DatasetVersion,
    lineage: pa.Table,
    documents: Set[str],
    revocation_id: str,
    progress: Progress,
) -> SetPurge | None:
    """Rewrite a shard set (its `shard_sets` row) without `documents`, given its lineage as
    recorded before the purge; None when it holds none of them."""
    store = open_object_store(settings)
    prefix = store.key_of(str(row["uri"]))

    def affected(manifest: Any) -> set[int]:
        hit = pc.is_in(lineage.column("doc_id"), pa.array(sorted(documents), pa.string()))
        samples = lineage.column("sample").filter(hit).to_numpy()
        bounds = np.cumsum([0] + [s.samples for s in manifest.shards])
        return {int(i) for i in np.searchsorted(bounds, samples, side="right") - 1}

    def register(manifest: Any) -> None:
        register_shard_set(
            settings,
            store,
            str(row["shard_set_key"]),
            prefix,
            str(row["version_key"]),
            str(row["tokenizer_hash"]),
            int(row["seq_len"]),
            manifest,
            None,
        )

    def relineage(old: Any, new: Any, edits: dict[int, Edited]) -> None:
        rows = purged_lineage(str(row["shard_set_key"]), lineage, old, new, edits)
        write_lineage(settings, str(row["shard_set_key"]), rows, version)

    manifest = json.loads(store.read_bytes(f"{prefix}/{MANIFEST_NAME}"))
    kind = PAIRS if "buckets" in manifest else TOKENS
    return _purge(
        store, prefix, str(row["shard_set_key"]), kind, documents, revocation_id,
        affected, register, relineage, progress,
    )  # fmt: skip


def purge_text_set(
    settings: Settings,
    row: dict[str, Any],
    documents: Set[str],
    revocation_id: str,
    progress: Progress,
) -> SetPurge | None:
    """Rewrite a version's text set (its `text_sets` row) without `documents`."""
    store = open_object_store(settings)
    prefix = store.key_of(str(row["uri"]))
    wanted = sorted(documents)

    def affected(manifest: Any) -> set[int]:
        # A text set is written in doc_id order: a shard may hold a document between its first
        # and last ids only.
        found = set()
        for i, shard in enumerate(manifest.shards):
            first, last = _doc_range(store, f"{prefix}/{shard.name}")
            at = int(np.searchsorted(wanted, first))
            if at < len(wanted) and wanted[at] <= last:
                found.add(i)
        return found

    def register(manifest: Any) -> None:
        data = store.read_bytes(f"{prefix}/{TEXT_MANIFEST_NAME}")
        new_row = {
            "version_key": row["version_key"],
            "uri": row["uri"],
            "manifest_sha256": hashlib.sha256(data).hexdigest(),
            "num_documents": manifest.num_documents,
            "num_bytes": manifest.num_bytes,
            "run_id": None,
            "created_at": dt.datetime.now(dt.UTC),
        }
        catalog.append_rows(settings, "text_sets", pa.Table.from_pylist([new_row]))

    return _purge(
        store, prefix, str(row["version_key"]), TEXTS, documents, revocation_id,
        affected, register, lambda old, new, edits: None, progress,
    )  # fmt: skip


def _doc_range(store: ObjectStore, key: str) -> tuple[str, str]:
    """The first and last doc ids of a text-set shard, read from its header and two samples."""
    with store.open_input(key) as f:
        count = int(np.frombuffer(f.read_at(4, 0), np.uint32)[0])
        offsets = np.frombuffer(f.read_at(4 * (count + 1), 4), np.uint32)

        def doc_id(begin: int) -> str:
            size = int(np.frombuffer(f.read_at(4, begin), np.uint32)[0])
            return bytes(f.read_at(size, begin + 8)).decode("utf-8")

        return doc_id(int(offsets[0])), doc_id(int(offsets[count - 1]))


def _purge(
    store: ObjectStore,
    prefix: str,
    key: str,
    kind: _Kind,
    documents: Set[str],
    revocation_id: str,
    affected: Callable[[Any], set[int]],
    register: Callable[[Any], None],
    relineage: Callable[[Any, Any, dict[int, Edited]], None],
    progress: Progress,
) -> SetPurge | None:
    journal = _journal(store, prefix, revocation_id)
    if journal is None:
        data = store.read_bytes(f"{prefix}/{kind.manifest_name}")
        hit = affected(_parse(data))
        if not hit:
            return None
        journal = {
            "revocation_id": revocation_id,
            "state": "started",
            "manifest_before": hashlib.sha256(data).hexdigest(),
            "manifest": data.decode("utf-8"),
            "index": store.read_bytes(f"{prefix}/{INDEX_NAME}").decode("utf-8"),
            "shards": sorted(hit),
        }
        _save(store, prefix, journal)
    if journal["state"] == "started":
        _mark_purged(store, prefix, journal["manifest_before"], revocation_id)
    old = _parse(journal["manifest"].encode())
    index = json.loads(journal["index"])
    report = SetPurge(key, kind.noun, store.uri(prefix), len(old.shards))
    report.manifest_before = journal["manifest_before"]
    report.bytes_before = sum(s.bytes for s in old.shards)
    report.shards_rewritten = len(journal["shards"])
    progress(f"{key}: rewriting {report.shards_rewritten} of {len(old.shards)} shards")
    edits: dict[int, Edited] = {}
    infos: list[ShardInfo] = []
    entries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fm-purge-set-") as staging:
        for i, shard in enumerate(old.shards):
            if i not in journal["shards"]:
                infos.append(shard)
                entries.append(index["shards"][i])
                continue
            content = read_shard(store.read_bytes(f"{prefix}/{shard.name}"), shard.name)
            edits[i] = edited = kind.edit(content, documents, old)
            report.samples_removed += edited.removed_samples
            if not edited.samples:
                continue  # every sample held purged documents: the shard goes
            name = _renamed(shard.name, revocation_id)
            entry = write_shard(content.config, edited.samples, Path(staging) / name)
            if journal["state"] == "started":
                store.upload_file(Path(staging) / name, f"{prefix}/{name}")
            raw = entry["raw_data"]
            sha, size = raw["hashes"]["sha256"], raw["bytes"]
            infos.append(ShardInfo(name, sha, size, entry["samples"], edited.tokens))
            entries.append(entry)
    report.bytes_after = sum(s.bytes for s in infos)
    new = purged_manifest(old, infos, edits) if infos else None
    if journal["state"] == "started":
        _publish(store, prefix, kind, index, entries, new)
        if new is not None:
            register(new)
        journal["state"] = "published"
        _save(store, prefix, journal)
    if journal["state"] == "published":
        if new is not None:
            relineage(old, new, edits)
        journal["state"] = "lineage"
        _save(store, prefix, journal)
    if new is not None:
        data = store.read_bytes(f"{prefix}/{kind.manifest_name}")
        report.manifest_after = hashlib.sha256(data).hexdigest()
    for i in journal["shards"]:
        store.delete_file(f"{prefix}/{old.shards[i].name}")
    store.delete_file(f"{prefix}/{JOURNAL_NAME}")
    return report


def _parse(data: bytes) -> Any:
    """A shard set's manifest (packed tokens or pairs) or a text set's."""
    text = data.decode("utf-8")
    if json.loads(text).get("text_set_key") is not None:
        return TextSetManifest.from_json(text)
    return parse_manifest(text)


def _publish(
    store: ObjectStore,
    prefix: str,
    kind: _Kind,
    index: dict[str, Any],
    entries: list[dict[str, Any]],
    manifest: Any,
) -> None:
    """The new index, then the manifest (its presence publishes the set); with nothing left,
    the manifest goes first and the set is gone."""
    if manifest is None:
        store.delete_file(f"{prefix}/{kind.manifest_name}")
        store.delete_file(f"{prefix}/{INDEX_NAME}")
        return
    body = json.dumps({**index, "shards": entries}, sort_keys=True).encode()
    store.write_bytes_atomic(f"{prefix}/{INDEX_NAME}", body)
    store.write_bytes_atomic(f"{prefix}/{kind.manifest_name}", manifest.to_json().encode())
