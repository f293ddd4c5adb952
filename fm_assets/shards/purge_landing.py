"""The landed files a purge touches: which to delete, which to blank records in, which keep the
bytes, decided with the plan (before any row is removed: the decision counts every record of a
file, purged or not) and carried out last (`storage.purge.landing_files` does the bytes).

A file every record of which is purged is deleted. Otherwise the purged records are blanked in
place where the format allows it without moving any other record: an uncompressed JSON-lines
file (a line whose `text`, else `html`, hashes to a purged document id is overwritten with
spaces) and an uncompressed WebDataset tar (every member of a sample whose image and caption
make a purged pair id is zeroed). In any other landed file (WARC, ARC, WET, gzip-compressed
files, img2dataset Parquet) the purged records' raw bytes remain: the record says which file
and why, and the audit lists them under what remains.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pyarrow as pa

from fm_assets.formats.image_text.webdataset import read_webdataset, sample_key
from fm_assets.settings import Settings
from fm_assets.stages.image_text.raw import pair_id
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.storage.purge import landing_files as lf
from fm_assets.storage.purge.landing_files import FileOutcome

Progress = Callable[[str], None]
JSON_LINES = (".jsonl", ".ndjson", ".json")
_MAX_SAMPLE = 1 << 31
_UTF8_BOM = b"\xef\xbb\xbf"


def _action(name: str, purged: int, total: int, whole_batch: bool) -> tuple[str, str]:
    if whole_batch or purged >= total:
        return "delete", ""
    lower = name.lower()
    if lower.endswith(JSON_LINES):
        return "blank", ""
    if lower.endswith(".tar"):
        return "blank", ""
    if lower.endswith((".gz", ".gzip", ".zst", ".bz2", ".xz")):
        return (
            "keep",
            "its records sit inside a compressed stream: blanking one would move the rest",
        )
    return "keep", "records of this format cannot be blanked without moving the records after them"


def plan_landing(
    settings: Settings,
    revocation_id: str,
    rows: pa.Table,
    file_records: dict[tuple[str, str], int],
    whole_batches: set[str],
) -> None:
    """Record (as planned) what becomes of each landed file holding purged records (`rows`:
    PURGED_DOCUMENTS of one namespace), for every batch not planned by an earlier run."""
    store = open_object_store(settings)
    by_batch: dict[str, dict[str, set[str]]] = {}
    for batch, name, record in zip(
        rows["batch_id"].to_pylist(),
        rows["source_file"].to_pylist(),
        rows["record_id"].to_pylist(),
        strict=True,
    ):
        by_batch.setdefault(batch, {}).setdefault(name, set()).add(record)
    for batch, files in sorted(by_batch.items()):
        if lf.read_record(store, batch, revocation_id) is not None:
            continue  # planned by an earlier run, when every record was still there to count
        manifest = read_manifest(store, batch)
        outcomes = []
        for landed in manifest.files:
            purged = len(files.get(landed.name, set()))
            if not purged and batch not in whole_batches:
                continue
            total = file_records.get((batch, landed.name), purged)
            action, why = _action(landed.name, purged, total, batch in whole_batches)
            outcomes.append(
                FileOutcome(landed.name, landed.key, action, purged, landed.sha256, detail=why)
            )
        lf.write_record(store, lf.new_record(revocation_id, batch, outcomes))


def _json_doc_id(line: bytes) -> str | None:
    """The document id the raw stage gives a JSON line: the sha256 of its `text` (else
    `html`) field, UTF-8 encoded; None for a line that is not such an object."""
    try:
        value = json.loads(line.removeprefix(_UTF8_BOM))
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    for field in ("text", "html"):
        if isinstance(value.get(field), str):
            try:
                return hashlib.sha256(value[field].encode("utf-8")).hexdigest()
            except UnicodeEncodeError:
                return None
    return None


def _purged_keys(store: ObjectStore, key: str, doc_ids: set[str]) -> set[str]:
    """Sample keys of a WebDataset tar whose pair ids are purged."""
    keys = set()
    with store.open_input(key) as source:
        for item in read_webdataset(source, _MAX_SAMPLE):  # type: ignore[arg-type]
            image, caption = getattr(item, "image", None), getattr(item, "caption", None)
            if image is not None and caption is not None and pair_id(image, caption) in doc_ids:
                keys.add(item.key)  # type: ignore[union-attr]
    return keys


def _carry_out(store: ObjectStore, plan: FileOutcome, ids: set[str]) -> None:
    """Do what `plan` says to one landed file holding the purged documents `ids`."""
    if plan.action == "delete":
        lf.delete_file(store, plan)
    elif plan.action == "blank" and plan.name.lower().endswith(".tar"):
        keys = _purged_keys(store, plan.key, ids)
        lf.zero_tar_members(store, plan, lambda name: sample_key(name)[0] in keys)
    elif plan.action == "blank":
        lf.blank_json_lines(store, plan, lambda line: _json_doc_id(line) in ids)
    else:
        lf.keep(plan, plan.detail)


def excise_landing(
    settings: Settings, revocation_id: str, rows: pa.Table, progress: Progress
) -> list[tuple[str, FileOutcome]]:
    """Carry out the recorded landing plans of the batches in `rows` (one namespace); return
    (batch, outcome) of every file touched."""
    store = open_object_store(settings)
    doomed: dict[tuple[str, str], set[str]] = {}
    for batch, name, doc_id in zip(
        rows["batch_id"].to_pylist(),
        rows["source_file"].to_pylist(),
        rows["doc_id"].to_pylist(),
        strict=True,
    ):
        if doc_id:
            doomed.setdefault((batch, name), set()).add(doc_id)
    done = []
    for batch in sorted(set(rows["batch_id"].to_pylist())):
        record = lf.read_record(store, batch, revocation_id)
        if record is None:
            raise RuntimeError(f"no landing plan of {revocation_id} for batch {batch}")
        if record.state != "done":
            for plan in record.files:
                _carry_out(store, plan, doomed.get((batch, plan.name), set()))
                progress(f"landed {batch}/{plan.name}: {plan.outcome}")
            record.state = "done"
            lf.write_record(store, record)
        done += [(batch, plan) for plan in record.files]
    return done
