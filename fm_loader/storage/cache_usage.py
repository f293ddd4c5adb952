"""The cache's own record of what it held and for how long: the source of cache byte-hours.

    <cache dir>/fm_cache_usage.jsonl    one JSON object per line, appended, never rewritten:
        {"event": "stored", "entry": <manifest sha256>, "key": ..., "uri": ..., "bytes": N, "at": T}
        {"event": "evicted", "entry": <manifest sha256>, "at": T}

A set counts from the moment it is complete (its manifest written) until it is evicted, at the
bytes of its shards. Each line is one `write` on a file opened for appending, so lines of
processes writing at once never interleave. A complete entry with no `stored` line (cached
before the cache kept this record) counts from its manifest's modification time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

USAGE_NAME = "fm_cache_usage.jsonl"
_HOUR = 3600.0


@dataclass(frozen=True)
class Occupancy:
    """How long one cached set held its bytes within a window, in byte-hours."""

    manifest_sha256: str
    shard_set_key: str
    uri: str
    bytes: int
    byte_hours: float


def _append(root: Path, record: dict[str, object]) -> None:
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(root / USAGE_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _now() -> float:
    return dt.datetime.now(dt.UTC).timestamp()


def record_stored(root: Path, entry: str, key: str, uri: str, size: int) -> None:
    """Record that set `entry` (its manifest sha256) is now complete in the cache at `root`."""
    _append(root, {"event": "stored", "entry": entry, "key": key, "uri": uri, "bytes": size,
                   "at": _now()})  # fmt: skip


def record_evicted(root: Path, entry: str) -> None:
    """Record that set `entry` left the cache at `root`."""
    _append(root, {"event": "evicted", "entry": entry, "at": _now()})


def _events(root: Path) -> list[dict[str, object]]:
    try:
        text = (root / USAGE_NAME).read_text()
    except FileNotFoundError:
        return []
    events = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ValueError(
                f"{root / USAGE_NAME} line {number} is not JSON ({exc}); the usage record is "
                "append-only: restore it, or delete the line"
            ) from exc
        if isinstance(event, dict):
            events.append(event)
    return events


def _untracked(root: Path, tracked: set[str]) -> list[dict[str, object]]:
    """`stored` events for complete entries cached before the usage record existed."""
    from fm_loader.storage.cache_dir import entry_dirs, read_entry_info

    found: list[dict[str, object]] = []
    for entry in entry_dirs(root):
        if entry.name in tracked:
            continue
        info = read_entry_info(entry)
        manifest = entry / str(info.get("manifest_name", "fm_manifest.json"))
        with contextlib.suppress(FileNotFoundError):
            size = info.get("bytes")
            found.append(
                {
                    "event": "stored",
                    "entry": entry.name,
                    "key": str(info.get("shard_set_key", "")),
                    "uri": str(info.get("uri", "")),
                    "bytes": size if isinstance(size, int) else 0,
                    "at": manifest.stat().st_mtime,
                }
            )
    return found


def occupancy(root: Path, since: dt.datetime, until: dt.datetime) -> list[Occupancy]:
    """Per cached set, the byte-hours it held within [since, until), from the usage record.

    A set stored and evicted several times adds up its stays; one still cached counts to
    `until`. Sets with no byte-hours in the window are left out.
    """
    events = _events(root)
    events += _untracked(root, {str(e.get("entry")) for e in events})
    events.sort(key=lambda e: float(e.get("at", 0.0)))  # type: ignore[arg-type]
    start, end = since.timestamp(), until.timestamp()
    open_since: dict[str, tuple[float, int]] = {}
    described: dict[str, tuple[str, str, int]] = {}
    hours: dict[str, float] = {}

    def close(entry: str, at: float) -> None:
        began, size = open_since.pop(entry)
        overlap = min(at, end) - max(began, start)
        if overlap > 0:
            hours[entry] = hours.get(entry, 0.0) + size * overlap / _HOUR

    for event in events:
        entry, at = str(event.get("entry")), float(event.get("at", 0.0))  # type: ignore[arg-type]
        if event.get("event") == "stored":
            if entry in open_since:
                close(entry, at)  # stored again without an eviction seen: a new stay
            size = int(event.get("bytes", 0))  # type: ignore[call-overload]
            open_since[entry] = (at, size)
            described[entry] = (str(event.get("key", "")), str(event.get("uri", "")), size)
        elif event.get("event") == "evicted" and entry in open_since:
            close(entry, at)
    for entry in list(open_since):
        close(entry, end)
    return [
        Occupancy(entry, described[entry][0], described[entry][1], described[entry][2], value)
        for entry, value in sorted(hours.items())
        if value > 0
    ]
