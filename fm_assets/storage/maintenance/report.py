"""What a maintenance run did, per table and in total: printed by `fm maintain`, recorded as
the `catalog_maintenance` job's output metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fm_assets.storage.maintenance.files import KINDS, Usage


@dataclass
class TableReport:
    """One table before and after (in a dry run: after as it would be)."""

    identifier: str
    snapshots_before: int = 0
    snapshots_after: int = 0
    live_files_before: int = 0  # data files of the current snapshot
    live_files_after: int = 0
    manifests_before: int = 0  # manifests of the current snapshot
    manifests_after: int = 0
    merged_files: int = 0  # small data files merged ...
    merged_into: int = 0  # ... into this many
    disk_before: Usage = field(default_factory=Usage)  # every file under the table's location
    disk_after: Usage = field(default_factory=Usage)
    deleted: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.identifier,
            "snapshots": [self.snapshots_before, self.snapshots_after],
            "live_data_files": [self.live_files_before, self.live_files_after],
            "manifests": [self.manifests_before, self.manifests_after],
            "merged_files": [self.merged_files, self.merged_into],
            "files": [self.disk_before.total_files, self.disk_after.total_files],
            "bytes": [self.disk_before.total_bytes, self.disk_after.total_bytes],
            "deleted": {k: [self.deleted.files[k], self.deleted.bytes[k]] for k in KINDS},
            "notes": self.notes,
        }


@dataclass
class MaintenanceReport:
    """Every table a run visited, in the order it visited them."""

    dry_run: bool
    retention_hours: float
    grace_hours: float
    tables: list[TableReport] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        t = self.tables
        return {
            "tables": len(t),
            "snapshots_before": sum(r.snapshots_before for r in t),
            "snapshots_after": sum(r.snapshots_after for r in t),
            "files_before": sum(r.disk_before.total_files for r in t),
            "files_after": sum(r.disk_after.total_files for r in t),
            "bytes_before": sum(r.disk_before.total_bytes for r in t),
            "bytes_after": sum(r.disk_after.total_bytes for r in t),
            "files_deleted": sum(r.deleted.total_files for r in t),
            "bytes_deleted": sum(r.deleted.total_bytes for r in t),
            "data_files_merged": sum(r.merged_files for r in t),
            "manifests_before": sum(r.manifests_before for r in t),
            "manifests_after": sum(r.manifests_after for r in t),
        }

    def render(self) -> str:
        """A fixed-width table: one row per table that holds anything, then the totals."""
        header = ("table", "snapshots", "live files", "manifests", "files", "bytes", "deleted")
        rows = [header]
        for r in self.tables:
            if not r.snapshots_before and not r.deleted.total_files:
                continue  # a table that was never written to: its creation's metadata only
            rows.append(
                (
                    r.identifier,
                    f"{r.snapshots_before} -> {r.snapshots_after}",
                    f"{r.live_files_before} -> {r.live_files_after}",
                    f"{r.manifests_before} -> {r.manifests_after}",
                    f"{r.disk_before.total_files} -> {r.disk_after.total_files}",
                    f"{_size(r.disk_before.total_bytes)} -> {_size(r.disk_after.total_bytes)}",
                    f"{r.deleted.total_files} ({_size(r.deleted.total_bytes)})",
                )
            )
        t = self.totals()
        rows.append(
            (
                f"total ({t['tables']} tables)",
                f"{t['snapshots_before']} -> {t['snapshots_after']}",
                "",
                f"{t['manifests_before']} -> {t['manifests_after']}",
                f"{t['files_before']} -> {t['files_after']}",
                f"{_size(t['bytes_before'])} -> {_size(t['bytes_after'])}",
                f"{t['files_deleted']} ({_size(t['bytes_deleted'])})",
            )
        )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        notes = [f"{r.identifier}: {note}" for r in self.tables for note in r.notes]
        title = "dry run: nothing changed; after = what a run would leave" if self.dry_run else ""
        return "\n".join([*([title] if title else []), *lines, *notes])


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable: the last unit always answers
