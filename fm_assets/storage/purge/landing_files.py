"""Landed files after a purge: deleted, or with records blanked in place, and the record of it.

A landing batch is immutable and content-addressed (its id is a hash of its files' hashes), so a
purge never edits its manifest. It writes beside it, one per revocation,

    landing/batches/<batch_id>/purges/<revocation_id>.json

naming each file it touched, what it did (`deleted`, `records blanked`, or `bytes remain`, with
why), how many records and bytes, and the file's sha256 and size afterwards; `landed_state` folds
a batch's records into what each landed file should now be, which `fm verify` and
`files_match_manifest` check instead of the manifest's hash.

In place, the bytes of a record are overwritten and the file keeps its length, so every other
record keeps its byte offset (`fm lineage` gives offsets): a JSON line is overwritten with spaces
(a blank line, which readers skip), a tar member's data with zeros (its header, name and size
stay). Other formats, and records inside compressed streams, cannot be blanked without
rewriting what follows them: their bytes remain in the landed file, and the record says so.
The record is written before the files change (as planned) and again after (as done).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from fm_assets.storage.objectstore import ObjectStore

RECORD_FORMAT_VERSION = 1
_CHUNK = 8 << 20
DELETED = "deleted"
BLANKED = "records blanked"
REMAIN = "bytes remain"


@dataclass
class FileOutcome:
    """What a purge did to one landed file."""

    name: str
    key: str
    action: str  # planned: "delete", "blank" (records of it), or "keep" (bytes remain)
    records: int  # purged records the file holds
    sha256_before: str  # as landed (the manifest's)
    outcome: str = ""  # DELETED, BLANKED or REMAIN once done
    detail: str = ""
    bytes_removed: int = 0  # the file's bytes (deleted) or the records' bytes overwritten
    sha256_after: str | None = None  # None: deleted
    size_after: int | None = None


@dataclass
class BatchRecord:
    """`landing/batches/<batch>/purges/<revocation>.json`."""

    format_version: int
    revocation_id: str
    batch_id: str
    state: str  # "planned", then "done"
    purged_at: str
    files: list[FileOutcome] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> BatchRecord:
        obj = json.loads(text)
        if obj.get("format_version") != RECORD_FORMAT_VERSION:
            raise ValueError(f"landing purge record format {obj.get('format_version')!r} unknown")
        files = [FileOutcome(**f) for f in obj.pop("files")]
        return cls(**obj, files=files)


def record_key(batch_id: str, revocation_id: str) -> str:
    return f"landing/batches/{batch_id}/purges/{revocation_id}.json"


def read_record(store: ObjectStore, batch_id: str, revocation_id: str) -> BatchRecord | None:
    key = record_key(batch_id, revocation_id)
    return BatchRecord.from_json(store.read_bytes(key)) if store.exists(key) else None


def write_record(store: ObjectStore, record: BatchRecord) -> None:
    store.write_bytes_atomic(
        record_key(record.batch_id, record.revocation_id), record.to_json().encode()
    )


def landed_state(store: ObjectStore, batch_id: str) -> dict[str, tuple[str, int] | None]:
    """Object key -> (sha256, size) a purge left the landed file with, or None when a purge
    deleted it; files no finished purge touched are absent (the manifest holds for them)."""
    prefix = f"landing/batches/{batch_id}/purges"
    records = [
        BatchRecord.from_json(store.read_bytes(f"{prefix}/{name}"))
        for name in store.list_dir(prefix)
        if name.endswith(".json")
    ]
    state: dict[str, tuple[str, int] | None] = {}
    for record in sorted(records, key=lambda r: r.purged_at):
        if record.state != "done":
            continue
        for f in record.files:
            if f.outcome == DELETED:
                state[f.key] = None
            elif f.outcome == BLANKED and f.sha256_after is not None and f.size_after is not None:
                state[f.key] = (f.sha256_after, f.size_after)
    return state


def new_record(revocation_id: str, batch_id: str, files: list[FileOutcome]) -> BatchRecord:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return BatchRecord(RECORD_FORMAT_VERSION, revocation_id, batch_id, "planned", now, files)


# -- doing it ------------------------------------------------------------------------------
Patch = tuple[int, int, bytes]  # (offset, length, replacement byte repeated)


def delete_file(store: ObjectStore, plan: FileOutcome) -> None:
    size = store.size(plan.key)
    if size is not None:
        store.delete_file(plan.key)
    plan.outcome, plan.bytes_removed = DELETED, size or 0
    plan.sha256_after = plan.size_after = None
    plan.detail = "every record of the file was purged: the file is deleted"


def blank_json_lines(
    store: ObjectStore, plan: FileOutcome, doomed: Callable[[bytes], bool]
) -> None:
    """Overwrite with spaces every line of an uncompressed JSON-lines file that `doomed` names
    (the line without its terminator)."""
    with store.open_input(plan.key) as source:
        patches = list(_doomed_lines(source, doomed))
    _apply(store, plan, patches, "JSON lines overwritten with spaces (blank lines)")


def _doomed_lines(source: BinaryIO, doomed: Callable[[bytes], bool]) -> Iterator[Patch]:
    offset = 0
    pending = b""
    while True:
        chunk = source.read(_CHUNK)
        data = pending + chunk
        lines = data.split(b"\n")
        pending = lines.pop() if chunk else b""
        for line in lines:
            body = line.rstrip(b"\r")
            if body.strip() and doomed(body):
                yield offset, len(body), b" "
            offset += len(line) + 1
        if not chunk:
            if pending.strip() and doomed(pending.rstrip(b"\r")):
                yield offset, len(pending.rstrip(b"\r")), b" "
            return


def zero_tar_members(store: ObjectStore, plan: FileOutcome, doomed: Callable[[str], bool]) -> None:
    """Overwrite with zeros the data of every member of an uncompressed tar that `doomed` names
    (by member name); headers stay, so the archive still reads."""
    with store.open_input(plan.key) as source, tarfile.open(fileobj=source, mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and doomed(m.name)]
    patches = [(m.offset_data, m.size, b"\0") for m in members]
    _apply(store, plan, patches, "tar members' data overwritten with zeros (headers kept)")


def keep(plan: FileOutcome, why: str) -> None:
    plan.outcome, plan.detail = REMAIN, why


def _apply(store: ObjectStore, plan: FileOutcome, patches: list[Patch], how: str) -> None:
    """Copy the file with `patches` applied, then put it in place (whole, as landing does)."""
    if not patches:
        sha, size = _digest(store, plan.key)
        if sha != plan.sha256_before:  # blanked by a run that stopped before recording it
            plan.outcome, plan.detail = BLANKED, how
            plan.sha256_after, plan.size_after = sha, size
        else:
            plan.outcome, plan.detail = REMAIN, "no purged record was found in it to blank"
        return
    patches.sort()
    digest, size = hashlib.sha256(), 0
    with tempfile.TemporaryDirectory(prefix="fm-purge-landed-") as staging:
        local = Path(staging) / "file"
        with store.open_input(plan.key) as source, open(local, "wb") as out:
            shutil.copyfileobj(source, out)
        with open(local, "r+b") as out:
            for offset, length, byte in patches:
                out.seek(offset)
                out.write(byte * length)
        with open(local, "rb") as done:
            while chunk := done.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        store.upload_file(local, plan.key)
    plan.outcome, plan.detail = BLANKED, how
    plan.bytes_removed = sum(length for _, length, _ in patches)
    plan.sha256_after, plan.size_after = digest.hexdigest(), size


def _digest(store: ObjectStore, key: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with store.open_input(key) as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def as_dicts(files: list[FileOutcome]) -> list[dict[str, Any]]:
    return [asdict(f) for f in files]
